"""Quantization conformance corpus: small ONNX graphs, one numerical hazard each, and the harness
that builds them (int8, int16, hybrid) and compares every output with float.

A case passes when every output has cosine ≥ 0.999 with norms within 2 %, or
max|diff| ≤ 0.02·max(1, max|float|) (tiny or near-constant outputs, where cosine says little).
"""
from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

COSINE_MIN = 0.999
NORM_TOLERANCE = 0.02
ABS_TOLERANCE = 0.02
OPSET = 13


@dataclass
class Case:
    """One hazard: the graph, calibration inputs and evaluation inputs (NCHW float32)."""

    name: str
    model: onnx.ModelProto
    calibration: list[list[np.ndarray]]
    evaluation: list[list[np.ndarray]]
    int16_layers: list[str] = field(default_factory=list)   # hybrid: tensors whose layer runs int16
    relative: bool = False   # tiny outputs: cosine and norm must hold (no absolute-difference escape)


def verdict(quantized: np.ndarray, reference: np.ndarray, relative: bool = False) -> tuple[bool, dict]:
    """The corpus tolerance on one output; returns (passed, measured figures)."""
    q, f = np.asarray(quantized, np.float64).ravel(), np.asarray(reference, np.float64).ravel()
    qn, fn = np.linalg.norm(q), np.linalg.norm(f)
    cos = float(q @ f / (qn * fn)) if qn > 0 and fn > 0 else (1.0 if qn == fn else 0.0)
    norm_ratio = float(qn / fn) if fn > 0 else (1.0 if qn == 0 else np.inf)
    max_diff = float(np.max(np.abs(q - f))) if q.size else 0.0
    bound = ABS_TOLERANCE * max(1.0, float(np.max(np.abs(f))) if f.size else 0.0)
    passed = (cos >= COSINE_MIN and abs(norm_ratio - 1) <= NORM_TOLERANCE) or (max_diff <= bound and not relative)
    return passed, {"cosine": cos, "norm_ratio": norm_ratio, "max_diff": max_diff, "bound": bound}


