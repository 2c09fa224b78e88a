"""Hybrid quantization in two steps (seed 001 §3.3, seed 002 §6.3).

Step 1 writes, in the current folder:

* ``{name}.model`` — the float model as an ONNX file (open it in Netron to find tensor names); the
  build facts (I/O, normalisation, platforms, quantization settings, step-1 parameters) ride along
  as JSON in its ``metadata_props`` under ``openrknn.hybrid``;
* ``{name}.data`` — the calibration samples (``.npz``), so step 2 calibrates exactly as step 1 did;
* ``{name}.quantization.cfg`` — the editable YAML of :mod:`openrknn.quant.hybrid_config`.

Step 2 re-quantizes the float model with the same samples, keeping the edited layers in float16
and using the edited parameters; tensors whose entries were not edited get the same parameters
as in step 1, so an unedited config reproduces the plain build exactly.
"""
from __future__ import annotations

import difflib
import io
import json
import os
from dataclasses import dataclass, replace
from typing import Any, Sequence

import numpy as np
import onnx

from openrknn import log
from openrknn.errors import ConfigError, ModelFileError
from openrknn.graph import npu_layers
from openrknn.graph.rknn_model import RKNNModel
from openrknn.model_file import from_container, to_container
from openrknn.model_file.container import Container, write_atomic
from openrknn.quant.hybrid_config import HybridConfig, read_config, write_config
from openrknn.quant.overrides import MODE_RANGE, MODE_SCALE, QuantOverrides
from openrknn.quant.settings import CORRECTED_EVERY_LAYER, CORRECTED_PICTURE_LAYERS, QuantSettings

METADATA_KEY = "openrknn.hybrid"


@dataclass(frozen=True)
class HybridFiles:
    """The three files of step 1."""

    model: str
    data: str
    config: str


@dataclass
class Step2Inputs:
    """What step 2 reads back: the float model, the samples, the settings and the user's edits."""

    float_model: RKNNModel
    samples: list[list[np.ndarray]]
    settings: QuantSettings
    overrides: QuantOverrides
    # step 1's bias-correction decision (quantizer._correct_every_layer), so step 2 quantizes alike;
    # None: step-1 files that do not record it
    every_layer_corrected: bool | None = None


def float_record(model: RKNNModel) -> RKNNModel:
    """The float (pre-quantization) record of a built model: its golden graph with the same I/O facts."""
    if model.golden is None:
        raise ConfigError("hybrid quantization needs the float model: build it from the source model first")
    return replace(model, graph=model.golden, quantized_dtype=None, quant_params={}, tensor_dtypes={})


def custom_hybrid_pairs(custom_hybrid: Any) -> tuple[tuple[str, str], ...]:
    """Validate ``custom_hybrid=[[input_name, output_name], ...]``."""
    if not custom_hybrid:
        return ()
    pairs = []
    for item in custom_hybrid:
        if not isinstance(item, (list, tuple)) or len(item) != 2 or not all(isinstance(v, str) for v in item):
            raise ConfigError(f"custom_hybrid entries must be [input_name, output_name] pairs, got {item!r}")
        pairs.append((item[0], item[1]))
    return tuple(pairs)


def producer_of(graph: onnx.ModelProto) -> dict[str, str]:
    """Tensor name → name of the node producing it (node names map to themselves)."""
    names = {n.name: n.name for n in graph.graph.node if n.name}
    for node in graph.graph.node:
        for out in node.output:
            names.setdefault(out, node.name)
    return names


def write_step1(quantized: RKNNModel, samples: Sequence[Sequence[np.ndarray]], settings: QuantSettings,
                name: str, folder: str = ".", float_layers: Sequence[str] = (), note: str = "",
                int16_layers: Sequence[str] = ()) -> HybridFiles:
    """Write the three step-1 files for ``quantized`` (a model just built with these settings);
    ``float_layers`` / ``int16_layers`` (layer names) go into ``custom_quantize_layers``."""
    files = HybridFiles(model=os.path.join(folder, f"{name}.model"), data=os.path.join(folder, f"{name}.data"),
                        config=os.path.join(folder, f"{name}.quantization.cfg"))
    plain = float_record(quantized)
    header = to_container(replace(plain, metadata=dict(quantized.metadata))).header
    header.update(fp16_initializers=[], removed_weights={}, graph_compression=None, graph_size=None)
    facts = {"header": header, "settings": {"dtype": settings.dtype, "method": settings.method,
                                            "algorithm": settings.algorithm, "batch_size": settings.batch_size,
                                            "epochs": settings.epochs, "toolkit": settings.toolkit,
                                            "weight_qtype": settings.weight_qtype},
             "step1_parameters": quantized.quant_params}
    graph = onnx.ModelProto()
    graph.CopyFrom(plain.graph)
    graph.metadata_props.add(key=METADATA_KEY, value=json.dumps(facts))
    write_atomic(files.model, graph.SerializeToString())
    buffer = io.BytesIO()
    np.savez_compressed(buffer, **{f"s{i}_{j}": a for i, sample in enumerate(samples) for j, a in enumerate(sample)})
    write_atomic(files.data, buffer.getvalue())
    layers = config_layers(plain.graph, {**{layer: "int16" for layer in int16_layers},
                                         **{layer: "float16" for layer in float_layers}})
    write_config(files.config, HybridConfig(layers=layers, parameters=dict(quantized.quant_params)), name,
                 quantized.quantized_dtype or settings.dtype, note)
    log.info(f"hybrid_quantization_step1: wrote {files.model}, {files.data} and {files.config}")
    return files


