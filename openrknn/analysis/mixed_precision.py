"""Choosing which layers to raise to float16 or int16: the hybrid proposal and ``build(auto_hybrid=True)``.

Sensitivity: accuracy analysis in ``single`` mode gives, per layer, the cosine of its output when
it alone is quantized (golden inputs). Layers are ranked by that cosine, lowest first.

Automatic mixed precision ranks possible MOVES (a layer raised to float16 or int16) by what they
buy per unit of speed: each layer's quantization is scored by what it costs at the OUTPUT
(:func:`openrknn.quant.sensitivity.output_sensitivity`: its quantization points switched on alone
in one gated float session), each precision by the time the target chip's cost model adds
(:mod:`openrknn.analysis.precision_cost`: the layer's own and that of the layers reading it), and a layer's move is its precision with the best
cosine regained per estimated µs (int16 keeps ``INT16_RESIDUAL`` of the int8 error). Moves whose
drop alone exceeds the allowed loss come first; the others are re-scored by the cosine they regain
with every other layer quantized (``context_gains``) and follow by that per µs, then every other layer that stores a quantized tensor in graph order — so raising
the whole model is the last prefix, and any threshold it meets is met. The search looks for the
shortest prefix which makes every model output meet the thresholds on the calibration samples
(cosine ≥ ``auto_hybrid_cos_thresh`` on each sample — for outputs of fewer than 16 values, on the
values of all samples stacked, since the cosine of a single score is always ±1 — and, when given,
euclidean distance ≤ ``auto_hybrid_euc_thresh``), within the speed floor ``auto_hybrid_min_fps``
when set: a doubling search then a bisection (about 2·log2(n) quantize-and-run trials for n
layers), then a pruning pass (:func:`prune`) that re-checks the chosen moves with the simulator
and drops those the thresholds do not need; the choice must also reach plain int8's mean output cosine on calibration samples the search
did not judge on (held back), else longer prefixes are tried. Each trial re-quantizes with the
same samples (deterministic result) and shares one calibration cache: the prepared graph and the
statistics of tensors already seen are not recomputed; the sensitivities and costs are measured once.
"""
from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from openrknn import log
from openrknn.analysis.accuracy import analyse, cosine, euclidean
from openrknn.graph import npu_layers
from openrknn.graph.rknn_model import RKNNModel
from openrknn.graph.custom_ops import CustomOpRegistry
from openrknn.quant import QuantSettings, quantize_model
from openrknn.quant.hybrid import config_layers, float_record
from openrknn.quant.calibrate import CalibrationCache
from openrknn.quant.overrides import QuantOverrides
from openrknn.quant.sensitivity import context_gains, output_sensitivity
from openrknn.analysis.precision_cost import INT16_RESIDUAL, MoveCosts, chip_precisions, fps, total_time_us
from openrknn.chips import Chip
from openrknn.sim.session import GraphRunner, lower

_EVAL_SAMPLES = 4      # calibration samples the output check runs on
_MAX_PRUNE = 48        # trials of the pruning pass at most (groups of chosen moves, most time saved per drop first)
_MAX_PRUNE_GROUP = 8   # moves the pruning pass removes together at most
_MIN_DROP = 1e-4       # the pruning order divides by a move's drop: a drop measured as 0 counts as this
_MIN_SAVING_US = 1.0   # a chosen move saving less than this is kept without a trial (free, and it helps)
_SENSITIVITY_SIDE = 256   # image inputs are scored on a crop this wide (quant.sensitivity: a quarter of 480²)
_MIN_COST_US = 0.5     # a move estimated free still costs a launch: no division by zero
_SMALL_OUTPUT = 16     # outputs with fewer values are compared stacked over the samples (a score, a flag)


