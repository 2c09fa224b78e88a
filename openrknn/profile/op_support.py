"""Which ONNX ops the NPU runs, how they print, and which are slow (seed 002 §8.4.2, table 8-5).

These sets are the defaults for every chip; a chip table adds to them with ``cost.cpu_ops``
(forced onto the CPU) and ``cost.npu_ops`` (extra NPU ops).
"""
from __future__ import annotations

# Ops the RKNPU2 compiler maps to NPU layers (the OpList of the SDK, common subset).
NPU_OPS = frozenset({
    "Conv", "ConvTranspose", "Gemm", "MatMul", "Add", "Sub", "Mul", "Div", "Max", "Min", "Sum", "Mean",
    "Relu", "Clip", "LeakyRelu", "PRelu", "Sigmoid", "Tanh", "Elu", "Selu", "HardSwish", "HardSigmoid",
    "Softplus", "Gelu", "Erf", "Exp", "Sqrt", "Pow", "Neg", "Abs", "Reciprocal", "Log", "Sin", "Cos",
    "MaxPool", "AveragePool", "GlobalAveragePool", "GlobalMaxPool", "LpNormalization",
    "Concat", "Split", "Slice", "Transpose", "Reshape", "Flatten", "Squeeze", "Unsqueeze",
    "Resize", "Upsample", "Pad", "Tile", "DepthToSpace", "SpaceToDepth", "Expand",
    "Softmax", "LogSoftmax", "ReduceMean", "ReduceSum", "ReduceMin", "ReduceL2",
    "LayerNormalization", "InstanceNormalization", "BatchNormalization", "Gather", "Cast",
    "LSTM", "GRU", "Swish", "Mish", "ThresholdedRelu", "Celu", "Shrink",
})

# Ops that always run on the CPU (seed 002 fig 8-4/8-5: ReduceMax, ArgMax on CPU; control flow,
# index and dynamic-shape ops have no NPU kernel).
CPU_OPS = frozenset({
    "ArgMax", "ArgMin", "ReduceMax", "ReduceProd", "TopK", "NonMaxSuppression", "NonZero", "Where",
    "ScatterND", "ScatterElements", "GatherND", "GatherElements", "Loop", "If", "Scan", "Range",
    "Einsum", "Mod", "Equal", "Less", "Greater", "LessOrEqual", "GreaterOrEqual", "Not", "And", "Or",
    "Xor", "CumSum", "RoiAlign", "GridSample", "ConstantOfShape", "OneHot", "Round", "Floor", "Ceil",
    "RandomNormal", "RandomUniform", "Multinomial", "Unique", "Trilu", "Compress",
})

# Ops evaluated at build time: their outputs are constants when shapes are static.
SHAPE_OPS = frozenset({"Constant", "Shape", "Size"})

# Seed 002 table 8-5: data movement, size transform and non-ReLU activations have low NPU efficiency.
LOW_EFFICIENCY_OPS = frozenset({
    "Transpose", "Reshape", "Flatten", "Squeeze", "Unsqueeze", "Split", "Concat",
    "Resize", "Upsample", "Tile", "MaxPool", "AveragePool", "Pad",
    "Sigmoid", "Tanh", "Softplus", "HardSwish",
})

# Toolkit1 simulator layer names (seed 001 §3.5: 'convolution.relu.pooling.layer2_2' for every conv,
# 'pooling.layer2_1', 'fullyconnected.relu.layer_3', 'softmaxlayer2.layer_1', 'tensor.transpose_3').
# Kinds the seed does not show get names in the same pattern.
TOOLKIT1_NAME = {
    "conv": "convolution.relu.pooling.layer2_2", "depthwise": "convolution.relu.pooling.layer2_2",
    "fc": "fullyconnected.relu.layer_3", "matmul": "fullyconnected.relu.layer_3",
    "pool": "pooling.layer2_1", "softmax": "softmaxlayer2.layer_1", "data": "tensor.transpose_3",
    "input": "tensor.transpose_3", "eltwise": "eltwise.layer_2", "activation": "activation.layer_1",
    "reduce": "reduce.layer_1", "resize": "resize.layer_1", "norm": "normalization.layer_1",
    "other": "custom.layer_1",
}