def config_layers(graph: onnx.ModelProto, layers: dict[str, str]) -> dict[str, str]:
    """``custom_quantize_layers`` entries for layer name → dtype: each layer named by the tensor it
    stores (what Netron shows and step 2 reads back), in graph order."""
    tensor_of = {n.name: n.output[0] for n in graph.graph.node if n.output}
    for group in npu_layers.layer_groups(graph.graph):
        if group.outputs:
            tensor_of[group.name] = group.outputs[-1]
    order = {o: i for i, n in enumerate(graph.graph.node) for o in n.output}
    named = sorted(((tensor_of.get(layer, layer), dtype) for layer, dtype in layers.items()),
                   key=lambda item: order.get(item[0], len(order)))
    return dict(named)


def read_step2(model_path: str, data_path: str, config_path: str) -> Step2Inputs:
    """Read the step-1 files (the config possibly edited) into what ``quantize_model`` needs.

    Raises:
        ModelFileError: a missing or foreign ``.model`` / ``.data`` file.
        ConfigError: a config entry naming an unknown tensor or an unsupported dtype.
    """
    graph, facts = _read_model(model_path)
    float_model = from_container(Container(header=facts["header"], sections={"graph.onnx": graph.SerializeToString()}),
                                 model_path)
    float_model.golden = float_model.graph
    samples = _read_samples(data_path)
    settings = QuantSettings(**facts["settings"])
    config = read_config(config_path)
    float_layers, int16_layers = _layer_dtypes(config, float_model.graph, config_path)
    overrides = QuantOverrides(float_layers=frozenset(float_layers), int16_layers=frozenset(int16_layers),
                               params=_edited_parameters(config, facts.get("step1_parameters", {}), config_path))
    scope = (float_model.metadata.get("quantization") or {}).get("bias_correction")
    every_layer = {CORRECTED_EVERY_LAYER: True, CORRECTED_PICTURE_LAYERS: False}.get(scope)
    return Step2Inputs(float_model=float_model, samples=samples, settings=settings, overrides=overrides,
                       every_layer_corrected=every_layer)


def _read_model(path: str) -> tuple[onnx.ModelProto, dict[str, Any]]:
    if not os.path.isfile(path):
        raise ModelFileError(f"hybrid model file '{path}' does not exist (it is written by hybrid_quantization_step1)")
    try:
        graph = onnx.load(path)
    except Exception as e:   # onnx raises DecodeError and others
        raise ModelFileError(f"'{path}' is not a hybrid quantization model file: {e}") from e
    props = {p.key: p.value for p in graph.metadata_props}
    if METADATA_KEY not in props:
        raise ModelFileError(f"'{path}' was not written by hybrid_quantization_step1 (no {METADATA_KEY} record)")
    facts = json.loads(props[METADATA_KEY])
    kept = [p for p in graph.metadata_props if p.key != METADATA_KEY]
    del graph.metadata_props[:]
    graph.metadata_props.extend(kept)
    return graph, facts


def _read_samples(path: str) -> list[list[np.ndarray]]:
    if not os.path.isfile(path):
        raise ModelFileError(f"hybrid data file '{path}' does not exist (it is written by hybrid_quantization_step1)")
    try:
        with np.load(path) as archive:
            arrays = {k: archive[k] for k in archive.files}
    except Exception as e:   # numpy raises several types for a bad archive
        raise ModelFileError(f"'{path}' is not a hybrid quantization data file: {e}") from e
    samples: dict[int, dict[int, np.ndarray]] = {}
    for key, array in arrays.items():
        i, j = (int(v) for v in key[1:].split("_"))
        samples.setdefault(i, {})[j] = array
    return [[sample[j] for j in sorted(sample)] for _, sample in sorted(samples.items())]


def _layer_dtypes(config: HybridConfig, graph: onnx.ModelProto, path: str) -> tuple[list[str], list[str]]:
    """The layers ``custom_quantize_layers`` moves to float16 and to int16 (node names)."""
    producers = producer_of(graph)
    layers, sixteen = [], []
    for name, dtype in config.layers.items():
        if name not in producers:
            close = difflib.get_close_matches(name, list(producers), n=3)
            raise ConfigError(f"'{path}': custom_quantize_layers names '{name}', which is neither a tensor nor a "
                              f"layer of the model" + (f" (did you mean {close}?)" if close else ""))
        if dtype == "int16":
            sixteen.append(producers[name])
        if dtype == "float16":
            layers.append(producers[name])
    return layers, sixteen


def _edited_parameters(config: HybridConfig, originals: dict[str, dict], path: str) -> dict[str, dict[str, Any]]:
    """Entries whose scale/zero_point (used as given) or min/max (recomputed) differ from step 1."""
    edited = {}
    for name, entry in config.parameters.items():
        original = originals.get(name)
        if original is None:
            raise ConfigError(f"'{path}': quantize_parameters names '{name}', which step 1 did not quantize")
        if _differs(entry, original, ("scale", "zero_point")):
            edited[name] = {"mode": MODE_SCALE, "scale": entry["scale"], "zero_point": entry["zero_point"]}
        elif _differs(entry, original, ("min", "max")):
            edited[name] = {"mode": MODE_RANGE, "min": entry["min"], "max": entry["max"]}
    if edited:
        log.info(f"hybrid_quantization_step2: {len(edited)} tensor(s) with edited parameters: {sorted(edited)[:8]}")
    return edited


def _differs(entry: dict[str, Any], original: dict[str, Any], keys: tuple[str, ...]) -> bool:
    for key in keys:
        if key not in entry or entry[key] is None:
            continue
        mine, theirs = np.asarray(entry[key], np.float64), np.asarray(original.get(key, []), np.float64)
        if mine.shape != theirs.shape or not np.allclose(mine, theirs, rtol=1e-6, atol=0):
            return True
    return False
