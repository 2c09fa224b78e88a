"""Worst-case integer patterns of the bit-exactness tests, and the simulator's integers of a tensor.

Weights at both ends of int8 (half the output channels all +127, so the products share a sign),
inputs at both ends of their integer range, output parameters that spread the accumulator over the
output range: the sums that saturate 16-bit kernels (test_integer_exactness.py,
test_asymmetric_weights.py).
"""
from __future__ import annotations

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from openrknn.graph.runner import make_session
from openrknn.quant.numerics import QuantParams
from openrknn.sim.quantized import lower_quantized
from tests.helpers import quantized_build

SIZE = 6   # the pictures' height and width


def build_with_tail(tmp_path, nodes, inits, channels, out_c, seed=0, platform="rk3588", **config):
    """``x → nodes → t → 1×1 Conv tail`` built w8a8 (rk3588 by default; ``config``: more
    ``RKNN.config`` options); the tail keeps ``t`` an integer tensor. Returns the built model."""
    rng = np.random.default_rng(seed)
    inits = inits + [numpy_helper.from_array(rng.normal(0, 0.3, (4, out_c, 1, 1)).astype(np.float32), "w_tail")]
    nodes = nodes + [helper.make_node("Conv", ["t", "w_tail"], ["y"], name="tail")]
    graph = helper.make_graph(nodes, "exact", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, channels, SIZE, SIZE])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)], inits)
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)]), tmp_path / "m.onnx")
    samples = [rng.uniform(-1, 1, (1, channels, SIZE, SIZE)).astype(np.float32) for _ in range(3)]
    return quantized_build(tmp_path / "m.onnx", samples, target_platform=platform, **config)._model


def params(model, name) -> QuantParams:
    return QuantParams.from_dict(model.quant_params[name])


def worst_case_weight(model, name, seed):
    """Weights at −128 / +127 (half the output channels all +127, so products share a sign)."""
    rng = np.random.default_rng(seed)
    init = next(i for i in model.graph.graph.initializer if i.name == name)
    shape = tuple(init.dims)
    values = np.where(rng.random(shape) < 0.5, -128, 127).astype(np.int8)
    axis = model.quant_params[name]["axis"] or 0
    index = [slice(None)] * len(shape)
    index[axis] = slice(0, shape[axis] // 2)
    values[tuple(index)] = 127
    init.CopyFrom(numpy_helper.from_array(values, name))
    return values.astype(np.int64)


def extreme_input(model, channels, size, seed):
    """A float ``[1, channels, size, size]`` input whose quantized values sit at both ends of the
    integer range, and those integers (zero point subtracted)."""
    rng = np.random.default_rng(seed)
    p = params(model, "x")
    lo, hi = p.scale[0] * (p.qmin - p.zero_point[0]), p.scale[0] * (p.qmax - p.zero_point[0])
    x = np.where(rng.random((1, channels, size, size)) < 0.7, hi * 1.5, lo * 1.5).astype(np.float32)
    x[:, :, ::2, ::2] = hi * 1.5
    return x, (np.clip(np.rint(x / p.scale[0]) + p.zero_point[0], p.qmin, p.qmax) - p.zero_point[0]).astype(np.int64)


def spread_output(model, tensor, acc, s_in, s_w):
    """Output parameters that map the accumulator range onto the integer range (few values clamp)."""
    record = model.quant_params[tensor]
    scale = float(np.float32(s_in) * np.float32(np.max(s_w)) * np.abs(acc).max() / 100.0)
    record["scale"], record["zero_point"] = [scale], [0]


def run_integers(model, x, tensors):
    """Integer values of ``tensors`` in the simulator (int8 tensors are held as uint8 with z + 128)."""
    lowered = lower_quantized(model)
    for name in tensors:
        lowered.graph.output.append(helper.make_empty_tensor_value_info(f"{name}__q"))
    session = make_session(lowered)
    values = dict(zip([o.name for o in session.get_outputs()], session.run(None, {"x": x})))
    return {name: values[f"{name}__q"].astype(np.int64) - (128 if model.quant_params[name]["dtype"] == "int8" else 0)
            for name in tensors}
