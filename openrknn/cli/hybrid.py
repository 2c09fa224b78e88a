"""``openrknn hybrid MODEL --dataset DS -t PLATFORM [--pareto]``: auto_hybrid from the command line.

Quantizes the model, lets auto_hybrid choose which layers run in float16 / int16 for the target
platform (cosine threshold ``--cos-thresh``, speed floor ``--min-fps``), prints the choice and, with
``--pareto``, the measured accuracy / estimated FPS trade-off along the search order. Optional
outputs: the ``.rknn`` (``-o``), the hybrid step-1 files with the chosen layers (``--step1-dir``),
an HTML page with the plot (``--report``) and the points as JSON (``--json``).
"""
from __future__ import annotations

import argparse
import json
import os

from openrknn.api.rknn import RKNN


def add_hybrid_parser(sub) -> None:
    """Register the ``hybrid`` subcommand."""
    p = sub.add_parser("hybrid", help="auto_hybrid: the cheapest float16/int16 layers that meet a cosine target")
    p.add_argument("model", help="source model (.onnx/.tflite)")
    p.add_argument("--dataset", required=True, help="calibration dataset.txt")
    p.add_argument("-t", "--target-platform", dest="target_platform", default="rk3588")
    p.add_argument("--mean", default=None, help="e.g. '123.675 116.28 103.53' ('#' between inputs)")
    p.add_argument("--std", default=None)
    p.add_argument("--cos-thresh", dest="cos_thresh", type=float, default=0.98, help="auto_hybrid_cos_thresh")
    p.add_argument("--min-fps", dest="min_fps", type=float, default=None, help="auto_hybrid_min_fps (estimated)")
    p.add_argument("--pareto", action="store_true", help="also measure and print the trade-off curve")
    p.add_argument("--chips", default="rk3566,rk3588", help="platforms to estimate FPS on (comma-separated)")
    p.add_argument("--points", type=int, default=10, help="--pareto: builds on the curve (default 10)")
    p.add_argument("-o", "--output", default=None, help="export the chosen build as this .rknn")
    p.add_argument("--step1-dir", dest="step1_dir", default=None,
                   help="write the hybrid step-1 files with the chosen layers here (for hybrid_quantization_step2)")
    p.add_argument("--report", default=None, help="HTML page with the trade-off plot")
    p.add_argument("--json", dest="json_path", default=None, help="the points as JSON")
    p.add_argument("-v", "--verbose", action="store_true")
    p.set_defaults(func=cmd_hybrid)


def _floats(text: str | None) -> list[list[float]] | None:
    if not text:
        return None
    return [[float(v) for v in part.replace(",", " ").split()] for part in text.split("#")]


def cmd_hybrid(args: argparse.Namespace) -> int:
    rknn = RKNN(verbose=args.verbose)
    config = {"target_platform": args.target_platform, "auto_hybrid_cos_thresh": args.cos_thresh,
              "auto_hybrid_min_fps": args.min_fps}
    if args.mean:
        config["mean_values"] = _floats(args.mean)
    if args.std:
        config["std_values"] = _floats(args.std)
    if rknn.config(**config) != 0:
        return 1
    load = rknn.load_tflite if args.model.lower().endswith(".tflite") else rknn.load_onnx
    if load(model=args.model) != 0:
        return 1
    chips = [c.strip() for c in args.chips.split(",") if c.strip()]
    points = rknn.auto_hybrid_report(dataset=args.dataset, target_platforms=chips,
                                     max_points=args.points if args.pareto else 0, report_path=args.report,
                                     step1_dir=args.step1_dir)
    if points is None:
        return 1
    if args.json_path:
        with open(args.json_path, "w", encoding="utf-8") as f:
            json.dump(points, f, indent=1)
    if args.output and rknn.export_rknn(os.fspath(args.output)) != 0:
        return 1
    return 0
