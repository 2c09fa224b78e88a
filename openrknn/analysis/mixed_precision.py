"""Choosing which layers to keep in float16: the hybrid proposal and ``build(auto_hybrid=True)``.

Sensitivity: accuracy analysis in ``single`` mode gives, per layer, the cosine of its output when
it alone is quantized (golden inputs). Layers are ranked by that cosine, lowest first.

Automatic mixed precision ranks layers by what their quantization costs at the OUTPUT instead
(:func:`openrknn.quant.sensitivity.output_sensitivity`: each layer's quantization points switched
on alone in one gated float session), then every other layer that stores a quantized tensor
follows in graph order — so the whole-model float16 build is the last prefix, and any threshold it
meets is met. It looks for the shortest prefix of that ranking which, kept in float16,
makes every model output meet the thresholds on the calibration samples (cosine ≥
``auto_hybrid_cos_thresh`` on each sample — for outputs of fewer than 16 values, on the values of
all samples stacked, since the cosine of a single score is always ±1 — and, when given,
euclidean distance ≤ ``auto_hybrid_euc_thresh``):
a doubling search then a bisection (about 2·log2(n) quantize-and-run trials for n layers), then a
pruning pass that returns every chosen layer the thresholds do not need. Each trial re-quantizes
with the same samples (deterministic result) and shares one calibration cache: the prepared graph
and the statistics of tensors already seen are not recomputed.
"""
from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np

from openrknn import log
from openrknn.analysis.accuracy import analyse, cosine, euclidean
from openrknn.graph import npu_layers
from openrknn.graph.rknn_model import RKNNModel
from openrknn.graph.custom_ops import CustomOpRegistry
from openrknn.quant import QuantSettings, quantize_model
from openrknn.quant.hybrid import float_record
from openrknn.quant.calibrate import CalibrationCache
from openrknn.quant.overrides import QuantOverrides
from openrknn.quant.sensitivity import output_sensitivity
from openrknn.sim.session import GraphRunner, lower

_EVAL_SAMPLES = 4      # calibration samples the output check runs on
_MAX_PRUNE = 16        # chosen layers the pruning pass re-checks one by one
_SMALL_OUTPUT = 16     # outputs with fewer values are compared stacked over the samples (a score, a flag)


@dataclass
class MixedPrecisionResult:
    """What automatic mixed precision decided."""

    model: RKNNModel
    float_layers: list[str] = field(default_factory=list)   # the layers moved to ``precision``
    precision: str = "float16"
    output_cosine: list[float] = field(default_factory=list)
    met: bool = True
    trials: int = 0


def layer_sensitivity(quantized: RKNNModel, samples: Sequence[Sequence[np.ndarray]],
                      custom_ops: CustomOpRegistry | None = None) -> list[tuple[str, float]]:
    """(layer name, mean single-mode cosine) of every quantized layer, most damaged first; layers
    whose tensors have no single-mode row follow (NaN), in graph order, so every layer that stores a
    quantized tensor is ranked."""
    names = [spec.name for spec in quantized.inputs]
    producers = _layer_of_tensor(quantized)
    scores: dict[str, list[float]] = {}
    for sample in samples:
        result = analyse(quantized, dict(zip(names, sample)), custom_ops)
        for row in result.rows:
            layer = producers.get(row.tensor)
            if layer and row.single_cos is not None and row.tensor in quantized.quant_params:
                scores.setdefault(layer, []).append(row.single_cos)
    ranked = sorted(((layer, float(np.nanmean(values))) for layer, values in scores.items()),
                    key=lambda item: (np.nan_to_num(item[1], nan=-2.0), item[0]))
    seen = {layer for layer, _ in ranked}
    rest = [producers[t] for t in _stored_in_graph_order(quantized) if producers.get(t) not in seen]
    return ranked + [(layer, float("nan")) for layer in dict.fromkeys(rest)]