@dataclass
class MixedPrecisionResult:
    """What automatic mixed precision decided."""

    model: RKNNModel
    float_layers: list[str] = field(default_factory=list)   # the layers moved to float16
    precision: str = "float16"                               # the precisions used, '+'-joined
    output_cosine: list[float] = field(default_factory=list)
    met: bool = True
    trials: int = 0
    int16_layers: list[str] = field(default_factory=list)   # the layers moved to int16
    base_time_us: float = 0.0    # estimated time of the plain model on the target (0: no chip given)
    time_us: float = 0.0         # estimated time of the chosen build
    choices: list["Choice"] = field(default_factory=list)
    prefix_moves: int = 0        # the shortest prefix of the search order that met the thresholds
    pruned: list[str] = field(default_factory=list)   # its layers the pruning pass found unnecessary

    def hybrid_layers(self) -> dict[str, str]:
        """The chosen set as ``custom_quantize_layers`` entries (layer → dtype), float16 first."""
        return {**{layer: "float16" for layer in self.float_layers}, **{layer: "int16" for layer in self.int16_layers}}


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


@dataclass
class Choice:
    """One step of the search: raise ``layer`` to ``precision``."""

    layer: str
    precision: str
    drop: float        # output cosine drop with this layer alone quantized in 8 bits
    cost_us: float     # estimated time it adds on the target chip

    @property
    def gain_per_us(self) -> float:
        kept = INT16_RESIDUAL if self.precision == "int16" else 0.0
        return self.drop * (1.0 - kept) / max(self.cost_us, _MIN_COST_US)


@dataclass
class SearchPlan:
    """What every trial shares: the float model, the output check, the ordered choices and the
    estimated time of the plain model (the target chip's cost model)."""

    float_model: RKNNModel
    check: "_OutputCheck"
    choices: list[Choice]
    base_time_us: float
    cache: CalibrationCache
    plain_passes: bool = False
    plain_cosine: float = 0.0    # the plain model's worst output cosine on the evaluation samples
    held_back: "_HeldBack | None" = None   # calibration samples the search does not judge on
    costs: MoveCosts | None = None   # the set cost model on the target (None: no chip)

    def time_us(self, count: int) -> float:
        """Estimated time with the first ``count`` choices applied."""
        return self.set_time_us(self.choices[:count])

    def set_time_us(self, moves: Sequence[Choice]) -> float:
        """Estimated time with ``moves`` applied: the set cost model (a reader of a raised layer
        pays too), else the moves' costs added."""
        if self.costs is not None:
            return self.costs.time_us([(c.layer, c.precision) for c in moves])
        return self.base_time_us + sum(c.cost_us for c in moves)


def overrides_of(choices: Sequence[Choice]) -> QuantOverrides:
    """The hybrid overrides that apply ``choices``."""
    return QuantOverrides(float_layers=frozenset(c.layer for c in choices if c.precision == "float16"),
                          int16_layers=frozenset(c.layer for c in choices if c.precision == "int16"))


