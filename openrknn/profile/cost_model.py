"""Per-layer cost: NPU cycles, DDR cycles, time, MAC usage, bytes moved, per-core work load.

For an NPU layer on a chip with cost table ``T`` (all per NPU core, see ``docs/performance-model.md``)::

    padded MACs  = rows · kh · kw · ⌈Cin⌉_a_in · ⌈Cout⌉_a_out · groups        (conv / FC / MatMul)
                 = rows · kh · kw · ⌈C⌉_a_dw                                     (depthwise)
    NPUCycles    = padded MACs / (MACs per cycle[dtype] · mac_efficiency)     (0 for ops without MACs)
    RW bytes     = Σ input tensors + weights + Σ output tensors     (4-D activations in NC1HWC2, C padded to C2)
    DDRCycles    = RW bytes · f_le / (DDR bytes per NPU cycle · ddr_efficiency)
    MaxCycles    = max(NPUCycles, DDRCycles)
    Time(us)     = (MaxCycles + ddr_overlap_loss · min(NPUCycles, DDRCycles)
                    + LUT elements · activation_cycles_per_element) / f_npu[MHz] + layer_overhead_us
    MacUsage(%)  = 100 · MACs / (Time · f_npu · MACs per cycle[dtype] · cores used)

where ``⌈x⌉_a`` rounds ``x`` up to a multiple of the chip's channel alignment ``a`` (seed 002
tables 8-1…8-4) and ``f_le`` is ``low_efficiency_factor`` for the ops of table 8-5 (1 otherwise).
CPU layers cost ``op_overhead + elements / elements_per_us + MACs / macs_per_us``.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

from openrknn.profile.cost_table import BYTES_PER_ELEMENT, CostTable
from openrknn.profile.layers import Layer, TensorInfo

# Seed 002 §5.3.2: ops the driver splits across cores (DepthwiseConvolution = depthwise Conv).
_SPLIT_KINDS = {"conv", "depthwise"}


@dataclass(frozen=True)
class LayerCost:
    """Cost of one layer (cycles are NPU clock cycles)."""

    ddr_cycles: float
    npu_cycles: float
    time_us: float
    rw_bytes: float
    mac_usage: float | None       # percent, conv-like NPU layers only
    workload: tuple[float, ...]   # fraction of the layer's work on each core of the chip

    @property
    def max_cycles(self) -> float:
        return max(self.ddr_cycles, self.npu_cycles)


def ceil_to(x: int, a: int) -> int:
    """``x`` rounded up to a multiple of ``a``."""
    return int(math.ceil(x / a) * a) if a > 1 else int(x)


def tensor_bytes(t: TensorInfo, cost: CostTable, native: bool = True) -> float:
    """Bytes of ``t`` in DDR; 4-D activations are stored NC1HWC2 on Toolkit2 chips (seed 002 §5.1)."""
    size = BYTES_PER_ELEMENT.get(t.dtype, 2)
    if native and not t.const and len(t.shape) == 4 and cost.toolkit == 2:
        n, c, h, w = t.shape
        return n * ceil_to(c, cost.channel_block(t.dtype)) * h * w * size
    return t.elements * size


def compute_dtype(layer: Layer) -> str:
    """The MAC rate class of a layer: the widest of its activation and weight dtypes."""
    dtypes = {t.dtype for t in layer.inputs}
    for d in ("float32", "float16", "bfloat16"):
        if d in dtypes:
            return "float16"
    return "int16" if ({"int16", "uint16"} & dtypes) else "int8"


def padded_macs(layer: Layer, cost: CostTable) -> float:
    """MACs the array executes, with channels padded to the chip's alignment."""
    geo = layer.conv
    if geo is None:
        return 0.0
    a = cost.alignment(compute_dtype(layer))
    rows = geo.rows
    if geo.width > 0 and cost.width_align > 1 and layer.kind != "fc":     # output-row tiles of spatial convs
        rows = geo.rows // geo.width * ceil_to(geo.width, cost.width_align)
    if geo.depthwise:
        return float(rows * geo.kh * geo.kw * ceil_to(geo.groups * geo.cout, a.depthwise))
    return float(rows * geo.kh * geo.kw * ceil_to(geo.cin, a.conv_in) * ceil_to(geo.cout, a.conv_out) * geo.groups)


def _weight_bytes(layer: Layer, cost: CostTable) -> float:
    """Bytes of the layer's constants (weights; a conv bias is int32 / float32)."""
    total = 0.0
    for t in layer.inputs:
        if t.const:
            total += t.elements * 4 if len(t.shape) <= 1 and layer.conv is not None else tensor_bytes(t, cost, False)
    return total


def _rw_bytes(layer: Layer, cost: CostTable, graph_inputs: set[str]) -> float:
    """Bytes moved: activations in and out, and the weights read ``weight_reads`` times."""
    total = _weight_bytes(layer, cost) * cost.weight_reads
    for t in layer.inputs + layer.outputs:
        if not t.const:
            total += tensor_bytes(t, cost, native=t.name not in graph_inputs)
    return total


def _npu_cycles(layer: Layer, cost: CostTable) -> float:
    """MAC-array cycles; 0 for layers without MACs, which the tables also print as 0 (seed 002 §8.2.4:
    "NPU Cycles are currently reported mainly for Conv") and which are bound by DDR traffic."""
    if layer.conv is None:
        return 0.0
    rate = cost.macs(compute_dtype(layer), depthwise=layer.conv.depthwise)
    return padded_macs(layer, cost) / (rate * cost.mac_efficiency)


