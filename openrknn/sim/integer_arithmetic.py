"""The exact-integer arithmetic of the quantized simulator: the onnxruntime nodes that compute an
8-bit layer's integer sums and requantize them, bit for bit as the integer reference, on every CPU.

Contract (docs/quantization.md states the arithmetic in full; ``tests/quant/test_integer_exactness.py``
checks it against a numpy integer reference, natively and under ``qemu-x86_64 -cpu Haswell``):

* **Sums.** ``acc = Σ (q_x − z_x)·(q_w − z_w) + q_b`` is exact: int32 from ``QLinearConv`` /
  ``ConvInteger`` / ``MatMulInteger``, or a float32 op on the centred integers while every partial sum
  stays below 2^24 (:func:`_exact_float_pieces` checks the bound per output channel; weights split as
  ``16·hi + lo`` when one op could pass it, the parts added in int32; a bias that alone passes it —
  int32-saturated biases reach 2^30 — is added in int32 after the float32 op). Non-grouped Convs
  and MatMuls whose output stays inside their layer use ``ConvInteger`` / ``MatMulInteger``
  (u8 × u8) plus the int32 bias: exact whatever the sums, and faster than the float32 op there;
  grouped Convs the float32 Conv.
* **Rounding.** ``y = clamp(rne(float32(acc)·M_c) + z_y)`` with ``M_c = float32(s_x·s_w[c]/s_y)``
  (``openrknn.quant.numerics.requant_multiplier``): one float32 multiply, round half to even
  (``QuantizeLinear`` with scale 1, or inside ``QLinearConv``).
* **Saturation.** Only at the end, to the output's storage range (uint8 0…255; int8 activations are
  held as uint8 with ``z + 128``, the same values). No intermediate step may saturate: onnxruntime's
  x86 u8·s8 kernels add pairs of products in 16-bit lanes (AVX2 ``vpmaddubsw``) and saturate on
  full-range int8 weights, while its VNNI and ARM kernels do not. Non-grouped Convs therefore get
  full-range int8 weights only where a probe of the runtime's own kernel found it exact
  (:func:`full_range_u8s8_is_exact`, ~3x faster), else 7-bit weight halves
  (:func:`_seven_bit_halves`, no pair can reach 2^15); other integer layers get uint8 weights
  (:func:`_unsigned`; u8 × u8 kernels widen before multiplying).
* **CPU-independence.** The emitted graph uses only kernels that are exact on the running CPU's
  instruction set (the points above; both Conv forms give the same integers), and its sessions run
  without the graph fusions that fold float scales into integer weights
  (``openrknn.graph.runner.EXACT_SUM_OPTIMIZERS``).

:class:`IntegerArithmetic` is a mix-in of the lowering (``openrknn.sim.quantized``): it emits into the
lowering's node list through the members listed in its docstring, and decides nothing about which
layers are integer (the layer kinds and their fallbacks stay with the lowering).
"""
from __future__ import annotations

import functools

import numpy as np
import onnx
from onnx import helper, numpy_helper

from openrknn import log
from openrknn.graph.runner import make_session
from openrknn.quant.numerics import NUMPY_TYPES, QuantParams, requant_multiplier


