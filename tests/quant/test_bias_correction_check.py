"""Bias correction checked on held-out calibration samples (``QuantSettings.bias_correction_check``).

A Conv whose input channel means flip sign between calibration samples: the correction estimated
on some samples adds the opposite of the held-out samples' offset, so the check must drop it and
the layer keep its float bias; a layer that reads the picture is corrected either way."""
from __future__ import annotations

import dataclasses
from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from tests.helpers import quantized_build

BIAS = np.array([0.05, -0.1, 0.2, 0.0], np.float32)


def flipping_means_model(path: Path) -> Path:
    """x → Conv 'first' (2→2, 1×1, identity) → Conv 'second' (2→4, 1×1, weights between grid steps)."""
    rng = np.random.default_rng(3)
    w2 = rng.uniform(-1, 1, (4, 2, 1, 1)).astype(np.float32)
    inits = [numpy_helper.from_array(np.eye(2, dtype=np.float32).reshape(2, 2, 1, 1), "w1"),
             numpy_helper.from_array(np.zeros(2, np.float32), "b1"),
             numpy_helper.from_array(w2, "w2"), numpy_helper.from_array(BIAS, "b2")]
    nodes = [helper.make_node("Conv", ["x", "w1", "b1"], ["h"], name="first"),
             helper.make_node("Conv", ["h", "w2", "b2"], ["y"], name="second")]
    graph = helper.make_graph(nodes, "flip", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 2, 6, 6])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 4, 6, 6])], inits)
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)]), path)
    return path


def flipping_samples() -> list[np.ndarray]:
    """Six pictures; the held-out ones (every third) have the opposite channel means of the others."""
    rng = np.random.default_rng(4)
    means = [1.0, 1.0, -1.0, 1.0, 1.0, -1.0]
    return [(m + rng.uniform(-0.2, 0.2, (1, 2, 6, 6))).astype(np.float32) for m in means]


def float_bias_of(model, layer: str) -> np.ndarray:
    """The float bias a quantized layer adds: its int32 bias times its scale ``s_x·s_w``."""
    node = next(n for n in model.graph.graph.node if n.name == layer)
    q = numpy_helper.to_array(next(i for i in model.graph.graph.initializer if i.name == node.input[2]))
    return q.astype(np.float64) * np.asarray(model.quant_params[node.input[2]]["scale"], np.float64)


def build(tmp_path: Path, check: bool):
    from openrknn.quant import QuantSettings, quantize_model
    from openrknn.quant.hybrid import float_record
    samples = flipping_samples()
    built = quantized_build(flipping_means_model(tmp_path / "m.onnx"), samples)._model
    settings = dataclasses.replace(QuantSettings(), bias_correction_check=check)
    return quantize_model(float_record(built), [[s] for s in samples], settings)


def test_a_correction_that_fails_on_held_out_samples_is_dropped(tmp_path, capsys):
    plain = build(tmp_path, check=False)
    step = np.asarray(plain.quant_params["b2"]["scale"], np.float64)
    assert np.abs(float_bias_of(plain, "second") - BIAS).max() > 5 * step.max()   # corrected: the bias moved
    capsys.readouterr()
    checked = build(tmp_path, check=True)
    printed = capsys.readouterr().out
    step = np.asarray(checked.quant_params["b2"]["scale"], np.float64)
    assert np.all(np.abs(float_bias_of(checked, "second") - BIAS) <= step)   # kept the float bias
    assert "bias correction applied to 1 of 2 layer(s); 1 kept their bias" in printed   # 'first' reads the picture
    assert "second" in printed.split("kept their bias")[1]


# The network-level decision (quantizer._correct_every_layer): a scorer stub stands in for the simulator.

def steady_samples() -> list[np.ndarray]:
    """Six pictures with the same channel means: every layer's own check keeps its correction."""
    rng = np.random.default_rng(5)
    return [(1.0 + rng.uniform(-0.2, 0.2, (1, 2, 6, 6))).astype(np.float32) for _ in range(6)]


class ScriptedJudge:
    """Returns the given (every layer, picture-reading layers only) cosines in turn and records the calls."""

    def __init__(self, *scores: tuple[float, float]) -> None:
        self.scores, self.sample_counts = list(scores), []

    def __call__(self, every_layer, picture_only, samples) -> tuple[float, float]:
        self.sample_counts.append(len(samples))
        return self.scores.pop(0)


