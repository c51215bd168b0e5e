#!/usr/bin/env bash
# System packages the GUI tests use (Xvfb, a D-Bus session, a notification server,
# GTK + AppIndicator and the headers PyGObject builds against for the real tray).
# Installs them with apt when running as root on Debian/Ubuntu; otherwise does nothing,
# and each test that needs a missing one is skipped with a message naming it.
set -u
PACKAGES="xvfb dbus dbus-x11 dunst xdotool"
# the real agents' terminal UIs are driven through tmux (tests/agents/)
PACKAGES="$PACKAGES tmux"
# the tray's GTK/AppIndicator backend (pystray) and what `pip install "pygobject<3.51"` builds with
PACKAGES="$PACKAGES libgirepository1.0-dev libcairo2-dev pkg-config gir1.2-gtk-3.0 gir1.2-ayatanaappindicator3-0.1"
# the settings window: Debian's chromium for the Playwright tests (no browser download) and
# WebKitGTK for pywebview's GTK backend (tests/web/test_window.py)
PACKAGES="$PACKAGES chromium gir1.2-webkit2-4.1"
# the PyInstaller bundle (tests/packaging/test_bundle.py): objdump, and cairo for the icons
PACKAGES="$PACKAGES binutils libcairo2"
# training on a bigger machine (tests/remote/): a private sshd on 127.0.0.1 stands in for it
PACKAGES="$PACKAGES openssh-server"
# the OpenClaw gateway test installs its pinned Node and OpenClaw with npm
# (tests/support/openclaw_install.py); any npm will do, so only where there is none
command -v npm >/dev/null 2>&1 || PACKAGES="$PACKAGES npm"
missing=""
for p in $PACKAGES; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing="$missing $p"
done
[ -z "$missing" ] && exit 0
if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
  echo "installing test system packages:$missing"
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq >/dev/null 2>&1 || true
  apt-get install -y -qq $missing >/dev/null 2>&1 || echo "could not install:$missing (GUI tests will be skipped)"
else
  echo "not root on Debian: GUI tests needing$missing will be skipped"
fi
exit 0