# ---------------------------------------------------------------------------------------------- builders
class GraphBuilder:
    """A few lines per graph: named initializers and nodes, NCHW float inputs."""

    def __init__(self, seed: int = 0) -> None:
        self.rng = np.random.default_rng(seed)
        self.nodes: list[onnx.NodeProto] = []
        self.inits: list[onnx.TensorProto] = []
        self.inputs: list[onnx.ValueInfoProto] = []
        self.outputs: list[onnx.ValueInfoProto] = []
        self._count = 0

    def const(self, name: str, array) -> str:
        self.inits.append(numpy_helper.from_array(np.asarray(array, np.float32), name))
        return name

    def weight(self, name: str, shape, scale: float = 0.3) -> str:
        return self.const(name, self.rng.normal(0, scale, shape))

    def input(self, name: str, shape) -> str:
        self.inputs.append(helper.make_tensor_value_info(name, TensorProto.FLOAT, list(shape)))
        return name

    def output(self, name: str) -> str:
        self.outputs.append(helper.make_tensor_value_info(name, TensorProto.FLOAT, None))
        return name

    def node(self, op: str, inputs, out: str | None = None, **attrs) -> str:
        self._count += 1
        out = out or f"{op.lower()}{self._count}"
        self.nodes.append(helper.make_node(op, list(inputs), [out], name=f"{out}_node", **attrs))
        return out

    def conv(self, x: str, w: str, b: str | None = None, out: str | None = None, k: int = 3, **attrs) -> str:
        pads = [k // 2] * 4
        return self.node("Conv", [x, w] + ([b] if b else []), out, pads=pads, **attrs)

    def model(self) -> onnx.ModelProto:
        graph = helper.make_graph(self.nodes, "conformance", self.inputs, [], self.inits)
        model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", OPSET)])
        model.ir_version = 8
        inferred = {v.name: v for v in onnx.shape_inference.infer_shapes(model).graph.value_info}
        model.graph.output.extend(inferred[o.name] for o in self.outputs)
        return model


def _images(rng: np.random.Generator, count: int, shape, low: float = -1.0, high: float = 1.0) -> list[list[np.ndarray]]:
    """Smooth random inputs (a low-frequency field plus noise) in [low, high]."""
    out = []
    for _ in range(count):
        base = rng.uniform(low, high, shape).astype(np.float32)
        smooth = (base + np.roll(base, 1, -1) + np.roll(base, 1, -2)) / 3
        out.append([np.clip(smooth, low, high).astype(np.float32)])
    return out


def _split(samples: list[list[np.ndarray]]) -> tuple[list[list[np.ndarray]], list[list[np.ndarray]]]:
    """Calibration and evaluation inputs. The corpus tests parameters, not generalisation: the
    evaluation inputs are calibration inputs shrunk by 10 %, so no value leaves its calibrated range."""
    return samples[:8], [[np.float32(0.9) * a for a in sample] for sample in samples[:4]]


def shared_head(seed: int = 0) -> Case:
    """Three pyramid levels of very different range feed one Conv-ReLU-Conv head (same initializers)."""
    g = GraphBuilder(seed)
    x = g.input("x", [1, 3, 16, 16])
    g.weight("head_w1", (8, 8, 3, 3), 0.2)
    g.weight("head_b1", (8,), 0.5)
    g.weight("head_w2", (4, 8, 1, 1), 0.3)
    g.weight("head_b2", (4,), 0.5)
    for i, gain in enumerate((1.0, 8.0, 60.0)):
        g.weight(f"lvl_w{i}", (8, 3, 3, 3), 0.3 * gain)
        level = g.node("Relu", [g.conv(x, f"lvl_w{i}", None, strides=[2 ** i] * 2)])
        hidden = g.node("Relu", [g.conv(level, "head_w1", "head_b1")])
        g.output(g.conv(hidden, "head_w2", "head_b2", out=f"p{i}", k=1))
    return Case("shared_head", g.model(), *_split(_images(np.random.default_rng(seed), 12, (1, 3, 16, 16))))


def identity_aliases(seed: int = 1) -> Case:
    """torch.onnx style: one bias initializer read through Identity aliases by three Convs of
    different input ranges, and one weight read through an alias."""
    g = GraphBuilder(seed)
    x = g.input("x", [1, 4, 8, 8])
    g.const("bias", np.array([0.3, -0.2, 0.5, 0.1], np.float32))
    g.weight("w_shared", (4, 4, 3, 3), 0.3)
    a1 = g.node("Identity", ["bias"], "bias_alias1")
    a2 = g.node("Identity", ["bias"], "bias_alias2")
    wa = g.node("Identity", ["w_shared"], "w_alias")
    c1 = g.node("Relu", [g.conv(x, "w_shared", "bias")])
    g.const("big", np.float32(40.0))
    c2 = g.node("Relu", [g.conv(g.node("Mul", [c1, "big"]), wa, a1)])
    g.const("small", np.float32(0.01))
    c3 = g.conv(g.node("Mul", [c2, "small"]), wa, a2, out="y")
    g.output(c3)
    return Case("identity_aliases", g.model(), *_split(_images(np.random.default_rng(seed), 12, (1, 4, 8, 8))))


def merged_zero_biases(seed: int = 2) -> Case:
    """Equal all-zero biases merged into one initializer, read by layers of very different ranges
    (bias correction adds a per-layer term to each)."""
    g = GraphBuilder(seed)
    x = g.input("x", [1, 8, 8, 8])
    g.const("zeros", np.zeros(8, np.float32))
    t = x
    for i, gain in enumerate((1.0, 30.0, 0.02)):
        g.weight(f"w{i}", (8, 8, 3, 3), 0.3 * gain)
        t = g.node("Relu", [g.conv(t, f"w{i}", "zeros")])
    g.output(g.conv(t, g.weight("w_out", (8, 8, 1, 1)), "zeros", out="y", k=1))
    return Case("merged_zero_biases", g.model(), *_split(_images(np.random.default_rng(seed), 12, (1, 8, 8, 8))))


def dead_output_channels(seed: int = 3) -> Case:
    """Four of eight output channels have weights ×1e-7 and a non-zero bias: their output is the bias."""
    g = GraphBuilder(seed)
    x = g.input("x", [1, 4, 8, 8])
    weight = g.rng.normal(0, 0.3, (8, 4, 3, 3)).astype(np.float32)
    weight[4:] *= 1e-7
    g.const("w", weight)
    g.const("b", np.array([0.2, -0.1, 0.3, 0.05, -0.85, -0.38, 0.14, 1.51], np.float32))
    g.output(g.conv(x, "w", "b", out="y"))
    return Case("dead_output_channels", g.model(), *_split(_images(np.random.default_rng(seed), 12, (1, 4, 8, 8))))


def dead_input(seed: int = 4) -> Case:
    """A ReLU that never fires (zero calibration range) feeds a Conv with a bias."""
    g = GraphBuilder(seed)
    x = g.input("x", [1, 4, 8, 8])
    g.const("minus", np.float32(-5.0))
    dead = g.node("Relu", [g.node("Add", [x, "minus"])])
    y = g.conv(dead, g.weight("w", (4, 4, 3, 3)), g.const("b", [0.7, -0.4, 0.2, 1.3]), out="y")
    g.output(y)
    live = g.conv(x, g.weight("w2", (4, 4, 3, 3)), g.const("b2", [0.1, 0.2, 0.3, 0.4]), out="z")
    g.output(g.node("Add", [live, y], "sum"))
    return Case("dead_input", g.model(), *_split(_images(np.random.default_rng(seed), 12, (1, 4, 8, 8))))


def constant_output(seed: int = 5) -> Case:
    """An output that does not depend on the input (zero weights, bias only)."""
    g = GraphBuilder(seed)
    x = g.input("x", [1, 4, 8, 8])
    g.const("w0", np.zeros((3, 4, 1, 1), np.float32))
    g.output(g.conv(x, "w0", g.const("b0", [0.25, -1.5, 3.0]), out="const_y", k=1))
    g.output(g.conv(x, g.weight("w1", (3, 4, 3, 3)), g.const("b1", [0.1, 0.0, -0.1]), out="live_y"))
    return Case("constant_output", g.model(), *_split(_images(np.random.default_rng(seed), 12, (1, 4, 8, 8))))


def concat_add_ranges(seed: int = 6) -> Case:
    """Concat and Add of two branches whose ranges differ 1000×."""
    g = GraphBuilder(seed)
    x = g.input("x", [1, 4, 8, 8])
    big = g.conv(x, g.weight("wb", (4, 4, 3, 3), 30.0), g.const("bb", np.full(4, 5.0)))
    small = g.conv(x, g.weight("ws", (4, 4, 3, 3), 0.03), g.const("bs", np.full(4, 0.005)))
    g.output(g.node("Concat", [big, small], "cat", axis=1))
    g.output(g.node("Add", [big, small], "sum"))
    g.output(g.node("Relu", [small], "small_relu"))   # the small branch keeps its own scale
    return Case("concat_add_ranges", g.model(), *_split(_images(np.random.default_rng(seed), 12, (1, 4, 8, 8))))


def huge_bias(seed: int = 7) -> Case:
    """A bias 10^4× larger than the weighted sum (int32 in units of s_x·s_w overflows)."""
    g = GraphBuilder(seed)
    x = g.input("x", [1, 4, 8, 8])
    weight = g.rng.normal(0, 1e-3, (4, 4, 3, 3)).astype(np.float32)
    g.const("w", weight)
    g.output(g.conv(x, "w", g.const("b", [3e3, -2e3, 1e3, 5e2]), out="y"))
    return Case("huge_bias", g.model(), *_split(_images(np.random.default_rng(seed), 12, (1, 4, 8, 8), 0.0, 1e-3)))


def negative_only(seed: int = 8) -> Case:
    """Tensors that are never positive (-Relu), through a Conv and a Sigmoid."""
    g = GraphBuilder(seed)
    x = g.input("x", [1, 4, 8, 8])
    neg = g.node("Neg", [g.node("Relu", [x])])
    y = g.conv(neg, g.weight("w", (4, 4, 3, 3)), g.const("b", [-2.0, -1.0, -0.5, -3.0]))
    g.output(g.node("Neg", [g.node("Relu", [g.node("Neg", [y])])], "y"))
    g.output(g.node("Sigmoid", [y], "s"))
    return Case("negative_only", g.model(), *_split(_images(np.random.default_rng(seed), 12, (1, 4, 8, 8))))


def split_slice_chain(seed: int = 9) -> Case:
    """Split → two Convs of different gains → Slice → Concat."""
    g = GraphBuilder(seed)
    x = g.input("x", [1, 8, 8, 8])
    g.nodes.append(helper.make_node("Split", [x], ["xa", "xb"], name="split", axis=1))
    a = g.node("Relu", [g.conv("xa", g.weight("wa", (4, 4, 3, 3), 3.0), g.const("ba", np.full(4, 0.5)))])
    b = g.conv("xb", g.weight("wb", (4, 4, 3, 3), 0.05), g.const("bb", np.full(4, -0.02)))
    for name, value in (("st", [1]), ("en", [3]), ("ax", [1])):
        g.inits.append(numpy_helper.from_array(np.array(value, np.int64), name))
    sa = g.node("Slice", [a, "st", "en", "ax"])
    sb = g.node("Slice", [b, "st", "en", "ax"])
    g.output(g.node("Concat", [sa, sb], "y", axis=1))
    g.output(g.conv(sb, g.weight("wc", (2, 2, 1, 1)), None, out="z", k=1))
    return Case("split_slice_chain", g.model(), *_split(_images(np.random.default_rng(seed), 12, (1, 8, 8, 8))))


def tiny_ranges(seed: int = 10) -> Case:
    """PyTorch-default-init-like magnitudes: activations ~1e-2 inside, outputs ~1e-9 … 1e-14."""
    g = GraphBuilder(seed)
    x = g.input("x", [1, 4, 8, 8])
    t = g.node("Relu", [g.conv(x, g.weight("w1", (8, 4, 3, 3), 0.05), g.const("b1", np.full(8, 1e-3)))])
    t = g.conv(t, g.weight("w2", (8, 8, 1, 1), 1e-4), None, k=1)
    g.output(g.node("Identity", [t], "y_small"))
    t = g.conv(t, g.weight("w3", (4, 8, 1, 1), 1e-4), None, out="y_tiny", k=1)
    g.output(t)
    g.output(g.node("Mul", [t, g.const("k", np.float32(1e-5))], "y_tinier"))
    return Case("tiny_ranges", g.model(), *_split(_images(np.random.default_rng(seed), 12, (1, 4, 8, 8))),
                relative=True)


def matmul_gemm_bias(seed: int = 12) -> Case:
    """The bias rule through the MatMul/Gemm lowering: Gemm and MatMul + Add rows whose weights
    are ×1e-7 next to live rows, and a Gemm bias shared with a second Gemm of 50× larger input."""
    g = GraphBuilder(seed)
    x = g.input("x", [1, 4, 4, 4])
    flat = g.node("Flatten", [x], "flat", axis=1)
    weight = g.rng.normal(0, 0.2, (8, 64)).astype(np.float32)
    weight[4:] *= 1e-7
    g.const("gw", weight)
    g.const("gb", [0.1, -0.3, 0.2, 0.0, -0.85, -0.38, 0.14, 1.51])
    g.output(g.node("Gemm", [flat, "gw", "gb"], "gemm_y", transB=1))
    mw = g.rng.normal(0, 0.2, (64, 8)).astype(np.float32)
    mw[:, :4] *= 1e-7
    g.const("mw", mw)
    g.output(g.node("Add", [g.node("MatMul", [flat, "mw"]), "gb"], "matmul_y"))
    big = g.node("Mul", [flat, g.const("fifty", np.float32(50.0))])
    g.output(g.node("Gemm", [big, g.weight("gw2", (8, 64), 0.2), "gb"], "gemm_big", transB=1))
    return Case("matmul_gemm_bias", g.model(), *_split(_images(np.random.default_rng(seed), 12, (1, 4, 4, 4))))


def hybrid_shared_weight(seed: int = 11) -> Case:
    """One weight read by an int8 layer and by a layer the hybrid cfg moves to int16."""
    g = GraphBuilder(seed)
    x = g.input("x", [1, 4, 8, 8])
    g.weight("w", (4, 4, 3, 3))
    g.const("b", [0.1, -0.2, 0.3, 0.05])
    a = g.node("Relu", [g.conv(x, "w", "b", out="conv_a")])
    b = g.conv(g.node("Mul", [a, g.const("gain", np.float32(20.0))]), "w", "b", out="conv_b")
    g.output(g.node("Relu", [b], "y"))
    return Case("hybrid_shared_weight", g.model(), *_split(_images(np.random.default_rng(seed), 12, (1, 4, 8, 8))),
                int16_layers=["conv_b"])


CASES: dict[str, Callable[[], Case]] = {f.__name__: f for f in (
    shared_head, identity_aliases, merged_zero_biases, dead_output_channels, dead_input, constant_output,
    concat_add_ranges, huge_bias, negative_only, split_slice_chain, tiny_ranges, matmul_gemm_bias,
    hybrid_shared_weight)}


# ---------------------------------------------------------------------------------------------- harness
def float_outputs(model: onnx.ModelProto, sample: list[np.ndarray]) -> list[np.ndarray]:
    import onnxruntime as ort
    session = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    feeds = {i.name: a for i, a in zip(session.get_inputs(), sample)}
    return session.run(None, feeds)


def write_inputs(case: Case, folder: Path) -> tuple[Path, Path]:
    """The model file and a dataset.txt of .npy calibration inputs."""
    folder.mkdir(parents=True, exist_ok=True)
    model_path = folder / f"{case.name}.onnx"
    onnx.save(case.model, model_path)
    lines = []
    for k, sample in enumerate(case.calibration):
        names = []
        for j, array in enumerate(sample):
            path = folder / f"calib{k}_{j}.npy"
            np.save(path, array)
            names.append(path.name)
        lines.append(" ".join(names))
    dataset = folder / "dataset.txt"
    dataset.write_text("\n".join(lines) + "\n")
    return model_path, dataset


def build(case: Case, folder: Path, dtype: str = "w8a8", platform: str = "rk3588", hybrid: bool = False,
          **config):
    """An RKNN object holding the built model (hybrid: step 1, the cfg edited to int16, step 2)."""
    import os
    from rknn.api import RKNN
    model_path, dataset = write_inputs(case, folder)
    rknn = RKNN(verbose=False)
    assert rknn.config(target_platform=platform, quantized_dtype=dtype, **config) == 0
    assert rknn.load_onnx(model=str(model_path)) == 0
    if not hybrid:
        assert rknn.build(do_quantization=True, dataset=str(dataset)) == 0
        return rknn
    cwd = os.getcwd()
    os.chdir(folder)
    try:
        assert rknn.hybrid_quantization_step1(dataset=str(dataset)) == 0
        cfg = folder / f"{case.name}.quantization.cfg"
        text = cfg.read_text()
        layers = "".join(f"    {name}: int16\n" for name in case.int16_layers)
        text = text.replace("custom_quantize_layers: {}\n", "custom_quantize_layers:\n" + layers) \
            if "custom_quantize_layers: {}" in text else text.replace("custom_quantize_layers:\n",
                                                                      "custom_quantize_layers:\n" + layers, 1)
        cfg.write_text(text)
        rknn = RKNN(verbose=False)
        assert rknn.hybrid_quantization_step2(model_input=f"{case.name}.model", data_input=f"{case.name}.data",
                                              model_quantization_cfg=str(cfg)) == 0
    finally:
        os.chdir(cwd)
    return rknn


def run(rknn, case: Case) -> list[list[np.ndarray]]:
    assert rknn.init_runtime() == 0
    return [rknn.inference(inputs=sample, data_format=["nchw"] * len(sample)) for sample in case.evaluation]


def compare(case: Case, outputs: list[list[np.ndarray]]) -> list[tuple[str, bool, dict]]:
    """Per output name: passed, and the worst figures over the evaluation samples."""
    names = [o.name for o in case.model.graph.output]
    results = []
    for k, name in enumerate(names):
        worst = None
        for sample, got in zip(case.evaluation, outputs):
            reference = float_outputs(case.model, sample)[k]
            passed, figures = verdict(got[k], reference, case.relative)
            if worst is None or not passed or figures["cosine"] < worst[1]["cosine"]:
                if worst is None or worst[0]:
                    worst = (passed, figures)
        results.append((name, worst[0], worst[1]))
    return results