def plan_search(quantized: RKNNModel, samples: Sequence[Sequence[np.ndarray]], settings: QuantSettings,
                cos_thresh: float, euc_thresh: float | None = None, custom_ops: CustomOpRegistry | None = None,
                precisions: Sequence[str] = ("float16",), chip: Chip | None = None,
                cache: CalibrationCache | None = None, always: bool = False) -> SearchPlan:
    """Order the possible moves, most output cosine regained per estimated µs first.

    Each quantized layer gets its output sensitivity (one gated session, on the calibration sample
    the plain model serves worst) and, per precision, its estimated cost on ``chip`` (one
    quantize-and-estimate per precision, sharing ``cache``); its move is the precision with the
    best gain per µs. Layers with no measured drop follow in graph order, so the last prefix is
    the whole model raised. Without ``chip`` the order is by sensitivity alone. When the plain
    model already meets the thresholds, nothing is ordered unless ``always``."""
    cache = cache if cache is not None else CalibrationCache()
    float_model = float_record(quantized)
    check = _OutputCheck(float_model, samples[:_EVAL_SAMPLES], cos_thresh, euc_thresh, custom_ops)
    base_time = total_time_us(quantized, chip) if chip is not None else 0.0
    plain_passes = check.passes(quantized)
    if plain_passes and not always:
        return SearchPlan(float_model, check, [], base_time, cache, True, min(check.last, default=1.0))
    held_back = _HeldBack.of(float_model, quantized, samples[_EVAL_SAMPLES:2 * _EVAL_SAMPLES], custom_ops)
    started = time.perf_counter()
    drops = dict(output_sensitivity(quantized, [check.samples[check.hardest]], custom_ops, _SENSITIVITY_SIDE))
    producers = _layer_of_tensor(quantized)
    layers = list(dict.fromkeys(list(drops) + [producers[t] for t in _stored_in_graph_order(quantized)
                                                 if t in producers]))
    log.info(f"auto_hybrid: {len(layers)} layers ranked by output sensitivity in {time.perf_counter() - started:.1f} s")
    options: dict[str, list[Choice]] = {layer: [] for layer in layers}
    move_costs = None
    if chip is not None:
        move_costs = MoveCosts.measure(quantized, {precision: quantize_model(float_model, samples, settings, overrides_of(
            [Choice(layer, precision, 0.0, 0.0) for layer in layers]), custom_ops, cache) for precision in precisions},
            chip)
    for precision in precisions:
        for layer in layers:
            cost = move_costs.move_cost_us(layer, precision) if move_costs is not None else 0.0
            options[layer].append(Choice(layer, precision, max(drops.get(layer, 0.0), 0.0), cost))
    order = {layer: i for i, layer in enumerate(layers)}
    best = [max(moves, key=lambda c: (c.gain_per_us, -precisions.index(c.precision))) for moves in options.values()]
    if chip is not None:
        best.sort(key=lambda c: (-c.gain_per_us, order[c.layer]))
        # a move whose drop alone exceeds the whole allowed loss is needed; the others are worth
        # what they regain once those are raised (small errors compound: drops from float misjudge them)
        needed = [c for c in best if c.drop > 1.0 - cos_thresh]
        if needed and len(needed) < len(best):
            gains = context_gains(quantized, [check.samples[check.hardest]], [c.layer for c in needed], custom_ops,
                                  _SENSITIVITY_SIDE)
            rest = [Choice(c.layer, c.precision, max(gains.get(c.layer, 0.0), 0.0), c.cost_us)
                    for c in best if c not in needed]
            best = needed + sorted(rest, key=lambda c: (-c.gain_per_us, order[c.layer]))
    return SearchPlan(float_model, check, best, base_time, cache, plain_passes, min(check.last, default=1.0),
                      held_back, move_costs)


