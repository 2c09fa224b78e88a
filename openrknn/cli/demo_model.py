"""The embedded default model: a small MobileNet-style classifier built with onnx.helper.

No download: weights are drawn from a fixed seed (He initialisation), BatchNorm layers are kept
so the build's folding passes have work to do.
"""
from __future__ import annotations

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

DEMO_INPUT = "input"
DEMO_OUTPUT = "prob"
DEMO_SIZE = 224
DEMO_CLASSES = 1000
# (out_channels, stride) of each depthwise-separable block
_BLOCKS = ((64, 1), (128, 2), (128, 1), (256, 2), (256, 1), (512, 2), (512, 1), (1024, 2))


class _Builder:
    def __init__(self, seed: int) -> None:
        self.rng = np.random.default_rng(seed)
        self.nodes: list[onnx.NodeProto] = []
        self.inits: list[onnx.TensorProto] = []

    def const(self, name: str, array: np.ndarray) -> str:
        self.inits.append(numpy_helper.from_array(array.astype(np.float32), name))
        return name

    def conv_bn_relu6(self, x: str, name: str, cin: int, cout: int, k: int, stride: int, group: int) -> str:
        fan_in = cin // group * k * k
        w = self.rng.normal(0, np.sqrt(2.0 / fan_in), (cout, cin // group, k, k))
        self.nodes.append(helper.make_node(
            "Conv", [x, self.const(f"{name}.weight", w)], [f"{name}.conv"], name=f"{name}.conv",
            kernel_shape=[k, k], strides=[stride, stride], pads=[k // 2] * 4, group=group))
        bn = [self.const(f"{name}.bn.{p}", v) for p, v in (
            ("scale", self.rng.uniform(0.8, 1.2, cout)), ("bias", self.rng.normal(0, 0.1, cout)),
            ("mean", self.rng.normal(0, 0.1, cout)), ("var", self.rng.uniform(0.8, 1.2, cout)))]
        self.nodes.append(helper.make_node("BatchNormalization", [f"{name}.conv"] + bn, [f"{name}.bn"],
                                           name=f"{name}.bn", epsilon=1e-5))
        lo, hi = self.const(f"{name}.min", np.array(0.0)), self.const(f"{name}.max", np.array(6.0))
        self.nodes.append(helper.make_node("Clip", [f"{name}.bn", lo, hi], [f"{name}.out"], name=f"{name}.relu6"))
        return f"{name}.out"


def build_demo_model(size: int = DEMO_SIZE, classes: int = DEMO_CLASSES, width: float = 1.0,
                     seed: int = 2024) -> onnx.ModelProto:
    """MobileNet-v1 style network: conv → 8 depthwise-separable blocks → pool → FC → softmax."""
    b = _Builder(seed)
    ch = max(8, int(32 * width))
    x = b.conv_bn_relu6(DEMO_INPUT, "stem", 3, ch, 3, 2, 1)
    for i, (cout, stride) in enumerate(_BLOCKS):
        cout = max(8, int(cout * width))
        x = b.conv_bn_relu6(x, f"block{i}.dw", ch, ch, 3, stride, ch)
        x = b.conv_bn_relu6(x, f"block{i}.pw", ch, cout, 1, 1, 1)
        ch = cout
    b.nodes.append(helper.make_node("GlobalAveragePool", [x], ["pool"], name="pool"))
    b.nodes.append(helper.make_node("Flatten", ["pool"], ["flat"], name="flatten", axis=1))
    fc_w = b.const("fc.weight", b.rng.normal(0, np.sqrt(1.0 / ch), (classes, ch)) * 4.0)
    fc_b = b.const("fc.bias", b.rng.normal(0, 0.1, classes))
    b.nodes.append(helper.make_node("Gemm", ["flat", fc_w, fc_b], ["logits"], name="fc", transB=1))
    b.nodes.append(helper.make_node("Dropout", ["logits"], ["logits_d"], name="dropout"))
    b.nodes.append(helper.make_node("Softmax", ["logits_d"], [DEMO_OUTPUT], name="softmax", axis=1))
    graph = helper.make_graph(
        b.nodes, "openrknn_demo_mobilenet",
        [helper.make_tensor_value_info(DEMO_INPUT, TensorProto.FLOAT, [1, 3, size, size])],
        [helper.make_tensor_value_info(DEMO_OUTPUT, TensorProto.FLOAT, [1, classes])], b.inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)], producer_name="openrknn-demo")
    onnx.checker.check_model(model)
    return model


def demo_image(size: int = DEMO_SIZE, seed: int = 7) -> np.ndarray:
    """A synthetic HxWx3 uint8 picture (gradients, a disc and noise) standing in for a photo."""
    rng = np.random.default_rng(seed)
    yy, xx = np.mgrid[0:size, 0:size].astype(np.float32) / size
    disc = ((xx - 0.6) ** 2 + (yy - 0.4) ** 2 < 0.06).astype(np.float32)
    r = 200 * xx + 55 * disc
    g = 180 * yy * (1 - disc) + 30
    bl = 120 + 100 * np.sin(6.28 * xx * yy)
    img = np.stack([r, g, bl], axis=-1) + rng.normal(0, 8, (size, size, 3))
    return np.clip(img, 0, 255).astype(np.uint8)
