"""Rockchip-format ``.rknn`` files from openrknn's quantization, compiled by rknn-toolkit2.

Rockchip's runtime ``librknnrt`` (the vendor kernel most RK3566/RK3568/RK3588 boards ship) only runs
files compiled by Rockchip's own toolkit. This back end hands openrknn's build to that compiler through
the toolkit's documented hybrid-quantization flow (seed 002 §6): step 1 writes
``{model}.quantization.cfg``; we replace each tensor's ``min``/``max`` with openrknn's calibrated range
(whatever algorithm produced it) and list openrknn's float16 layers under ``custom_quantize_layers``;
step 2 compiles. Rockchip's toolkit refuses an edited ``scale`` but honours ``min``/``max`` and derives
the same scale from them (``scale = (max − min) / 255``).

The vendor toolkit is closed, runs only on CPython ≤ 3.12 and pins old libraries, so it is never
imported here: it runs in its own interpreter as a subprocess (``job.py`` beside this file), found
through ``toolchain_python=`` or the ``OPENRKNN_RKNN_TOOLKIT2`` environment variable.
"""
from __future__ import annotations

import json
import re
import os
import shutil
import subprocess
import tempfile
from dataclasses import dataclass, field
from typing import Any, Sequence

import numpy as np
import onnx
from onnx import numpy_helper

from openrknn import __version__, log
from openrknn.errors import BuildError, ConfigError, NotSupportedError
from openrknn.graph import npu_layers
from openrknn.graph.preprocess import PREPROCESS_KEY
from openrknn.graph.rknn_model import RKNNModel
from openrknn.model_file.container import write_atomic
from openrknn.quant import annotate
from openrknn.quant.numerics import qrange

TOOLCHAIN = "rknn-toolkit2"
ENV_VAR = "OPENRKNN_RKNN_TOOLKIT2"
PROVENANCE_PREFIX = "openrknn-provenance:"
_JOB_SCRIPT = os.path.join(os.path.dirname(__file__), "job.py")
# config() options rknn-toolkit2 knows that carry over unchanged from openrknn's config
_CONFIG_PASSTHROUGH = ("mean_values", "std_values", "quantized_dtype", "quantized_method", "optimization_level",
                       "float_dtype", "quant_img_RGB2BGR", "single_core_mode", "model_pruning", "remove_weight",
                       "compress_weight", "op_target", "dynamic_input", "inputs_yuv_fmt", "remove_reshape",
                       "sparse_infer", "enable_flash_attention")
_HOW_TO_PROVIDE = (f"give export_rknn(..., toolchain_python='/path/to/python') or set {ENV_VAR} to a Python "
                   "that can 'import rknn.api' from rknn-toolkit2 (a venv with 'pip install rknn-toolkit2', "
                   "CPython 3.8-3.12, x86-64 or aarch64 Linux) — docs/deployment.md")


@dataclass
class VendorBuild:
    """What the vendor compile did with openrknn's quantization."""

    path: str
    toolkit_version: str
    mapped: list[str] = field(default_factory=list)        # tensors given openrknn's range
    unmapped: list[str] = field(default_factory=list)      # tensors left at the vendor's own range
    float16_placed: list[str] = field(default_factory=list)
    float16_unplaced: list[str] = field(default_factory=list)
    build_seconds: float = 0.0
    vendor_outputs: list[list[np.ndarray]] | None = None   # the vendor simulator on the same build, per sample


