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


def cosine(a: np.ndarray, b: np.ndarray) -> float:
    a, b = np.asarray(a, np.float64).ravel(), np.asarray(b, np.float64).ravel()
    return float(a @ b / (np.linalg.norm(a) * np.linalg.norm(b) + 1e-30))
