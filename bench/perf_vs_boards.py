"""Predicted FPS next to Rockchip's published board figures, per chip, with the error.

    python bench/perf_vs_boards.py

The same table as ``python bench/perf_fit.py --check``: eval_perf with the chip data as they are, on
the 15 int8 networks (rknn_model_zoo v2.3.2 and MobileNetV2 / ResNet50-v2) and the two float16 ones,
each built by openrknn. ``bench/perf_fit.py`` also refits the constants; see its docstring.
"""
from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from perf_fit import main  # noqa: E402

if __name__ == "__main__":
    raise SystemExit(main(["--check", *sys.argv[1:]]))