def output_ranking(quantized: RKNNModel, samples: Sequence[Sequence[np.ndarray]],
                   custom_ops: CustomOpRegistry | None = None) -> list[str]:
    """Layers by output cosine drop when quantized alone (largest first), then every other layer
    that stores a quantized tensor or reads quantized weights, in graph order."""
    ranked = [layer for layer, _ in output_sensitivity(quantized, samples, custom_ops)]
    producers = _layer_of_tensor(quantized)
    rest = [producers[t] for t in _stored_in_graph_order(quantized) if t in producers]
    return list(dict.fromkeys(ranked + rest))


def _stored_in_graph_order(model: RKNNModel) -> list[str]:
    """Outputs of the nodes that store a quantized tensor or read quantized weights, in graph order."""
    weights = {i.name for i in model.graph.graph.initializer}
    return [n.output[0] for n in model.graph.graph.node if n.output and (
        any(o in model.quant_params and o not in weights for o in n.output)
        or any(i in weights and i in model.quant_params for i in n.input))]


def _layer_of_tensor(model: RKNNModel) -> dict[str, str]:
    """Tensor → the NPU layer that computes it (``openrknn.graph.npu_layers``; a fused activation,
    residual Add or hard-swish belongs to its Conv's layer)."""
    return {o: group.name for group in npu_layers.layer_groups(model.graph.graph)
            for node in group.nodes for o in node.output if o}


def propose_layers(quantized: RKNNModel, samples: Sequence[Sequence[np.ndarray]], threshold: float = 0.99,
                   limit: int = 8, custom_ops: CustomOpRegistry | None = None) -> list[str]:
    """The hybrid proposal: up to ``limit`` layers whose single-mode cosine is below ``threshold``."""
    return [layer for layer, cos in layer_sensitivity(quantized, samples, custom_ops)[:limit] if not cos >= threshold]


def auto_hybrid(quantized: RKNNModel, samples: Sequence[Sequence[np.ndarray]], settings: QuantSettings,
                cos_thresh: float, euc_thresh: float | None = None,
                custom_ops: CustomOpRegistry | None = None, precision: str = "float16",
                cache: CalibrationCache | None = None) -> MixedPrecisionResult:
    """Raise the fewest layers to ``precision`` ('float16', or 'int16' on chips whose NPU has no
    float16) so that every output meets the thresholds (see module doc). ``cache``: the one the
    plain build of ``quantized`` filled (same samples and settings), else a new one."""
    def overrides(layers: Sequence[str]) -> QuantOverrides:
        if precision == "int16":
            return QuantOverrides(int16_layers=frozenset(layers))
        return QuantOverrides(float_layers=frozenset(layers))

    float_model = float_record(quantized)
    check = _OutputCheck(float_model, samples[:_EVAL_SAMPLES], cos_thresh, euc_thresh, custom_ops)
    if check.passes(quantized):
        return MixedPrecisionResult(model=quantized, output_cosine=check.last, trials=check.trials)
    started = time.perf_counter()
    # rank on the sample the plain model serves worst: the threshold is judged on the worst sample
    hardest = check.samples[check.hardest]
    ranking = output_ranking(quantized, [hardest], custom_ops)
    log.info(f"auto_hybrid: {len(ranking)} layers ranked by output sensitivity in {time.perf_counter() - started:.1f} s")
    cache = cache if cache is not None else CalibrationCache()

    def trial(layers: Sequence[str]) -> RKNNModel | None:
        model = quantize_model(float_model, samples, settings, overrides(layers), custom_ops, cache)
        return model if check.passes(model) else None

    count = _smallest_prefix(ranking, trial)
    if count is None:
        log.warning(f"auto_hybrid: even with all {len(ranking)} quantized layers in {precision} the outputs miss "
                    f"the threshold (cosine {check.last}); keeping the plain quantized model")
        return MixedPrecisionResult(model=quantized, precision=precision, output_cosine=check.last, met=False,
                                    trials=check.trials)
    chosen = list(ranking[:count])
    for layer in list(reversed(chosen))[:_MAX_PRUNE]:
        if len(chosen) > 1 and trial([c for c in chosen if c != layer]) is not None:
            chosen.remove(layer)
    model = quantize_model(float_model, samples, settings, overrides(chosen), custom_ops, cache)
    check.passes(model)
    return MixedPrecisionResult(model=model, float_layers=chosen, precision=precision, output_cosine=check.last,
                                trials=check.trials)


