"""Element-wise steps between two int8 tensors as an int8 lookup table (CAST → ADD → GATHER).

The model computes such steps (hard-swish, sigmoid, PRelu, Clip, ... after a Conv or as a layer of
their own) as ``quantize(f(dequantize(q)))``: a function of one int8 value (per channel when a
constant has one value per channel). The export tabulates it for the 256 inputs with the
simulator's own engine (onnxruntime: the same float kernels), so LiteRT gives the simulator's
integers bit for bit, without a float step; TFLite's int8 LOGISTIC / HARD_SWISH kernels round
differently (a step on a few percent of the values, which deep models accumulate).
"""
from __future__ import annotations

import numpy as np
import onnx

from openrknn.export.tflite import layout
from openrknn.export.tflite.flatbuffer import Quant
from openrknn.export.tflite.ranges import closure_model
from openrknn.sim.session import make_session

# ONNX ops computed value by value (a constant operand may broadcast along the channels)
ELEMENTWISE = frozenset({"Relu", "Clip", "Sigmoid", "HardSigmoid", "HardSwish", "Mul", "Add", "Sub", "Div", "PRelu",
                         "LeakyRelu", "Tanh", "Exp", "Sqrt", "Max", "Min", "Elu", "Selu", "Softplus", "Neg", "Abs",
                         "Pow", "Identity", "Erf", "Log", "Reciprocal", "Celu", "ThresholdedRelu", "Softsign",
                         "BatchNormalization", "Sin", "Cos", "Ceil", "Floor", "Round", "Sign", "Mish", "Gelu",
                         "Shrink"})


def chain_constants(ex, nodes: list[onnx.NodeProto], start: str) -> list[str] | None:
    """The constants of ``nodes`` when they compute element-wise from ``start`` alone (constants of one
    value, or one per channel of ``start``), else None."""
    made = {start}
    constants = []
    channels = ex.shapes[start][1] if ex.rank(start) >= 2 else 1
    for node in nodes:
        if node.op_type not in ELEMENTWISE or len([o for o in node.output if o]) != 1:
            return None
        for name in (i for i in node.input if i):
            if name in made:
                continue
            if name not in ex.inits:
                return None
            value = ex.inits[name]
            per_channel = node.op_type == "BatchNormalization" or _channel_axis(value, ex.rank(start)) is not None
            if value.size > 1 and (value.size != channels or not per_channel):
                return None
            constants.append(name)
        made.add(node.output[0])
    return constants


def _channel_axis(value: np.ndarray, rank: int) -> int | None:
    """Where a per-channel constant's values lie once broadcast against a rank-``rank`` tensor (axis 1)."""
    shape = (1,) * (rank - value.ndim) + value.shape
    big = [a for a, d in enumerate(shape) if d != 1]
    return 1 if big == [1] else None


def table(ex, nodes: list[onnx.NodeProto], start: str, out: str, constants: list[str]) -> np.ndarray:
    """``[channels, 256]`` int8: the stored ``out`` for each int8 value of ``start`` (per channel)."""
    rank = ex.rank(start)
    channels = ex.shapes[start][1] if any(ex.inits[c].size > 1 for c in constants) else 1
    q_in, q_out = ex.params[start], ex.params[out]
    codes = np.arange(-128, 128, dtype=np.int64)
    real = (codes - int(q_in.zero_point.ravel()[0])).astype(np.float32) * np.float32(q_in.scale.ravel()[0])
    grid = np.broadcast_to(real.reshape((256, 1) + (1,) * (rank - 2)), (256, channels) + (1,) * (rank - 2))
    model = closure_model(ex, nodes, start, out)   # the constants it reads are ``constants``
    model.ir_version = ex.model.graph.ir_version
    values = make_session(model).run(None, {start: np.ascontiguousarray(grid, np.float32)})[0]
    values = np.asarray(values, np.float32).reshape(256, -1)
    if values.shape[1] not in (1, channels):
        raise ValueError("not element-wise")
    stored = np.rint(values / np.float32(q_out.scale.ravel()[0])) + int(q_out.zero_point.ravel()[0])
    return np.clip(stored, q_out.qmin, q_out.qmax).astype(np.int8).T   # [channels, 256]


def emit(ex, nodes: list[onnx.NodeProto], start: str, out: str) -> bool:
    """Emit the steps ``nodes`` from int8 ``start`` to int8 ``out`` as a lookup; False when they are
    not an element-wise function of ``start`` (or the table cannot be computed)."""
    if start not in ex.params or out not in ex.params or ex.shapes.get(start) != ex.shapes.get(out):
        return False
    constants = chain_constants(ex, nodes, start)
    if constants is None:
        return False
    try:
        entries = table(ex, nodes, start, out, constants)
    except Exception:   # an op onnxruntime cannot run alone: keep the float steps
        return False
    source = ex.need_q(start)
    perm = ex.storage(start)
    shape = list(ex.out.tensors[source].shape)
    wide = ex.new_tensor(start, "int32", shape=shape, label=f"{out}/codes")
    ex.emit("CAST", [source], [wide])
    offsets = np.arange(entries.shape[0], dtype=np.int32) * 256 + 128
    if entries.shape[0] > 1:   # one table per channel: offsets along the stored channel axis
        offsets = layout.constant_for(offsets.reshape((1, -1) + (1,) * (ex.rank(start) - 2)), ex.rank(start), perm)
    else:
        offsets = offsets.reshape(())
    indices = ex.new_tensor(start, "int32", shape=shape, label=f"{out}/indices")
    ex.emit("ADD", [wide, ex.const(f"{out}/offsets", offsets.astype(np.int32), "int32")], [indices], "AddOptions")
    quant = ex.act_quant(out)
    lookup = ex.const(f"{out}/table", entries.reshape(-1), "int8", Quant(quant.scale, quant.zero_point))
    ex.q[out] = ex.new_tensor(out, "int8", quant, perm)
    ex.emit("GATHER", [lookup, indices], [ex.q[out]], "GatherOptions", Axis=0)
    return True
