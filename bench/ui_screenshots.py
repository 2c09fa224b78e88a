"""Screenshots of the workbench pages for docs/ui.md.

    python bench/ui_screenshots.py [--out docs/ui] [--keep /tmp/ui-shots]

Runs the browser tests (tests/ui/test_browser.py; headless Debian chromium, the PP-OCR cls model
from the shared folder when present; each test opens the workbench's start URL with its access token
first, as a user would) with ``OPENRKNN_UI_SCREENSHOTS`` set, then writes small copies
of five pages to ``--out``: downscaled to 900 px wide, cropped to 1100 px high, 64-colour PNG, each
checked to stay under 100 KB.
"""
from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
from pathlib import Path

from PIL import Image

REPO = Path(__file__).resolve().parents[1]
CHOSEN = {"10-config-error.png": "config.png", "ocr-4-graph.png": "graph.png", "ocr-5-accuracy.png": "accuracy.png",
          "6-perf.png": "perf.png", "8-inference.png": "inference.png"}
LIMIT = 100 * 1024


def shrink(source: Path, target: Path, width: int = 900, max_height: int = 1100) -> int:
    """Write a small palette PNG of ``source``; returns its size in bytes."""
    with Image.open(source) as img:
        img = img.convert("RGB")
        scale = width / img.width
        img = img.resize((width, round(img.height * scale)), Image.LANCZOS)
        img = img.crop((0, 0, width, min(img.height, max_height)))
        for colours in (64, 32, 16):
            img.quantize(colours).save(target, optimize=True)
            if target.stat().st_size <= LIMIT:
                break
    return target.stat().st_size


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default=str(REPO / "docs" / "ui"))
    parser.add_argument("--keep", default=None, help="folder for the full-size screenshots (default: temporary)")
    args = parser.parse_args()
    shots = Path(args.keep or tempfile.mkdtemp(prefix="openrknn-ui-shots-"))
    env = dict(os.environ, OPENRKNN_UI_SCREENSHOTS=str(shots), PYTHONPATH=str(REPO))
    env.setdefault("OPENRKNN_TEST_DATA", str(REPO.parent / "shared"))
    subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "tests/ui/test_browser.py"],
                   cwd=REPO, env=env, check=True)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    for source, name in CHOSEN.items():
        if not (shots / source).is_file():
            print(f"W {source} was not taken (PP-OCR model absent?)")
            continue
        size = shrink(shots / source, out / name)
        print(f"{'I' if size <= LIMIT else 'E'} {out / name}: {size / 1024:.1f} KB (full size "
              f"{(shots / source).stat().st_size / 1024:.1f} KB)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