def auto_hybrid(quantized: RKNNModel, samples: Sequence[Sequence[np.ndarray]], settings: QuantSettings,
                cos_thresh: float, euc_thresh: float | None = None,
                custom_ops: CustomOpRegistry | None = None, precision: str | Sequence[str] = "float16",
                cache: CalibrationCache | None = None, chip: Chip | None = None,
                min_fps: float | None = None, plan: SearchPlan | None = None) -> MixedPrecisionResult:
    """Raise the cheapest set of layers to a higher precision so that every output meets the
    thresholds (see module doc). ``precision``: one precision or several to choose from per layer
    ('float16', 'int16'); ``chip``: the target, whose cost model orders the moves by cosine regained
    per estimated µs; ``min_fps``: never go below this estimated FPS on ``chip`` (the search then
    stops at the last move that keeps it, met or not). ``cache``: the one the plain build of
    ``quantized`` filled (same samples and settings), else a new one. ``plan``: the
    :func:`plan_search` of these arguments, when already made (the trade-off report shares it)."""
    precisions = (precision,) if isinstance(precision, str) else tuple(precision)
    if plan is None:
        plan = plan_search(quantized, samples, settings, cos_thresh, euc_thresh, custom_ops, precisions, chip, cache)
    check = plan.check
    if plan.plain_passes:
        return MixedPrecisionResult(model=quantized, precision="+".join(precisions), output_cosine=check.last,
                                    trials=check.trials, base_time_us=plan.base_time_us, time_us=plan.base_time_us)
    choices = plan.choices
    if min_fps is not None and chip is not None:
        affordable = 0
        while affordable < len(choices) and fps(plan.time_us(affordable + 1)) >= min_fps:
            affordable += 1
        if affordable < len(choices):
            log.info(f"auto_hybrid: {affordable} of {len(choices)} moves keep the estimated FPS on {chip.name} "
                     f">= {min_fps:g}")
        choices = choices[:affordable]
    passing: dict[tuple[str, ...], RKNNModel] = {}

    def trial(moves: Sequence[Choice]) -> RKNNModel | None:
        model = quantize_model(plan.float_model, samples, settings, overrides_of(moves), custom_ops, plan.cache)
        if check.passes(model):
            passing[tuple(c.layer for c in moves)] = model
            return model
        return None

    plain_cosine = plan.plain_cosine
    count = _smallest_prefix(choices, trial, predicted_count([c.drop for c in choices], plain_cosine, cos_thresh))
    if count is None:
        what = f"{len(choices)} affordable move(s)" if min_fps is not None else f"all {len(choices)} moves"
        if min_fps is not None and choices:
            model = quantize_model(plan.float_model, samples, settings, overrides_of(choices), custom_ops, plan.cache)
            check.passes(model, full=True)
            log.warning(f"auto_hybrid: even with {what} the outputs miss the threshold (cosine {check.last}); "
                        f"keeping the most accurate build above {min_fps:g} FPS")
            return _result(model, list(choices), check, plan, chip, met=False)
        log.warning(f"auto_hybrid: even with {what} the outputs miss the threshold (cosine {check.last}); "
                    f"keeping the plain quantized model")
        return MixedPrecisionResult(model=quantized, precision="+".join(precisions), output_cosine=check.last,
                                    met=False, trials=check.trials, base_time_us=plan.base_time_us,
                                    time_us=plan.base_time_us)
    # a move whose own drop exceeds the whole loss the threshold allows is needed: not re-checked
    chosen = prune(list(choices[:count]), trial, plan.set_time_us,
                   needed=[c for c in choices[:count] if c.drop > 1.0 - cos_thresh])
    prefix, pruned = count, [c.layer for c in choices[:count] if all(c is not k for k in chosen)]
    model = passing.get(tuple(c.layer for c in chosen))
    if model is None:
        model = quantize_model(plan.float_model, samples, settings, overrides_of(chosen), custom_ops, plan.cache)
    held_back = plan.held_back
    if held_back is not None and not held_back.beats_plain(model):
        # the thresholds are met on the samples the search judged on, yet the choice generalises
        # worse than plain int8: longer prefixes (more of the model raised) until one does not
        log.info(f"auto_hybrid: the choice's mean output cosine on {len(held_back.samples)} held-back calibration "
                 f"sample(s) is {held_back.last:.5f}, below plain int8's {held_back.plain:.5f}; adding moves")
        chosen, model = _held_back_prefix(choices, count, trial, passing, held_back)
        prefix, pruned = len(chosen), []
        if model is None:
            log.warning(f"auto_hybrid: no choice meeting the threshold beats plain int8 on the held-back "
                        f"calibration samples; keeping the plain quantized model")
            check.passes(quantized, full=True)
            return MixedPrecisionResult(model=quantized, precision="+".join(precisions), output_cosine=check.last,
                                        met=False, trials=check.trials, base_time_us=plan.base_time_us,
                                        time_us=plan.base_time_us)
    check.passes(model, full=True)
    result = _result(model, chosen, check, plan, chip, met=True)
    result.prefix_moves, result.pruned = prefix, pruned
    return result