def build_judged(tmp_path: Path, judge, cache=None):
    from openrknn.quant import QuantSettings, quantize_model
    from openrknn.quant.hybrid import float_record
    samples = steady_samples()
    built = quantized_build(flipping_means_model(tmp_path / "m.onnx"), samples)._model
    return quantize_model(float_record(built), [[s] for s in samples], QuantSettings(), cache=cache,
                          correction_judge=judge)


def moved(model) -> bool:
    step = np.asarray(model.quant_params["b2"]["scale"], np.float64)
    return bool(np.abs(float_bias_of(model, "second") - BIAS).max() > 5 * step.max())


def test_corrections_are_left_out_only_when_outputs_lose_on_held_out_and_calibration_samples(tmp_path, capsys):
    judge = ScriptedJudge((0.90, 0.95), (0.97, 0.98))
    model = build_judged(tmp_path, judge)
    assert judge.sample_counts == [2, 6]   # held-out: every third of 6; then the calibration samples
    step = np.asarray(model.quant_params["b2"]["scale"], np.float64)
    assert np.all(np.abs(float_bias_of(model, "second") - BIAS) <= step)   # 'second' keeps its float bias
    assert model.metadata["quantization"]["bias_correction"] == "picture-reading layers"
    assert "bias correction kept on the picture-reading layers only" in capsys.readouterr().out


def test_one_losing_test_is_not_enough_to_leave_corrections_out(tmp_path):
    held_out_only = ScriptedJudge((0.90, 0.95), (0.99, 0.98))    # the calibration samples disagree
    assert moved(build_judged(tmp_path, held_out_only)) and held_out_only.sample_counts == [2, 6]
    winning = ScriptedJudge((0.95, 0.90))                          # no second test when the first keeps them
    model = build_judged(tmp_path, winning)
    assert moved(model) and winning.sample_counts == [2]
    assert model.metadata["quantization"]["bias_correction"] == "checked per layer"


def test_auto_hybrid_trials_reuse_the_decision(tmp_path):
    from openrknn.quant.calibrate import CalibrationCache
    cache = CalibrationCache()
    judge = ScriptedJudge((0.90, 0.95), (0.97, 0.98))
    first = build_judged(tmp_path, judge, cache)
    second = build_judged(tmp_path, judge, cache)   # a trial: the cache holds the decision, no new scoring
    assert judge.sample_counts == [2, 6] and cache.every_layer_corrected is False
    assert not moved(first) and not moved(second)


def test_a_build_scores_both_candidates_in_the_simulator(tmp_path, capsys):
    quantized_build(flipping_means_model(tmp_path / "m.onnx"), steady_samples())
    printed = capsys.readouterr().out
    assert "bias correction kept on" in printed and "correcting every layer" in printed


def test_a_check_that_cannot_run_keeps_every_correction(tmp_path):
    def failing(*_):
        raise RuntimeError("the simulator cannot run this model")
    model = build_judged(tmp_path, failing)
    assert moved(model) and model.metadata["quantization"]["bias_correction"] == "checked per layer"


def test_outputs_too_small_to_judge_keep_every_correction(tmp_path):
    judge = ScriptedJudge(None)   # the scorer found no output of 16 values or more
    model = build_judged(tmp_path, judge)
    assert moved(model) and judge.sample_counts == [2]


def test_the_scorer_judges_only_outputs_of_16_values_or_more(tmp_path):
    from openrknn.analysis.correction_check import correction_judge
    from openrknn.quant.hybrid import float_record
    rknn = quantized_build(flipping_means_model(tmp_path / "m.onnx"), steady_samples())   # one 4×6×6 output
    model = rknn._model
    scores = correction_judge(float_record(model))(model, model, [[s] for s in steady_samples()[:2]])
    assert scores is not None and scores[0] == scores[1] and 0.99 < scores[0] <= 1.0
    small = tmp_path / "small"
    small.mkdir()
    pooled = flipping_means_model(small / "m.onnx")
    graph = onnx.load(pooled)
    graph.graph.node.append(helper.make_node("GlobalAveragePool", ["y"], ["pooled"], name="pool"))
    graph.graph.output[0].CopyFrom(helper.make_tensor_value_info("pooled", TensorProto.FLOAT, [1, 4, 1, 1]))
    onnx.save(graph, pooled)
    model = quantized_build(pooled, steady_samples())._model
    assert correction_judge(float_record(model))(model, model, [[s] for s in steady_samples()[:2]]) is None
