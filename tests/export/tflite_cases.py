"""Generated models for the TFLite end-to-end tests: the structures of the models the export failed
on (PP-OCR detector head, SAME_UPPER padding, MediaPipe pose/palm detectors, an audio LSTM)."""
from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper


class _Builder:
    def __init__(self, seed: int) -> None:
        self.rng = np.random.default_rng(seed)
        self.inits: list[onnx.TensorProto] = []

    def init(self, name: str, shape, std: float = 0.3, array: np.ndarray | None = None) -> str:
        value = self.rng.normal(0, std, shape).astype(np.float32) if array is None else array
        self.inits.append(numpy_helper.from_array(value, name))
        return name

    def save(self, path: Path, nodes, inputs, outputs, opset: int = 13) -> Path:
        graph = helper.make_graph(nodes, path.stem, inputs, outputs, self.inits)
        onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)]), path)
        return path


def _image(name: str, shape) -> onnx.ValueInfoProto:
    return helper.make_tensor_value_info(name, TensorProto.FLOAT, list(shape))


def ocr_head(path: Path) -> Path:
    """PP-OCR detector tail: an upsampled branch merged with a ConvTranspose, BatchNorm + Relu on that
    (a float-step layer, stored int8), then the float layer ConvTranspose → Add(bias) → Sigmoid whose
    output the user reads."""
    b = _Builder(1)
    nodes = [
        helper.make_node("Conv", ["x", b.init("w1", (8, 3, 3, 3)), b.init("b1", 8, 0.1)], ["c1"], pads=[1, 1, 1, 1]),
        helper.make_node("Relu", ["c1"], ["r1"]),
        helper.make_node("ConvTranspose", ["r1", b.init("wt", (8, 4, 2, 2))], ["t1"], strides=[2, 2]),
        helper.make_node("Conv", ["x", b.init("w2", (4, 3, 1, 1))], ["c2"]),
        helper.make_node("Resize", ["c2", "", b.init("scales", 4, array=np.array([1, 1, 2, 2], np.float32))], ["u2"],
                         mode="nearest"),
        helper.make_node("Max", ["t1", "u2"], ["sum"]),   # (two-tensor Max: a float step)
        helper.make_node("BatchNormalization", ["sum", b.init("g", 4, array=np.full(4, 1.3, np.float32)),
                                                b.init("beta", 4, 0.2), b.init("mu", 4, 0.1),
                                                b.init("var", 4, array=np.full(4, 0.8, np.float32))], ["bn"]),
        helper.make_node("Relu", ["bn"], ["r2"]),
        helper.make_node("Max", ["r2", "u2"], ["m2"]),   # a float step (two-tensor Max) the last layer reads
        helper.make_node("ConvTranspose", ["m2", b.init("wt2", (4, 1, 2, 2), 0.5)], ["t2"], strides=[2, 2]),
        helper.make_node("Add", ["t2", b.init("tb", (1, 1, 1, 1), array=np.full((1, 1, 1, 1), -0.4, np.float32))],
                         ["a2"]),
        helper.make_node("Sigmoid", ["a2"], ["y"]),
    ]
    return b.save(path, nodes, [_image("x", (1, 3, 16, 16))], [_image("y", (1, 1, 64, 64))])


def same_upper(path: Path) -> Path:
    """Conv and MaxPool with auto_pad SAME_UPPER / SAME_LOWER / VALID (newer PaddleOCR exports)."""
    b = _Builder(2)
    nodes = [
        helper.make_node("Conv", ["x", b.init("w1", (8, 3, 3, 3)), b.init("b1", 8, 0.1)], ["c1"], auto_pad="SAME_UPPER",
                         strides=[2, 2]),
        helper.make_node("Relu", ["c1"], ["r1"]),
        helper.make_node("MaxPool", ["r1"], ["p1"], kernel_shape=[3, 3], strides=[2, 2], auto_pad="SAME_UPPER"),
        helper.make_node("Conv", ["p1", b.init("w2", (8, 8, 2, 2)), b.init("b2", 8, 0.1)], ["c2"],
                         auto_pad="SAME_LOWER"),
        helper.make_node("Conv", ["c2", b.init("w3", (4, 8, 3, 3))], ["y"], auto_pad="VALID"),
    ]
    return b.save(path, nodes, [_image("x", (1, 3, 17, 17))], [_image("y", (1, 4, 3, 3))])


def pose_like(path: Path) -> Path:
    """MediaPipe pose-detector pieces: DepthToSpace / SpaceToDepth, nearest Resize, a Concat of
    differently quantized branches, hard-swish, PRelu, global pooling and a classifier."""
    b = _Builder(3)
    nodes = [
        helper.make_node("Conv", ["x", b.init("w1", (16, 3, 3, 3)), b.init("b1", 16, 0.1)], ["c1"], pads=[1, 1, 1, 1],
                         strides=[2, 2]),
        helper.make_node("PRelu", ["c1", b.init("slope", (16, 1, 1), array=np.linspace(0.05, 0.3, 16).astype(
            np.float32).reshape(16, 1, 1))], ["r1"]),
        helper.make_node("DepthToSpace", ["r1"], ["d2s"], blocksize=2, mode="DCR"),
        helper.make_node("Conv", ["d2s", b.init("w2", (8, 4, 3, 3)), b.init("b2", 8, 0.1)], ["c2"], pads=[1, 1, 1, 1]),
        helper.make_node("SpaceToDepth", ["c2"], ["s2d"], blocksize=2),
        helper.make_node("Conv", ["s2d", b.init("w3", (8, 32, 1, 1))], ["c3"]),
        helper.make_node("HardSwish", ["c3"], ["h3"]),
        helper.make_node("Resize", ["h3", "", b.init("scales", 4, array=np.array([1, 1, 2, 2], np.float32))], ["up"],
                         mode="nearest"),
        helper.make_node("Sigmoid", ["d2s"], ["sg"]),
        helper.make_node("Conv", ["sg", b.init("w4", (4, 4, 1, 1), 1.5)], ["c4"]),
        helper.make_node("Concat", ["up", "c4"], ["cc"], axis=1),
        helper.make_node("GlobalAveragePool", ["cc"], ["g"]),
        helper.make_node("Flatten", ["g"], ["f"]),
        helper.make_node("Gemm", ["f", b.init("fw", (6, 12)), b.init("fb", 6, 0.1)], ["y"], transB=1),
    ]
    return b.save(path, nodes, [_image("x", (1, 3, 32, 32))], [_image("y", (1, 6))], opset=14)


