"""Draw every icon file the bundles need from the one SVG (run at build time; nothing committed).

Why a script: the launcher, the macOS .app, the Windows .exe and the macOS
menu bar each want a different format, and hand-exported copies drift from the
SVG. cairosvg (needs the cairo system library: Debian libcairo2, macOS
`brew install cairo`) renders the SVG; Pillow, which cannot read SVG, writes
ICO and ICNS from those renders.

Writes into OUT (default build/icons):

* ``rltray-<size>.png`` for 16…1024 and ``rltray.png`` (256 px, the Linux icon);
* ``rltray.ico`` (16–256, Windows .exe and shortcuts);
* ``rltray.icns`` (16–1024, the macOS .app);
* ``rltray-template.png`` / ``rltray-template@2x.png`` (22/44 px): the macOS
  menu bar "template" image, black with alpha only, so macOS tints it for light
  and dark menu bars. The white check mark becomes a transparent cut-out.
"""

from __future__ import annotations

import argparse
import io
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
SVG = HERE / "icons" / "rltray.svg"
SIZES = (16, 22, 24, 32, 44, 48, 64, 128, 256, 512, 1024)
ICO_SIZES = (16, 24, 32, 48, 64, 128, 256)
ICNS_SIZES = (16, 32, 64, 128, 256, 512, 1024)
TEMPLATE = {"rltray-template.png": 22, "rltray-template@2x.png": 44}
WHITE_FROM = 45  # the SVG's darkest channel (#2d6cdf's red, 0x2d): at or below it stays opaque


def render(svg: bytes, size: int):  # -> PIL.Image.Image
    import cairosvg
    from PIL import Image

    png = cairosvg.svg2png(bytestring=svg, output_width=size, output_height=size)
    return Image.open(io.BytesIO(png)).convert("RGBA")


def template(image):  # -> PIL.Image.Image
    """Black + alpha: opaque where the icon is coloured, transparent where it is white."""
    from PIL import Image, ImageChops

    r, g, b, a = image.split()
    darkest = ImageChops.darker(ImageChops.darker(r, g), b)
    span = 255 - WHITE_FROM
    coloured = darkest.point(lambda v: round(255 * max(0.0, min(1.0, (255 - v) / span))))
    black = Image.new("L", image.size, 0)
    return Image.merge("RGBA", (black, black, black, ImageChops.multiply(a, coloured)))


def make_icons(out: Path, svg_path: Path = SVG) -> list[Path]:
    out.mkdir(parents=True, exist_ok=True)
    svg = svg_path.read_bytes()
    images = {size: render(svg, size) for size in SIZES}
    written = []
    for size, image in images.items():
        image.save(out / f"rltray-{size}.png")
        written.append(out / f"rltray-{size}.png")
    images[256].save(out / "rltray.png")
    # Pillow scales the largest image down for each listed size.
    images[256].save(out / "rltray.ico", sizes=[(s, s) for s in ICO_SIZES])
    images[1024].save(
        out / "rltray.icns", append_images=[images[s] for s in ICNS_SIZES if s != 1024]
    )
    for name, size in TEMPLATE.items():
        template(images[size]).save(out / name)
    written += [out / n for n in ("rltray.png", "rltray.ico", "rltray.icns", *TEMPLATE)]
    return written


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("out", nargs="?", type=Path, default=HERE.parent / "build" / "icons")
    args = parser.parse_args(argv)
    try:
        written = make_icons(args.out)
    except OSError as exc:  # cairocffi raises OSError when libcairo is missing
        print(f"make_icons: cannot render the SVG: {exc} (install the cairo library: "
              "Debian libcairo2, macOS `brew install cairo`)", file=sys.stderr)
        return 1
    print(f"wrote {len(written)} icon files to {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