def find_toolchain(explicit: str | None = None) -> tuple[str, str]:
    """The vendor toolkit's Python interpreter and its rknn-toolkit2 version.

    Raises:
        NotSupportedError: no interpreter given, or it cannot import ``rknn.api``.
    """
    python = explicit or os.environ.get(ENV_VAR)
    if not python:
        raise NotSupportedError(f"export with toolchain='{TOOLCHAIN}' needs Rockchip's rknn-toolkit2: {_HOW_TO_PROVIDE}")
    if not (os.path.isfile(python) and os.access(python, os.X_OK)):
        raise NotSupportedError(f"toolchain Python '{python}' is not an executable file: {_HOW_TO_PROVIDE}")
    # the distribution's metadata tells Rockchip's package from openrknn's own compatibility 'rknn'
    # (the metadata first: a Python without it answers at once, without importing anything heavy)
    probe = "import importlib.metadata as m\nversion = m.version('rknn-toolkit2')\nimport rknn.api\nprint(version)\n"
    with tempfile.TemporaryDirectory(prefix="openrknn-probe-") as cwd:   # away from any project 'rknn/' package
        try:
            done = subprocess.run([python, "-I", "-c", probe], cwd=cwd, capture_output=True, text=True, timeout=300)
        except (OSError, subprocess.TimeoutExpired) as e:
            raise NotSupportedError(f"toolchain Python '{python}' could not be started ({e}): {_HOW_TO_PROVIDE}") from e
    if done.returncode != 0:
        last = (done.stderr.strip().splitlines() or ["no message"])[-1]
        if "PackageNotFoundError" in last:
            last = "its 'rknn' package is not rknn-toolkit2's (openrknn's own compatibility package?)"
        raise NotSupportedError(f"toolchain Python '{python}' has no usable rknn-toolkit2 ({last}): {_HOW_TO_PROVIDE}")
    return python, done.stdout.strip().splitlines()[-1]


def tensor_ranges(model: RKNNModel) -> dict[str, dict[str, list[float]]]:
    """The calibrated range of every quantized activation, as the vendor config writes it.

    The range is the one the stored scale and zero point represent exactly (``(qmin − zp)·s``,
    ``(qmax − zp)·s``), so the vendor derives the same parameters from it, whichever algorithm
    (normal, kl_divergence, mmse, hand edits) chose them. The normalised input is also the vendor's
    ``{input}`` and ``{input}_int8`` tensor.
    """
    initializers = {init.name for init in model.graph.graph.initializer}
    clamped = annotate.requantized_before_activation(model.graph)
    ranges: dict[str, dict[str, list[float]]] = {}
    for name, params in model.quant_params.items():
        if name in initializers or params.get("axis") is not None:   # weights: the vendor quantizes them itself
            continue
        scale, zero = params.get("scale"), params.get("zero_point")
        if not scale or zero is None or len(scale) != 1:
            continue
        if name in clamped and params.get("min") and params.get("max"):
            ranges[name] = _clamped_range(params)
            continue
        lo, hi = qrange(params.get("dtype", "int8"), params.get("qtype", "asymmetric_quantized"))
        s, z = float(scale[0]), float(np.asarray(zero).reshape(-1)[0])
        ranges[name] = {"min": [(lo - z) * s], "max": [(hi - z) * s]}
    for ours, theirs in npu_layers.vendor_pool_stage_names(model.graph).items():   # a pool's stored stages
        if ours in ranges:
            ranges[theirs] = ranges.pop(ours)
    for pre in model.preprocess:
        if pre.normalized_name in ranges:
            ranges.setdefault(pre.input_name, ranges[pre.normalized_name])
            ranges.setdefault(f"{pre.input_name}_int8", ranges[pre.normalized_name])
    return ranges


def _clamped_range(params: dict) -> dict[str, list[float]]:
    """The range an int8 step inside a fused activation (``annotate.requantized_before_activation``)
    was derived from, already within the activation's bounds. The vendor clamps whatever it is given
    to those bounds again (the grid's own end, e.g. −3.0032 for a HardSwish input, became −3.0 and
    moved the scale by 0.02 %, PP-OCR classifier), so it gets the range itself: from it, it derives the
    same scale and zero point."""
    return {"min": [float(params["min"][0])], "max": [float(params["max"][0])]}


