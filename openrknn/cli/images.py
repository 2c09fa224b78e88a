"""Read an image or .npy file as a model input (for ``openrknn run`` and the demo)."""
from __future__ import annotations

import os

import numpy as np

from openrknn.errors import InferenceInputError
from openrknn.graph.rknn_model import LAYOUT_NCHW, TensorSpec

IMAGE_EXTENSIONS = (".jpg", ".jpeg", ".png", ".bmp")


def read_input(path: str, spec: TensorSpec) -> np.ndarray:
    """An NHWC uint8 batch for image files (resized to the input), the array itself for .npy."""
    if not os.path.isfile(path):
        raise InferenceInputError(f"input file '{path}' does not exist")
    if path.lower().endswith(".npy"):
        return np.load(path, allow_pickle=False)
    if not path.lower().endswith(IMAGE_EXTENSIONS):
        raise InferenceInputError(f"'{path}': give a .jpg/.jpeg/.png/.bmp image or a .npy array")
    from PIL import Image

    if len(spec.shape) != 4:
        raise InferenceInputError(f"input '{spec.name}' is not an image tensor (shape {spec.shape}); give a .npy")
    if spec.layout == LAYOUT_NCHW:
        _, channels, height, width = spec.shape
    else:
        _, height, width, channels = spec.shape
    try:
        with Image.open(path) as img:
            img = img.convert("L" if channels == 1 else "RGB")
            if img.size != (width, height):
                img = img.resize((width, height), Image.BILINEAR)
            array = np.asarray(img, dtype=np.uint8)
    except OSError as e:
        raise InferenceInputError(f"cannot read image '{path}': {e}") from e
    if array.ndim == 2:
        array = array[..., None]
    return array[None]