class IntegerArithmetic:
    """Exact integer sums and requantization, emitted as onnxruntime nodes.

    The host (the lowering) provides: ``params`` (tensor → :class:`QuantParams`, int8 activations
    already as uint8), ``inits`` (name → initializer), ``records`` (raw quantization records),
    ``nodes`` (the emitted node list), ``_consts`` (names of constants and shared steps emitted once),
    and the tensor-form helpers :meth:`const`, :meth:`scale_zero`, :meth:`need_int`,
    :meth:`set_int` and :meth:`_qdq_domain`.
    """

    params: dict[str, QuantParams]
    inits: dict[str, onnx.TensorProto]
    records: dict[str, dict]
    nodes: list[onnx.NodeProto]
    _consts: set[str]

    def const(self, name: str, array: np.ndarray) -> str:
        raise NotImplementedError

    def scale_zero(self, tensor: str) -> tuple[str, str]:
        raise NotImplementedError

    def need_int(self, tensor: str) -> str | None:
        raise NotImplementedError

    def set_int(self, tensor: str) -> str:
        raise NotImplementedError

    def _qdq_domain(self, dtype: str) -> str:
        raise NotImplementedError

    def _qlinear_conv(self, node: onnx.NodeProto) -> None:
        """``QLinearConv`` of a non-grouped or grouped 8-bit Conv: non-grouped int8 weights as they are
        where the runtime's u8 × s8 kernel is exact, else as 7-bit halves over the input read twice;
        u8 × u8 otherwise; requantization inside the kernel."""
        x, w, y, bias = weighted_io(node)
        w_params = self.params[w]
        channels = self.inits[w].dims[0]
        ws = self.const(f"{w}__ws", np.resize(w_params.scale.ravel().astype(np.float32), channels))
        weight = numpy_helper.to_array(self.inits[w])
        zero = np.resize(w_params.zero_point.ravel(), channels).astype(weight.dtype)
        xs, xz = self.scale_zero(x)
        ys, yz = self.scale_zero(y)
        attrs = {a.name: helper.get_attribute_value(a) for a in node.attribute}
        group = attrs.get("group", 1)
        source, weight = self._whole_channel_blocks(self.need_int(x), xz, weight, zero, group, y)
        symmetric_int8 = weight.dtype == np.int8 and not zero.any()
        depthwise = group > 1 and weight.shape[1] == 1
        full_range = symmetric_int8 and (group == 1 or depthwise) and full_range_u8s8_is_exact(depthwise)
        if group == 1 and symmetric_int8 and not full_range:
            source, weight = self._twice(source), _seven_bit_halves(weight)
        elif not full_range:
            weight, zero = _unsigned(weight, zero)
        wz = self.const(f"{w}__wz", zero)
        inputs = [source, xs, xz, self.const(f"{w}__exact", weight), ws, wz, ys, yz] + ([bias] if bias else [])
        self.nodes.append(helper.make_node("QLinearConv", inputs, [self.set_int(y)], name=node.name or y, **attrs))


    def _twice(self, x_int: str) -> str:
        """``x_int`` concatenated with itself along the channels (the input of a split-weight Conv)."""
        name = f"{x_int}__twice"
        if name not in self._consts:
            self._consts.add(name)
            self.nodes.append(helper.make_node("Concat", [x_int, x_int], [name], name=f"{name}_concat", axis=1))
        return name

    def _whole_channel_blocks(self, x_int: str, x_zero: str, weight: np.ndarray, w_zero: np.ndarray,
                              group: int, y: str) -> tuple[str, np.ndarray]:
        """Input channels padded to a multiple of 4 (zero-point inputs, weights at their zero point):
        the same sums.

        onnxruntime 1.23 (the newest for Python 3.10) gives run-to-run different QLinearConv results
        when a non-grouped Conv has a channel count that is not a multiple of 4 (an image's 3)."""
        extra = -weight.shape[1] % 4
        if group != 1 or not extra:
            return x_int, weight
        spatial = weight.ndim - 2
        padding = np.broadcast_to(w_zero.reshape((-1,) + (1,) * (weight.ndim - 1)),
                                  (weight.shape[0], extra) + weight.shape[2:])
        amounts = self.const(f"{y}__c4pads", np.array([0, 0] + [0] * spatial + [0, extra] + [0] * spatial, np.int64))
        padded = f"{y}__c4"
        self.nodes.append(helper.make_node("Pad", [x_int, amounts, x_zero], [padded], name=f"{y}__c4pad",
                                           mode="constant"))
        return padded, np.concatenate([weight, padding], 1)

    def _w_scales(self, w: str, node: onnx.NodeProto, out_axis: int) -> np.ndarray:
        weight_dims = self.inits[w].dims
        transposed = node.op_type == "Gemm" and any(a.name == "transB" and a.i for a in node.attribute)
        channels = weight_dims[0] if transposed else weight_dims[out_axis]
        return np.resize(self.params[w].scale.ravel(), channels).astype(np.float32)

    def _exact_sum(self, node: onnx.NodeProto, out_axis: int) -> tuple[str, tuple[int, ...]] | None:
        """``acc = Σ (q_x − z_x)·(q_w − z_w) + q_b`` exactly, as float32 (``float32(acc)``).

        The float32 op (Conv, ConvTranspose, MatMul) runs on the integers ``q_x − z_x`` and
        ``q_w − z_w``: while every partial sum stays below 2^24 each float32 step is exact, in any
        summation order and on any CPU. The bound is checked per output channel
        (``max|q_x − z_x| · Σ|q_w − z_w| + |q_b|``). Sums that could pass it are computed by
        ConvInteger / MatMulInteger (u8 × u8, one weight zero point), else with weights split as
        ``16·hi + lo``, the parts combined in int32; only a bias past it is added in int32 after
        the float32 op. Non-grouped Convs and MatMuls take the integer kernel whatever the bound,
        where it is the faster (:func:`_integer_kernel_is_faster`). Returns (tensor, broadcast shape of a per-channel
        constant) or None when even the split could overflow."""
        x, w, y, bias = weighted_io(node)
        weight = numpy_helper.to_array(self.inits[w]).astype(np.int64)
        op_type, attrs = node.op_type, {a.name: helper.get_attribute_value(a) for a in node.attribute}
        if op_type == "Gemm":
            weight = weight.T if attrs.get("transB") else weight
            op_type, attrs = "MatMul", {}
        shape = [1] * weight.ndim
        shape[out_axis] = -1
        centred = weight - np.resize(self.params[w].zero_point.ravel(), weight.shape[out_axis]).reshape(shape)
        reduce_axes = tuple(a for a in range(weight.ndim) if a != out_axis)
        x_params = self.params[x]
        x_zero = int(x_params.zero_point.ravel()[0])
        x_reach = max(x_zero - x_params.qmin, x_params.qmax - x_zero)
        q_bias = numpy_helper.to_array(self.inits[bias]).astype(np.int64).ravel() if bias else None
        spatial = (1,) * (weight.ndim - 2) if op_type != "MatMul" else ()
        pieces = _exact_float_pieces(centred, x_reach, reduce_axes, np.abs(q_bias) if bias else None)
        zero_points = np.unique(self.params[w].zero_point)
        integer_kernel = op_type in ("Conv", "MatMul") and zero_points.size == 1
        too_large = pieces is None or len(pieces) > 1
        if integer_kernel and _integer_kernel_is_faster(op_type, attrs, weight):
            return self._integer_sum(node, op_type, attrs, weight, int(zero_points[0]), bias, q_bias, spatial, y), spatial
        if bias and too_large and len(_exact_float_pieces(centred, x_reach, reduce_axes) or ()) == 1:
            # only the bias is too large for float32 (a saturated int32 bias, ~2^30): the sums in one
            # exact float32 op, the bias added in int32 — the integer kernel's result (grouped Convs:
            # onnxruntime's ConvInteger is ~2.7x slower than a float32 Conv there)
            return self._float_sum_int32_bias(node, op_type, attrs, centred, bias, q_bias, spatial, y), spatial
        if integer_kernel and too_large:   # sums too large for one exact float32 op
            return self._integer_sum(node, op_type, attrs, weight, int(zero_points[0]), bias, q_bias, spatial, y), spatial
        if pieces is None:
            log.debug(f"{node.name or y}: integer sums could pass 2^24 even with split weights; "
                      f"the layer runs on dequantized values")
            return None
        centred_x = self._centred(x)
        if len(pieces) == 1:   # one exact float32 op, the bias added inside it
            inputs = [centred_x, self.const(f"{w}__exact_f", pieces[0][1].astype(np.float32))]
            if bias:
                inputs.append(self.const(f"{bias}__exact_f", q_bias.astype(np.float32)))
            out = f"{y}__acc_f"
            if op_type == "MatMul" and bias:
                self.nodes += [helper.make_node("MatMul", inputs[:2], [f"{out}0"], name=f"{out}0_matmul"),
                               helper.make_node("Add", [f"{out}0", inputs[2]], [out], name=f"{out}_bias")]
            else:
                self.nodes.append(helper.make_node(op_type, inputs, [out], name=f"{out}_{op_type.lower()}", **attrs))
            return out, spatial
        parts = []
        for k, (factor, piece) in enumerate(pieces):
            raw, ints = f"{y}__part{k}_exact", f"{y}__part{k}"
            self.nodes += [helper.make_node(op_type, [centred_x, self.const(f"{w}__int{k}", piece.astype(np.float32))],
                                            [raw], name=f"{raw}_{op_type.lower()}", **attrs),
                           helper.make_node("Cast", [raw], [ints], to=onnx.TensorProto.INT32, name=f"{ints}_to_int32")]
            if factor != 1:
                scaled = f"{ints}_x{factor}"
                self.nodes.append(helper.make_node("Mul", [ints, self.const(f"{y}__factor{k}", np.int32(factor))],
                                                   [scaled], name=f"{scaled}_mul"))
                ints = scaled
            parts.append(ints)
        acc = parts[0]
        for k, part in enumerate(parts[1:], 1):
            self.nodes.append(helper.make_node("Add", [acc, part], [f"{y}__acc_sum{k}"], name=f"{y}__acc_sum{k}"))
            acc = f"{y}__acc_sum{k}"
        return self._int32_sum_as_float(acc, bias, q_bias, spatial, y), spatial

    def _integer_sum(self, node: onnx.NodeProto, op_type: str, attrs: dict, weight: np.ndarray, zero_point: int,
                     bias: str | None, q_bias: np.ndarray | None, spatial: tuple[int, ...], y: str) -> str:
        """The integer kernel's sum (u8 × u8, exact whatever its size) plus the int32 bias, as float32."""
        acc = self._integer_accumulator(node, op_type, attrs, weight, zero_point, y)
        return self._int32_sum_as_float(acc, bias, q_bias, spatial, y)

    def _float_sum_int32_bias(self, node: onnx.NodeProto, op_type: str, attrs: dict, centred_w: np.ndarray,
                              bias: str, q_bias: np.ndarray, spatial: tuple[int, ...], y: str) -> str:
        """``Σ (q_x − z_x)·(q_w − z_w)`` by one float32 op (every partial sum below 2^24, so exact),
        as int32, plus the int32 bias, then ``float32(acc)``."""
        raw, ints = f"{y}__sum_exact", f"{y}__acc_int"
        weight = self.const(f"{node.input[1]}__exact_f", centred_w.astype(np.float32))
        self.nodes += [helper.make_node(op_type, [self._centred(node.input[0]), weight], [raw],
                                        name=f"{raw}_{op_type.lower()}", **attrs),
                       helper.make_node("Cast", [raw], [ints], to=onnx.TensorProto.INT32, name=f"{ints}_to_int32")]
        return self._int32_sum_as_float(ints, bias, q_bias, spatial, y)

    def _int32_sum_as_float(self, acc: str, bias: str | None, q_bias: np.ndarray | None, spatial: tuple[int, ...],
                            y: str) -> str:
        """The int32 sum ``acc`` plus the int32 bias, then ``float32(acc)``."""
        if bias:
            b = self.const(f"{bias}__int32", q_bias.astype(np.int32).reshape(-1, *spatial))
            self.nodes.append(helper.make_node("Add", [acc, b], [f"{y}__accb"], name=f"{y}__bias"))
            acc = f"{y}__accb"
        self.nodes.append(helper.make_node("Cast", [acc], [f"{y}__acc_f"], to=onnx.TensorProto.FLOAT,
                                           name=f"{y}__acc_to_float"))
        return f"{y}__acc_f"

    def _integer_accumulator(self, node: onnx.NodeProto, op_type: str, attrs: dict, weight: np.ndarray,
                             zero_point: int, y: str) -> str:
        """``Σ (q_x − z_x)·(q_w − z_w)`` as int32 by ConvInteger / MatMulInteger on uint8 weights."""
        x = node.input[0]
        stored = NUMPY_TYPES[self.params[node.input[1]].dtype]   # int8 or uint8, as the model stores it
        unsigned, zero = _unsigned(weight.astype(stored), np.array([zero_point]))
        _, xz = self.scale_zero(x)
        w_name = self.const(f"{node.input[1]}__u8_{op_type.lower()}", np.ascontiguousarray(unsigned))
        wz = self.const(f"{node.input[1]}__u8_zero", np.asarray(zero[0], np.uint8))
        acc = f"{y}__acc_int"
        integer_op = "ConvInteger" if op_type == "Conv" else "MatMulInteger"   # same attributes as the float op
        self.nodes.append(helper.make_node(integer_op, [self.need_int(x), w_name, xz, wz], [acc],
                                           name=f"{acc}_{integer_op.lower()}", **attrs))
        return acc

    def _centred(self, x: str) -> str:
        """``q_x − z_x`` as float32 (exact): DequantizeLinear with scale 1."""
        name = f"{x}__centred"
        if name not in self._consts:
            self._consts.add(name)
            _, xz = self.scale_zero(x)
            one = self.const(f"{name}_unit", np.float32(1.0))
            self.nodes.append(helper.make_node("DequantizeLinear", [self.need_int(x), one, xz], [name],
                                               name=f"{name}_dequantize", domain=self._qdq_domain(self.params[x].dtype)))
        return name

    def _matmul_integer(self, node: onnx.NodeProto) -> None:
        """``MatMulInteger`` (u8 × u8) of an 8-bit MatMul/Gemm with constant weights, int32 bias, requantized."""
        x, w, y, bias = weighted_io(node)
        weight = numpy_helper.to_array(self.inits[w])
        w_params = self.params[w]
        transposed = node.op_type == "Gemm" and any(a.name == "transB" and a.i for a in node.attribute)
        if transposed:
            weight = weight.T
        columns = weight.shape[1]
        weight, zero = _unsigned(weight, np.resize(w_params.zero_point.ravel(), columns))
        w_name = self.const(f"{w}__u8kn", np.ascontiguousarray(weight))
        wz = self.const(f"{w}__wz", zero)
        multiplier = requant_multiplier(self.params[x].scale.ravel()[0], np.resize(w_params.scale.ravel(), columns),
                                        self.params[y].scale.ravel()[0])
        xs, xz = self.scale_zero(x)
        acc = f"{y}__acc"
        self.nodes.append(helper.make_node("MatMulInteger", [self.need_int(x), w_name, xz, wz], [acc],
                                           name=node.name or acc))
        if bias:
            self.nodes.append(helper.make_node("Add", [acc, bias], [f"{y}__accb"], name=f"{y}__bias"))
            acc = f"{y}__accb"
        self._requantize(acc, multiplier, y)


    def _matmul_integer2(self, node: onnx.NodeProto) -> None:
        """``MatMulInteger`` of two 8-bit activations (per-tensor parameters), requantized."""
        a, b, y = node.input[0], node.input[1], node.output[0]
        multiplier = requant_multiplier(self.params[a].scale.ravel()[0], self.params[b].scale.ravel()[:1],
                                        self.params[y].scale.ravel()[0])[0]
        _, az = self.scale_zero(a)
        _, bz = self.scale_zero(b)
        acc = f"{y}__acc"
        self.nodes.append(helper.make_node("MatMulInteger", [self.need_int(a), self.need_int(b), az, bz], [acc],
                                           name=node.name or acc))
        self._requantize(acc, np.float32(multiplier), y)


    def _requantize(self, acc: str, multiplier: np.ndarray, y: str) -> None:
        """``acc`` (int32, or float32 holding float32(acc)) → ``clamp(rne(float32(acc)·M) + z_y)``."""
        _, yz = self.scale_zero(y)
        one = self.const(f"{y}__one", np.float32(1.0))
        m = self.const(f"{y}__m", np.asarray(multiplier, np.float32))
        source = acc
        if not acc.endswith("__acc_f"):   # int32: to float32 first
            source = f"{acc}_f"
            self.nodes.append(helper.make_node("Cast", [acc], [source], to=onnx.TensorProto.FLOAT, name=f"{acc}_cast"))
        self.nodes += [helper.make_node("Mul", [source, m], [f"{acc}_m"], name=f"{acc}_scale"),
                       helper.make_node("QuantizeLinear", [f"{acc}_m", one, yz], [self.set_int(y)],
                                        name=f"{y}__requantize", domain=self._qdq_domain(self.params[y].dtype))]



