"""The hardened-runtime entitlements rltray.app is signed with (packaging/macos/sign.sh).

No Mac here: the file is read as codesign reads it (a property list) and checked for
what the signed app needs at run time. ctypes callbacks are libffi closures, which
need writable-then-executable memory that the hardened runtime refuses without
allow-unsigned-executable-memory (issue 23 item 8).
"""

from __future__ import annotations

import plistlib
from pathlib import Path

ENTITLEMENTS = Path(__file__).parents[2] / "packaging" / "macos" / "entitlements.plist"


def test_the_signed_app_may_run_ctypes_callbacks_load_its_libraries_and_listen_locally():
    granted = plistlib.loads(ENTITLEMENTS.read_bytes())
    assert granted == {
        "com.apple.security.cs.allow-unsigned-executable-memory": True,
        "com.apple.security.cs.disable-library-validation": True,
        "com.apple.security.network.server": True,
        "com.apple.security.network.client": True,
    }
