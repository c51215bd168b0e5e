"""The window's icon: every page names it, it serves, and it is the launcher's picture.

Issue 22 item 10: every page logged a 404 for /favicon.ico, because no page
named an icon and a browser then asks for that one.
"""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
ICON = re.compile(r'<link rel="icon" type="image/svg\+xml" href="([^"]+)">')


def test_every_page_names_an_icon_that_serves(client, anonymous, guard) -> None:
    urls = ("/", "/ratings", "/adapters", "/settings", "/setup", "/nowhere")
    pages = [client.get(url) for url in urls]
    pages.append(anonymous.get("/settings"))  # not signed in: the refusal page
    pages.append(client.post("/signout", data={"csrf_token": client.csrf}))
    launch = anonymous.get(
        f"/launch/{guard.launch_token('')}", headers={"Sec-Fetch-Site": "cross-site"}
    )
    for response in [*pages, launch]:
        found = ICON.search(response.get_data(as_text=True))
        assert found, response.get_data(as_text=True)[:300]
        assert found.group(1) == "/static/rltray.svg"
    icon = anonymous.get("/static/rltray.svg")  # no session needed: the refusal pages show it too
    assert icon.status_code == 200 and icon.mimetype == "image/svg+xml"
    assert icon.data == (ROOT / "packaging" / "icons" / "rltray.svg").read_bytes()
