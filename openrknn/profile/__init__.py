"""Performance and memory estimation on the simulator (``eval_perf`` / ``eval_memory``) for every chip.

A per-platform cost model: chips are data (``openrknn/chips/data/*.yaml``, ``cost:`` section) and
``docs/performance-model.md`` gives every formula and constant with its source.
"""
from __future__ import annotations

from openrknn.profile.memory import MemoryReport, estimate_memory, format_memory
from openrknn.profile.memory_plan import MEMORY_PLAN_STRATEGIES, BufferRequest, MemoryPlan, plan_buffers
from openrknn.profile.perf import LayerPerf, PerfReport, estimate_perf
from openrknn.profile.perf_format import format_perf

__all__ = [
    "estimate_perf", "format_perf", "PerfReport", "LayerPerf", "estimate_memory", "format_memory", "MemoryReport",
    "plan_buffers", "BufferRequest", "MemoryPlan", "MEMORY_PLAN_STRATEGIES",
]
