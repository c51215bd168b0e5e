#!/bin/sh
# Sign (and, with Apple credentials, notarize) rltray.app. packaging/build.py runs it on macOS.
#
#   sh packaging/macos/sign.sh build/package/dist/rltray.app
#
# Without secrets it signs ad hoc ("-"): the app runs on the build machine and
# desktop-notifier can post notifications, but Gatekeeper warns on other Macs.
# CI secrets (never committed):
#   MACOS_SIGN_IDENTITY   "Developer ID Application: NAME (TEAMID)", its certificate
#                         imported into the build keychain beforehand
#   APPLE_ID, APPLE_TEAM_ID, APPLE_APP_PASSWORD   an app-specific password for notarytool
set -eu
app="$1"
here="$(cd "$(dirname "$0")" && pwd)"
identity="${MACOS_SIGN_IDENTITY:--}"
codesign --force --deep --options runtime --timestamp=none \
  --entitlements "$here/entitlements.plist" --sign "$identity" "$app"
codesign --verify --deep --strict --verbose=2 "$app"
if [ "$identity" != "-" ] && [ -n "${APPLE_ID:-}" ] && [ -n "${APPLE_APP_PASSWORD:-}" ]; then
  zip="${app%.app}-notarize.zip"
  ditto -c -k --keepParent "$app" "$zip"
  xcrun notarytool submit "$zip" --apple-id "$APPLE_ID" --team-id "$APPLE_TEAM_ID" \
    --password "$APPLE_APP_PASSWORD" --wait
  xcrun stapler staple "$app"
  rm -f "$zip"
fi