def prune(chosen: list[Choice], trial, time_us, max_trials: int = _MAX_PRUNE,
          min_saving_us: float = _MIN_SAVING_US, needed: Sequence[Choice] = ()) -> list[Choice]:
    """The backward pruning pass: drop the chosen moves whose removal keeps the thresholds
    (``trial(moves)`` is not None, measured with the simulator). Candidates are the moves saving
    at least ``min_saving_us`` of estimated time (``time_us(moves)``: the set cost model, readers
    included; cheaper moves are free and help), the one saving the most per unit of its measured
    drop first (the search order read backwards: expensive moves that regain little are the
    likeliest to go), each tried once.
    Most moves of a long prefix turn out unnecessary (the sensitivities misjudge the small ones),
    so runs of them are removed together: the group doubles after a removal that keeps the
    thresholds, and a group that breaks them is split in halves, down to single moves, which are
    then kept. At most ``max_trials`` trials; moves in ``needed`` are kept without one."""
    chosen, tried = list(chosen), {id(move) for move in needed}
    size, trials, pending = 1, 0, []    # pending: halves of a group that broke the thresholds
    while trials < max_trials:
        if pending:
            group = pending.pop(0)
        else:   # savings re-estimated: a removal can make another move's readers pay
            total = time_us(chosen)
            savings = [(total - time_us([c for c in chosen if c is not move]), index, move)
                       for index, move in enumerate(chosen) if id(move) not in tried]
            ranked = [move for saving, _, move in sorted(
                savings, key=lambda item: (-item[0] / max(item[2].drop, _MIN_DROP), item[1])) if saving >= min_saving_us]
            group = ranked[:size]
        if not group:
            break
        if len(group) >= len(chosen):
            tried.update(id(g) for g in group)
            continue
        trials += 1
        kept = [c for c in chosen if all(c is not g for g in group)]
        if trial(kept) is not None:
            chosen = kept
            size = size if pending else min(2 * size, _MAX_PRUNE_GROUP)
        elif len(group) > 1:
            half = len(group) // 2
            pending[:0] = [group[:half], group[half:]]
            size = 1
        else:
            tried.add(id(group[0]))
    return chosen


def _held_back_prefix(choices: list[Choice], count: int, trial, passing: dict, held_back: "_HeldBack"
                      ) -> tuple[list[Choice], RKNNModel | None]:
    """The shortest prefix of ``choices`` longer than ``count`` (doubling) that meets the thresholds
    and beats plain int8 on the held-back samples; ([], None) when none does."""
    k = count
    while k < len(choices):
        k = min(2 * k, len(choices))
        prefix = list(choices[:k])
        model = trial(prefix)
        if model is not None and held_back.beats_plain(model):
            return prefix, model
    return [], None


def auto_hybrid_build(quantized: RKNNModel, samples: Sequence[Sequence[np.ndarray]], settings: QuantSettings,
                      cfg: Any, chip: Chip, custom_ops: CustomOpRegistry | None = None,
                      cache: CalibrationCache | None = None, always_plan: bool = False
                      ) -> tuple[MixedPrecisionResult, SearchPlan]:
    """``build(auto_hybrid=True)``: :func:`auto_hybrid` with the thresholds of ``cfg`` (a
    ``ModelConfig``) and the precisions ``chip`` offers, logged, and recorded in the model's
    ``metadata["auto_hybrid"]`` — ``custom_quantize_layers`` there is the plain hybrid config.
    Returns the result and the search plan (ordered moves even when the plain model passes, with
    ``always_plan``)."""
    precisions = tuple(p for p in chip_precisions(chip)
                       if p == "float16" or settings.spec.act_dtype in ("int8", "uint8")) or ("float16",)
    min_fps = getattr(cfg, "auto_hybrid_min_fps", None)
    plan = plan_search(quantized, samples, settings, cfg.auto_hybrid_cos_thresh, cfg.auto_hybrid_euc_thresh,
                       custom_ops, precisions, chip, cache, always_plan)
    result = auto_hybrid(quantized, samples, settings, cfg.auto_hybrid_cos_thresh, cfg.auto_hybrid_euc_thresh,
                         custom_ops, precisions, cache, chip, min_fps, plan)
    before, after = result.base_time_us, result.time_us
    drop = 100.0 * (1.0 - fps(after) / fps(before)) if before and after else 0.0
    moved = [f"{kind} {layers}" for kind, layers in (("float16", result.float_layers), ("int16", result.int16_layers))
             if layers] or ["float16 []"]
    log.info(f"auto_hybrid: {len(result.float_layers) + len(result.int16_layers)} layer(s) moved to "
             f"{' and '.join(moved)}; output cosine {result.output_cosine} (threshold {cfg.auto_hybrid_cos_thresh}"
             f"{'' if result.met else ', missed'}); estimated {fps(before):.1f} -> {fps(after):.1f} FPS on "
             f"{chip.name} ({drop:.1f}% slower, {result.trials} trials"
             + (f"; the pruning pass dropped {len(result.pruned)} of the first {result.prefix_moves} moves"
                if result.pruned else "") + ")")
    result.model.metadata["auto_hybrid"] = {   # float_layers: every moved layer (the name predates int16 moves)
        "float_layers": result.float_layers + result.int16_layers, "float16_layers": result.float_layers,
        "int16_layers": result.int16_layers, "precision": result.precision,
        "met": result.met, "output_cosine": result.output_cosine, "platform": chip.name,
        "plain_cosine": round(plan.plain_cosine, 6), "cos_thresh": cfg.auto_hybrid_cos_thresh,
        "time_us": [round(before, 1), round(after, 1)],
        "prefix_moves": result.prefix_moves, "pruned_layers": result.pruned,
        "custom_quantize_layers": config_layers(result.model.golden or result.model.graph, result.hybrid_layers())}
    return result, plan


