"""``rknn_convert``: convert a model described by a yml file (seed 002 §3.1.6, table 3-1).

    python -m rknn.api.rknn_convert -t rk3588 -i ./model_config.yml -o ./output_path
"""
from __future__ import annotations

import argparse
import os
from typing import Any, Sequence

import yaml

from openrknn import frontends, log
from openrknn.api.rknn import RKNN
from openrknn.errors import ConfigError, missing_extra_from

_PLATFORM_LOADERS = ("tensorflow", "tflite", "caffe", "onnx", "pytorch", "darknet", "mxnet")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="rknn_convert", description="Convert a model described by a yml file")
    parser.add_argument("-i", "--input", required=True, help="model config .yml")
    parser.add_argument("-o", "--output", required=True, help="output folder (created if missing)")
    parser.add_argument("-t", "--target_platform", required=True, help="e.g. rk3588, rk3566, rv1106, rk1808")
    parser.add_argument("-e", "--eval_perf_memory", action="store_true", help="estimate time and memory")
    parser.add_argument("-a", "--accuracy_analysis", default=None, help='"img1.jpg img2.jpg": run accuracy analysis')
    parser.add_argument("-v", "--verbose", action="store_true")
    parser.add_argument("-d", "--device_id", nargs="?", const="", default=None)
    return parser


def _as_bool(value: Any) -> bool:
    if isinstance(value, str):
        return value.strip().lower() == "true"
    return bool(value)


def _sizes(entries: Sequence[Any] | None) -> list[list[int]] | None:
    if not entries:
        return None
    sizes = []
    for entry in entries:
        dims = [int(v) for v in (entry.split(",") if isinstance(entry, str) else entry)]
        sizes.append([1] + dims if len(dims) == 3 else dims)
    return sizes


def _nested(values: Any) -> Any:
    if values is None:
        return None
    return values if values and isinstance(values[0], (list, tuple)) else [values]


def config_kwargs(configs: dict[str, Any], platform: str) -> dict[str, Any]:
    """Map the yml ``configs`` section to ``RKNN.config`` keyword arguments."""
    kwargs: dict[str, Any] = {"target_platform": platform}
    mean, std = configs.get("mean_values"), configs.get("std_values")
    if mean is None and std is None and configs.get("channel_mean_value"):
        numbers = [float(v) for v in str(configs["channel_mean_value"]).split()]
        mean = None if numbers[0] == -1 else numbers[:-1]
        std = None if numbers[-1] == -1 else [numbers[-1]] * (len(numbers) - 1)
    if mean is not None:
        kwargs["mean_values"] = _nested(mean)
    if std is not None:
        kwargs["std_values"] = _nested(std)
    for key in ("quantized_dtype", "quantized_algorithm", "quantized_method", "optimization_level", "custom_string"):
        if configs.get(key) is not None:
            kwargs[key] = configs[key]
    for key in ("quant_img_RGB2BGR", "model_pruning", "quantize_weight", "single_core_mode", "sparse_infer"):
        if key in configs:
            kwargs[key] = _as_bool(configs[key])
    if kwargs.get("quantized_dtype") == "asymmetric_quantized-u8" and not platform.lower().startswith(("rk1808", "rk3399pro", "rv1109", "rv1126")):
        kwargs["quantized_dtype"] = "asymmetric_quantized-8"
    return kwargs


