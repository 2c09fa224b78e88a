"""What a Caffe layer converter sees: the layer, its input tensors, its weights and the graph builder."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Sequence

import numpy as np

from openrknn.errors import ModelLoadError
from openrknn.frontends.onnx_builder import GraphBuilder, Registry

CONVERTERS = Registry("Caffe")


@dataclass
class CaffeLayer:
    """One layer of the net, V1 (``layers``) and V2 (``layer``) forms alike.

    Attributes:
        name: layer name (also the ONNX node name).
        type: V2 type string ('Convolution', ...); V1 enum types are mapped to these.
        bottoms: input blob names.
        tops: output blob names.
        msg: the parsed layer message (``*_param`` fields are read from it).
    """

    name: str
    type: str
    bottoms: list[str]
    tops: list[str]
    msg: Any


class CaffeContext:
    """State shared by the converters while one net is converted.

    Args:
        builder: the ONNX graph builder.
        layers: the layers to convert, in order.
        blobs: layer name -> weight arrays read from the ``.caffemodel`` (None: random weights).
        blobs_file: name of the weights file for messages.
    """

    def __init__(self, builder: GraphBuilder, layers: list[CaffeLayer], blobs: dict[str, list[np.ndarray]] | None,
                 blobs_file: str) -> None:
        self.b = builder
        self.layers = layers
        self.blob_arrays = blobs
        self.blobs_file = blobs_file
        self.tensors: dict[str, str] = {}  # Caffe blob name -> current ONNX tensor
        self.skipped: set[int] = set()  # indices of layers already folded into another one
        self.position = 0
        self._rng = np.random.default_rng(0)

    # ----------------------------------------------------------------- inputs
    def input(self, layer: CaffeLayer, index: int = 0) -> str:
        """The ONNX tensor holding bottom ``index`` of ``layer``."""
        if index >= len(layer.bottoms):
            raise ModelLoadError(f"layer '{layer.name}' ({layer.type}) needs at least {index + 1} bottom(s), "
                                 f"has {len(layer.bottoms)}")
        blob = layer.bottoms[index]
        if blob not in self.tensors:
            raise ModelLoadError(f"layer '{layer.name}' ({layer.type}) reads blob '{blob}', which no earlier layer "
                                 "or input produces")
        return self.tensors[blob]

    def inputs(self, layer: CaffeLayer) -> list[str]:
        """Tensors of all bottoms of ``layer``."""
        return [self.input(layer, i) for i in range(len(layer.bottoms))]

    def shape(self, tensor: str) -> list[int]:
        """Static shape of an ONNX tensor."""
        return self.b.shape(tensor)

    def out_names(self, layer: CaffeLayer, tops: Sequence[str] | None = None) -> list[str]:
        """Names for the output tensors: the top blob name, or the layer name for in-place layers."""
        names = []
        for top in (tops if tops is not None else layer.tops):
            names.append(top if not self.b.is_used(top) else layer.name)
        return names

    def out_name(self, layer: CaffeLayer) -> list[str]:
        """Output name list for a single-top layer."""
        return self.out_names(layer)[:1]

    # ---------------------------------------------------------------- weights
    def weight(self, layer: CaffeLayer, index: int, shape: Sequence[int], what: str,
               fill: str = "normal") -> np.ndarray:
        """Blob ``index`` of ``layer`` reshaped to ``shape``.

        Without a ``.caffemodel`` a random array is returned (``fill``: 'normal', 'ones', 'zeros',
        'positive').
        """
        shape = [int(d) for d in shape]
        count = int(np.prod(shape)) if shape else 1
        if self.blob_arrays is None:
            return self._random(shape, fill)
        arrays = self.blob_arrays.get(layer.name)
        if arrays is None:
            raise ModelLoadError(f"{self.blobs_file}: no weights for layer '{layer.name}' ({layer.type}); "
                                 "does the .caffemodel belong to this .prototxt?")
        if index >= len(arrays):
            raise ModelLoadError(f"{self.blobs_file}: layer '{layer.name}' ({layer.type}) has {len(arrays)} blob(s), "
                                 f"blob {index} ({what}) is missing")
        array = arrays[index]
        if array.size != count:
            raise ModelLoadError(f"{self.blobs_file}: layer '{layer.name}' ({layer.type}) blob {index} ({what}) has "
                                 f"{array.size} values, the prototxt needs {count} (shape {shape})")
        return array.reshape(shape).astype(np.float32)

    def has_blob(self, layer: CaffeLayer, index: int) -> bool:
        """Whether the ``.caffemodel`` has blob ``index`` for ``layer`` (True without a caffemodel)."""
        if self.blob_arrays is None:
            return True
        return index < len(self.blob_arrays.get(layer.name, []))

    def _random(self, shape: list[int], fill: str) -> np.ndarray:
        if fill == "ones":
            return np.ones(shape, np.float32)
        if fill == "zeros":
            return np.zeros(shape, np.float32)
        if fill == "positive":
            return self._rng.uniform(0.5, 1.5, shape).astype(np.float32)
        return self._rng.normal(0.0, 0.1, shape).astype(np.float32)

    # ----------------------------------------------------------------- fusion
    def take_next(self, layer: CaffeLayer, layer_type: str) -> CaffeLayer | None:
        """The next layer if it is a ``layer_type`` that reads only ``layer``'s top, marking it consumed.

        The next layer is not taken when another layer also reads ``layer``'s top before it is
        overwritten (the intermediate value would be lost).
        """
        nxt_index = self.position + 1
        if nxt_index >= len(self.layers):
            return None
        nxt = self.layers[nxt_index]
        if nxt.type != layer_type or nxt.bottoms != layer.tops[:1] or len(nxt.bottoms) != 1:
            return None
        if nxt.tops != layer.tops:  # not in place: the intermediate blob must have no other reader
            top = layer.tops[0]
            if any(top in other.bottoms for other in self.layers[nxt_index + 1:]):
                return None
        self.skipped.add(nxt_index)
        return nxt