def _smallest_prefix(ranking: list[str], trial) -> int | None:
    """Smallest k with ``trial(ranking[:k])`` passing (doubling, then bisection); None if none does."""
    if not ranking:
        return None
    high = 1
    while trial(ranking[:high]) is None:
        if high >= len(ranking):
            return None
        high = min(2 * high, len(ranking))
    low = high // 2          # ranking[:low] failed (or low == 0)
    while high - low > 1:
        middle = (low + high) // 2
        if trial(ranking[:middle]) is None:
            low = middle
        else:
            high = middle
    return high


def worst_output_cosines(golden: Sequence[Sequence[np.ndarray]], results: Sequence[Sequence[np.ndarray]]) -> list[float]:
    """Per model output, the lowest cosine over the samples (``golden[s][k]`` vs ``results[s][k]``).

    An output of fewer than 16 values (a score, a flag) is compared once, on the values of every
    sample stacked: the cosine of a single number is always ±1. NaN counts as -1.
    """
    worst = []
    for k, first in enumerate(golden[0]):
        if np.asarray(first).size < _SMALL_OUTPUT:
            scores = [cosine(np.concatenate([np.ravel(g[k]) for g in golden]),
                             np.concatenate([np.ravel(r[k]) for r in results]))]
        else:
            scores = [cosine(g[k], r[k]) for g, r in zip(golden, results)]
        worst.append(float(np.nan_to_num(np.min(scores), nan=-1.0)))
    return worst


class _OutputCheck:
    """Runs a candidate on the evaluation samples and compares its outputs with the float model."""

    def __init__(self, float_model: RKNNModel, samples: Sequence[Sequence[np.ndarray]], cos_thresh: float,
                 euc_thresh: float | None, custom_ops: CustomOpRegistry | None = None) -> None:
        self.names = [spec.name for spec in float_model.inputs]
        self.custom_ops = custom_ops
        session = GraphRunner(float_model.graph, custom_ops)
        self.samples = [list(s) for s in samples]
        self.golden = [session.run(dict(zip(self.names, s))) for s in self.samples]
        self.cos_thresh, self.euc_thresh = cos_thresh, euc_thresh
        self.last: list[float] = []
        self.hardest = 0   # index of the sample with the lowest output cosine in the last run
        self.trials = 0

    def passes(self, model: RKNNModel) -> bool:
        """Whether every output meets the thresholds on every sample; ``last`` keeps the worst cosines.

        The sample that failed last runs first, and a sample below the cosine threshold ends the
        check (outputs judged per sample only: a one-value output needs every sample stacked). The
        first check runs every sample, to find the hardest."""
        self.trials += 1
        session = GraphRunner(lower(model), self.custom_ops)   # samples are in graph layout: run the lowered graph
        per_sample = self.trials > 1 and all(np.asarray(g).size >= _SMALL_OUTPUT for g in self.golden[0])
        order = [self.hardest] + [i for i in range(len(self.samples)) if i != self.hardest]
        ran: dict[int, list[np.ndarray]] = {}
        for index in order:
            ran[index] = session.run(dict(zip(self.names, self.samples[index])))
            if per_sample and min(worst_output_cosines([self.golden[index]], [ran[index]])) < self.cos_thresh:
                break
        golden, results = [self.golden[i] for i in sorted(ran)], [ran[i] for i in sorted(ran)]
        worst_cos = np.array(worst_output_cosines(golden, results))
        scores = [min(worst_output_cosines([g], [r])) for g, r in zip(golden, results)]
        self.hardest = sorted(ran)[int(np.argmin(scores))]
        distances = [[euclidean(g, o) for g, o in zip(gold, outputs)] for gold, outputs in zip(golden, results)]
        self.last = [round(float(c), 6) for c in worst_cos]
        ok = len(ran) == len(self.samples) and bool(np.all(worst_cos >= self.cos_thresh))
        if self.euc_thresh is not None:
            ok = ok and bool(np.max(distances) <= self.euc_thresh)
        return ok
