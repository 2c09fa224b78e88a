"""Lifetime-based buffer allocation for internal tensors (``memory_plan_strategy``).

Every internal tensor is a :class:`BufferRequest` live over the closed step interval
``[start, end]`` (producer layer to last consumer layer, in topological order). A plan gives each
request a byte offset in one arena so that two requests whose intervals intersect never share a
byte; the arena size is ``max(offset + size)``. Strategies:

* ``greedy_by_size`` (default): largest buffers first; each goes into the smallest gap between
  the already placed buffers it is live with (best fit), else above them. Near the lower bound
  ``max_t Σ_{live at t} size`` on CNNs.
* ``first_fit``: buffers in creation order, each at the lowest offset where it fits.
* ``naive``: no reuse, every buffer has its own range (the upper bound ``Σ size``).
"""
from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

from openrknn.errors import ConfigError

MEMORY_PLAN_STRATEGIES = ("greedy_by_size", "first_fit", "naive")
DEFAULT_MEMORY_PLAN_STRATEGY = "greedy_by_size"


@dataclass(frozen=True)
class BufferRequest:
    """A tensor of ``size`` bytes live from step ``start`` to step ``end`` (inclusive)."""

    name: str
    size: int
    start: int
    end: int

    def overlaps_in_time(self, other: "BufferRequest") -> bool:
        return self.start <= other.end and other.start <= self.end


@dataclass(frozen=True)
class Placement:
    """A request and the offset it was given."""

    request: BufferRequest
    offset: int

    @property
    def stop(self) -> int:
        return self.offset + self.request.size


@dataclass
class MemoryPlan:
    """Offsets of every internal buffer in one arena."""

    strategy: str
    placements: list[Placement]

    @property
    def total(self) -> int:
        return max((p.stop for p in self.placements), default=0)

    @property
    def lower_bound(self) -> int:
        """Largest sum of sizes live at one step: no plan can use less."""
        steps = {s for p in self.placements for s in (p.request.start, p.request.end)}
        return max((sum(p.request.size for p in self.placements if p.request.start <= t <= p.request.end)
                    for t in steps), default=0)

    def conflicts(self) -> list[tuple[str, str]]:
        """Pairs of buffers live at the same time whose byte ranges intersect (empty for a valid plan)."""
        bad = []
        ps = sorted(self.placements, key=lambda p: p.offset)
        for i, a in enumerate(ps):
            for b in ps[i + 1:]:
                if b.offset >= a.stop:
                    break
                if a.request.size and b.request.size and a.request.overlaps_in_time(b.request):
                    bad.append((a.request.name, b.request.name))
        return bad

    def offsets(self) -> dict[str, int]:
        return {p.request.name: p.offset for p in self.placements}


def _align(n: int, a: int) -> int:
    return -(-n // a) * a if a > 1 else n


def _place(req: BufferRequest, placed: list[Placement], best_fit: bool) -> int:
    """Lowest (first fit) or tightest (best fit) gap among time-overlapping placed buffers."""
    live = sorted((p for p in placed if p.request.overlaps_in_time(req)), key=lambda p: p.offset)
    cursor, best, best_gap = 0, None, None
    for p in live:
        gap = p.offset - cursor
        if gap >= req.size:
            if not best_fit:
                return cursor
            if best_gap is None or gap < best_gap:
                best, best_gap = cursor, gap
        cursor = max(cursor, p.stop)
    return cursor if best is None else best


def plan_buffers(requests: Iterable[BufferRequest], strategy: str = DEFAULT_MEMORY_PLAN_STRATEGY,
                 align: int = 1) -> MemoryPlan:
    """Assign offsets to ``requests`` (sizes rounded up to ``align`` bytes).

    Example:
        >>> reqs = [BufferRequest("a", 100, 0, 1), BufferRequest("b", 50, 1, 2), BufferRequest("c", 100, 2, 3)]
        >>> plan = plan_buffers(reqs)
        >>> plan.total, plan.conflicts()
        (150, [])
    """
    if strategy not in MEMORY_PLAN_STRATEGIES:
        raise ConfigError(f"memory_plan_strategy '{strategy}' is not supported; choose one of "
                          f"{list(MEMORY_PLAN_STRATEGIES)}")
    reqs = [BufferRequest(r.name, _align(int(r.size), align), r.start, r.end) for r in requests]
    placed: list[Placement] = []
    if strategy == "naive":
        offset = 0
        for r in reqs:
            placed.append(Placement(r, offset))
            offset += r.size
        return MemoryPlan(strategy, placed)
    if strategy == "greedy_by_size":
        order = sorted(reqs, key=lambda r: (-r.size, r.start, r.name))
    else:
        order = sorted(reqs, key=lambda r: (r.start, -r.size, r.name))
    for r in order:
        placed.append(Placement(r, _place(r, placed, best_fit=strategy == "greedy_by_size")))
    return MemoryPlan(strategy, placed)


def lifetimes(steps: Sequence[tuple[Sequence[str], Sequence[str]]], sizes: Mapping[str, int],
              exclude: Iterable[str] = ()) -> list[BufferRequest]:
    """Buffer requests from a topologically ordered list of ``(inputs, outputs)`` steps.

    A tensor lives from the step that produces it to the last step that reads it; tensors never
    produced (graph inputs, constants) and the ``exclude`` names (graph outputs) get no request.
    """
    skip = set(exclude)
    start: dict[str, int] = {}
    end: dict[str, int] = {}
    for i, (ins, outs) in enumerate(steps):
        for t in outs:
            if t not in skip and t in sizes:
                start.setdefault(t, i)
                end[t] = max(end.get(t, i), i)
        for t in ins:
            if t in start:
                end[t] = max(end[t], i)
    return [BufferRequest(t, int(sizes[t]), start[t], end[t]) for t in start]
