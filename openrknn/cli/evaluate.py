"""``openrknn eval``: the float reference and one or more builds over a dataset, side by side.

Builds come from a source model and ``--compare`` settings (``fp16``, ``normal``, ``mmse``,
``kl_divergence``, ``auto_hybrid``, a quantized dtype such as ``w8a16``; ``+`` combines, e.g.
``w8a16+mmse``), or are ``.rknn`` files given as they are.
"""
from __future__ import annotations

import argparse
import json
import os

from openrknn import log
from openrknn.api.rknn import RKNN
from openrknn.cli.common import add_input_size_list_argument, load_by_extension, parse_floats, parse_input_size_list
from openrknn.errors import ConfigError
from openrknn.evaluation import evaluate_built
from openrknn.evaluation.cache import default_cache_path
from openrknn.model_file.container import write_atomic
from openrknn.quant.settings import QUANT_ALGORITHMS, TOOLKIT1_QUANT_DTYPES, TOOLKIT2_QUANT_DTYPES


def add_eval_parser(sub) -> None:
    """Register the ``eval`` subcommand."""
    p = sub.add_parser("eval", help="evaluate builds over a dataset (top-1/top-5, mAP, output cosine)")
    p.add_argument("models", nargs="+", help="a source model (.onnx/.tflite) and/or .rknn files")
    p.add_argument("--dataset", required=True, help="image folder, COCO instances .json, or dataset .txt")
    p.add_argument("--labels", default=None, help="labels file: '<image> <class index>' per line")
    p.add_argument("--images", default=None, help="COCO: the image folder (default: the json's folder)")
    p.add_argument("--task", choices=("classification", "detection", "cosine"), default=None)
    p.add_argument("--decoder", default=None, help="detection: yolov5, yolov8, ssd or db")
    p.add_argument("--top-k", dest="top_k", type=int, default=5)
    p.add_argument("--compare", default=None,
                   help="builds of the source model, e.g. 'fp16,normal,mmse,auto_hybrid,w8a16' (default: normal "
                        "with --calibration, else fp16)")
    p.add_argument("--calibration", default=None, help="calibration dataset.txt for the quantized builds")
    p.add_argument("-t", "--target-platform", dest="target_platform", default="rk3588")
    p.add_argument("--mean", default=None, help="e.g. '123.675 116.28 103.53' ('#' between inputs)")
    p.add_argument("--std", default=None)
    add_input_size_list_argument(p)
    p.add_argument("--workers", type=int, default=None, help="local worker processes (default: the cores)")
    p.add_argument("--ray", dest="ray_address", default=None, help="Ray cluster address ('auto', 'local', ...)")
    p.add_argument("--cache", default=None, help="result cache file (default: ~/.cache/openrknn/eval.sqlite)")
    p.add_argument("--no-cache", dest="no_cache", action="store_true", help="keep no results on disk")
    p.add_argument("--per-class", dest="per_class", action="store_true", help="print the per-class breakdown")
    p.add_argument("--json", dest="json_path", default=None, help="also write the report as JSON")
    p.add_argument("-v", "--verbose", action="store_true")
    p.set_defaults(func=cmd_eval)


def parse_setting(text: str) -> tuple[dict, dict]:
    """``config`` and ``build`` keyword arguments of one ``--compare`` item."""
    config: dict = {}
    build: dict = {"do_quantization": True}
    for part in text.split("+"):
        part = part.strip()
        if part == "fp16":
            build["do_quantization"] = False
        elif part == "auto_hybrid":
            build["auto_hybrid"] = True
        elif part in QUANT_ALGORITHMS:
            config["quantized_algorithm"] = part
        elif part in TOOLKIT2_QUANT_DTYPES + TOOLKIT1_QUANT_DTYPES:
            config["quantized_dtype"] = part
        else:
            raise ConfigError(f"--compare: '{part}' is not a build setting; use fp16, {', '.join(QUANT_ALGORITHMS)}, "
                              f"auto_hybrid or a quantized dtype ({', '.join(TOOLKIT2_QUANT_DTYPES)})")
    return config, build


def cmd_eval(args: argparse.Namespace) -> int:
    sources = [m for m in args.models if not m.endswith(".rknn")]
    if len(sources) > 1:
        raise ConfigError(f"eval: give one source model (and any .rknn files), not {sources}")
    settings = [s for s in (args.compare or ("normal" if args.calibration else "fp16")).split(",") if s.strip()]
    sizes = parse_input_size_list(args.input_size_list)
    builds = []
    for setting in settings if sources else []:
        config, build = parse_setting(setting)
        if build["do_quantization"] and not args.calibration:
            raise ConfigError(f"eval: the '{setting}' build quantizes: give --calibration dataset.txt")
        rknn = RKNN(verbose=args.verbose)
        config.update(target_platform=args.target_platform)
        if args.mean:
            config["mean_values"] = parse_floats(args.mean)
        if args.std:
            config["std_values"] = parse_floats(args.std)
        log.info(f"eval: building '{setting}'")
        if (rknn.config(**config) != 0 or load_by_extension(rknn, sources[0], sizes) != 0
                or rknn.build(dataset=args.calibration if build["do_quantization"] else None, **build) != 0):
            return 1
        builds.append((setting.strip(), rknn._model))
    for path in (m for m in args.models if m.endswith(".rknn")):
        rknn = RKNN(verbose=args.verbose)
        if rknn.load_rknn(path) != 0:
            return 1
        builds.append((os.path.splitext(os.path.basename(path))[0], rknn._model))
    if not any(model.golden is not None for _, model in builds):
        log.warning("eval: no float reference (only .rknn files): give the source model too for output cosine "
                    "and top-1 agreement")
    cache = None if args.no_cache else (args.cache or default_cache_path())
    report = evaluate_built(builds, args.dataset, args.labels, args.images, args.task, args.decoder, args.top_k,
                            workers=args.workers, ray_address=args.ray_address, cache=cache,
                            per_class=args.per_class)
    if args.json_path:
        write_atomic(args.json_path, json.dumps(report.to_dict(), indent=2, default=float).encode())
    return 0