def _integer_kernel_is_faster(op_type: str, attrs: dict, weight: np.ndarray) -> bool:
    """Whether onnxruntime's ConvInteger / MatMulInteger (u8 × u8, then int32 bias and a cast) beats
    the float32 op on the centred integers (a DequantizeLinear, then the op with the bias): for
    non-grouped Convs and MatMuls, by 10–40 % on the OCR models' shapes (one thread); grouped Convs
    are ~2.7x faster in float32. Conv inputs with a channel count that is not a multiple of 4 stay
    in float32 (see :meth:`IntegerArithmetic._whole_channel_blocks`)."""
    if op_type == "MatMul":
        return True
    return op_type == "Conv" and attrs.get("group", 1) == 1 and weight.shape[1] % 4 == 0


# Set to False to force the 7-bit halves whatever the runtime (the exactness guard compares both forms).
ALLOW_FULL_RANGE_U8S8 = True


@functools.cache
def _u8s8_probe(depthwise: bool) -> bool:
    """Every probe shape of the kind (non-grouped / depthwise) gives the exact integers."""
    for channels, kernel in (_PROBE_DEPTHWISE if depthwise else _PROBE_SHAPES):
        group = channels if depthwise else 1
        session = make_session(_probe_graph(channels, kernel, group), threads=1)
        got = session.run(None, {"x": np.full((1, channels, _PROBE_SIZE, _PROBE_SIZE), 255, np.uint8)})[0]
        steps = np.rint(255 * 127 * channels // group * kernel * kernel / _PROBE_OUT_SCALE)
        want = np.where(np.arange(_PROBE_OUTPUTS) % 2 == 0, 128 + steps, 128 - steps)
        inside = got[0, :, kernel // 2:_PROBE_SIZE - kernel // 2, kernel // 2:_PROBE_SIZE - kernel // 2]
        if not np.array_equal(inside, np.broadcast_to(want[:, None, None], inside.shape)):
            return False
    return True


# the channel counts and kernels of the lowering's u8 × s8 Convs (an image's 3 channels padded to 4)
_PROBE_OUTPUTS, _PROBE_SIZE = 16, 10
_PROBE_SHAPES = ((4, 3), (64, 1), (64, 3), (512, 1))
_PROBE_DEPTHWISE = ((_PROBE_OUTPUTS, 3), (_PROBE_OUTPUTS, 5))
_PROBE_OUT_SCALE = 1 << 18   # 255·127·512·9/2^18 < 128: no output saturates


def _probe_graph(channels: int, kernel: int, group: int) -> onnx.ModelProto:
    """One QLinearConv u8 × s8, inputs at 255, weights at +127 (even outputs) and −127 (odd ones):
    every pair of products reaches 64 770, past a 16-bit lane."""
    weight = np.empty((_PROBE_OUTPUTS, channels // group, kernel, kernel), np.int8)
    weight[0::2], weight[1::2] = 127, -127
    inits = [numpy_helper.from_array(np.array(1.0, np.float32), "one"),
             numpy_helper.from_array(np.array(0, np.uint8), "x_zero"),
             numpy_helper.from_array(weight, "w"),
             numpy_helper.from_array(np.ones(_PROBE_OUTPUTS, np.float32), "w_scale"),
             numpy_helper.from_array(np.zeros(_PROBE_OUTPUTS, np.int8), "w_zero"),
             numpy_helper.from_array(np.array(_PROBE_OUT_SCALE, np.float32), "y_scale"),
             numpy_helper.from_array(np.array(128, np.uint8), "y_zero")]
    node = helper.make_node("QLinearConv", ["x", "one", "x_zero", "w", "w_scale", "w_zero", "y_scale", "y_zero"],
                            ["y"], pads=[kernel // 2] * 4, group=group)
    x = helper.make_tensor_value_info("x", onnx.TensorProto.UINT8, [1, channels, _PROBE_SIZE, _PROBE_SIZE])
    y = helper.make_tensor_value_info("y", onnx.TensorProto.UINT8, None)
    graph = helper.make_graph([node], "u8s8_probe", [x], [y], inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])


def full_range_u8s8_is_exact(depthwise: bool = False) -> bool:
    """Whether this onnxruntime's u8 × s8 QLinearConv keeps full-range int8 weight sums exact (its
    VNNI/AVX-VNNI and ARM kernels do; AVX2/AVX-512BW ``vpmaddubsw`` saturates pairs in 16 bits): a
    probe of the kernel itself, run once per process, so an emulated CPU is judged by what it runs."""
    return ALLOW_FULL_RANGE_U8S8 and _u8s8_probe(bool(depthwise))


def _seven_bit_halves(weight: np.ndarray) -> np.ndarray:
    """int8 weights ``w`` as ``[w >> 1, w − (w >> 1)]`` along the input channels, both in [−64, 64]:
    with the input read twice, the same sums. Any pair of u8·s8 products is then at most
    2·255·64 = 32640, so kernels that add pairs in 16 bits cannot saturate."""
    high = np.right_shift(weight.astype(np.int16), 1)
    return np.concatenate([high, weight.astype(np.int16) - high], axis=1).astype(np.int8)


# onnxruntime's x86 kernels for uint8 activations × int8 weights add pairs of u8·s8 products in
# 16-bit lanes (AVX2/AVX-512BW vpmaddubsw) and saturate when the weights use the full int8 range,
# while the VNNI and ARM kernels do not: the same model gave different integers on different PCs.
# Non-grouped Convs therefore get 7-bit weight halves (above; ~2x faster than the alternatives) on
# such CPUs, and their full-range weights where the probe found the kernel exact (~3x faster still);
# other integer layers get uint8 weights (+128, zero point +128): u8 × u8 kernels widen to 16 bits
# before multiplying, exact on every CPU, about as fast as float32. s8 × s8 kernels are exact but
# ~5x slower.
_UNSIGNED_ZERO = 128


def _unsigned(weight: np.ndarray, zero_point: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """8-bit weights as uint8 with their zero points: int8 values move up by 128 (same differences)."""
    if weight.dtype == np.uint8:
        return weight, zero_point.astype(np.uint8)
    return ((weight.astype(np.int16) + _UNSIGNED_ZERO).astype(np.uint8),
            (zero_point.astype(np.int16) + _UNSIGNED_ZERO).astype(np.uint8))


_FLOAT32_EXACT = 1 << 24   # every integer of smaller magnitude is a float32


def _exact_float_pieces(weight: np.ndarray, x_reach: int, reduce_axes: tuple[int, ...],
                        bias_abs: np.ndarray | None = None) -> list[tuple[int, np.ndarray]] | None:
    """``[(factor, piece)]`` with ``weight = Σ factor·piece`` and every sum of products of a piece
    with integers of magnitude ≤ ``x_reach`` below 2^24 (so exact in float32), or None. A single
    piece also leaves room for the bias (added inside the float32 op)."""
    def reach(piece: np.ndarray) -> np.ndarray:
        return np.abs(piece).sum(axis=reduce_axes).ravel() * x_reach
    whole = reach(weight) + (bias_abs if bias_abs is not None else 0)
    if whole.max(initial=0) < _FLOAT32_EXACT:
        return [(1, weight)]
    high = np.floor_divide(weight, 16)
    low = weight - 16 * high
    fits = all(reach(p).max(initial=0) < _FLOAT32_EXACT for p in (high, low))
    return [(16, high), (1, low)] if fits else None


def weighted_io(node: onnx.NodeProto) -> tuple[str, str, str, str | None]:
    """(input, weight, output, bias or None) of a Conv/ConvTranspose/MatMul/Gemm."""
    bias = node.input[2] if len(node.input) > 2 and node.input[2] else None
    return node.input[0], node.input[1], node.output[0], bias
