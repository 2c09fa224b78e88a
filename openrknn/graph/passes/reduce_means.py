"""ReduceMean and overlapping wide AveragePools as rknn-toolkit2 2.5.0 runs them: convolutions.

Measured on probe graphs (rk3588 and rk3566, int8 and float16; LPRNet on rk3562 and rk3576 too;
the tables are in docs/fidelity.md). A ReduceMean over a 4-D tensor of batch 1 becomes, by its axes:

* **C, H and W** (no axes, or 1, 2, 3): one Conv whose kernel covers the whole C×H×W tensor (weights
  1/N) when H and W are at most 7 and the Conv fits one NPU pass (the chip's
  ``lowering.conv_split_input_bytes``); otherwise a ``Reshape`` to (1, N, 1, 1) and a 1×1 Conv over
  the N channels, which the wide-Conv rule then splits into tiles (``Split``, ``Conv``,
  ``ConvAdd``…: LPRNet's 64×4×18 mean on rk3588 float16 is three tiles of 1536 channels, on rk3566
  two of 2304). A ``Div`` reads the mean through an ``Expand`` to its other input's shape (a ``Mul``
  reads it as it is); keepdims=0 adds a ``Reshape`` only where a reader needs the smaller rank.
* **C**: a 1×1 Conv of weights 1/C (``Conv``), then a ``Reshape`` for keepdims=0; when its input
  is read by other nodes too (pp_liteseg's mean beside a max, a mean that scales its own input), a
  ``Reshape`` to (1, C, 1, H·W), the Conv, and a ``Reshape`` back to (1, 1, H, W).
* **H and W**: a GlobalAveragePool — a cascade of depthwise Convs of at most 7×7
  (:func:`openrknn.graph.npu_layers.global_average_pool_stages`), then a ``Reshape`` for keepdims=0.
* **H alone or W alone**: a ``Transpose`` that makes it the channel axis, a 1×1 Conv of weights 1/K,
  then a ``Reshape`` (keepdims=0) or the ``Transpose`` back (keepdims=1).

Other axes sets and other ranks stay a ReduceMean. An AveragePool whose kernel is wider than 7 along
an axis where its windows overlap (stride < kernel; LPRNet's 4×10 kernel, stride 4×2) is a depthwise
Conv of weights 1/(kh·kw) (printed ``Conv``, ``<node>_2dw``). All of it is exact in float but for the
rounding of 1/N; in int8 every Conv output is stored and requantized, as on the chip.
"""
from __future__ import annotations

import numpy as np
import onnx
from onnx import helper, numpy_helper

from openrknn.graph.names import fresh_name
from openrknn.graph.passes.base import PassResult, attribute, constant_axes, consumers, graph_output_names
from openrknn.graph.passes.constant_folding import static_shapes
from openrknn.graph.passes.wide_convs import conv_tiles

_KERNEL_LIMIT = 7   # the largest kernel side a whole-tensor mean Conv or a pooling window takes
_BROADCASTING = frozenset({"Add", "Sub", "Mul", "Div"})


def lower_reduce_means(model: onnx.ModelProto, limit_bytes: int | None = None, weight_bytes: int = 1,
                       block: int | None = None) -> PassResult:
    """Rewrite the ReduceMean and wide AveragePool nodes of ``model`` (module docstring).
    ``limit_bytes``/``block``: the chip's Conv split (None: no limit); ``weight_bytes``: 2 for a
    float16 build."""
    graph = model.graph
    targets = [n for n in graph.node if n.domain in ("", "ai.onnx") and n.op_type in ("ReduceMean", "AveragePool")]
    if not targets:
        return PassResult(model, False)
    shapes = static_shapes(model)
    lowering = _Lowering(graph, shapes, limit_bytes, weight_bytes, block or 16)
    normalising = _normalisation_means(graph)
    modified = False
    for node in targets:
        shape = shapes.get(node.input[0]) if node.input else None
        if shape is None or len(shape) != 4 or shape[0] != 1 or node.output[0] not in shapes \
                or node.output[0] in normalising:
            continue
        if node.op_type == "ReduceMean":
            modified |= lowering.mean(node, shape)
        else:
            modified |= lowering.pool(node, shape)
    return PassResult(model, modified)


def mean_axes(node: onnx.NodeProto, inits: dict[str, onnx.TensorProto], rank: int) -> tuple[int, ...] | None:
    """The axes a ReduceMean reduces (all of them without axes), None when they are not constant or
    the node reduces nothing (``noop_with_empty_axes``)."""
    axes = constant_axes(node, inits)
    if axes is None:
        return None
    if not axes:
        return None if attribute(node, "noop_with_empty_axes", 0) else tuple(range(rank))
    return tuple(sorted({int(a) % rank for a in axes}))


