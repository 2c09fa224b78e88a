"""What raising a layer's precision costs in estimated speed, and which precisions a chip offers.

The cost of running layer L at precision p is read from the cost model (``openrknn.profile``
``estimate_perf``) for the target chip: the model with EVERY quantized layer at p is estimated
once, and a layer's extra time is its rows' time there minus its rows' time in the plain 8-bit
model. Raising L also changes what the layers READING its output are charged: the cost model
prices a layer by the dtype of the tensor it reads (the NPU converts, or runs the reader in that
precision), so an 8-bit head after a float16 Concat costs float16 time. :class:`MoveCosts` counts
that: a set of moves costs the extra time of every layer it raises AND of every layer reading
one of them (a layer counted once). A single move costs its own extra time plus its readers'.
On the PP-OCRv3 detector (rk3588) this predicts a 61-move choice at 16600 µs where the cost model
gives 16781 µs; adding the moves' own costs predicted 15187 µs (their Concat_0 costs 58 µs alone,
about 1000 µs with the head that reads it). The build the search returns is estimated again as a whole.
"""
from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

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


def layer_readers(model: RKNNModel) -> dict[str, set[str]]:
    """NPU layer name → the layers reading one of its output tensors (``graph.npu_layers``)."""
    groups = npu_layers.layer_groups(model.graph.graph)
    layer_of = {o: group.name for group in groups for node in group.nodes for o in node.output if o}
    readers: dict[str, set[str]] = {}
    for group in groups:
        for node in group.nodes:
            for tensor in node.input:
                source = layer_of.get(tensor)
                if source is not None and source != group.name:
                    readers.setdefault(source, set()).add(group.name)
    return readers


@dataclass
class MoveCosts:
    """Estimated extra time of sets of moves on one chip (see module doc): ``extra[p][L]`` is
    layer L's time with every layer at precision p minus its time in the plain model."""

    base_time_us: float
    extra: dict[str, dict[str, float]] = field(default_factory=dict)
    readers: dict[str, set[str]] = field(default_factory=dict)

    @classmethod
    def measure(cls, plain: RKNNModel, raised: dict[str, RKNNModel], chip: Chip) -> "MoveCosts":
        """From the plain model and, per precision, the model with every layer raised to it."""
        before = layer_times(plain, chip)
        extra = {precision: {layer: time - before.get(layer, 0.0) for layer, time in layer_times(model, chip).items()}
                 for precision, model in raised.items()}
        return cls(total_time_us(plain, chip), extra, layer_readers(plain))

    def affected(self, moves: Sequence[tuple[str, str]]) -> dict[str, str]:
        """Layer → the precision it is charged at: the moved layers, then the layers reading one of
        them (at the precision of the first moved layer they read)."""
        charged = dict(moves)
        for layer, precision in moves:
            for reader in sorted(self.readers.get(layer, ())):
                charged.setdefault(reader, precision)
        return charged

    def set_cost_us(self, moves: Sequence[tuple[str, str]]) -> float:
        """Estimated extra time of applying ``moves`` ((layer, precision) pairs) together."""
        return float(sum(self.extra.get(precision, {}).get(layer, 0.0)
                         for layer, precision in self.affected(moves).items()))

    def move_cost_us(self, layer: str, precision: str) -> float:
        """Estimated extra time of raising ``layer`` alone: its own and its readers'."""
        return self.set_cost_us([(layer, precision)])

    def time_us(self, moves: Sequence[tuple[str, str]]) -> float:
        """Estimated inference time with ``moves`` applied."""
        return self.base_time_us + self.set_cost_us(moves)
