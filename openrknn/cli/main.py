"""The ``openrknn`` command: convert, info, run, demo, eval, check, platforms."""
from __future__ import annotations

import argparse
import dataclasses
import os
import sys
from typing import Sequence

import numpy as np

from openrknn import __version__, log, ui
from openrknn.api.platforms import describe_platforms
from openrknn.api.rknn import RKNN
from openrknn.capi import build as capi_build
from openrknn.cli import serve
from openrknn.cli.check import add_check_parser
from openrknn.cli.common import (add_input_size_list_argument, load_by_extension, parse_floats,
                                 parse_input_size_list, print_top5)
from openrknn.cli.demo import run_demo
from openrknn.cli.evaluate import add_eval_parser
from openrknn.cli.hybrid import add_hybrid_parser
from openrknn.cli.info import describe_model
from openrknn.cli.rknn_convert import convert
from openrknn.errors import RKNNError, missing_extra_from
from openrknn.graph.input_files import read_input
from openrknn.quant.settings import QUANT_METHOD_GROUPS, QUANT_METHODS
from openrknn.runtime.lite import RKNNLite

# the group methods need quantized_dtype w4a16, which `convert` has no flag for
PER_TENSOR_OR_CHANNEL = tuple(m for m in QUANT_METHODS if m not in QUANT_METHOD_GROUPS)


def cmd_convert(args: argparse.Namespace) -> int:
    if args.model.endswith((".yml", ".yaml")):
        out_dir = args.output or "."
        convert(args.model, out_dir, args.target_platform, verbose=args.verbose, export_format=args.format,
                quantized_method=args.quantized_method)
        return 0
    rknn = RKNN(verbose=args.verbose)
    kwargs = {"target_platform": args.target_platform, "optimization_level": args.optimization_level}
    if args.mean:
        kwargs["mean_values"] = parse_floats(args.mean)
    if args.std:
        kwargs["std_values"] = parse_floats(args.std)
    if args.quantized_dtype:
        kwargs["quantized_dtype"] = args.quantized_dtype
    if args.quantized_algorithm:
        kwargs["quantized_algorithm"] = args.quantized_algorithm
    if getattr(args, "weight_qtype", None):
        kwargs["weight_qtype"] = args.weight_qtype
    method = tflite_quantized_method(args)
    if method:
        kwargs["quantized_method"] = method
    sizes = parse_input_size_list(args.input_size_list)
    steps = [lambda: rknn.config(**kwargs), lambda: load_by_extension(rknn, args.model, sizes),
             lambda: rknn.build(do_quantization=bool(args.dataset), dataset=args.dataset,
                                auto_hybrid=bool(getattr(args, "auto_hybrid", False))),
             lambda: _export(rknn, args)]
    for step in steps:
        if step() != 0:
            return 1
    return 0


def tflite_quantized_method(args: argparse.Namespace) -> str | None:
    """``--quantized-method``; for ``--format tflite`` 'layer' by default: Teflon's Rockchip backend
    takes per-tensor weights only (per-channel ones leave every Conv on the CPU)."""
    if args.quantized_method:
        return args.quantized_method
    return "layer" if args.format == "tflite" else None


def _export(rknn, args: argparse.Namespace) -> int:
    if args.format == "tflite":   # export_tflite prints the report, ending "N of M layers on the NPU ..."
        return rknn.export_tflite(args.output or os.path.splitext(args.model)[0] + "_int8.tflite")
    if getattr(args, "toolchain", None):
        return rknn.export_rknn(args.output or os.path.splitext(args.model)[0] + ".rknn", toolchain=args.toolchain,
                                toolchain_python=args.toolchain_python)
    return rknn.export_rknn(args.output or os.path.splitext(args.model)[0] + ".rknn")


def cmd_info(args: argparse.Namespace) -> int:
    try:
        print(describe_model(args.model, params=args.params))
    except RKNNError as e:
        log.error(f"info: {e}")
        return 1
    return 0


def cmd_run(args: argparse.Namespace) -> int:
    lite = RKNNLite(verbose=args.verbose)
    if lite.load_rknn(args.model) != 0 or lite.init_runtime() != 0:
        return 1
    input_specs, output_specs = lite._io_specs()
    if len(args.input) != len(input_specs):
        log.error(f"run: the model has {len(input_specs)} input(s); give one --input per input")
        return 1
    sizes = parse_input_size_list(args.input_size_list)
    if sizes is not None:
        input_specs = _specs_of_size(input_specs, sizes, (lite._model.metadata.get("dynamic_input")
                                                          if lite._model is not None else None))
        if input_specs is None:
            return 1
    inputs = [read_input(p, spec, resize=args.resize) for p, spec in zip(args.input, input_specs)]
    outputs = lite.inference(inputs=inputs)
    if outputs is None:
        return 1
    for spec, out in zip(output_specs, outputs):
        print(f"{spec.name}: shape {list(out.shape)} min {out.min():.6g} max {out.max():.6g} mean {out.mean():.6g}")
        bad = int(out.size - np.count_nonzero(np.isfinite(out)))
        if bad:
            log.warning(f"run: output '{spec.name}' has {bad} NaN/inf value(s): float16 overflowed inside the model; "
                        "does it expect normalised inputs (convert with --mean/--std)?")
        if out.ndim <= 2 and out.size >= 5:
            print_top5(out)
    return 0


