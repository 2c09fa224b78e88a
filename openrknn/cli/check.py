"""``openrknn check MODEL -t PLATFORM``: every layer against the chip's documented NPU limits.

Builds the model (float, or quantized with ``--dataset``) and prints one line per layer outside
Rockchip's operator list for that chip, with the limit, its section and the consequence (CPU
fallback with its estimated time, unsupported on the chip, or a failure on the board), and advice
where the fix is mechanical. Exit code 1 when a layer cannot run as built (an ``E`` finding).
"""
from __future__ import annotations

import argparse
import json
import logging
import os

from openrknn import chips, frontends, log
from openrknn.api.rknn import RKNN
from openrknn.cli.common import parse_input_size_list
from openrknn.errors import ConfigError


def add_check_parser(sub) -> None:
    """Register the ``check`` subcommand."""
    p = sub.add_parser("check", help="check every layer against the chip's documented NPU limits")
    p.add_argument("model", help="source model (.onnx or .tflite) or an openrknn .rknn file")
    p.add_argument("-t", "--target-platform", dest="target_platform", required=True)
    p.add_argument("--input-size-list", dest="input_size_list", default=None,
                   help="input shapes, e.g. '1,3,224,224' ('#' between inputs)")
    p.add_argument("--dataset", default=None, help="calibration dataset.txt: check the quantized (int8) build")
    p.add_argument("--dtype", choices=("int8", "int16", "float16"), default=None,
                   help="judge every layer in this data type instead of the build's (e.g. int8: as "
                        "rknn-toolkit2 quantizes every layer)")
    p.add_argument("--optimization-level", dest="optimization_level", type=int, default=3)
    p.add_argument("--json", dest="json_path", default=None, help="also write the findings as JSON")
    p.add_argument("-v", "--verbose", action="store_true")
    p.set_defaults(func=cmd_check)


def cmd_check(args: argparse.Namespace) -> int:
    try:
        sizes = parse_input_size_list(args.input_size_list)
    except ConfigError as e:
        log.error(f"check: {e}")
        return 1
    rknn = RKNN(verbose=args.verbose)
    options = {"target_platform": args.target_platform, "optimization_level": args.optimization_level}
    try:
        accepted = chips.get_chip(args.target_platform).quantized_dtypes
        if accepted and "w8a8" not in accepted:   # e.g. rk2118: int16 only
            options["quantized_dtype"] = accepted[0]
    except ConfigError:
        pass   # config() names the unknown platform
    if rknn.config(**options) != 0:
        return 1
    ext = os.path.splitext(args.model)[1].lower()
    if ext == ".rknn":   # an openrknn .rknn file: already built
        if rknn.load_rknn(args.model) != 0:
            return 1
        if rknn.check_limits(target_platform=args.target_platform, data_type=args.dtype) != 0:
            return 1
        return _finish(rknn, args)
    if ext == ".onnx" or (ext == ".tflite" and not sizes):
        status = frontends.load(rknn, frontends.framework_of(args.model), args.model, input_size_list=sizes)
    else:
        log.error(f"check: '{args.model}': give an .onnx or .rknn model (or a .tflite without --input-size-list)")
        return 1
    if status != 0:
        return 1
    with _quiet_warnings(args.verbose):   # the report below repeats build's NPU-limit W lines
        if rknn.build(do_quantization=bool(args.dataset), dataset=args.dataset) != 0:
            return 1
    if rknn.check_limits(data_type=args.dtype) != 0:
        return 1
    return _finish(rknn, args)


def _finish(rknn, args: argparse.Namespace) -> int:
    if args.json_path:
        with open(args.json_path, "w", encoding="utf-8") as f:
            json.dump([finding.to_dict() for finding in rknn.limit_findings], f, indent=2)
    return 1 if any(finding.severity == "E" for finding in rknn.limit_findings) else 0


class _quiet_warnings:
    """Console shows errors only while active (unless verbose)."""

    def __init__(self, verbose: bool) -> None:
        self.verbose = verbose
        self.levels: list[tuple[logging.Handler, int]] = []

    def __enter__(self) -> None:
        if not self.verbose:
            for handler in log.logger.handlers:
                if not isinstance(handler, logging.FileHandler):
                    self.levels.append((handler, handler.level))
                    handler.setLevel(logging.ERROR)

    def __exit__(self, *exc: object) -> None:
        for handler, level in self.levels:
            handler.setLevel(level)