def float16_tensors(model: RKNNModel) -> list[str]:
    """Tensors stored as float16 in a quantized build (the layers openrknn's hybrid or auto_hybrid moved)."""
    if not model.is_quantized:
        return []
    internal = npu_layers.internal_tensors(model.graph.graph)   # computed inside a layer, never stored
    # the mean/std steps build() adds are the NPU's input stage (the vendor's own), not layers
    outputs = [o for node in model.graph.graph.node
               if not any(p.key == PREPROCESS_KEY for p in node.metadata_props) for o in node.output]
    return [name for name in outputs if model.tensor_dtypes.get(name) == "float16" and name not in internal]


def float16_layer_internals(model: RKNNModel) -> list[str]:
    """Tensors computed inside the float16 layers: Rockchip keeps a range for some of them (a Conv output
    before its activation) and runs the producing op in int8 unless it is named too."""
    if not model.is_quantized:
        return []
    stored = set(float16_tensors(model))
    found = []
    for group in npu_layers.layer_groups(model.graph.graph):
        outs = [o for n in group.nodes for o in n.output]
        if stored & set(outs):
            found += [o for o in outs if o not in stored and o in group.internal]
    # a float16 global pool: the vendor's cascade stages (npu_layers.global_average_pool_stages) run
    # in int8 unless named too
    found += [theirs for ours, theirs in npu_layers.vendor_pool_stage_names(model.graph).items()
              if npu_layers.pool_output_of(ours) in stored]
    return found


def handover_graph(model: RKNNModel, source: onnx.ModelProto) -> onnx.ModelProto:
    """The float graph the vendor compiles: the one openrknn's ranges describe.

    A quantized build calibrates a prepared copy of the source (constants as initializers, BatchNorm
    folded, shared weights unshared, depthwise-equalized channels). Equalization rescales the channels
    of the tensors between a Conv and its depthwise Conv, so a range calibrated there belongs to the
    rescaled tensor: compiling the source instead would give Rockchip's compiler ranges of other values
    (and weights of another scale). With asymmetric weights (``weight_qtype='asymmetric_quantized'``,
    the vendor's own grid) the biases are the build's, corrected for that rounding; a symmetric build's
    correction is for other integers, so its float biases go over. The input stage (mean/std) is left out again: the vendor applies it
    from its config. Float builds, or models without that graph, hand over the source.
    """
    golden = model.golden if model.is_quantized else None
    if golden is None:
        return source
    graph = onnx.ModelProto()
    graph.CopyFrom(golden)
    if not _symmetric_weights(model):   # corrected for rounding on the vendor's own weight grid only
        _use_quantized_biases(graph, model)
    marked = [n for n in graph.graph.node if any(p.key == PREPROCESS_KEY for p in n.metadata_props)]
    if not marked:
        return graph
    renamed = {pre.normalized_name: pre.input_name for pre in model.preprocess}
    kept = [n for n in graph.graph.node if n not in marked]
    for node in kept:
        for i, name in enumerate(node.input):
            node.input[i] = renamed.get(name, name)
    for output in graph.graph.output:
        output.name = renamed.get(output.name, output.name)
    del graph.graph.node[:]
    graph.graph.node.extend(kept)
    used = {i for n in kept for i in n.input}
    keep_inits = [i for i in graph.graph.initializer if i.name in used]
    del graph.graph.initializer[:]
    graph.graph.initializer.extend(keep_inits)
    del graph.graph.value_info[:]
    return graph


