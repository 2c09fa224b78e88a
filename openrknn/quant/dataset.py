"""Calibration datasets: the documented ``dataset.txt`` format.

One sample per line; a line lists one file per model input, separated by spaces. Paths are
relative to the folder of the dataset file. Images (jpg/jpeg/png/bmp) are read as RGB
(``quant_img_RGB2BGR`` swaps them to BGR), resized to the model input with a warning when their
size differs, and returned as raw pixel values — the built graph applies mean/std itself, exactly
as at inference. ``.npy`` arrays are never resized: their shape must be the input's, in the model
layout or (for 4-D inputs) the other of NCHW/NHWC, with or without the batch axis.
"""
from __future__ import annotations

import os
from typing import Sequence

import numpy as np
from PIL import Image, UnidentifiedImageError

from openrknn import log
from openrknn.errors import QuantizationError
from openrknn.graph.rknn_model import LAYOUT_NHWC, TensorSpec

IMAGE_EXTENSIONS = (".jpg", ".jpeg", ".png", ".bmp")


def load_dataset(path: str, input_specs: Sequence[TensorSpec],
                 rgb2bgr: bool | Sequence[bool] = False) -> list[list[np.ndarray]]:
    """Read every sample of a dataset file.

    Args:
        path: the dataset ``.txt`` file.
        input_specs: the model inputs (graph layout, batch 1).
        rgb2bgr: ``quant_img_RGB2BGR``: one bool, or one per input; images only.

    Returns:
        One list per sample, holding one array per input in the graph's layout and dtype.

    Raises:
        QuantizationError: naming the file (and line) for a missing or empty dataset, a wrong number of
            files on a line, a missing/unreadable/unsupported file, NaN/inf or a shape mismatch.

    Example:
        >>> # samples = load_dataset('dataset.txt', model.inputs)
    """
    lines = _read_lines(path)
    flags = _flags(rgb2bgr, len(input_specs))
    base = os.path.dirname(os.path.abspath(path))
    samples = []
    resized: list[tuple[str, tuple[int, int], tuple[int, int]]] = []   # one summary line, not one per image
    for number, line in lines:
        files = line.split()
        if len(files) != len(input_specs):
            raise QuantizationError(f"dataset '{path}' line {number}: {len(files)} file(s) for a model with "
                                    f"{len(input_specs)} input(s) {[s.name for s in input_specs]}; list one file "
                                    "per input, separated by spaces")
        where = f"dataset '{path}' line {number}"
        samples.append(load_files([os.path.join(base, f) for f in files], input_specs, flags, where,
                                  resized=resized))
    if resized:
        file, (w, h), (iw, ih) = resized[0]
        others = f" and {len(resized) - 1} more" if len(resized) > 1 else ""
        shown = os.path.relpath(file, base)
        shown = file if shown.startswith("..") else shown
        log.warning(f"dataset: {len(resized)} of {len(samples) * len(input_specs)} image(s) resized to the model "
                    f"input (e.g. '{shown}' {w}x{h} to {iw}x{ih}{others})")
    return samples


def load_files(files: Sequence[str], input_specs: Sequence[TensorSpec], rgb2bgr: bool | Sequence[bool] = False,
               where: str = "sample", warn_resize: bool = True,
               resized: list | None = None) -> list[np.ndarray]:
    """One sample from its files (one per input), read exactly as a calibration line is
    (``warn_resize=False``: resize images of another size silently; a ``resized`` list collects
    ``(file, size, input size)`` of resized images instead of one warning each)."""
    if len(files) != len(input_specs):
        raise QuantizationError(f"{where}: {len(files)} file(s) for a model with {len(input_specs)} input(s) "
                                f"{[s.name for s in input_specs]}; give one file per input")
    flags = _flags(rgb2bgr, len(input_specs))
    return [_load_one(f, spec, flag, where, warn_resize, resized) for f, spec, flag in zip(files, input_specs, flags)]


def _read_lines(path: str) -> list[tuple[int, str]]:
    if not path or not os.path.isfile(path):
        raise QuantizationError(f"dataset file '{path}' does not exist")
    try:
        with open(path, encoding="utf-8") as handle:
            text = handle.read()
    except (OSError, UnicodeDecodeError) as e:
        raise QuantizationError(f"dataset file '{path}' cannot be read: {e}") from e
    lines = [(i + 1, ln.strip()) for i, ln in enumerate(text.splitlines()) if ln.strip() and not ln.strip().startswith("#")]
    if not lines:
        raise QuantizationError(f"dataset file '{path}' is empty; list one calibration sample per line")
    return lines


