"""What the ``openrknn`` subcommands share: argument parsing, loading a model named by its file, the top-5 print.

``main.py`` only dispatches; ``demo``, ``evaluate`` and the others import from here, never from ``main``.
"""
from __future__ import annotations

import argparse
from typing import Any

import numpy as np

from openrknn import frontends, log
from openrknn.errors import ConfigError

INPUT_SIZE_LIST_HELP = ("full input shape(s) for a model with dynamic dimensions, e.g. '1,3,640,640' "
                        "('#' between inputs: '1,3,224,224#1,10')")


def parse_input_size_list(text: str | None) -> list[list[int]] | None:
    """``'1,3,640,640#1,10'`` → ``[[1, 3, 640, 640], [1, 10]]`` (the workbench's format); None for no text.

    Commas or spaces separate the dims of one input, ``#`` separates inputs. Raises ``ConfigError``
    naming the bad part.
    """
    if text is None or not text.strip():
        return None
    shapes = []
    for part in text.split("#"):
        dims = part.replace(",", " ").split()
        try:
            shape = [int(d) for d in dims]
        except ValueError:
            raise ConfigError(f"--input-size-list: '{part.strip()}' is not a list of integers "
                              "(e.g. '1,3,640,640', '#' between inputs)") from None
        if not shape or min(shape) < 1:
            raise ConfigError(f"--input-size-list: '{part.strip()}' needs positive sizes (e.g. '1,3,640,640')")
        shapes.append(shape)
    return shapes


def add_input_size_list_argument(parser: argparse.ArgumentParser) -> None:
    """The ``--input-size-list`` option (``convert``, ``eval``, ``run``)."""
    parser.add_argument("--input-size-list", dest="input_size_list", default=None, help=INPUT_SIZE_LIST_HELP)


def parse_floats(text: str | None) -> list[list[float]] | None:
    """``'0 0 0#1 1 1'`` (``,`` or spaces between values, ``#`` between inputs) → per-input float lists."""
    if not text:
        return None
    return [[float(v) for v in part.replace(",", " ").split()] for part in text.split("#")]


def load_by_extension(rknn: Any, path: str, input_size_list: list[list[int]] | None = None) -> int:
    """Load an ``.onnx`` or ``.tflite`` file into ``rknn`` (other frameworks need files or names a single path
    cannot give: they come through an ``rknn_convert`` yml)."""
    framework = frontends.framework_of(path)
    if framework not in ("onnx", "tflite"):
        log.error(f"convert: cannot tell the framework of '{path}' from its extension; use a yml (rknn_convert "
                  "format) for pytorch/tensorflow/caffe/darknet models")
        return -1
    if framework == "tflite" and input_size_list:
        log.error("convert: --input-size-list applies to ONNX models; a .tflite file fixes its input sizes")
        return -1
    return frontends.load(rknn, framework, path, input_size_list=input_size_list)


def print_top5(output: np.ndarray) -> None:
    """Print the five best classes in the guide's example format."""
    flat = output.reshape(-1)
    order = np.argsort(flat)[::-1][:5]
    print("-----TOP 5-----")
    for index in order:
        print(f"[{index}]: {flat[index]}")