def _use_quantized_biases(graph: onnx.ModelProto, model: RKNNModel) -> None:
    """Give each weighted layer of ``graph`` the bias openrknn's build computes with (in place).

    The build corrects biases for the weights' rounding (``b + (W − Ŵ)·E[x]``), after the float graph
    was kept. Rockchip's compiler quantizes a float bias as ``round(b / (s_x·s_w))``: handing it the
    dequantized int32 bias makes it store openrknn's integers (the scales are the same).
    """
    built = {node.output[0]: node for node in model.graph.graph.node if node.output}
    stored = {init.name: init for init in model.graph.graph.initializer}
    inits = {init.name: init for init in graph.graph.initializer}
    for node in graph.graph.node:
        twin = built.get(node.output[0]) if node.output else None
        if node.op_type not in ("Conv", "ConvTranspose", "Gemm") or twin is None or len(twin.input) < 3:
            continue
        name = twin.input[2]
        params = model.quant_params.get(name) or {}
        if name not in stored or params.get("dtype") != "int32" or not params.get("scale"):
            continue
        integers = numpy_helper.to_array(stored[name]).astype(np.float64)
        bias = (integers * np.resize(np.asarray(params["scale"], np.float64), integers.shape)).astype(np.float32)
        if len(node.input) > 2 and node.input[2] in inits:
            inits[node.input[2]].CopyFrom(numpy_helper.from_array(bias, node.input[2]))
        else:
            while len(node.input) < 3:
                node.input.append("")
            node.input[2] = name
            graph.graph.initializer.append(numpy_helper.from_array(bias, name))


def provenance(model: RKNNModel, toolkit_version: str, algorithm: str | None) -> str:
    """One line naming where the file's quantization came from (stored in the model's custom string)."""
    meta = model.metadata or {}
    facts = {"openrknn": __version__, "toolchain": f"{TOOLCHAIN} {toolkit_version}",
             "dtype": model.quantized_dtype or model.float_dtype,
             "algorithm": algorithm if model.is_quantized else None,
             "float16_layers": len(float16_tensors(model))}
    if meta.get("auto_hybrid"):
        facts["auto_hybrid"] = True
    return PROVENANCE_PREFIX + json.dumps({k: v for k, v in facts.items() if v is not None}, separators=(",", ":"))


def vendor_config(config: Any, model: RKNNModel, toolkit_version: str) -> dict[str, Any]:
    """rknn-toolkit2 ``config()`` arguments equivalent to this build's openrknn config."""
    if config.toolkit == 1:
        raise NotSupportedError(f"rknn-toolkit2 compiles for RKNPU2 chips only; '{config.platform}' needs "
                                "Rockchip's RKNN-Toolkit 1, which this back end does not drive")
    if config.reorder_channel:
        raise NotSupportedError("rknn-toolkit2 has no 'reorder_channel': use quant_img_RGB2BGR instead")
    out = {name: getattr(config, name) for name in _CONFIG_PASSTHROUGH}
    out = {k: v for k, v in out.items() if v not in (None, False) or k in ("quant_img_RGB2BGR",)}
    out["target_platform"] = config.platform
    # the ranges are openrknn's; the vendor's own algorithm only decides the tensors it cannot be given
    out["quantized_algorithm"] = "normal"
    line = provenance(model, toolkit_version, config.quantized_algorithm)
    if config.custom_string:
        log.warning("export_rknn: the custom string keeps yours and gets the provenance line after a newline")
        line = f"{config.custom_string}\n{line}"
    out["custom_string"] = line
    return out


