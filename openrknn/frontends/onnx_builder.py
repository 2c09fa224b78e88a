"""A small ONNX graph builder shared by the frontends that read a framework's files directly.

The Caffe, Darknet and MXNet readers all walk a list of layers and emit ONNX nodes one layer at
a time. :class:`GraphBuilder` holds what they share: unique node and tensor names, weights as
initializers, shapes on demand (from ONNX shape inference, run only when a converter asks for a
shape it does not know yet) and the final check (``onnx.checker`` + strict shape inference).

Also here: the pooling lowering with "ceil" output rounding used by Caffe and MXNet
(:func:`pool2d`), which both frameworks define the same way.

Example:
    >>> b = GraphBuilder("demo")
    >>> x = b.add_input("data", [1, 3, 8, 8])
    >>> y = b.node("Relu", [x], name="relu1")
    >>> b.shape(y)
    [1, 3, 8, 8]
    >>> model = b.finish([y])
"""
from __future__ import annotations

import math
from typing import Any, Callable, Sequence

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from openrknn.errors import ModelLoadError, UnsupportedOpError
from openrknn.frontends import FRONTEND_OPSET
from openrknn.graph.names import fresh_name

# Initializers up to this many elements stay real constants during shape inference
# (Reshape/Slice/Resize read them); bigger ones are declared by shape only.
_SMALL_CONST = 64


