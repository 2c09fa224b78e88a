"""What a Darknet layer converter sees: the section, the layers before it, the weights and the graph."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import numpy as np

from openrknn.errors import ModelLoadError
from openrknn.frontends.darknet.cfg import Section
from openrknn.frontends.onnx_builder import GraphBuilder
from openrknn.frontends.darknet.weights import WeightReader


@dataclass
class Tensor:
    """A layer output: ONNX tensor name and Darknet shape (channels, height, width)."""

    name: str
    c: int
    h: int
    w: int

    @property
    def shape(self) -> list[int]:
        """NCHW shape with batch 1."""
        return [1, self.c, self.h, self.w]


Converter = Callable[["DarknetContext", Section], Tensor]
CONVERTERS: dict[str, Converter] = {}
ALIASES: dict[str, str] = {}


def register(kind: str, *aliases: str) -> Callable[[Converter], Converter]:
    """Register the converter of section ``kind`` (and its short names); duplicates are an error."""
    def wrap(func: Converter) -> Converter:
        for name in (kind, *aliases):
            if name in CONVERTERS or name in ALIASES:
                raise RuntimeError(f"Darknet converter for [{name}] registered twice")
        CONVERTERS[kind] = func
        ALIASES.update({alias: kind for alias in aliases})
        return func
    return wrap


class DarknetContext:
    """State shared by the converters while one cfg is converted.

    Args:
        graph: the ONNX graph writer.
        weights: the weight reader.
        network_input: the [net] input tensor.
    """

    def __init__(self, graph: GraphBuilder, weights: WeightReader, network_input: Tensor) -> None:
        self.g = graph
        self.weights = weights
        self.network_input = network_input
        self.layers: list[Tensor] = []  # output of each layer, by Darknet index
        self.outputs: list[Tensor] = []  # tensors exposed by [yolo]/[region] layers

    @property
    def last(self) -> Tensor:
        """Input of the layer being converted (the previous layer's output, or the network input)."""
        return self.layers[-1] if self.layers else self.network_input

    def layer(self, section: Section, ref: int) -> Tensor:
        """Output of layer ``ref`` (negative: relative to ``section``)."""
        index = section.index + ref if ref < 0 else ref
        if not 0 <= index < section.index:
            raise ModelLoadError(f"{section.where}: refers to layer {ref} (index {index}), but only layers "
                                 f"0..{section.index - 1} come before it")
        return self.layers[index]

    def read(self, section: Section, count: int, what: str) -> np.ndarray:
        """Next ``count`` float32 weights for ``section``."""
        return self.weights.read(count, section, what)

    @staticmethod
    def name(section: Section) -> str:
        """The ONNX node name of a layer: '<kind>_<index>'."""
        return f"{section.kind}_{section.index}"