def compile_with_vendor(model: RKNNModel, source: onnx.ModelProto, config: Any, dataset: str | None, path: str,
                        toolchain_python: str | None = None, rknn_batch_size: int | None = None,
                        check_samples: Sequence[Sequence[np.ndarray]] = (), has_custom_ops: bool = False,
                        verbose: bool = False) -> VendorBuild:
    """Compile ``model``'s source with rknn-toolkit2, using openrknn's quantization; write ``path`` atomically.

    ``check_samples`` (each a list of inputs as ``inference()`` takes them) are run through the vendor's
    simulator on the same build; its outputs come back in ``VendorBuild.vendor_outputs``.

    Raises:
        NotSupportedError: no vendor toolkit, a Toolkit 1 chip, custom operators.
        ConfigError: a quantized build whose calibration dataset is gone.
        BuildError: the vendor toolkit failed (its message is passed on).
    """
    python, version = find_toolchain(toolchain_python)
    if has_custom_ops:
        raise NotSupportedError("the model has custom operators registered with reg_custom_op; Rockchip's "
                                "compiler needs them as its own custom-op plugins, which cannot be handed over")
    quantize = model.is_quantized
    if quantize and _symmetric_weights(model):
        log.info(f"export_rknn: {TOOLCHAIN} stores int8 weights asymmetric per channel and this build's are "
                 "symmetric, so openrknn's simulator predicts the file approximately (docs/deployment.md); "
                 "build with config(weight_qtype='asymmetric_quantized') to simulate its weights exactly")
    if quantize and (not dataset or not os.path.isfile(dataset)):
        raise ConfigError("the vendor compiler re-reads the calibration dataset given to build(), "
                          f"and '{dataset}' is not there any more")
    with tempfile.TemporaryDirectory(prefix="openrknn-vendor-") as work:
        onnx_path = os.path.join(work, "model.onnx")
        onnx.save(handover_graph(model, source), onnx_path)
        job = {"onnx": onnx_path, "quantize": quantize, "config": vendor_config(config, model, version),
               "dataset": _absolute_dataset(dataset, work) if quantize else None,
               "rknn_batch_size": rknn_batch_size, "ranges": tensor_ranges(model) if quantize else {},
               "float16": float16_tensors(model), "float16_internal": float16_layer_internals(model), "output": os.path.join(work, "out.rknn"), "verbose": verbose,
               "samples": []}
        for k, sample in enumerate(check_samples):
            job["samples"].append([])
            for i, array in enumerate(sample):
                job["samples"][-1].append(os.path.join(work, f"input_{k}_{i}.npy"))
                np.save(job["samples"][-1][-1], np.asarray(array))
        job_path, result_path = os.path.join(work, "job.json"), os.path.join(work, "result.json")
        with open(job_path, "w", encoding="utf-8") as f:
            json.dump(job, f)
        script = os.path.join(work, "job.py")   # run from the job folder: no package of ours on its path
        shutil.copyfile(_JOB_SCRIPT, script)
        log.info(f"export_rknn: compiling with {TOOLCHAIN} {version} ({python})")
        done = subprocess.run([python, "-I", script, job_path, result_path], cwd=work, capture_output=not verbose,
                              text=True)
        result = _read_result(result_path, done)
        if not result.get("ok"):
            raise BuildError(f"{TOOLCHAIN} failed: {result.get('error', 'no result')}")
        with open(job["output"], "rb") as f:
            write_atomic(path, f.read())
        build = VendorBuild(path=path, toolkit_version=result.get("toolkit_version") or version,
                            mapped=result.get("mapped", []), unmapped=result.get("unmapped", []),
                            float16_placed=result.get("float16_placed", []),
                            float16_unplaced=result.get("float16_unplaced", []),
                            build_seconds=float(result.get("build_seconds", 0.0)))
        if result.get("outputs"):
            build.vendor_outputs = [[np.load(p) for p in sample] for sample in result["outputs"]]
    _log_handover(build, quantize)
    return build


def _symmetric_weights(model: RKNNModel) -> bool:
    """Whether the build has int8 weights stored symmetric (rknn-toolkit2 re-derives them asymmetric)."""
    weights = {n.input[1] for n in model.graph.graph.node
               if n.op_type in ("Conv", "ConvTranspose", "Gemm", "MatMul") and len(n.input) > 1} \
        & {init.name for init in model.graph.graph.initializer}   # constant weights, not a MatMul of two tensors
    return any(r.get("dtype") == "int8" and r.get("qtype") == "symmetric_quantized"
               for name, r in model.quant_params.items() if name in weights)