def _specs_of_size(specs: list, sizes: list[list[int]], dynamic_sets: list | None) -> list | None:
    """The input specs at ``--input-size-list`` sizes: the model's own sizes or one of its dynamic_input sets."""
    allowed = [[list(s) for s in shape_set] for shape_set in dynamic_sets or []] or [[list(s.shape) for s in specs]]
    if sizes not in allowed:
        log.error(f"run: --input-size-list {sizes} is not a size this model takes: "
                  + (f"its dynamic_input sets are {allowed}" if dynamic_sets else
                     f"it was converted for {allowed[0]} (convert again with --input-size-list for another size)"))
        return None
    return [dataclasses.replace(spec, shape=size) for spec, size in zip(specs, sizes)]


def cmd_demo(args: argparse.Namespace) -> int:
    return run_demo(args.target_platform, args.output_dir, verbose=args.verbose)


def cmd_platforms(args: argparse.Namespace) -> int:
    print(describe_platforms(None)[0])
    return 0


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="openrknn", description="Open toolkit for Rockchip NPUs")
    parser.add_argument("--version", action="version", version=f"openrknn {__version__}")
    sub = parser.add_subparsers(dest="command", required=True)
    p = sub.add_parser("convert", help="convert a model (.onnx/.tflite, or a rknn_convert .yml)")
    p.add_argument("model")
    p.add_argument("-t", "--target-platform", dest="target_platform", default="rk3588")
    p.add_argument("-o", "--output", default=None, help=".rknn path (folder for .yml)")
    p.add_argument("--format", choices=("rknn", "tflite"), default="rknn",
                   help="tflite: a fully-int8 .tflite for LiteRT / Mesa Teflon (needs --dataset)")
    p.add_argument("--quantized-method", dest="quantized_method", choices=PER_TENSOR_OR_CHANNEL, default=None,
                   help="weights per tensor ('layer') or per output channel ('channel'); default: 'layer' with "
                        "--format tflite (what Teflon's NPU backend takes), the config default ('channel') otherwise")
    p.add_argument("--mean", default=None, help="e.g. '123.675 116.28 103.53' ('#' between inputs)")
    p.add_argument("--std", default=None)
    p.add_argument("--dataset", default=None, help="calibration dataset.txt: quantize")
    p.add_argument("--quantized-dtype", dest="quantized_dtype", default=None)
    p.add_argument("--quantized-algorithm", dest="quantized_algorithm", default=None)
    p.add_argument("--optimization-level", dest="optimization_level", type=int, default=3)
    p.add_argument("--weight-qtype", dest="weight_qtype", choices=("symmetric_quantized", "asymmetric_quantized"),
                   default=None, help="w8a8 weights: 'asymmetric_quantized' is rknn-toolkit2's own grid (use it with "
                                      "--toolchain rknn-toolkit2); default symmetric, which --format tflite needs")
    add_input_size_list_argument(p)
    p.add_argument("--auto-hybrid", dest="auto_hybrid", action="store_true",
                   help="move the layers that hurt accuracy most to float16 (build(auto_hybrid=True))")
    p.add_argument("--toolchain", choices=("rknn-toolkit2",), default=None,
                   help="write a Rockchip-format .rknn compiled by rknn-toolkit2 from this build's quantization, "
                        "for boards running Rockchip's librknnrt")
    p.add_argument("--toolchain-python", dest="toolchain_python", default=None,
                   help="the Python of rknn-toolkit2's environment (default: $OPENRKNN_RKNN_TOOLKIT2)")
    p.add_argument("-v", "--verbose", action="store_true")
    p.set_defaults(func=cmd_convert)
    p = sub.add_parser("info", help="describe an .rknn file")
    p.add_argument("model")
    p.add_argument("--params", "--verbose", dest="params", action="store_true",
                   help="list every tensor's quantization parameters (default: a one-line summary)")
    p.set_defaults(func=cmd_info)
    p = sub.add_parser("run", help="run an .rknn file (simulator; librknnrt for Rockchip-compiled ones)")
    p.add_argument("model")
    p.add_argument("--input", action="append", required=True, help="image (.png/.jpg/.bmp) or .npy; repeat per input")
    p.add_argument("--resize", action="store_true",
                   help="resize images of another size to the input (otherwise refused, as inference() does)")
    add_input_size_list_argument(p)
    p.add_argument("-v", "--verbose", action="store_true")
    p.set_defaults(func=cmd_run)
    p = sub.add_parser("demo", help="build, export, reload and run the embedded MobileNet-style model")
    p.add_argument("-t", "--target-platform", dest="target_platform", default="rk3588")
    p.add_argument("-o", "--output-dir", dest="output_dir", default=None)
    p.add_argument("-v", "--verbose", action="store_true")
    p.set_defaults(func=cmd_demo)
    add_eval_parser(sub)
    add_check_parser(sub)
    add_hybrid_parser(sub)
    p = sub.add_parser("platforms", help="list supported platforms")
    p.set_defaults(func=cmd_platforms)
    serve.add_parser(sub)
    capi_build.add_parser(sub)
    p = ui.build_parser(sub.add_parser("ui", help="the conversion workbench in the browser (extra 'ui')"))
    p.set_defaults(func=ui.run)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        return int(args.func(args))
    except BrokenPipeError:   # output piped into e.g. `head`
        return 0
    except ImportError as e:   # an optional module: name the extra that brings it
        missing = missing_extra_from(e, f"{args.command}: this step")
        log.error(str(missing) if missing else f"{args.command}: {e}")
        return 1
    except Exception as e:  # one E line, exit code 1
        log.error(f"{args.command}: {e}")
        return 1


if __name__ == "__main__":
    sys.exit(main())