class GraphBuilder:
    """Collects nodes, initializers and graph inputs of one ONNX graph.

    Args:
        source: a label for error messages (usually the model file name).
    """

    def __init__(self, source: str) -> None:
        self.source = source
        self.inputs: list[onnx.ValueInfoProto] = []
        self.initializers: dict[str, np.ndarray] = {}
        self.nodes: list[onnx.NodeProto] = []
        self._names: set[str] = set()
        self._node_names: set[str] = set()
        self._shapes: dict[str, list[int]] = {}
        self._partial: dict[str, list[int | None]] = {}  # shapes with data-dependent dims (None)

    # ----------------------------------------------------------------- names
    def unique(self, hint: str) -> str:
        """A tensor name not used yet, ``hint`` itself when free."""
        return fresh_name(hint, self._names)

    def is_used(self, name: str) -> bool:
        """Whether a tensor called ``name`` exists already."""
        return name in self._names

    def _unique_node(self, hint: str) -> str:
        return fresh_name(hint, self._node_names)

    # ---------------------------------------------------------------- tensors
    def add_input(self, name: str, shape: Sequence[int]) -> str:
        """Declare a float32 graph input of a fixed shape and return its tensor name."""
        if name in self._names:
            raise ModelLoadError(f"{self.source}: input '{name}' is declared twice")
        self._names.add(name)
        self.inputs.append(helper.make_tensor_value_info(name, TensorProto.FLOAT, list(shape)))
        self._shapes[name] = [int(d) for d in shape]
        return name

    def const(self, hint: str, value: Any, dtype: Any = np.float32) -> str:
        """Add an initializer (float32 by default, int64 for shape-like data) and return its name."""
        name = self.unique(hint)
        array = np.ascontiguousarray(np.asarray(value, dtype=dtype))
        self.initializers[name] = array
        self._shapes[name] = list(array.shape)
        return name

    def ints(self, hint: str, values: Sequence[int]) -> str:
        """Add a 1-D int64 initializer (axes, shapes, starts...)."""
        return self.const(hint, np.asarray(values, dtype=np.int64).reshape(-1), dtype=np.int64)

    # ------------------------------------------------------------------ nodes
    def node(self, op_type: str, inputs: Sequence[str], name: str, outputs: Sequence[str] | None = None,
             n_outputs: int = 1, output: str | None = None, **attrs: Any) -> Any:
        """Append one node.

        Args:
            op_type: ONNX operator type.
            inputs: input tensor names ('' for an omitted optional input).
            name: node name (made unique); also the default output tensor name.
            outputs: output tensor names to use (made unique); default derived from ``name``.
            n_outputs: number of outputs when ``outputs`` is not given.
            output: shorthand for ``outputs=[output]``.
            **attrs: ONNX attributes (None values are skipped).

        Returns:
            The output name, or a list of names when the node has several outputs.
        """
        node_name = self._unique_node(name)
        if output is not None:
            outputs = [output]
        if outputs is None:
            outputs = [node_name] if n_outputs == 1 else [f"{node_name}:{i}" for i in range(n_outputs)]
        out_names = [self.unique(o) for o in outputs]
        clean = {k: v for k, v in attrs.items() if v is not None}
        self.nodes.append(helper.make_node(op_type, list(inputs), out_names, name=node_name, **clean))
        return out_names[0] if len(out_names) == 1 else out_names

    # ----------------------------------------------------------------- shapes
    def shape(self, tensor: str) -> list[int]:
        """Static shape of ``tensor``; runs ONNX shape inference on the graph built so far if needed."""
        if tensor not in self._shapes:
            self._infer()
        if tensor not in self._shapes:
            if tensor in self._partial:
                raise ModelLoadError(f"{self.source}: tensor '{tensor}' has a data-dependent shape "
                                     f"{self._partial[tensor]}; no layer may read its size")
            raise ModelLoadError(f"{self.source}: cannot infer the shape of tensor '{tensor}'")
        return list(self._shapes[tensor])

    def partial_shape(self, tensor: str) -> list[int | None]:
        """Shape of ``tensor`` with None for data-dependent dims (e.g. the count of NMS detections)."""
        if tensor not in self._shapes and tensor not in self._partial:
            self._infer()
        if tensor in self._shapes:
            return list(self._shapes[tensor])
        if tensor not in self._partial:
            raise ModelLoadError(f"{self.source}: cannot infer the shape of tensor '{tensor}'")
        return list(self._partial[tensor])

    def _infer(self) -> None:
        inputs = list(self.inputs)
        inits = []
        for name, array in self.initializers.items():
            if array.size <= _SMALL_CONST:
                inits.append(numpy_helper.from_array(array, name))
            else:
                elem = helper.np_dtype_to_tensor_dtype(array.dtype)
                inputs.append(helper.make_tensor_value_info(name, elem, list(array.shape)))
        graph = helper.make_graph(self.nodes, "partial", inputs, [], initializer=inits)
        model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", FRONTEND_OPSET)])
        try:
            inferred = onnx.shape_inference.infer_shapes(model, strict_mode=True, data_prop=True)
        except Exception as e:  # onnx raises InferenceError and others
            last = self.nodes[-1].name if self.nodes else "?"
            raise ModelLoadError(f"{self.source}: shapes do not fit at or before layer '{last}': {e}") from e
        for info in inferred.graph.value_info:
            if not info.type.tensor_type.HasField("shape"):
                continue
            dims = info.type.tensor_type.shape.dim
            if all(d.HasField("dim_value") for d in dims):
                self._shapes[info.name] = [d.dim_value for d in dims]
            else:
                self._partial[info.name] = [d.dim_value if d.HasField("dim_value") else None for d in dims]

    # ----------------------------------------------------------------- finish
    def finish(self, outputs: Sequence[str], graph_name: str, producer: str = "openrknn") -> onnx.ModelProto:
        """Build, shape-infer and check the model whose outputs are ``outputs``."""
        used = {i for n in self.nodes for i in n.input} | set(outputs)
        inits = [numpy_helper.from_array(a, n) for n, a in self.initializers.items() if n in used]
        outs = []
        for o in outputs:
            dims = [d if d is not None else f"{o}_dim{i}" for i, d in enumerate(self.partial_shape(o))]
            outs.append(helper.make_tensor_value_info(o, TensorProto.FLOAT, dims))
        graph = helper.make_graph(self.nodes, graph_name, self.inputs, outs, initializer=inits)
        model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", FRONTEND_OPSET)],
                                  producer_name=producer)
        model.ir_version = 8
        try:
            model = onnx.shape_inference.infer_shapes(model, strict_mode=True)
            onnx.checker.check_model(model)
        except Exception as e:
            raise ModelLoadError(f"{self.source}: the converted ONNX graph is invalid: {e}") from e
        return model


