"""The ONNX operators openrknn accepts, and the load/build-time check that refuses the rest.

The claimed set is what the RKNPU toolchain lists for ONNX models (seed 002, appendix "supported
operators", which the guide keeps in a separate document) intersected with what this project
verifies: every op below passes the ONNX backend node tests shipped in the ``onnx`` package when
run through load → build → simulator (``tests/graph/test_onnx_conformance.py``; the exclusions
there each carry their reason). ``docs/operators.md`` lists the same set and where each op runs.
"""
from __future__ import annotations

import onnx

from openrknn.errors import UnsupportedOpError
from openrknn.graph.custom_ops import CustomOpRegistry

# Standard-domain ops (opset ≤ 19 semantics) that load, build and simulate.
SUPPORTED_ONNX_OPS = frozenset({
    # convolution, matrix and pooling layers
    "Conv", "ConvTranspose", "Gemm", "MatMul", "AveragePool", "MaxPool", "GlobalAveragePool",
    "GlobalMaxPool", "LpPool", "MaxRoiPool", "RoiAlign",
    # element-wise arithmetic
    "Add", "Sub", "Mul", "Div", "Pow", "Mod", "Max", "Min", "Sum", "Mean", "Abs", "Neg", "Reciprocal",
    "Sqrt", "Exp", "Log", "Sin", "Cos", "Ceil", "Floor", "Round", "Sign", "Erf",
    # activations
    "Relu", "LeakyRelu", "PRelu", "Clip", "Sigmoid", "HardSigmoid", "HardSwish", "Tanh", "Elu", "Selu",
    "Celu", "Softplus", "Softsign", "ThresholdedRelu", "Mish", "Gelu", "Shrink",
    # normalisation
    "BatchNormalization", "InstanceNormalization", "LayerNormalization", "LpNormalization", "LRN",
    "Softmax", "LogSoftmax",
    # reductions
    "ReduceMean", "ReduceSum", "ReduceMax", "ReduceMin", "ReduceProd", "ReduceL1", "ReduceL2",
    "ReduceSumSquare", "ReduceLogSumExp", "ArgMax", "ArgMin", "CumSum", "TopK",
    "NonMaxSuppression",   # SSD DetectionOutput post-processing (CPU)
    # layout and data movement
    "Reshape", "Flatten", "Squeeze", "Unsqueeze", "Transpose", "Concat", "Split", "Slice", "Pad",
    "Tile", "Expand", "Gather", "GatherElements", "GatherND", "ScatterND", "ScatterElements",
    "DepthToSpace", "SpaceToDepth", "Resize", "Upsample", "GridSample", "ReverseSequence", "Trilu",
    # comparison and logic (CPU)
    "Equal", "Less", "LessOrEqual", "Greater", "GreaterOrEqual", "Not", "And", "Or", "Xor", "Where",
    # recurrent layers
    "LSTM", "GRU", "RNN",
    # shape computation (folded at build for static shapes, else CPU)
    "Shape", "Size", "Constant", "ConstantOfShape", "Range", "Cast", "CastLike", "Identity", "Dropout",
    "NonZero", "If",
    # quantization (pre-quantized models)
    "QuantizeLinear", "DequantizeLinear", "QLinearConv", "QLinearMatMul",
})


def unsupported_nodes(model: onnx.ModelProto, custom_ops: CustomOpRegistry | None = None) -> list[onnx.NodeProto]:
    """Nodes (subgraphs included) whose op is neither claimed nor a registered custom op."""
    bad: list[onnx.NodeProto] = []
    _collect(model.graph, custom_ops, bad)
    return bad


def _collect(graph: onnx.GraphProto, custom_ops: CustomOpRegistry | None, bad: list[onnx.NodeProto]) -> None:
    for node in graph.node:
        if custom_ops is not None and node.op_type in custom_ops:
            pass   # registered custom op (source models keep them in the default domain, seed 002 §5.5)
        elif node.domain in ("", "ai.onnx"):
            if node.op_type not in SUPPORTED_ONNX_OPS:
                bad.append(node)
        else:
            bad.append(node)
        for attr in node.attribute:
            for sub in ([attr.g] if attr.type == onnx.AttributeProto.GRAPH else list(attr.graphs)):
                _collect(sub, custom_ops, bad)


def check_supported(model: onnx.ModelProto, custom_ops: CustomOpRegistry | None = None,
                    framework: str = "ONNX") -> None:
    """Raise ``UnsupportedOpError`` for the first unsupported node, listing every unsupported op type.

    Raises:
        UnsupportedOpError: naming the op, the node and what to do.
    """
    bad = unsupported_nodes(model, custom_ops)
    if not bad:
        return
    first = bad[0]
    others = sorted({n.op_type for n in bad} - {first.op_type})
    domain = f" (domain '{first.domain}')" if first.domain not in ("", "ai.onnx") else ""
    hint = ("replace it in the source model, or implement it as a custom op with reg_custom_op() "
            "(see docs/operators.md for the supported set)")
    if others:
        hint = f"also unsupported here: {', '.join(others)}; " + hint
    raise UnsupportedOpError(first.op_type + domain, first.name or first.output[0], framework, hint)