def _flags(rgb2bgr: bool | Sequence[bool], count: int) -> list[bool]:
    if isinstance(rgb2bgr, (list, tuple)):
        if len(rgb2bgr) != count:
            raise QuantizationError(f"quant_img_RGB2BGR lists {len(rgb2bgr)} flag(s) for {count} input(s)")
        return [bool(v) for v in rgb2bgr]
    return [bool(rgb2bgr)] * count


def _load_one(file: str, spec: TensorSpec, rgb2bgr: bool, where: str, warn_resize: bool = True,
              resized: list | None = None) -> np.ndarray:
    if not os.path.isfile(file):
        raise QuantizationError(f"{where}: file '{file}' does not exist")
    ext = os.path.splitext(file)[1].lower()
    if ext == ".npy":
        return _load_npy(file, spec, where)
    if ext in IMAGE_EXTENSIONS:
        return _load_image(file, spec, rgb2bgr, where, warn_resize, resized)
    raise QuantizationError(f"{where}: '{file}' has an unsupported type '{ext}'; use jpg, jpeg, png, bmp or npy")


def _np_dtype(spec: TensorSpec) -> np.dtype:
    try:
        return np.dtype(spec.dtype)
    except TypeError:
        return np.dtype(np.float32)


def _load_npy(file: str, spec: TensorSpec, where: str) -> np.ndarray:
    try:
        array = np.load(file, allow_pickle=False)
    except Exception as e:  # numpy raises ValueError/OSError/EOFError for broken files
        raise QuantizationError(f"{where}: '{file}' is not a readable .npy file ({e})") from e
    if array.dtype.kind not in "biuf":
        raise QuantizationError(f"{where}: '{file}' holds {array.dtype} data; calibration arrays must be numeric")
    if array.dtype.kind == "f" and not np.all(np.isfinite(array)):
        raise QuantizationError(f"{where}: '{file}' contains NaN or inf values")
    expected = tuple(spec.shape)
    candidates = [(expected, None)]
    if len(expected) == 4:
        order = (0, 2, 3, 1) if spec.layout != LAYOUT_NHWC else (0, 3, 1, 2)
        candidates.append((tuple(expected[i] for i in order), (0, 3, 1, 2) if spec.layout != LAYOUT_NHWC else (0, 2, 3, 1)))
    for shape, transpose in candidates:
        for batched in (array, array[np.newaxis]):
            if tuple(batched.shape) == shape:
                out = batched.transpose(transpose) if transpose else batched
                return np.ascontiguousarray(out.astype(_np_dtype(spec), copy=False))
    raise QuantizationError(f"{where}: '{file}' has shape {tuple(array.shape)} but input '{spec.name}' expects "
                            f"{expected} ({spec.layout}); .npy data is never resized")


def _image_geometry(spec: TensorSpec, file: str, where: str) -> tuple[int, int, int]:
    shape = list(spec.shape)
    if len(shape) != 4:
        raise QuantizationError(f"{where}: '{file}' is an image but input '{spec.name}' has shape {shape}; "
                                "give .npy data for non-image inputs")
    if spec.layout == LAYOUT_NHWC:
        return shape[1], shape[2], shape[3]
    return shape[2], shape[3], shape[1]


def _load_image(file: str, spec: TensorSpec, rgb2bgr: bool, where: str, warn_resize: bool = True,
                resized: list | None = None) -> np.ndarray:
    height, width, channels = _image_geometry(spec, file, where)
    mode = {1: "L", 3: "RGB", 4: "RGBA"}.get(channels)
    if mode is None:
        raise QuantizationError(f"{where}: input '{spec.name}' has {channels} channels; images give 1, 3 or 4, "
                                "use .npy data")
    try:
        with Image.open(file) as img:
            img = img.convert(mode)
            if img.size != (width, height) and warn_resize and resized is not None:
                resized.append((file, img.size, (width, height)))
            elif img.size != (width, height) and warn_resize:
                log.warning(f"dataset: '{file}' is {img.size[0]}x{img.size[1]}, resized to the model input "
                            f"{width}x{height}")
            if img.size != (width, height):
                img = img.resize((width, height), Image.BILINEAR)
            pixels = np.asarray(img, dtype=np.float32)
    except (UnidentifiedImageError, OSError, ValueError) as e:
        raise QuantizationError(f"{where}: image '{file}' cannot be read ({e})") from e
    if pixels.ndim == 2:
        pixels = pixels[:, :, None]
    if rgb2bgr and channels >= 3:
        pixels = pixels[:, :, [2, 1, 0] + list(range(3, channels))]
    batch = pixels[None]
    if spec.layout != LAYOUT_NHWC:
        batch = batch.transpose(0, 3, 1, 2)
    return np.ascontiguousarray(batch.astype(_np_dtype(spec), copy=False))


__all__ = ["IMAGE_EXTENSIONS", "load_dataset", "load_files"]
