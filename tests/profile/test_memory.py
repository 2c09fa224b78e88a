"""eval_memory: the lifetime-based buffer planner (property test on random DAGs) and the report."""
from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from openrknn.chips import get_chip
from openrknn.errors import ConfigError
from openrknn.profile import MEMORY_PLAN_STRATEGIES, BufferRequest, estimate_memory, format_memory, plan_buffers
from openrknn.profile.memory import human
from openrknn.profile.memory_plan import lifetimes
from openrknn.profile.reference_nets import reference_model


@st.composite
def random_dag(draw):
    """A topologically ordered DAG: node i reads 1-3 earlier tensors and writes 1-2 tensors."""
    n = draw(st.integers(2, 30))
    tensors, steps, sizes = ["in"], [], {"in": 64}
    for i in range(n):
        k = draw(st.integers(1, min(3, len(tensors))))
        ins = draw(st.lists(st.sampled_from(tensors), min_size=1, max_size=k, unique=True))
        outs = [f"t{i}_{j}" for j in range(draw(st.integers(1, 2)))]
        for o in outs:
            sizes[o] = draw(st.integers(0, 5000))
        steps.append((ins, outs))
        tensors.extend(outs)
    return steps, sizes, {steps[-1][1][0]}


@settings(max_examples=150, deadline=None)
@given(random_dag(), st.sampled_from(MEMORY_PLAN_STRATEGIES), st.sampled_from([1, 16, 64]))
def test_planner_never_overlaps_live_buffers(dag, strategy, align):
    steps, sizes, outputs = dag
    reqs = lifetimes(steps, sizes, exclude=outputs)
    plan = plan_buffers(reqs, strategy, align=align)
    assert plan.conflicts() == []
    assert len(plan.placements) == len(reqs)
    naive = sum(-(-r.size // align) * align for r in reqs)
    assert plan.lower_bound <= plan.total <= naive
    # brute-force check of the same property, independent of MemoryPlan.conflicts
    ps = plan.placements
    for i, a in enumerate(ps):
        for b in ps[i + 1:]:
            live_together = a.request.start <= b.request.end and b.request.start <= a.request.end
            bytes_shared = a.offset < b.offset + b.request.size and b.offset < a.offset + a.request.size
            assert not (live_together and bytes_shared and a.request.size and b.request.size)


def test_lifetimes_span_producer_to_last_consumer():
    steps = [(["x"], ["a"]), (["a"], ["b"]), (["b"], ["c"]), (["a", "c"], ["y"])]
    reqs = {r.name: r for r in lifetimes(steps, {"a": 10, "b": 10, "c": 10, "y": 10}, exclude={"y"})}
    assert (reqs["a"].start, reqs["a"].end) == (0, 3)
    assert (reqs["b"].start, reqs["b"].end) == (1, 2)
    assert "y" not in reqs and "x" not in reqs


def test_chain_reuses_memory():
    reqs = [BufferRequest(f"t{i}", 100, i, i + 1) for i in range(10)]
    assert plan_buffers(reqs).total == 200
    assert plan_buffers(reqs, "first_fit").total == 200
    assert plan_buffers(reqs, "naive").total == 1000


def test_unknown_strategy_is_a_config_error():
    with pytest.raises(ConfigError, match="memory_plan_strategy"):
        plan_buffers([], "best")


def test_memory_report_of_mobilenet_v2():
    model = reference_model("mobilenet_v2")
    rep = estimate_memory(model, get_chip("rk3588"))
    naive = estimate_memory(model, get_chip("rk3588"), "naive")
    d = rep.to_dict()
    assert set(d) == {"weight_memory", "internal_memory", "other_memory", "total_memory"}   # seed 002 §3.2.4
    assert d["total_memory"] == d["weight_memory"] + d["internal_memory"] + d["other_memory"]
    assert rep.plan.conflicts() == []
    assert rep.internal_memory < naive.internal_memory / 3
    assert 3.0 * 2**20 < rep.weight_memory < 4.0 * 2**20      # 3.5 M int8 parameters


def test_format_memory_layout():
    text = format_memory(estimate_memory(reference_model("mobilenet_v2"), get_chip("rk3588")))
    lines = text.splitlines()
    assert lines[1].strip() == "Memory Profile Info Dump"
    assert lines[3] == "NPU model memory detail(bytes):"
    for i, key in enumerate(["Weight Memory", "Internal Tensor Memory", "Other Memory", "Total Memory"]):
        assert lines[4 + i].startswith(f"    {key}: ") and lines[4 + i].endswith(("MiB", "KiB", " B"))
    assert lines[-2].startswith("the size of model, current model size is: ")


def test_units():
    assert human(512) == "512 B" and human(2048) == "2.00 KiB" and human(3 * 2**20) == "3.00 MiB"


def test_toolkit1_memory_dict():
    d = estimate_memory(reference_model("mobilenet_v1", "asymmetric_quantized-u8"), get_chip("rk1808")).to_dict()
    assert set(d) == {"system_memory", "npu_memory", "total_memory"}                  # seed 001 §3.6.10
    assert set(d["total_memory"]) == {"maximum_allocation", "total_allocation"}
    assert d["total_memory"]["maximum_allocation"] <= d["total_memory"]["total_allocation"]


def test_memory_plan_strategy_comes_from_the_model():
    model = reference_model("resnet50")
    chip = get_chip("rk3566")
    default = estimate_memory(model, chip)
    model.metadata["memory_plan_strategy"] = "naive"
    naive = estimate_memory(model, chip)
    assert naive.plan.strategy == "naive" and default.plan.strategy == "greedy_by_size"
    assert naive.internal_memory > 3 * default.internal_memory
    assert naive.weight_memory == default.weight_memory and naive.other_memory == default.other_memory
    assert estimate_memory(model, chip, "first_fit").plan.strategy == "first_fit"     # explicit argument wins
    model.metadata["memory_plan_strategy"] = "largest_first"
    with pytest.raises(ConfigError, match="memory_plan_strategy"):
        estimate_memory(model, chip)