def _result(model: RKNNModel, chosen: list[Choice], check: "_OutputCheck", plan: SearchPlan, chip: Chip | None,
            met: bool) -> MixedPrecisionResult:
    kinds = sorted({c.precision for c in chosen}) or ["float16"]
    return MixedPrecisionResult(
        model=model, float_layers=[c.layer for c in chosen if c.precision == "float16"],
        int16_layers=[c.layer for c in chosen if c.precision == "int16"], precision="+".join(kinds),
        output_cosine=check.last, met=met, trials=check.trials, base_time_us=plan.base_time_us,
        time_us=total_time_us(model, chip) if chip is not None else 0.0, choices=chosen)


def _smallest_prefix(ranking: list, trial, guess: int = 1) -> int | None:
    """Smallest k with ``trial(ranking[:k])`` passing; None if none does. An exponential search
    from ``guess`` (steps 1, 2, 4, … down while passing, up while failing), then a bisection: a
    good guess costs about two trials, a guess off by d about 2·log2(d)."""
    count = len(ranking)
    if not count:
        return None
    passes = lambda k: trial(ranking[:k]) is not None   # noqa: E731 - short local predicate
    guess = min(max(guess, 1), count)
    step = 1
    if passes(guess):
        high, low = guess, 0          # ranking[:low] fails (the plain model, low == 0, failed)
        while high - step > 0:
            if not passes(high - step):
                low = high - step
                break
            high -= step
            step *= 2
    else:
        low, high = guess, None
        while high is None:
            if low >= count:
                return None
            probe = min(low + step, count)
            if passes(probe):
                high = probe
            else:
                low = probe
            step *= 2
    while high - low > 1:
        middle = (low + high) // 2
        if passes(middle):
            high = middle
        else:
            low = middle
    return high


def predicted_count(drops: Sequence[float], plain_cosine: float, cos_thresh: float, margin: float = 0.8) -> int:
    """How many of the moves (their 8-bit output drops, in order) should bring the output cosine
    from ``plain_cosine`` to ``cos_thresh``, if drops add up: the loss left after the first k moves
    is the plain loss times the share of the drops they leave. ``margin`` < 1 aims a little past."""
    total = float(sum(drops))
    plain_loss, allowed = 1.0 - plain_cosine, (1.0 - cos_thresh) * margin
    if total <= 0 or plain_loss <= allowed:
        return 1
    left = total
    for k, drop in enumerate(drops, start=1):
        left -= drop
        if plain_loss * left / total <= allowed:
            return k
    return len(drops)


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


def mean_output_cosine(golden: Sequence[Sequence[np.ndarray]], results: Sequence[Sequence[np.ndarray]]) -> float:
    """The lowest, over the model outputs, of the mean cosine over the samples (an output of fewer
    than 16 values: the cosine of every sample stacked). NaN counts as -1."""
    means = []
    for k, first in enumerate(golden[0]):
        if np.asarray(first).size < _SMALL_OUTPUT:
            means.append(worst_output_cosines([[g[k]] for g in golden], [[r[k]] for r in results])[0])
        else:
            means.append(float(np.mean([np.nan_to_num(cosine(g[k], r[k]), nan=-1.0) for g, r in zip(golden, results)])))
    return float(min(means))