def _absolute_dataset(dataset: str, work: str) -> str:
    """The dataset list with absolute paths (the vendor runs in another folder)."""
    base = os.path.dirname(os.path.abspath(dataset))
    lines = []
    with open(dataset, encoding="utf-8") as f:
        for line in f:
            items = line.split()
            if items:
                lines.append(" ".join(p if os.path.isabs(p) else os.path.join(base, p) for p in items))
    path = os.path.join(work, "dataset.txt")
    with open(path, "w", encoding="utf-8") as f:
        f.write("\n".join(lines) + "\n")
    return path


def _read_result(path: str, done: subprocess.CompletedProcess) -> dict[str, Any]:
    try:
        with open(path, encoding="utf-8") as f:
            return json.load(f)
    except (OSError, ValueError):
        tail = ((done.stderr or "") + (done.stdout or "")).strip().splitlines()[-3:]
        return {"ok": False, "error": f"exit status {done.returncode}: " + " | ".join(tail)}


def _log_handover(build: VendorBuild, quantize: bool) -> None:
    if quantize:
        log.info(f"export_rknn: {len(build.mapped)} tensor range(s) handed over to {TOOLCHAIN}, "
                 f"{len(build.float16_placed)} float16 layer(s)")
        if build.unmapped:
            log.warning(f"export_rknn: {len(build.unmapped)} tensor(s) of the vendor's graph have no openrknn "
                        f"counterpart and keep the vendor's own range: {', '.join(build.unmapped)}")
        if build.float16_unplaced:
            log.warning(f"export_rknn: {len(build.float16_unplaced)} float16 layer(s) are not in the vendor's "
                        f"graph and stay as it compiles them: {', '.join(build.float16_unplaced)}")
    log.info(f"export_rknn: {build.path} written by {TOOLCHAIN} {build.toolkit_version} "
             f"({build.build_seconds:.1f} s in the vendor compiler)")


def read_provenance(data: bytes) -> dict[str, Any] | None:
    """The provenance line of a Rockchip-format file this back end wrote, if any (the first that parses)."""
    prefix = PROVENANCE_PREFIX.encode()
    at = data.find(prefix)
    while at >= 0:
        start = at + len(prefix)
        end = data.find(b"}", start, start + 4096)
        try:
            found = json.loads(data[start:end + 1].decode("utf-8")) if end > 0 else None
        except (ValueError, UnicodeDecodeError):
            found = None
        if isinstance(found, dict):
            return found
        at = data.find(prefix, start)
    return None


_FACTS = {
    "compiler": re.compile(rb"compiler version: ([^()\x00]{1,80})"),
    "platforms": re.compile(rb'"target_platform":\[([^\]]{0,200})\]'),
    "tensors": re.compile(rb'"size":\[([0-9,]{0,80})\],"tensor_id":(\d{1,6}),"url":"([^"\x00]{0,200})"'),
}


def describe_rockchip_file(data: bytes) -> list[str]:
    """What can be read of a Rockchip-format ``.rknn`` (closed format) without Rockchip's runtime:
    the compiler version, the platforms, the I/O tensors and, for files this back end wrote, their origin."""
    lines = ["format:           Rockchip RKNN-Toolkit model (closed format; runs on a board through librknnrt)"]
    compiler = _FACTS["compiler"].search(data)
    if compiler:
        lines.append(f"compiler:         rknn-toolkit2 {compiler.group(1).decode('ascii', 'replace').strip()}")
    platforms = _FACTS["platforms"].search(data)
    if platforms:
        lines.append(f"target platforms: {platforms.group(1).decode('ascii', 'replace').replace(chr(34), '')}")
    seen = set()
    for size, _, name in _FACTS["tensors"].findall(data):
        key = (name, size)
        if key not in seen:
            seen.add(key)
            lines.append(f"  tensor {name.decode('utf-8', 'replace')}: [{size.decode('ascii')}]")
    origin = read_provenance(data)
    if origin:
        facts = ", ".join(f"{k}={v}" for k, v in origin.items())
        lines.append(f"quantized by:     {facts}")
    else:
        lines.append("quantized by:     rknn-toolkit2 (no openrknn provenance in the file)")
    return lines