def palm_like(path: Path) -> Path:
    """MediaPipe palm-detector head: a regressor whose outputs reach ~10^5, beyond float16 (65504),
    next to a classifier; both read by the user, so the NPU model runs them in float16."""
    b = _Builder(4)
    nodes = [
        helper.make_node("Conv", ["x", b.init("w1", (8, 3, 3, 3)), b.init("b1", 8, 0.1)], ["c1"], pads=[1, 1, 1, 1],
                         strides=[2, 2]),
        helper.make_node("Relu", ["c1"], ["r1"]),
        helper.make_node("Conv", ["r1", b.init("w2", (8, 8, 3, 3)), b.init("b2", 8, 0.1)], ["c2"], pads=[1, 1, 1, 1]),
        helper.make_node("Relu", ["c2"], ["r2"]),
        helper.make_node("Conv", ["r2", b.init("wr", (18, 8, 1, 1), 9000.0)], ["reg"]),
        helper.make_node("Conv", ["r2", b.init("wc", (2, 8, 1, 1))], ["cls"]),
        helper.make_node("Transpose", ["reg"], ["regressors"], perm=[0, 2, 3, 1]),
        helper.make_node("Transpose", ["cls"], ["classificators"], perm=[0, 2, 3, 1]),
    ]
    return b.save(path, nodes, [_image("x", (1, 3, 32, 32))],
                  [_image("regressors", (1, 16, 16, 18)), _image("classificators", (1, 16, 16, 2))])


def audio_lstm(path: Path) -> Path:
    """An audio model's pieces (silero VAD): reflect Pad, 1-D Conv, Gather of a state, an LSTM."""
    b = _Builder(5)
    hidden = 8
    nodes = [
        helper.make_node("Pad", ["x", b.init("pads", 6, array=np.array([0, 0, 2, 0, 0, 2], np.int64))], ["xp"],
                         mode="reflect"),
        helper.make_node("Conv", ["xp", b.init("w1", (8, 4, 5)), b.init("b1", 8, 0.1)], ["c1"], strides=[2]),
        helper.make_node("Relu", ["c1"], ["r1"]),
        helper.make_node("Transpose", ["r1"], ["seq"], perm=[2, 0, 1]),
        helper.make_node("Gather", ["state", b.init("zero", (), array=np.array(0, np.int64))], ["h0"], axis=0),
        helper.make_node("Gather", ["state", b.init("one", (), array=np.array(1, np.int64))], ["c0"], axis=0),
        helper.make_node("Unsqueeze", ["h0", b.init("ax", 1, array=np.array([0], np.int64))], ["h0u"]),
        helper.make_node("Unsqueeze", ["c0", "ax"], ["c0u"]),
        helper.make_node("LSTM", ["seq", b.init("W", (1, 4 * hidden, 8)), b.init("R", (1, 4 * hidden, hidden)),
                                  b.init("B", (1, 8 * hidden), 0.1), "", "h0u", "c0u"], ["Y", "y", "yc"],
                         hidden_size=hidden),
    ]
    inputs = [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 4, 12]),
              helper.make_tensor_value_info("state", TensorProto.FLOAT, [2, 1, hidden])]
    outputs = [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 1, hidden])]
    return b.save(path, nodes, inputs, outputs)


def misc_ops(path: Path) -> Path:
    """Split, reductions, LogSoftmax and element-wise ops (Abs, Sin, Floor) between Convs."""
    b = _Builder(6)
    nodes = [
        helper.make_node("Conv", ["x", b.init("w1", (8, 3, 3, 3)), b.init("b1", 8, 0.1)], ["c1"], pads=[1, 1, 1, 1]),
        helper.make_node("Split", ["c1", b.init("sizes", 2, array=np.array([3, 5], np.int64))], ["s1", "s2"], axis=1),
        helper.make_node("Abs", ["s1"], ["a1"]),
        helper.make_node("Sin", ["s2"], ["a2"]),
        helper.make_node("ReduceMax", ["a1"], ["m1"], axes=[1], keepdims=1),
        helper.make_node("Floor", ["m1"], ["f1"]),
        helper.make_node("Conv", ["a2", b.init("w2", (4, 5, 1, 1))], ["c2"]),
        helper.make_node("Concat", ["f1", "c2"], ["cc"], axis=1),
        helper.make_node("ReduceSum", ["cc", b.init("axes", 2, array=np.array([2, 3], np.int64))], ["r"],
                         keepdims=0),
        helper.make_node("LogSoftmax", ["r"], ["y"], axis=1),
    ]
    return b.save(path, nodes, [_image("x", (1, 3, 8, 8))], [_image("y", (1, 5))])


CASES = {"ocr_head": ocr_head, "misc_ops": misc_ops, "same_upper": same_upper, "pose_like": pose_like,
         "palm_like": palm_like, "audio_lstm": audio_lstm}