class Registry:
    """Explicit table from a source layer type to its converter; registering a type twice is an error.

    Args:
        framework: name used in error messages ('Caffe', 'Darknet', 'MXNet').
    """

    def __init__(self, framework: str) -> None:
        self.framework = framework
        self._table: dict[str, Callable[..., Any]] = {}

    def register(self, *types: str) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
        """Decorator registering a converter for one or more layer types."""
        def decorate(fn: Callable[..., Any]) -> Callable[..., Any]:
            for layer_type in types:
                if layer_type in self._table:
                    raise RuntimeError(f"{self.framework} layer type '{layer_type}' registered twice "
                                       f"({self._table[layer_type].__module__} and {fn.__module__})")
                self._table[layer_type] = fn
            return fn
        return decorate

    def get(self, layer_type: str, layer_name: str) -> Callable[..., Any]:
        """The converter of ``layer_type``, or ``UnsupportedOpError`` naming the layer."""
        if layer_type not in self._table:
            raise UnsupportedOpError(layer_type, layer_name, self.framework,
                                     f"supported layer types: {', '.join(sorted(self._table))}")
        return self._table[layer_type]

    def types(self) -> list[str]:
        """Registered layer types, sorted."""
        return sorted(self._table)


def same_pads(size: Sequence[int], kernel: Sequence[int], strides: Sequence[int],
              dilations: Sequence[int]) -> list[int]:
    """ONNX ``pads`` ([begins..., ends...]) of TensorFlow / TFLite ``SAME`` padding over spatial dims:
    ``out = ceil(size / stride)``, the total padding split ``total // 2`` before, the odd pixel after."""
    begins, ends = [], []
    for n, k, s, d in zip(size, kernel, strides, dilations):
        out = -(-n // s)
        total = max((out - 1) * s + (k - 1) * d + 1 - n, 0)
        begins.append(total // 2)
        ends.append(total - total // 2)
    return begins + ends


# ---------------------------------------------------------------------------------------------
# Pooling with the output rounding of Caffe / MXNet ("ceil" convention)
# ---------------------------------------------------------------------------------------------
def pooled_size(size: int, kernel: int, stride: int, pad: int, ceil_mode: bool, clip_last: bool) -> int:
    """Output length of one pooled axis.

    ``out = op((size + 2*pad - kernel) / stride) + 1`` with ``op`` ceil or floor; with
    ``clip_last`` (Caffe, when ``pad > 0``) the last window must start inside ``size + pad``:
    ``if (out - 1) * stride >= size + pad: out -= 1``.
    """
    span = size + 2 * pad - kernel
    out = (math.ceil(span / stride) if ceil_mode else span // stride) + 1
    if clip_last and pad > 0 and (out - 1) * stride >= size + pad:
        out -= 1
    return max(out, 1)


def pool2d(b: GraphBuilder, x: str, name: str, method: str, kernel: Sequence[int], stride: Sequence[int],
           pad: Sequence[int], out_hw: Sequence[int], divide_by_padded: bool = True,
           output: str | None = None) -> str:
    """Max or average pooling whose output size is ``out_hw`` exactly.

    The window at output ``o`` covers ``[o*s - p, o*s - p + k)``. Max ignores positions outside the
    image. Average sums the positions inside the image and divides by the window clipped to
    ``[-p, size + p)`` (``divide_by_padded``, Caffe / MXNet ``count_include_pad``) or clipped to
    the image. ONNX pads at the end are chosen so that floor rounding yields ``out_hw``; when the
    extra end padding beyond ``p`` must not count, the ``p`` border becomes an explicit zero Pad.
    """
    in_hw = b.shape(x)[2:]
    outs = [output] if output else None
    ends = [max((o - 1) * s + k - i - p, 0) for o, s, k, i, p in zip(out_hw, stride, kernel, in_hw, pad)]
    if method == "max":
        return b.node("MaxPool", [x], name, kernel_shape=list(kernel), strides=list(stride),
                      pads=list(pad) + ends, outputs=outs)
    extra = [max(e - p, 0) for e, p in zip(ends, pad)]
    if not divide_by_padded or not any(pad):
        return b.node("AveragePool", [x], name, kernel_shape=list(kernel), strides=list(stride),
                      pads=list(pad) + ends, count_include_pad=0 if not divide_by_padded or any(extra) else 1,
                      outputs=outs)
    if not any(extra):
        return b.node("AveragePool", [x], name, kernel_shape=list(kernel), strides=list(stride),
                      pads=list(pad) * 2, count_include_pad=1, outputs=outs)
    pads = b.ints(f"{name}/pads", [0, 0, pad[0], pad[1], 0, 0, pad[0], pad[1]])
    padded = b.node("Pad", [x, pads], f"{name}/pad")
    return b.node("AveragePool", [padded], name, kernel_shape=list(kernel), strides=list(stride),
                  pads=[0, 0] + extra, count_include_pad=0, outputs=outs)

