"""Which ONNX ops are slow on the NPU (seed 002 table 8-5) and how Toolkit1 names layers.

Which ops the NPU runs at all, and so where each layer runs, is the layer record's
(``openrknn.graph.placement``): this module decides no target.
"""
from __future__ import annotations

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
