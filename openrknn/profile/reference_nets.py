"""Standard networks built with ``onnx.helper`` (random weights) for calibrating and validating the
cost model: MobileNetV1, MobileNetV2, SSD-MobileNetV1 (300x300), ResNet50, YOLOv8n and a network
structurally like PP-OCRv4 mobile det. Only the architecture matters for performance and memory.
"""
from __future__ import annotations

import functools
import math

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from openrknn.graph import npu_layers
from openrknn.graph.rknn_model import LAYOUT_NCHW, RKNNModel, TensorSpec

OPSET = 17


class NetBuilder:
    """Append-only ONNX graph builder that tracks NCHW shapes."""

    def __init__(self, name: str, input_shape: tuple[int, ...], seed: int = 0) -> None:
        self.name = name
        self.rng = np.random.default_rng(seed)
        self.nodes: list[onnx.NodeProto] = []
        self.inits: list[onnx.TensorProto] = []
        self.shapes: dict[str, tuple[int, ...]] = {"input": tuple(input_shape)}
        self._n = 0

    def _id(self, kind: str) -> str:
        self._n += 1
        return f"{kind}_{self._n}"

    def _const(self, base: str, arr: np.ndarray) -> str:
        name = f"{base}.{len(self.inits)}"
        self.inits.append(numpy_helper.from_array(arr, name))
        return name

    def _node(self, op: str, inputs: list[str], shape: tuple[int, ...], **attrs) -> str:
        name = self._id(op.lower())
        self.nodes.append(helper.make_node(op, inputs, [name], name=f"/{self.name}/{name}", **attrs))
        self.shapes[name] = tuple(shape)
        return name

    def conv(self, x: str, cout: int, k: int = 1, stride: int = 1, groups: int = 1, act: str | None = "relu",
             pad: int | None = None) -> str:
        n, c, h, w = self.shapes[x]
        p = k // 2 if pad is None else pad
        oh, ow = (h + 2 * p - k) // stride + 1, (w + 2 * p - k) // stride + 1
        wt = self._const("w", (self.rng.standard_normal((cout, c // groups, k, k), dtype=np.float32)
                               * math.sqrt(2.0 / (k * k * c / groups))))
        b = self._const("b", np.zeros(cout, np.float32))
        y = self._node("Conv", [x, wt, b], (n, cout, oh, ow), kernel_shape=[k, k], strides=[stride, stride],
                       pads=[p, p, p, p], group=groups)
        return self.act(y, act)

    def act(self, x: str, act: str | None) -> str:
        if act is None:
            return x
        s = self.shapes[x]
        if act == "relu":
            return self._node("Relu", [x], s)
        if act == "relu6":
            lo, hi = self._const("lo", np.array(0, np.float32)), self._const("hi", np.array(6, np.float32))
            return self._node("Clip", [x, lo, hi], s)
        if act == "silu":
            return self._node("Mul", [x, self._node("Sigmoid", [x], s)], s)
        if act == "hardswish":
            return self._node("HardSwish", [x], s)
        if act == "sigmoid":
            return self._node("Sigmoid", [x], s)
        if act == "hardsigmoid":
            return self._node("HardSigmoid", [x], s, alpha=0.2, beta=0.5)
        raise ValueError(f"unknown activation {act}")

    def conv_transpose(self, x: str, cout: int, k: int = 2, stride: int = 2, act: str | None = "relu") -> str:
        n, c, h, w = self.shapes[x]
        wt = self._const("w", self.rng.standard_normal((c, cout, k, k), dtype=np.float32) * 0.1)
        y = self._node("ConvTranspose", [x, wt], (n, cout, (h - 1) * stride + k, (w - 1) * stride + k),
                       kernel_shape=[k, k], strides=[stride, stride])
        return self.act(y, act)

    def add(self, a: str, b: str) -> str:
        return self._node("Add", [a, b], self.shapes[a])

    def mul(self, a: str, b: str) -> str:
        return self._node("Mul", [a, b], self.shapes[a])

    def concat(self, xs: list[str]) -> str:
        n, _, h, w = self.shapes[xs[0]]
        return self._node("Concat", xs, (n, sum(self.shapes[x][1] for x in xs), h, w), axis=1)

    def concat_axis(self, xs: list[str], axis: int) -> str:
        s = list(self.shapes[xs[0]])
        s[axis] = sum(self.shapes[x][axis] for x in xs)
        return self._node("Concat", xs, tuple(s), axis=axis)

    def split2(self, x: str) -> tuple[str, str]:
        n, c, h, w = self.shapes[x]
        a, b = self._id("split"), self._id("split")
        self.nodes.append(helper.make_node("Split", [x, self._const("sp", np.array([c // 2, c // 2], np.int64))],
                                           [a, b], name=f"/{self.name}/{a}", axis=1))
        self.shapes[a] = self.shapes[b] = (n, c // 2, h, w)
        return a, b

    def maxpool(self, x: str, k: int, stride: int, pad: int) -> str:
        n, c, h, w = self.shapes[x]
        return self._node("MaxPool", [x], (n, c, (h + 2 * pad - k) // stride + 1, (w + 2 * pad - k) // stride + 1),
                          kernel_shape=[k, k], strides=[stride, stride], pads=[pad] * 4)

    def gap(self, x: str) -> str:
        n, c, _, _ = self.shapes[x]
        return self._node("GlobalAveragePool", [x], (n, c, 1, 1))

    def resize(self, x: str, scale: int) -> str:
        n, c, h, w = self.shapes[x]
        sc = self._const("scales", np.array([1, 1, scale, scale], np.float32))
        return self._node("Resize", [x, "", sc], (n, c, h * scale, w * scale), mode="nearest")

    def flatten(self, x: str) -> str:
        s = self.shapes[x]
        return self._node("Flatten", [x], (s[0], math.prod(s[1:])), axis=1)

    def gemm(self, x: str, cout: int) -> str:
        n, k = self.shapes[x]
        wt = self._const("fc_w", self.rng.standard_normal((cout, k), dtype=np.float32) * math.sqrt(1.0 / k))
        b = self._const("fc_b", np.zeros(cout, np.float32))
        return self._node("Gemm", [x, wt, b], (n, cout), transB=1)

    def softmax(self, x: str, axis: int = -1) -> str:
        return self._node("Softmax", [x], self.shapes[x], axis=axis)

    def to_rows(self, x: str, width: int) -> str:
        """NCHW → (N, H·W·C/width, width): Transpose to NHWC then Reshape, as SSD heads do."""
        n, c, h, w = self.shapes[x]
        t = self._node("Transpose", [x], (n, h, w, c), perm=[0, 2, 3, 1])
        shape = self._const("shape", np.array([n, -1, width], np.int64))
        return self._node("Reshape", [t, shape], (n, h * w * c // width, width))

    def model(self, outputs: list[str]) -> onnx.ModelProto:
        ins = [helper.make_tensor_value_info("input", TensorProto.FLOAT, list(self.shapes["input"]))]
        outs = [helper.make_tensor_value_info(o, TensorProto.FLOAT, list(self.shapes[o])) for o in outputs]
        graph = helper.make_graph(self.nodes, self.name, ins, outs, self.inits)
        m = helper.make_model(graph, opset_imports=[helper.make_opsetid("", OPSET)])
        m.ir_version = 8
        return m


def _dw_sep(b: NetBuilder, x: str, cout: int, stride: int, act: str = "relu6", k: int = 3) -> str:
    c = b.shapes[x][1]
    x = b.conv(x, c, k, stride, groups=c, act=act)
    return b.conv(x, cout, 1, act=act)


def _mobilenet_v1_body(b: NetBuilder, x: str) -> tuple[str, str]:
    """MobileNetV1 trunk; returns (conv11 output, conv13 output)."""
    x = b.conv(x, 32, 3, 2, act="relu6")
    conv11 = x
    for i, (c, s) in enumerate([(64, 1), (128, 2), (128, 1), (256, 2), (256, 1), (512, 2)] + [(512, 1)] * 5
                               + [(1024, 2), (1024, 1)]):
        x = _dw_sep(b, x, c, s)
        if i == 10:
            conv11 = x
    return conv11, x


def mobilenet_v1(size: int = 224, classes: int = 1001) -> onnx.ModelProto:
    """MobileNetV1 1.0 (TFLite layout of seed 001's example: avgpool, 1x1 logits conv, softmax)."""
    b = NetBuilder("mobilenet_v1", (1, 3, size, size))
    _, x = _mobilenet_v1_body(b, "input")
    x = b.conv(b._node("AveragePool", [x], (1, 1024, 1, 1), kernel_shape=[size // 32] * 2), classes, 1, act=None)
    return b.model([b.softmax(b.flatten(x))])


def mobilenet_v2(size: int = 224, classes: int = 1000) -> onnx.ModelProto:
    """MobileNetV2 1.0 (torchvision layout: ReLU6 as Clip, GAP, Flatten, Gemm)."""
    b = NetBuilder("mobilenet_v2", (1, 3, size, size))
    x = b.conv("input", 32, 3, 2, act="relu6")
    for t, c, n, s in [(1, 16, 1, 1), (6, 24, 2, 2), (6, 32, 3, 2), (6, 64, 4, 2), (6, 96, 3, 1), (6, 160, 3, 2),
                       (6, 320, 1, 1)]:
        for i in range(n):
            cin = b.shapes[x][1]
            y = b.conv(x, cin * t, 1, act="relu6") if t != 1 else x
            y = b.conv(y, cin * t, 3, s if i == 0 else 1, groups=cin * t, act="relu6")
            y = b.conv(y, c, 1, act=None)
            x = b.add(y, x) if (i > 0 or s == 1) and cin == c else y
    x = b.conv(x, 1280, 1, act="relu6")
    return b.model([b.gemm(b.flatten(b.gap(x)), classes)])


def ssd_mobilenet_v1(size: int = 300, classes: int = 91) -> onnx.ModelProto:
    """SSD-MobileNetV1 (TF object-detection layout: 6 feature maps, 1x1 box predictors, 1917 anchors)."""
    b = NetBuilder("ssd_mobilenet_v1", (1, 3, size, size))
    c11, x = _mobilenet_v1_body(b, "input")
    maps = [c11, x]
    for mid, out in [(256, 512), (128, 256), (128, 256), (64, 128)]:
        x = b.conv(b.conv(x, mid, 1, act="relu6"), out, 3, 2, act="relu6")
        maps.append(x)
    boxes, scores = [], []
    for m, anchors in zip(maps, [3, 6, 6, 6, 6, 6]):
        boxes.append(b.to_rows(b.conv(m, anchors * 4, 1, act=None), 4))
        scores.append(b.to_rows(b.conv(m, anchors * classes, 1, act=None), classes))
    return b.model([b.concat_axis(boxes, 1), b.concat_axis(scores, 1)])


def resnet50(size: int = 224, classes: int = 1000) -> onnx.ModelProto:
    """ResNet50 v1.5 (torchvision: stride on the 3x3 conv)."""
    b = NetBuilder("resnet50", (1, 3, size, size))
    x = b.maxpool(b.conv("input", 64, 7, 2), 3, 2, 1)
    for width, blocks, stride in [(64, 3, 1), (128, 4, 2), (256, 6, 2), (512, 3, 2)]:
        for i in range(blocks):
            s = stride if i == 0 else 1
            y = b.conv(b.conv(x, width, 1), width, 3, s)
            y = b.conv(y, width * 4, 1, act=None)
            sc = b.conv(x, width * 4, 1, s, act=None) if i == 0 else x
            x = b.act(b.add(y, sc), "relu")
    return b.model([b.gemm(b.flatten(b.gap(x)), classes)])


def _c2f(b: NetBuilder, x: str, cout: int, n: int, shortcut: bool) -> str:
    c = cout // 2
    y0, y1 = b.split2(b.conv(x, 2 * c, 1, act="silu"))
    ys = [y0, y1]
    for _ in range(n):
        z = b.conv(b.conv(ys[-1], c, 3, act="silu"), c, 3, act="silu")
        ys.append(b.add(z, ys[-1]) if shortcut else z)
    return b.conv(b.concat(ys), cout, 1, act="silu")


def yolov8n(size: int = 640, classes: int = 80) -> onnx.ModelProto:
    """YOLOv8n (width 0.25, depth 0.33) with the rknn_model_zoo head: per scale a 64-channel DFL box
    map and a sigmoid class map (the DFL decoding and NMS run in post-processing)."""
    b = NetBuilder("yolov8n", (1, 3, size, size))
    x = b.conv(b.conv("input", 16, 3, 2, act="silu"), 32, 3, 2, act="silu")
    x = _c2f(b, x, 32, 1, True)
    p3 = _c2f(b, b.conv(x, 64, 3, 2, act="silu"), 64, 2, True)
    p4 = _c2f(b, b.conv(p3, 128, 3, 2, act="silu"), 128, 2, True)
    x = _c2f(b, b.conv(p4, 256, 3, 2, act="silu"), 256, 1, True)
    s = b.conv(x, 128, 1, act="silu")
    m1 = b.maxpool(s, 5, 1, 2)
    m2 = b.maxpool(m1, 5, 1, 2)
    p5 = b.conv(b.concat([s, m1, m2, b.maxpool(m2, 5, 1, 2)]), 256, 1, act="silu")
    h4 = _c2f(b, b.concat([b.resize(p5, 2), p4]), 128, 1, False)
    o3 = _c2f(b, b.concat([b.resize(h4, 2), p3]), 64, 1, False)
    o4 = _c2f(b, b.concat([b.conv(o3, 64, 3, 2, act="silu"), h4]), 128, 1, False)
    o5 = _c2f(b, b.concat([b.conv(o4, 128, 3, 2, act="silu"), p5]), 256, 1, False)
    outs = []
    for o in (o3, o4, o5):
        box = b.conv(b.conv(b.conv(o, 64, 3, act="silu"), 64, 3, act="silu"), 64, 1, act=None)
        cls = b.conv(b.conv(b.conv(o, 80, 3, act="silu"), 80, 3, act="silu"), classes, 1, act="sigmoid")
        outs += [box, cls]
    return b.model(outs)


def _make_div(v: float, d: int = 16) -> int:
    return max(d, int(v + d / 2) // d * d)


def _se(b: NetBuilder, x: str, act_out: str = "hardsigmoid") -> str:
    c = b.shapes[x][1]
    s = b.conv(b.conv(b.gap(x), max(c // 4, 8), 1, act="relu"), c, 1, act=act_out)
    return b.mul(x, s)


def ppocr_det_like(size: int = 480) -> onnx.ModelProto:
    """A network structurally like PP-OCRv4 mobile det (not the released weights or exact graph):
    PP-LCNetV3 x0.75 backbone (depthwise-separable blocks, HardSwish, SE in the last stage), RSE-FPN
    neck (96 channels, SE shortcut blocks, nearest upsampling) and the DB head (conv + two 2x2
    transposed convs + sigmoid) at 1x3xSxS."""
    b = NetBuilder("ppocr_det_like", (1, 3, size, size))
    x = b.conv("input", _make_div(16 * 0.75), 3, 2, act="hardswish")
    cfg = [[(3, 32, 1, False)], [(3, 64, 2, False), (3, 64, 1, False)], [(3, 128, 2, False), (3, 128, 1, False)],
           [(3, 256, 2, False)] + [(5, 256, 1, False)] * 4,
           [(5, 512, 2, True), (5, 512, 1, True), (5, 512, 1, False), (5, 512, 1, False)]]
    feats = []
    for stage, blocks in enumerate(cfg):
        for k, c, s, se in blocks:
            cin = b.shapes[x][1]
            x = b.conv(x, cin, k, s, groups=cin, act="hardswish")
            if se:
                x = _se(b, x)
            x = b.conv(x, _make_div(c * 0.75), 1, act="hardswish")
        if stage >= 1:
            feats.append(x)
    feats = [b.conv(f, int(c * 0.75), 1, act=None) for f, c in zip(feats, [16, 24, 56, 480])]
    ins = [b.add(y, _se(b, y, "hardsigmoid")) for y in (b.conv(f, 96, 1, act=None) for f in feats)]
    for i in (2, 1, 0):
        ins[i] = b.add(ins[i], b.resize(ins[i + 1], 2))
    ps = []
    for y, scale in zip(ins, (1, 2, 4, 8)):
        p = b.conv(y, 24, 3, act=None)
        p = b.add(p, _se(b, p))
        ps.append(b.resize(p, scale) if scale > 1 else p)
    x = b.conv(b.concat(ps[::-1]), 24, 3, act="relu")
    x = b.conv_transpose(b.conv_transpose(x, 24, act="relu"), 1, act="sigmoid")
    return b.model([x])


BUILDERS = {"mobilenet_v1": mobilenet_v1, "mobilenet_v2": mobilenet_v2, "ssd_mobilenet_v1": ssd_mobilenet_v1,
            "resnet50": resnet50, "yolov8n": yolov8n, "ppocr_det_like": ppocr_det_like}


@functools.lru_cache(maxsize=16)
def reference_onnx(name: str, size: int | None = None) -> onnx.ModelProto:
    """The ONNX model of a reference network (cached; treat it as read-only)."""
    if name not in BUILDERS:
        raise KeyError(f"unknown reference network '{name}'; choose one of {sorted(BUILDERS)}")
    return BUILDERS[name]() if size is None else BUILDERS[name](size)


def wrap_onnx(model: onnx.ModelProto, quantized_dtype: str | None = "w8a8", platform: str = "rk3588") -> RKNNModel:
    """An :class:`RKNNModel` around a float ONNX graph, as ``build`` would produce for profiling."""
    def spec(vi: onnx.ValueInfoProto) -> TensorSpec:
        dims = [d.dim_value for d in vi.type.tensor_type.shape.dim]
        return TensorSpec(vi.name, dims, "float32", LAYOUT_NCHW if len(dims) == 4 else "UNDEFINED")
    inits = {i.name for i in model.graph.initializer}
    marked = onnx.ModelProto()
    marked.CopyFrom(model)
    npu_layers.mark_layers(marked)   # the layer grouping build() records at optimization_level 3
    return RKNNModel(graph=marked, inputs=[spec(v) for v in model.graph.input if v.name not in inits],
                     outputs=[spec(v) for v in model.graph.output], platforms=[platform],
                     quantized_dtype=quantized_dtype)


def reference_model(name: str, quantized_dtype: str | None = "w8a8", platform: str = "rk3588",
                    size: int | None = None) -> RKNNModel:
    """A reference network wrapped as a built model.

    Example:
        >>> m = reference_model("mobilenet_v2")
        >>> m.graph.graph.input[0].type.tensor_type.shape.dim[2].dim_value
        224
    """
    return wrap_onnx(reference_onnx(name, size), quantized_dtype, platform)