class _HeldBack:
    """Calibration samples the output check does not judge on: a choice fitted to the evaluation
    samples must still do at least as well as plain int8 here (mean output cosine)."""

    def __init__(self, float_model: RKNNModel, quantized: RKNNModel, samples: Sequence[Sequence[np.ndarray]],
                 custom_ops: CustomOpRegistry | None = None) -> None:
        self.names = [spec.name for spec in float_model.inputs]
        self.custom_ops = custom_ops
        self.samples = [list(s) for s in samples]
        session = GraphRunner(float_model.graph, custom_ops)
        self.golden = [session.run(dict(zip(self.names, s))) for s in self.samples]
        self.plain = self.score(quantized)
        self.last = self.plain

    @classmethod
    def of(cls, float_model: RKNNModel, quantized: RKNNModel, samples: Sequence[Sequence[np.ndarray]],
           custom_ops: CustomOpRegistry | None = None) -> "_HeldBack | None":
        """The held-back check on ``samples``; None without samples."""
        return cls(float_model, quantized, samples, custom_ops) if len(samples) else None

    def score(self, model: RKNNModel) -> float:
        """``model``'s mean output cosine on the held-back samples (kept in ``last``)."""
        session = GraphRunner(lower(model), self.custom_ops)
        results = [session.run(dict(zip(self.names, s))) for s in self.samples]
        self.last = mean_output_cosine(self.golden, results)
        return self.last

    def beats_plain(self, model: RKNNModel) -> bool:
        """Whether ``model`` does at least as well as plain int8 on the held-back samples."""
        return self.score(model) >= self.plain


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

    def passes(self, model: RKNNModel, full: bool = False) -> bool:
        """Whether every output meets the thresholds on every sample; ``last`` keeps the worst cosines.

        The sample that failed last runs first, and a sample below the cosine threshold ends the
        check (outputs judged per sample only: a one-value output needs every sample stacked). The
        first check runs every sample, to find the hardest; ``full=True`` runs every sample too."""
        self.trials += 1
        session = GraphRunner(lower(model), self.custom_ops)   # samples are in graph layout: run the lowered graph
        per_sample = not full and self.trials > 1 and all(np.asarray(g).size >= _SMALL_OUTPUT for g in self.golden[0])
        order = [self.hardest] + [i for i in range(len(self.samples)) if i != self.hardest]
        ran: dict[int, list[np.ndarray]] = {}
        sample_cos: dict[int, list[float]] = {}   # each output's cosine on each sample, computed once
        for index in order:
            ran[index] = session.run(dict(zip(self.names, self.samples[index])))
            sample_cos[index] = [float(np.nan_to_num(cosine(g, r), nan=-1.0))
                                 for g, r in zip(self.golden[index], ran[index])]
            if per_sample and min(sample_cos[index]) < self.cos_thresh:
                break
        indices = sorted(ran)
        golden, results = [self.golden[i] for i in indices], [ran[i] for i in indices]
        worst_cos = np.array([
            worst_output_cosines([[g[k]] for g in golden], [[r[k]] for r in results])[0]
            if np.asarray(first).size < _SMALL_OUTPUT else min(sample_cos[i][k] for i in indices)
            for k, first in enumerate(golden[0])])
        self.hardest = indices[int(np.argmin([min(sample_cos[i]) for i in indices]))]
        self.last = [round(float(c), 6) for c in worst_cos]
        ok = len(ran) == len(self.samples) and bool(np.all(worst_cos >= self.cos_thresh))
        if ok and self.euc_thresh is not None:
            distances = [[euclidean(g, o) for g, o in zip(gold, outputs)] for gold, outputs in zip(golden, results)]
            ok = bool(np.max(distances) <= self.euc_thresh)
        return ok
