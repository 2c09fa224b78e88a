"""``eval_memory`` on the simulator: weight, internal-tensor (after buffer reuse), other and total memory.

::

    Weight Memory          = Σ_const align_w(bytes)   conv weights with Cout/Cin padded to the chip alignment
    Internal Tensor Memory = arena size of plan_buffers(internal tensors, strategy)   (NC1HWC2 sizes)
    Other Memory           = inputs + outputs + regcmd_bytes_per_task · NPU layers + runtime_bytes
    Total Memory           = Weight + Internal + Other
    model size             = Weight + regcmd · NPU layers + model_header_bytes
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from openrknn.chips import Chip
from openrknn.graph.rknn_model import RKNNModel
from openrknn.profile.cost_model import ceil_to, compute_dtype, tensor_bytes
from openrknn.profile.cost_table import BYTES_PER_ELEMENT, CostTable, cost_table
from openrknn.profile.layers import Layer, build_layers
from openrknn.profile.memory_plan import DEFAULT_MEMORY_PLAN_STRATEGY, MemoryPlan, lifetimes, plan_buffers
from openrknn.profile.perf import extra_batch


@dataclass
class MemoryReport:
    """Result of :func:`estimate_memory` (bytes)."""

    chip: str
    toolkit: int
    weight_memory: int
    internal_memory: int
    other_memory: int
    model_size: int
    plan: MemoryPlan

    @property
    def total_memory(self) -> int:
        return self.weight_memory + self.internal_memory + self.other_memory

    def to_dict(self) -> dict[str, Any]:
        """The documented result dict, in bytes.

        Toolkit2 (seed 002 §3.2.4 / API reference): ``{'weight_memory', 'internal_memory',
        'other_memory', 'total_memory'}``. Toolkit1 (seed 001 §3.6.10): ``{'system_memory' |
        'npu_memory' | 'total_memory': {'maximum_allocation', 'total_allocation'}}``, where the peak
        is the planned total and the accumulated allocation counts every internal buffer once (no
        reuse); the simulator has no host-side ("system") allocations of its own, so those are 0.
        """
        if self.toolkit == 1:
            naive = sum(p.request.size for p in self.plan.placements)
            npu = {"maximum_allocation": self.total_memory,
                   "total_allocation": self.weight_memory + naive + self.other_memory}
            return {"system_memory": {"maximum_allocation": 0, "total_allocation": 0}, "npu_memory": npu,
                    "total_memory": dict(npu)}
        return {"weight_memory": self.weight_memory, "internal_memory": self.internal_memory,
                "other_memory": self.other_memory, "total_memory": self.total_memory}


def human(n: float) -> str:
    """Bytes as the real tool prints them: ``B`` below 1 KiB, else ``KiB``/``MiB`` with 2 decimals."""
    if n < 1024:
        return f"{int(n)} B"
    if n < 1024 * 1024:
        return f"{n / 1024:.2f} KiB"
    return f"{n / (1024 * 1024):.2f} MiB"


def format_memory(report: MemoryReport) -> str:
    """The "Memory Profile Info Dump" of seed 002 §3.2.4 (Toolkit1: seed 001 §3.6.10's total lines).

    Example:
        >>> from openrknn.chips import get_chip
        >>> from openrknn.profile.reference_nets import reference_model
        >>> print(format_memory(estimate_memory(reference_model("mobilenet_v2"), get_chip("rk3588"))))  # doctest: +ELLIPSIS
        ======================================================
                    Memory Profile Info Dump
        ...
    """
    if report.toolkit == 1:
        d = report.to_dict()["total_memory"]
        body = ["Total memory:", f"    maximum allocation: {human(d['maximum_allocation'])}",
                f"    total allocation: {human(d['total_allocation'])}"]
        return _dump(body, report.model_size)
    return memory_dump_text(report.weight_memory, report.internal_memory, report.other_memory, report.model_size)


def memory_dump_text(weight: int, internal: int, other: int, model_size: int) -> str:
    """The Toolkit2 dump from its four figures (bytes); also used for librknnrt's RKNN_QUERY_MEM_SIZE."""
    return _dump(["NPU model memory detail(bytes):", f"    Weight Memory: {human(weight)}",
                  f"    Internal Tensor Memory: {human(internal)}", f"    Other Memory: {human(other)}",
                  f"    Total Memory: {human(weight + internal + other)}"], model_size)


def _dump(body: list[str], model_size: int) -> str:
    bar = "=" * 54
    return "\n".join([bar, "            Memory Profile Info Dump", bar, *body, "",
                      "INFO: When evaluating memory usage, we need consider",
                      f"the size of model, current model size is: {human(model_size)}", bar])


def _weight_bytes(layer: Layer, cost: CostTable, seen: set[str]) -> int:
    total = 0
    geo = layer.conv
    for t in layer.inputs:
        if not t.const or t.name in seen:
            continue
        seen.add(t.name)
        size = BYTES_PER_ELEMENT.get(t.dtype, 1)
        if geo is not None and len(t.shape) >= 2 and cost.toolkit == 2:
            a = cost.alignment(compute_dtype(layer))
            rest = t.elements // max(t.shape[0] * t.shape[1], 1)
            if geo.depthwise:
                n = ceil_to(t.shape[0], a.depthwise) * t.shape[1] * rest
            else:
                n = ceil_to(t.shape[0], a.conv_out) * ceil_to(t.shape[1], a.conv_in) * rest
            nbytes = n * size
        elif geo is not None and len(t.shape) <= 1:
            nbytes = t.elements * 4                              # bias: int32 / float32
        else:
            nbytes = t.elements * size
        total += ceil_to(int(round(nbytes)), cost.memory.weight_align)
    return total


def internal_plan(layers: list[Layer], cost: CostTable, strategy: str) -> MemoryPlan:
    """Plan the internal tensors (every layer output except graph inputs/outputs)."""
    io = {t.name for layer in layers if layer.kind in ("input", "output") for t in layer.inputs + layer.outputs}
    sizes: dict[str, int] = {}
    steps = []
    for layer in layers:
        if layer.kind in ("input", "output"):
            continue
        for t in layer.outputs:
            sizes[t.name] = int(tensor_bytes(t, cost))
        steps.append(([t.name for t in layer.inputs if not t.const], [t.name for t in layer.outputs]))
    return plan_buffers(lifetimes(steps, sizes, exclude=io), strategy, align=cost.memory.tensor_align)


def estimate_memory(model: RKNNModel, chip: Chip, strategy: str | None = None) -> MemoryReport:
    """Estimate the NPU memory ``model`` needs on ``chip``.

    Args:
        model: a built model.
        chip: target platform.
        strategy: ``memory_plan_strategy`` for internal tensors: ``greedy_by_size``, ``first_fit`` or
            ``naive`` (no reuse); see :mod:`openrknn.profile.memory_plan`. ``None`` takes the
            strategy the model was built with (``model.metadata['memory_plan_strategy']``), else
            ``greedy_by_size``.

    Example:
        >>> from openrknn.chips import get_chip
        >>> from openrknn.profile.reference_nets import reference_model
        >>> r = estimate_memory(reference_model("mobilenet_v2"), get_chip("rk3588"))
        >>> r.total_memory == r.weight_memory + r.internal_memory + r.other_memory
        True
    """
    cost = cost_table(chip)
    strategy = strategy or (model.metadata or {}).get("memory_plan_strategy") or DEFAULT_MEMORY_PLAN_STRATEGY
    layers = build_layers(model, cost, float_on_npu=chip.float_on_npu)
    seen: set[str] = set()
    weights = sum(_weight_bytes(layer, cost, seen) for layer in layers)
    plan = internal_plan(layers, cost, strategy)
    batch = extra_batch(model, layers)
    io_bytes = sum(t.elements * BYTES_PER_ELEMENT.get(t.dtype, 2)
                   for layer in layers if layer.kind in ("input", "output") for t in layer.inputs + layer.outputs)
    npu_layers = sum(1 for layer in layers if layer.target == "NPU")
    regcmd = npu_layers * cost.memory.regcmd_bytes_per_task
    other = int(io_bytes * batch) + regcmd + cost.memory.runtime_bytes
    return MemoryReport(chip.name, chip.toolkit, weights, plan.total * batch, other,
                        weights + regcmd + cost.memory.model_header_bytes, plan)
