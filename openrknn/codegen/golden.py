"""Reference data for the demo: the user's input files in C API layout, and the simulator's outputs.

``codegen(inputs=[...])`` takes one file per model input: ``.npy`` (its shape is the model's or the
C API's, see ``io_table``) or an image (``.jpg``/``.jpeg``/``.png``/``.bmp``, for 1/3/4-channel
image inputs; resized to the model size). The simulator runs them once; the demo later compares the
C API outputs with these by cosine similarity (seed 002 §5.12).
"""
from __future__ import annotations

import os
from typing import Any, Sequence

import numpy as np
from PIL import Image

from openrknn import log
from openrknn.codegen.io_table import DemoTensor
from openrknn.errors import ConfigError
from openrknn.graph.rknn_model import RKNNModel
from openrknn.sim.session import Simulator

IMAGE_SUFFIXES = (".jpg", ".jpeg", ".png", ".bmp")
_NCHW_TO_NHWC = (0, 2, 3, 1)


def _load_image(path: str, t: DemoTensor) -> np.ndarray:
    if t.api_format != "NHWC" or len(t.api_dims) != 4 or t.api_dims[3] not in (1, 3, 4):
        raise ConfigError(f"codegen: input {t.index} '{t.name}' ({list(t.model_shape)}) is not an image input; "
                          f"give a .npy file instead of '{path}'")
    n, h, w, c = t.api_dims
    try:
        with Image.open(path) as image:
            pixels = image.convert({1: "L", 3: "RGB", 4: "RGBA"}[c]).resize((w, h), Image.BILINEAR)
    except OSError as e:
        raise ConfigError(f"codegen: cannot read image '{path}': {e}") from e
    array = np.asarray(pixels, dtype=np.uint8).reshape(1, h, w, c)
    return np.repeat(array, n, axis=0)


def _load_npy(path: str, t: DemoTensor) -> np.ndarray:
    try:
        array = np.load(path, allow_pickle=False)
    except (OSError, ValueError) as e:
        raise ConfigError(f"codegen: cannot read '{path}' as a .npy array: {e}") from e
    shape = tuple(array.shape)
    if shape == t.api_dims:
        return array
    if shape == t.model_shape:
        return array.transpose(_NCHW_TO_NHWC) if t.transposed else array
    raise ConfigError(f"codegen: '{path}' has shape {list(shape)}; input {t.index} '{t.name}' takes "
                      f"{list(t.model_shape)} ({t.layout}) or {list(t.api_dims)} ({t.api_format})")


def load_input(path: str, t: DemoTensor) -> np.ndarray:
    """One input file as the C API buffer of input ``t`` (API layout)."""
    if not os.path.isfile(path):
        raise ConfigError(f"codegen: input file '{path}' does not exist")
    suffix = os.path.splitext(path)[1].lower()
    if suffix == ".npy":
        return np.ascontiguousarray(_load_npy(path, t))
    if suffix in IMAGE_SUFFIXES:
        return _load_image(path, t)
    raise ConfigError(f"codegen: '{path}' is not a .npy/.jpg/.png file")


def golden_data(model: RKNNModel, tensors: list[DemoTensor], paths: Sequence[str],
                custom_ops: Any = None) -> tuple[list[np.ndarray], list[np.ndarray]]:
    """``(inputs in API layout, simulator outputs as float32)`` for the files in ``paths``."""
    if len(paths) != len(tensors):
        raise ConfigError(f"codegen: the model has {len(tensors)} input(s) {[t.name for t in tensors]} but "
                          f"{len(paths)} input file(s) were given")
    arrays = [load_input(str(p), t) for p, t in zip(paths, tensors, strict=True)]
    formats = ["nchw" if t.api_format == "NCHW" else "nhwc" for t in tensors]
    outputs = [np.asarray(o, dtype=np.float32) for o in Simulator(model, custom_ops).run(arrays, formats)]
    for spec, out in zip(model.outputs, outputs, strict=True):
        if not np.isfinite(out).all():
            log.warning(f"codegen: the simulator's output '{spec.name}' has NaN/Inf values for these inputs; the "
                        "golden comparison will fail. Are the inputs in the range the model expects (config "
                        "mean_values/std_values)?")
    return arrays, outputs