def _normalisation_means(graph: onnx.GraphProto) -> set[str]:
    """Outputs of the ReduceMeans of a decomposed normalisation (``x − mean(x)``, and the mean of its
    square): the layer graph runs those as one ``exNorm`` layer (``npu_layers.norm_closure``)."""
    producer = {o: n for n in graph.node for o in n.output}
    readers = consumers(graph)
    centred: set[str] = set()   # outputs of Sub(x, mean(x))
    found: set[str] = set()
    for node in graph.node:
        if node.op_type != "ReduceMean" or not node.input:
            continue
        for reader in readers.get(node.output[0], []):
            if reader.op_type == "Sub" and list(reader.input) == [node.input[0], node.output[0]]:
                found.add(node.output[0])
                centred.add(reader.output[0])
    for node in graph.node:
        if node.op_type != "ReduceMean" or not node.input or node.input[0] not in producer:
            continue
        square = producer[node.input[0]]
        if square.op_type in ("Pow", "Mul") and any(i in centred for i in square.input):
            found.add(node.output[0])
    return found


class _Lowering:
    """The node rewrites of one graph (names kept unique, new nodes at the replaced node's place)."""

    def __init__(self, graph: onnx.GraphProto, shapes: dict[str, list[int]], limit_bytes: int | None,
                 weight_bytes: int, block: int) -> None:
        self.graph, self.shapes = graph, shapes
        self.limit_bytes, self.weight_bytes, self.block = limit_bytes, weight_bytes, block
        self.inits = {i.name: i for i in graph.initializer}
        self.names = set(self.inits) | {o for n in graph.node for o in n.output} | {n.name for n in graph.node}
        self.readers = consumers(graph)

    # ---------------------------------------------------------------- ReduceMean
    def mean(self, node: onnx.NodeProto, shape: list[int]) -> bool:
        axes = mean_axes(node, self.inits, 4)
        if axes is None:
            return False
        _, c, h, w = shape
        source, out = node.input[0], node.output[0]
        keep = bool(attribute(node, "keepdims", 1))
        new: list[onnx.NodeProto] = []
        if axes in ((1, 2, 3), (0, 1, 2, 3)):
            whole = h <= _KERNEL_LIMIT and w <= _KERNEL_LIMIT and \
                len(conv_tiles(c, h * w * self.weight_bytes, self.limit_bytes, self.block)) == 1
            if whole:
                reduced = self._conv(new, source, np.full((1, c, h, w), 1.0 / (c * h * w), np.float32), f"{source}_rs_mm#1")
            else:
                flat = self._reshape(new, source, [1, c * h * w, 1, 1], f"{source}_rs")
                reduced = self._conv(new, flat, np.full((1, c * h * w, 1, 1), 1.0 / (c * h * w), np.float32),
                                     f"{source}_rs_mm#1")
            self._finish_whole(node, new, reduced, keep)
            return True
        if axes == (1,) and len(self.readers.get(source, [])) > 1:   # the input is read elsewhere too
            flat = self._reshape(new, source, [1, c, 1, h * w], f"{source}_rs")
            reduced = self._conv(new, flat, np.full((1, c, 1, 1), 1.0 / c, np.float32), f"{source}_rs_mm#1")
            self._reshape(new, reduced, [1, 1, h, w] if keep else [1, h, w], f"{node.name or out}#1_rs", out)
            self._replace(node, new)
            return True
        if axes == (1,):
            reduced = self._conv(new, source, np.full((1, c, 1, 1), 1.0 / c, np.float32), f"{source}_rs_mm#1")
            tail = [1, 1, h, w] if keep else [1, h, w]
        elif axes == (2, 3):
            reduced = self._fresh(f"{source}_gavg")
            new.append(helper.make_node("GlobalAveragePool", [source], [reduced], name=reduced))
            tail = [1, c, 1, 1] if keep else [1, c]
        elif axes in ((2,), (3,)):
            k = h if axes == (2,) else w
            perm = [0, 2, 1, 3] if axes == (2,) else [0, 3, 1, 2]
            moved = self._transpose(new, source, perm, f"{source}_rs_tp" + ("#1" if axes == (2,) else ""))
            reduced = self._conv(new, moved, np.full((1, k, 1, 1), 1.0 / k, np.float32), f"{source}_rs_tp_conv")
            if keep:   # back to the input's axis order, the reduced axis of size 1
                self._transpose(new, reduced, [0, 2, 1, 3] if axes == (2,) else [0, 2, 3, 1], f"{node.name or out}#1_rs#1", out)
            else:
                self._reshape(new, reduced, [1, c, w] if axes == (2,) else [1, c, h],
                              f"{source}_rs_mm_tp_rs" if axes == (2,) else f"{source}_rs", out)
            self._replace(node, new)
            return True
        else:
            return False
        if keep:
            _rename_output(new[-1], reduced, out)
        else:
            self._reshape(new, reduced, tail, f"{reduced}_rs", out)
        self._replace(node, new)
        return True

    def _finish_whole(self, node: onnx.NodeProto, new: list[onnx.NodeProto], reduced: str, keep: bool) -> None:
        """The (1,1,1,1) mean of C, H and W as its readers take it: through an Expand for a Div,
        as it is for the other broadcasting ops of a 4-D tensor, reshaped for the rest."""
        out = node.output[0]
        readers = consumers(self.graph).get(out, [])
        is_output = out in graph_output_names(self.graph)
        four_d = [r for r in readers if r.op_type in _BROADCASTING and
                  all(len(self.shapes.get(i, [])) == 4 for i in r.input if i and i != out)]
        if keep or (not is_output and len(four_d) == len(readers)):
            _rename_output(new[-1], reduced, out if keep else reduced)
            mean = out if keep else reduced
        else:   # the smaller rank is read: the Conv's (1,1,1,1) goes through a Reshape
            self._reshape(new, reduced, list(self.shapes[out]), f"{reduced}_tp_rs", out)
            mean = reduced
        for reader in four_d:
            if reader.op_type != "Div" or list(reader.input).index(out) != 1:
                if not keep:
                    _read(reader, out, mean)
                continue
            other = self.shapes.get(reader.input[0])
            if other is None or other == [1, 1, 1, 1]:
                _read(reader, out, mean)
                continue
            shape_name = self._fresh(f"{out}_rs_expand_shape")
            self.graph.initializer.append(numpy_helper.from_array(np.array(other, np.int64), shape_name))
            expanded = self._fresh(f"{out}_rs_expand")
            new.append(helper.make_node("Expand", [mean, shape_name], [expanded], name=expanded))
            _read(reader, out, expanded)
        self._replace(node, new)

    # ---------------------------------------------------------------- AveragePool
    def pool(self, node: onnx.NodeProto, shape: list[int]) -> bool:
        kernel = list(attribute(node, "kernel_shape", []))
        strides = list(attribute(node, "strides", [1, 1]) or [1, 1])
        pads = list(attribute(node, "pads", [0, 0, 0, 0]) or [0, 0, 0, 0])
        if len(kernel) != 2 or attribute(node, "ceil_mode", 0) or attribute(node, "auto_pad", b"NOTSET") not in ("NOTSET", b"NOTSET") \
                or (any(pads) and not attribute(node, "count_include_pad", 0)) \
                or list(attribute(node, "dilations", [1, 1]) or [1, 1]) != [1, 1]:
            return False   # a window that does not average exactly its kh·kw taps is not this Conv
        if not any(k > _KERNEL_LIMIT and s < k for k, s in zip(kernel, strides)):
            return False
        c = shape[1]
        weight = np.full((c, 1, kernel[0], kernel[1]), 1.0 / (kernel[0] * kernel[1]), np.float32)
        new: list[onnx.NodeProto] = []
        self._conv(new, node.input[0], weight, f"{node.name or node.output[0]}_2dw", node.output[0],
                   group=c, kernel_shape=kernel, strides=strides, pads=pads)
        self._replace(node, new)
        return True

    # ---------------------------------------------------------------- building blocks
    def _fresh(self, hint: str) -> str:
        return fresh_name(hint, self.names)

    def _conv(self, new: list[onnx.NodeProto], source: str, weight: np.ndarray, name: str, output: str | None = None,
              **attrs) -> str:
        w_name = self._fresh(f"{name}_w")
        self.graph.initializer.append(numpy_helper.from_array(weight, w_name))
        self.inits[w_name] = self.graph.initializer[-1]
        node_name = self._fresh(name)
        out = output or self._fresh(f"{node_name}_out")
        new.append(helper.make_node("Conv", [source, w_name], [out], name=node_name, **attrs))
        return out

    def _reshape(self, new: list[onnx.NodeProto], source: str, shape: list[int], name: str, output: str | None = None) -> str:
        shape_name = self._fresh(f"{name}_shape")
        self.graph.initializer.append(numpy_helper.from_array(np.array(shape, np.int64), shape_name))
        node_name = self._fresh(name)
        out = output or node_name
        new.append(helper.make_node("Reshape", [source, shape_name], [out], name=node_name))
        return out

    def _transpose(self, new: list[onnx.NodeProto], source: str, perm: list[int], name: str, output: str | None = None) -> str:
        node_name = self._fresh(name)
        out = output or node_name
        new.append(helper.make_node("Transpose", [source], [out], name=node_name, perm=perm))
        return out

    def _replace(self, node: onnx.NodeProto, new: list[onnx.NodeProto]) -> None:
        position = list(self.graph.node).index(node)
        self.graph.node.remove(node)
        for offset, made in enumerate(new):
            self.graph.node.insert(position + offset, made)


def _rename_output(node: onnx.NodeProto, old: str, new: str) -> None:
    for i, name in enumerate(node.output):
        if name == old:
            node.output[i] = new


def _read(reader: onnx.NodeProto, old: str, new: str) -> None:
    for i, name in enumerate(reader.input):
        if name == old:
            reader.input[i] = new
