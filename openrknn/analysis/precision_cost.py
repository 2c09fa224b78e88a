"""What raising a layer's precision costs in estimated speed, and which precisions a chip offers.

The cost of running layer L at precision p is read from the cost model (``openrknn.profile``
``estimate_perf``) for the target chip: the model with EVERY quantized layer at p is estimated
once, and L's cost is its rows' time there minus its rows' time in the plain 8-bit model. One
estimate per precision gives every layer's cost; the search then treats costs as additive, and
the build it returns is estimated again as a whole.
"""
from __future__ import annotations

from collections.abc import Iterable

from openrknn.chips import Chip
from openrknn.graph import npu_layers
from openrknn.graph.rknn_model import RKNNModel
from openrknn.profile import estimate_perf
from openrknn.quant.settings import DTYPES

# Quantized dtypes with 16-bit activations (quant/settings' table): int16, or float16 over int8 weights
# (w8a16). A chip listing one runs 16-bit layers on its NPU, so a layer may be raised to int16 there.
SIXTEEN_BIT_DTYPES = frozenset(name for name, spec in DTYPES.items()
                               if spec.act_dtype == "int16" or (spec.act_dtype is None and spec.weight_dtype == "int8"))

# What int16 leaves of a layer's int8 output error: quantization noise power scales with the
# square of the step, and a 16-bit step over the same range is 255/65535 of an 8-bit one.
INT16_RESIDUAL = (255.0 / 65535.0) ** 2


def chip_precisions(chip: Chip) -> tuple[str, ...]:
    """The precisions a layer of an 8-bit model can be raised to on ``chip``: float16 where the NPU
    runs float (elsewhere a float16 layer falls back to the CPU), int16 where the chip lists a
    16-bit-activation dtype (``quantized_dtypes`` in ``chips/data``). Never empty."""
    out = []
    if chip.float_on_npu:
        out.append("float16")
    if SIXTEEN_BIT_DTYPES & set(chip.quantized_dtypes) or not out:
        out.append("int16")
    return tuple(out)


def layer_times(model: RKNNModel, chip: Chip, layers: Iterable[str] | None = None) -> dict[str, float]:
    """NPU layer name (``graph.npu_layers``) → estimated µs on ``chip``: the ``estimate_perf`` rows
    whose node belongs to the layer, summed. ``layers``: keep only these."""
    group_of = {node.name: group.name for group in npu_layers.layer_groups(model.graph.graph) for node in group.nodes}
    wanted = None if layers is None else set(layers)
    times: dict[str, float] = {}
    for row in estimate_perf(model, chip).layers:
        group = group_of.get(row.name)
        if group is not None and (wanted is None or group in wanted):
            times[group] = times.get(group, 0.0) + row.time_us
    return times


def total_time_us(model: RKNNModel, chip: Chip) -> float:
    """Estimated inference time of ``model`` on ``chip`` (µs)."""
    return float(estimate_perf(model, chip).total_time_us)


def fps(time_us: float) -> float:
    """Frames per second of an inference time in µs (0 for a zero time)."""
    return 1e6 / time_us if time_us > 0 else 0.0
