"""Read an image or .npy file as the model input a ``TensorSpec`` describes (``openrknn run``, the workbench)."""
from __future__ import annotations

import os

import numpy as np
from PIL import Image

from openrknn import log
from openrknn.errors import InferenceInputError
from openrknn.graph.rknn_model import LAYOUT_NCHW, TensorSpec

IMAGE_EXTENSIONS = (".jpg", ".jpeg", ".png", ".bmp")


def read_input(path: str, spec: TensorSpec, resize: bool = False, caller: str = "run") -> np.ndarray:
    """An NHWC uint8 batch for image files, the array itself for .npy.

    The rule is the API's: an input has the model's size. An image of another size is refused
    (naming both sizes) unless ``resize`` is set; then it is resized, with a ``W`` line saying so.
    """
    if not os.path.isfile(path):
        raise InferenceInputError(f"input file '{path}' does not exist")
    if path.lower().endswith(".npy"):
        return np.load(path, allow_pickle=False)
    if not path.lower().endswith(IMAGE_EXTENSIONS):
        raise InferenceInputError(f"'{path}': give a .jpg/.jpeg/.png/.bmp image or a .npy array")

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
                size = f"{img.size[0]}×{img.size[1]}"
                if not resize:
                    raise InferenceInputError(
                        f"image '{os.path.basename(path)}' is {size} (width×height) but input '{spec.name}' takes "
                        f"{width}×{height}: give an image of that size, or --resize to resize it")
                log.warning(f"{caller}: image '{os.path.basename(path)}' resized from {size} to the input's "
                            f"{width}×{height} (width×height, bilinear, aspect ratio not kept)")
                img = img.resize((width, height), Image.BILINEAR)
            array = np.asarray(img, dtype=np.uint8)
    except OSError as e:
        raise InferenceInputError(f"cannot read image '{path}': {e}") from e
    if array.ndim == 2:
        array = array[..., None]
    return array[None]
