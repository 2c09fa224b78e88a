"""Shared fixtures: small generated models and the location of the shared real-model folder."""
from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

REPO = Path(__file__).resolve().parents[1]


def shared_data_root() -> Path | None:
    """``OPENRKNN_TEST_DATA`` or ``../shared`` beside the checkout, if it has models/."""
    env = os.environ.get("OPENRKNN_TEST_DATA")
    for candidate in ([Path(env)] if env else []) + [REPO.parent / "shared"]:
        if (candidate / "models").is_dir():
            return candidate
    return None


@pytest.fixture
def shared_data() -> Path:
    root = shared_data_root()
    if root is None:
        pytest.skip("real models not found: set OPENRKNN_TEST_DATA or put shared/ beside the checkout")
    return root


def make_conv_model(path: Path, channels: int = 3, size: int = 16, seed: int = 0) -> Path:
    """Conv(3x3) → BatchNorm → Relu → GlobalAveragePool → Flatten → Gemm → Softmax."""
    rng = np.random.default_rng(seed)
    inits = [
        numpy_helper.from_array(rng.normal(0, 0.3, (8, channels, 3, 3)).astype(np.float32), "w"),
        numpy_helper.from_array(rng.normal(0, 0.1, 8).astype(np.float32), "b"),
        numpy_helper.from_array(rng.uniform(0.5, 1.5, 8).astype(np.float32), "bn_s"),
        numpy_helper.from_array(rng.normal(0, 0.1, 8).astype(np.float32), "bn_b"),
        numpy_helper.from_array(rng.normal(0, 0.1, 8).astype(np.float32), "bn_m"),
        numpy_helper.from_array(rng.uniform(0.5, 1.5, 8).astype(np.float32), "bn_v"),
        numpy_helper.from_array(rng.normal(0, 0.3, (5, 8)).astype(np.float32), "fc_w"),
        numpy_helper.from_array(rng.normal(0, 0.1, 5).astype(np.float32), "fc_b"),
    ]
    nodes = [
        helper.make_node("Conv", ["x", "w", "b"], ["c"], name="conv", pads=[1, 1, 1, 1]),
        helper.make_node("BatchNormalization", ["c", "bn_s", "bn_b", "bn_m", "bn_v"], ["bn"], name="bn"),
        helper.make_node("Relu", ["bn"], ["r"], name="relu"),
        helper.make_node("GlobalAveragePool", ["r"], ["p"], name="pool"),
        helper.make_node("Flatten", ["p"], ["f"], name="flatten"),
        helper.make_node("Gemm", ["f", "fc_w", "fc_b"], ["logits"], name="fc", transB=1),
        helper.make_node("Softmax", ["logits"], ["prob"], name="softmax", axis=1),
    ]
    graph = helper.make_graph(nodes, "conv_test", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, channels, size, size])],
                              [helper.make_tensor_value_info("prob", TensorProto.FLOAT, [1, 5])], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    onnx.save(model, path)
    return path


@pytest.fixture
def conv_model(tmp_path: Path) -> Path:
    return make_conv_model(tmp_path / "conv.onnx")


def exported_conv_model(folder: Path, platform: str) -> Path:
    """``make_conv_model`` built as a float model for ``platform`` and exported to ``folder/conv.rknn``."""
    from rknn.api import RKNN
    rknn = RKNN()
    rknn.config(target_platform=platform)
    assert rknn.load_onnx(str(make_conv_model(folder / "conv.onnx"))) == 0
    assert rknn.build(do_quantization=False) == 0
    assert rknn.export_rknn(str(folder / "conv.rknn")) == 0
    return folder / "conv.rknn"


def quantized_build(model_path: Path, samples: list[np.ndarray], **config):
    """An ``RKNN`` built quantized (rk3588 unless ``config`` says otherwise), calibrated on
    ``samples`` — written as ``s0.npy``… and a dataset file beside the model."""
    from rknn.api import RKNN
    folder = Path(model_path).parent
    for i, sample in enumerate(samples):
        np.save(folder / f"s{i}.npy", sample)
    (folder / "ds.txt").write_text("".join(f"s{i}.npy\n" for i in range(len(samples))))
    rknn = RKNN()
    assert rknn.config(**{"target_platform": "rk3588", **config}) == 0
    assert rknn.load_onnx(model=str(model_path)) == 0
    assert rknn.build(do_quantization=True, dataset=str(folder / "ds.txt")) == 0
    return rknn


def reference_session(model):
    """onnxruntime on a test model (a path, serialized bytes or a ModelProto) — through the simulator's
    session maker, so a model stamped by a newer onnx than the installed onnxruntime still runs."""
    from openrknn.sim.session import make_session
    if isinstance(model, (bytes, bytearray)):
        model = onnx.load_from_string(bytes(model))
    elif not isinstance(model, onnx.ModelProto):
        model = onnx.load(str(model))
    return make_session(model)


def cosine(a: np.ndarray, b: np.ndarray) -> float:
    a, b = np.asarray(a, np.float64).ravel(), np.asarray(b, np.float64).ravel()
    return float(a @ b / (np.linalg.norm(a) * np.linalg.norm(b) + 1e-30))


def three_convs(path: Path, outlier: float | None = None, overflow: bool = False, seed: int = 0) -> Path:
    """x → conv1+relu → conv2+relu → conv3 (1x1) → y.

    conv1's channel 7 is dead (zero weights, bias -1, then Relu): always 0. With ``outlier``, conv2's
    weights that read that dead channel are set to ``outlier``: the float output does not change, but
    each output channel's weight range becomes huge, so int8 weights of conv2 round to zero: conv2 is
    the layer that is hard to quantize. With ``overflow``, conv2's weights are scaled so its output
    exceeds the fp16 range (65504).
    """
    rng = np.random.default_rng(seed)
    w1 = rng.normal(0, 0.4, (8, 3, 3, 3)).astype(np.float32)
    b1 = rng.normal(0.1, 0.05, 8).astype(np.float32)
    w1[7], b1[7] = 0.0, -1.0
    w2 = rng.normal(0, 0.3, (8, 8, 3, 3)).astype(np.float32)
    if outlier is not None:
        w2[:, 7, :, :] = outlier
    if overflow:
        w2 *= 3e4
    w3 = rng.normal(0, 0.3, (4, 8, 1, 1)).astype(np.float32)
    inits = [numpy_helper.from_array(a, n) for a, n in ((w1, "w1"), (b1, "b1"), (w2, "w2"),
                                                       (np.zeros(8, np.float32), "b2"), (w3, "w3"))]
    nodes = [helper.make_node("Conv", ["x", "w1", "b1"], ["c1"], name="conv1", pads=[1, 1, 1, 1]),
             helper.make_node("Relu", ["c1"], ["r1"], name="relu1"),
             helper.make_node("Conv", ["r1", "w2", "b2"], ["c2"], name="conv2", pads=[1, 1, 1, 1]),
             helper.make_node("Relu", ["c2"], ["r2"], name="relu2"),
             helper.make_node("Conv", ["r2", "w3"], ["y"], name="conv3")]
    graph = helper.make_graph(nodes, "three_convs", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 16, 16])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 4, 16, 16])], inits)
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)]), path)
    return path
