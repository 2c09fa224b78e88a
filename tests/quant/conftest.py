"""Small generated models and calibration sets for the quantization tests."""
from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper
from PIL import Image

SIZE = 16


def make_quant_model(path: Path, seed: int = 0) -> Path:
    """Conv-BN-Relu → depthwise Conv-Clip(0,6) → Conv + residual Add → hard-swish → GAP → Gemm(64) → Softmax."""
    rng = np.random.default_rng(seed)

    def init(name, shape, scale=0.3):
        return numpy_helper.from_array(rng.normal(0, scale, shape).astype(np.float32), name)

    inits = [init("w1", (16, 3, 3, 3)), init("b1", (16,), 0.1),
             numpy_helper.from_array(rng.uniform(0.5, 1.5, 16).astype(np.float32), "bn_s"), init("bn_b", (16,), 0.1),
             init("bn_m", (16,), 0.1), numpy_helper.from_array(rng.uniform(0.5, 1.5, 16).astype(np.float32), "bn_v"),
             init("w2", (16, 1, 3, 3)), init("w3", (16, 16, 1, 1), 0.25), init("b3", (16,), 0.1),
             numpy_helper.from_array(np.array(0.0, np.float32), "zero"), numpy_helper.from_array(np.array(6.0, np.float32), "six"),
             numpy_helper.from_array(np.array(3.0, np.float32), "three"),
             init("w_e", (64, 16, 1, 1), 0.3), init("fc_w", (10, 64), 0.3), init("fc_b", (10,), 0.1)]
    nodes = [
        helper.make_node("Conv", ["x", "w1", "b1"], ["c1"], name="conv1", pads=[1, 1, 1, 1]),
        helper.make_node("BatchNormalization", ["c1", "bn_s", "bn_b", "bn_m", "bn_v"], ["bn1"], name="bn1"),
        helper.make_node("Relu", ["bn1"], ["r1"], name="relu1"),
        helper.make_node("Conv", ["r1", "w2"], ["c2"], name="dw", pads=[1, 1, 1, 1], group=16),
        helper.make_node("Clip", ["c2", "zero", "six"], ["r2"], name="relu6"),
        helper.make_node("Conv", ["r2", "w3", "b3"], ["c3"], name="pw"),
        helper.make_node("Add", ["c3", "r1"], ["res"], name="residual"),
        helper.make_node("Add", ["res", "three"], ["hs_a"], name="hs_add"),
        helper.make_node("Clip", ["hs_a", "zero", "six"], ["hs_c"], name="hs_clip"),
        helper.make_node("Mul", ["res", "hs_c"], ["hs_m"], name="hs_mul"),
        helper.make_node("Div", ["hs_m", "six"], ["hs"], name="hs_div"),
        helper.make_node("Conv", ["hs", "w_e"], ["e"], name="expand"),
        helper.make_node("GlobalAveragePool", ["e"], ["p"], name="pool"),
        helper.make_node("Flatten", ["p"], ["f"], name="flatten"),
        helper.make_node("Gemm", ["f", "fc_w", "fc_b"], ["logits"], name="fc", transB=1),
        helper.make_node("Softmax", ["logits"], ["prob"], name="softmax", axis=1),
    ]
    graph = helper.make_graph(nodes, "quant_test", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, SIZE, SIZE])],
                              [helper.make_tensor_value_info("prob", TensorProto.FLOAT, [1, 10])], inits)
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)]), path)
    return path


def make_images(folder: Path, count: int, size: int = SIZE, seed: int = 0) -> list[np.ndarray]:
    """Smooth random colour images written as png; returns the HWC uint8 arrays."""
    rng = np.random.default_rng(seed)
    folder.mkdir(parents=True, exist_ok=True)
    out = []
    yy, xx = np.mgrid[0:size, 0:size] / size
    for i in range(count):
        a, b, c = rng.uniform(0, 1, 3)
        img = np.stack([255 * (a * xx + (1 - a) * yy), 255 * np.abs(np.sin(6 * b * xx)), 255 * c * yy], -1)
        img = np.clip(img + rng.normal(0, 12, img.shape), 0, 255).astype(np.uint8)
        Image.fromarray(img).save(folder / f"img{i}.png")
        out.append(img)
    return out


@pytest.fixture
def quant_setup(tmp_path: Path) -> dict:
    model = make_quant_model(tmp_path / "model.onnx")
    images = make_images(tmp_path / "imgs", 10)
    dataset = tmp_path / "dataset.txt"
    dataset.write_text("\n".join(f"imgs/img{i}.png" for i in range(6)) + "\n")
    return {"model": model, "dataset": dataset, "eval": images[6:], "dir": tmp_path}