def convert(config_path: str, output_dir: str, platform: str, eval_perf_memory: bool = False,
            accuracy_inputs: str | None = None, verbose: bool = False, export_format: str = "rknn",
            quantized_method: str | None = None) -> str:
    """Convert as the yml says; returns the written .rknn path (``export_format='tflite'``: the
    ``<name>_int8.tflite`` written by ``export_tflite``, per-tensor weights unless the yml or
    ``quantized_method`` says otherwise). Raises on failure."""
    with open(config_path, encoding="utf-8") as handle:
        text = handle.read()
    print(text)
    spec = (yaml.safe_load(text) or {}).get("models")
    if not isinstance(spec, dict):
        raise ConfigError(f"{config_path}: the yml needs a top-level 'models:' mapping; see docs/command-line.md")
    config_dir = os.path.dirname(os.path.abspath(config_path))
    print(f"convert_model:\n  config_path={config_path}\n  config_dir={config_dir}\n  out_path={output_dir}\n"
          f"  target_platform={platform}")
    name = str(spec.get("name", "model"))
    name = name[:-5] if name.endswith(".rknn") else name
    kwargs = config_kwargs(spec.get("configs") or {}, platform)
    if quantized_method or export_format == "tflite":   # Teflon's NPU backend takes per-tensor weights
        kwargs["quantized_method"] = quantized_method or kwargs.get("quantized_method") or "layer"
    quantize = _as_bool(spec.get("quantize", False))
    for key in ("mean_values", "std_values", "quant_img_RGB2BGR", "quantized_dtype", "quantized_algorithm",
                "target_platform", "quantized_method", "optimization_level"):
        print(f"{key}: {kwargs.get(key)}")
    print(f"quantize: {quantize}")
    rknn = RKNN(verbose=verbose)
    try:
        if rknn.config(**kwargs) != 0:
            raise ConfigError("config failed (see the E line above)")
        cwd = os.getcwd()
        os.chdir(config_dir)   # paths in the yml and the dataset are relative to the yml
        try:
            _load(rknn, spec)
            dataset = spec.get("dataset")
            if rknn.build(do_quantization=quantize, dataset=dataset) != 0:
                raise ConfigError("build failed (see the E line above)")
        finally:
            os.chdir(cwd)
        os.makedirs(output_dir, exist_ok=True)
        if export_format == "tflite":
            out_path = os.path.join(output_dir, name + "_int8.tflite")
            exported = rknn.export_tflite(out_path)
        else:
            out_path = os.path.join(output_dir, name + ".rknn")
            exported = rknn.export_rknn(out_path)
        if exported != 0:
            raise ConfigError("export failed (see the E line above)")
        if accuracy_inputs:
            rknn.accuracy_analysis(inputs=[accuracy_inputs], output_dir=os.path.join(output_dir, "snapshot"))
        if eval_perf_memory:
            rknn.init_runtime(target=platform, perf_debug=False, eval_mem=False)
            rknn.eval_perf()
            rknn.init_runtime(target=platform, eval_mem=True)
            rknn.eval_memory()
        print(f"output {'tflite' if export_format == 'tflite' else 'rknn'} path: {out_path}")
        return out_path
    finally:
        rknn.release()


# platform in the yml → the yml keys naming its model file and its second file
_YML_FILES = {"onnx": ("model_file_path", None), "tflite": ("model_file_path", None),
              "pytorch": ("model_file_path", None), "tensorflow": ("model_file_path", None),
              "caffe": ("prototxt_file_path", "caffemodel_file_path"),
              "darknet": ("darknet_cfg_path", "darknet_weights_path")}


def _load(rknn: Any, spec: dict[str, Any]) -> None:
    platform = str(spec.get("platform", "")).lower()
    sub = spec.get("subgraphs") or {}
    sizes = _sizes(sub.get("input_size_list") or sub.get("input-size-list"))
    inputs, outputs = sub.get("inputs"), sub.get("outputs")
    if platform not in _YML_FILES:
        raise ConfigError(f"platform '{platform}' in the yml is not one of {list(_PLATFORM_LOADERS)}")
    if platform == "tensorflow" and (not inputs or not outputs):
        raise ConfigError("tensorflow models need subgraphs.inputs and subgraphs.outputs in the yml")
    model_key, weights_key = _YML_FILES[platform]
    model_path = spec.get(model_key) or (spec.get("pt_file_path") if model_key == "model_file_path" else None)
    ret = frontends.load(rknn, platform, model_path, spec.get(weights_key) if weights_key else None,
                         inputs=inputs, outputs=outputs, input_size_list=sizes)
    if ret != 0:
        raise ConfigError(f"loading the {platform} model failed (see the E line above)")


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        convert(args.input, args.output, args.target_platform, args.eval_perf_memory, args.accuracy_analysis,
                args.verbose)
    except ImportError as e:   # an optional module: name the extra that brings it
        missing = missing_extra_from(e, "rknn_convert: this model")
        log.error(str(missing) if missing else f"rknn_convert: {e}")
        return 1
    except Exception as e:  # the CLI reports every failure as one E line and exit code 1
        log.error(f"rknn_convert: {e}")
        return 1
    return 0