def cpu_time_us(layer: Layer, cost: CostTable) -> float:
    """Time of a layer the board CPU runs (fallback ops, input/output operators)."""
    cpu = cost.cpu
    if layer.kind in ("input", "output"):
        nbytes = sum(t.elements * BYTES_PER_ELEMENT.get(t.dtype, 2) for t in layer.inputs + layer.outputs)
        return cpu.op_overhead_us + nbytes / cpu.copy_bytes_per_us
    elements = sum(t.elements for t in layer.inputs + layer.outputs if not t.const)
    return cpu.op_overhead_us + elements / cpu.elements_per_us + layer.macs / cpu.macs_per_us


def _split(layer: Layer, cost: CostTable, cores: tuple[int, ...], single_cycles: float) -> int:
    """How many cores share this layer (seed 002 §5.3.2: only the listed ops, above a granularity)."""
    if len(cores) <= 1 or single_cycles < cost.min_split_cycles:
        return 1
    if layer.kind in _SPLIT_KINDS or layer.onnx_op in cost.split_ops:
        return len(cores)
    return 1


# Activations the NPU evaluates through its lookup table (one extra pass over the output), unlike the
# saturating and piecewise-linear ones (Relu, Clip, LeakyRelu, PRelu) the convolution output stage applies.
# Matched on the printed OpType's ending (``ConvExSwish``, ``ConvSigmoid``, ``HardSwish``, ...).
_LUT_ACTIVATIONS = ("Swish", "Sigmoid", "Tanh", "HardSwish", "HardSigmoid", "Gelu", "Mish", "Elu", "Selu",
                    "Softplus")


def lut_elements(layer: Layer) -> float:
    """Output elements of a layer whose activation goes through the NPU's lookup table (0 otherwise)."""
    if layer.target != "NPU" or not layer.op_type.endswith(_LUT_ACTIVATIONS):
        return 0.0
    return float(sum(t.elements for t in layer.outputs))


@dataclass(frozen=True)
class LayerFeatures:
    """What the cost of one single-core NPU layer depends on, before the chip's fitted constants apply
    (``bench/perf_fit.py`` caches these per layer and fits the constants on them)."""

    padded_macs: float      # MACs the array executes (0 for layers without MACs)
    depthwise: bool
    rate_class: str         # 'int8' / 'int16' / 'float16': the MAC rate row
    rw_bytes: float         # bytes read and written in DDR (weights read ``weight_reads`` times)
    weight_bytes: float     # ... of which the weights, read once
    low_efficiency: bool    # an op of table 8-5, alone
    lut_elements: float     # output elements through the activation lookup table


def layer_features(layer: Layer, cost: CostTable, graph_inputs: set[str] | None = None) -> LayerFeatures:
    """The :class:`LayerFeatures` of an NPU layer."""
    macs = padded_macs(layer, cost) if layer.conv is not None else 0.0
    return LayerFeatures(macs, bool(layer.conv is not None and layer.conv.depthwise),
                         cost.rate(compute_dtype(layer)), _rw_bytes(layer, cost, graph_inputs or set()),
                         _weight_bytes(layer, cost), bool(layer.low_efficiency), lut_elements(layer))


def layer_cost(layer: Layer, cost: CostTable, cores: tuple[int, ...] = (0,),
               graph_inputs: set[str] | None = None) -> LayerCost:
    """Cost of ``layer`` when the cores in ``cores`` (indices) are enabled.

    Example:
        >>> from openrknn.chips import get_chip
        >>> from openrknn.profile.cost_table import cost_table
        >>> from openrknn.profile.layers import ConvGeometry, Layer, TensorInfo
        >>> t = cost_table(get_chip("rk3588"))
        >>> conv = Layer("Conv", "Conv", "c", "conv", "NPU", "int8",
        ...              [TensorInfo("x", (1, 64, 56, 56), "int8")], [TensorInfo("y", (1, 64, 56, 56), "int8")],
        ...              ConvGeometry(56 * 56, 3, 3, 64, 64, 1))
        >>> layer_cost(conv, t).npu_cycles > 0
        True
    """
    idle = tuple(0.0 for _ in range(max(cost.cores, 1)))
    if layer.target != "NPU":
        load = list(idle)
        load[cores[0]] = 1.0 if layer.kind not in ("input", "output") else 0.0
        return LayerCost(0.0, 0.0, cpu_time_us(layer, cost), 0.0, None, tuple(load))
    factor = 1.0
    if layer.low_efficiency:
        factor = cost.concat_factor if layer.onnx_op == "Concat" and cost.concat_factor else cost.low_efficiency_factor
    rw = _rw_bytes(layer, cost, graph_inputs or set())
    ddr = rw * factor / (cost.ddr_bytes_per_npu_cycle * cost.ddr_efficiency)
    npu = _npu_cycles(layer, cost) * factor
    n = _split(layer, cost, cores, max(ddr, npu))
    load = list(idle)
    for c in cores[:n]:
        load[c] = 1.0 / n
    if n > 1:
        npu /= n
        ddr /= min(float(n), 1.0 / cost.ddr_efficiency)    # more ports, same DDR: at most its peak
    lut = lut_elements(layer) * cost.activation_cycles_per_element / n
    time = (max(ddr, npu) + cost.ddr_overlap_loss * min(ddr, npu) + lut) / cost.npu_freq_mhz + cost.layer_overhead_us
    usage = None
    if layer.conv is not None and layer.macs:
        peak = cost.macs(compute_dtype(layer), depthwise=False) * n
        usage = 100.0 * layer.macs / (time * cost.npu_freq_mhz * peak)
    return LayerCost(ddr, npu, time, rw, usage, tuple(load))
