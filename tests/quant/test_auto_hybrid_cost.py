"""auto_hybrid by output sensitivity per estimated µs: precisions per chip, costs, the FPS floor,
the guided prefix search, the trade-off report (API, CLI, HTML) and the hybrid cfg it leaves."""
from __future__ import annotations

import json

import numpy as np
import pytest
import yaml

from openrknn import chips
from openrknn.analysis.mixed_precision import Choice, _smallest_prefix, predicted_count, prune
from openrknn.analysis.precision_cost import MoveCosts, chip_precisions, layer_readers, layer_times
from openrknn.profile.calibration import with_cost
from rknn.api import RKNN
from tests.helpers import three_convs


@pytest.fixture
def workdir(tmp_path, monkeypatch):
    """three_convs with a hard-to-quantize conv2, a 4-sample dataset, cwd = tmp_path."""
    three_convs(tmp_path / "net.onnx", outlier=200.0)
    rng = np.random.default_rng(3)
    for i in range(4):
        np.save(tmp_path / f"x{i}.npy", rng.uniform(0, 1, (1, 3, 16, 16)).astype(np.float32))
    (tmp_path / "dataset.txt").write_text("".join(f"x{i}.npy\n" for i in range(4)))
    monkeypatch.chdir(tmp_path)
    return tmp_path


def _rknn(workdir, platform="rk3588", **config) -> RKNN:
    rknn = RKNN()
    assert rknn.config(target_platform=platform, **config) == 0
    assert rknn.load_onnx(str(workdir / "net.onnx")) == 0
    return rknn


def test_precisions_come_from_the_chip_data():
    assert chip_precisions(chips.get_chip("rk3588")) == ("float16",)            # w8a8 only
    assert chip_precisions(chips.get_chip("rk3562")) == ("float16", "int16")    # lists w8a16
    assert chip_precisions(chips.get_chip("rv1106")) == ("int16",)              # no float16 on the NPU


def test_float16_layers_cost_time_in_the_cost_model(workdir):
    plain = _rknn(workdir)
    assert plain.build(do_quantization=True, dataset="dataset.txt") == 0
    raised = _rknn(workdir, auto_hybrid_cos_thresh=0.99999)
    assert raised.build(do_quantization=True, dataset="dataset.txt", auto_hybrid=True) == 0
    # the float16 MAC rate pinned at 1/4 of int8: with the fitted rate (1/2, the 32x16 float16 array of
    # table 8-2) an 8-channel conv pads to the same cycles in both (docs/performance-model.md §5)
    chip = with_cost(chips.get_chip("rk3588"), macs_per_cycle={"int8": 1024, "int16": 256, "float16": 256})
    before, after = layer_times(plain._model, chip), layer_times(raised._model, chip)
    assert {"conv1", "conv2", "conv3"} <= set(before)
    moved = raised._model.metadata["auto_hybrid"]["float16_layers"]
    assert moved and all(after[layer] > before[layer] for layer in moved if layer.startswith("conv"))


def test_the_choice_is_logged_with_its_speed_and_kept_as_a_hybrid_cfg(workdir, capsys):
    rknn = _rknn(workdir, auto_hybrid_cos_thresh=0.99)
    assert rknn.build(do_quantization=True, dataset="dataset.txt", auto_hybrid=True) == 0
    facts = rknn._model.metadata["auto_hybrid"]
    assert facts["float16_layers"] == ["conv2"] and facts["int16_layers"] == []
    assert facts["custom_quantize_layers"] == {"r2": "float16"}   # the tensor conv2's layer stores
    out = capsys.readouterr().out
    assert "auto_hybrid: 1 layer(s) moved to float16 ['conv2']" in out and "FPS on rk3588" in out


def test_a_chip_with_float16_and_int16_gets_one_precision_per_layer(workdir):
    rknn = _rknn(workdir, platform="rk3562", auto_hybrid_cos_thresh=0.99)
    assert rknn.build(do_quantization=True, dataset="dataset.txt", auto_hybrid=True) == 0
    facts = rknn._model.metadata["auto_hybrid"]
    assert facts["met"] and "conv2" in facts["float16_layers"] + facts["int16_layers"]
    assert set(facts["custom_quantize_layers"].values()) <= {"float16", "int16"}


def test_min_fps_is_validated(workdir):
    rknn = RKNN()
    assert rknn.config(target_platform="rk3588", auto_hybrid_min_fps=-5) == -1
    assert rknn.config(target_platform="rk3588", auto_hybrid_min_fps="fast") == -1
    assert rknn.config(target_platform="rk3588", auto_hybrid_min_fps=30) == 0


def test_min_fps_above_the_plain_build_moves_nothing(workdir, capsys):
    plain = _rknn(workdir)
    assert plain.build(do_quantization=True, dataset="dataset.txt") == 0
    from openrknn.profile import estimate_perf
    plain_fps = estimate_perf(plain._model, chips.get_chip("rk3588")).fps
    rknn = _rknn(workdir, auto_hybrid_cos_thresh=0.99, auto_hybrid_min_fps=plain_fps * 1.01)
    assert rknn.build(do_quantization=True, dataset="dataset.txt", auto_hybrid=True) == 0
    facts = rknn._model.metadata["auto_hybrid"]
    assert facts["float_layers"] == [] and not facts["met"]
    assert "W auto_hybrid: even with 0 affordable move(s)" in capsys.readouterr().out


@pytest.mark.parametrize("guess", [1, 5, 13, 14, 40, 50, 99])
def test_the_guided_search_finds_the_smallest_prefix_from_any_guess(guess):
    calls = []

    def trial(prefix):
        calls.append(len(prefix))
        return object() if len(prefix) >= 13 else None

    assert _smallest_prefix(list(range(50)), trial, guess) == 13
    assert len(calls) <= 14
    assert _smallest_prefix(list(range(50)), lambda prefix: None, guess) is None


def test_a_good_guess_costs_two_trials():
    calls = []

    def trial(prefix):
        calls.append(len(prefix))
        return object() if len(prefix) >= 13 else None

    assert _smallest_prefix(list(range(50)), trial, 13) == 13 and calls == [13, 12]


def test_predicted_count_reads_the_drops_as_additive():
    drops = [0.5, 0.3, 0.1, 0.05, 0.05]
    assert predicted_count(drops, plain_cosine=0.0, cos_thresh=0.75, margin=1.0) == 2   # 0.2 of the loss left
    assert predicted_count(drops, plain_cosine=0.0, cos_thresh=0.99, margin=1.0) == 5


def test_sensitivity_on_a_crop_keeps_the_hard_layer_first(workdir):
    from openrknn.quant.sensitivity import _busiest_crop, output_sensitivity
    x = np.zeros((1, 3, 16, 16), np.float32)
    x[..., 8:, 8:] = np.random.default_rng(0).uniform(0, 1, (1, 3, 8, 8))
    crop = _busiest_crop(x, 8)
    assert crop.shape == (1, 3, 8, 8) and np.array_equal(crop, x[..., 8:, 8:])   # the busy corner
    plain = _rknn(workdir)
    assert plain.build(do_quantization=True, dataset="dataset.txt") == 0
    sample = [np.load(workdir / "x0.npy")]
    assert output_sensitivity(plain._model, [sample], crop_side=8)[0][0] == "conv2"


def test_report_lists_measured_points_and_reproduces_with_step2(workdir, capsys):
    rknn = _rknn(workdir, auto_hybrid_cos_thresh=0.99)
    (workdir / "step1").mkdir()
    points = rknn.auto_hybrid_report(dataset="dataset.txt", report_path="tradeoff.html", step1_dir="step1")
    assert points is not None and [p["moves"] for p in points if not p["chosen"]][:2] == [0, 1]
    chosen = [p for p in points if p["chosen"]]
    assert len(chosen) == 1 and chosen[0]["meets"] and chosen[0]["cosine"] >= 0.99
    assert set(chosen[0]["fps"]) == {"rk3566", "rk3588"}
    assert points[0]["fps"]["rk3588"] >= chosen[0]["fps"]["rk3588"]    # raising a layer costs speed
    assert not points[0]["meets"]
    out = capsys.readouterr().out
    assert "auto_hybrid trade-off" in out and "rk3566 FPS" in out
    page = (workdir / "tradeoff.html").read_text()
    assert '<svg class="chart tradeoff"' in page and page.count('class="pt') >= 2 * len(points)
    cfg = yaml.safe_load((workdir / "step1" / "net.quantization.cfg").read_text())
    assert cfg["custom_quantize_layers"] == {"r2": "float16"}
    built = rknn._model
    again = RKNN()
    assert again.config(target_platform="rk3588") == 0
    assert again.hybrid_quantization_step2("step1/net.model", "step1/net.data", "step1/net.quantization.cfg") == 0
    assert again._model.tensor_dtypes == built.tensor_dtypes
    assert json.dumps(again._model.quant_params, sort_keys=True, default=str) == \
        json.dumps(built.quant_params, sort_keys=True, default=str)


def test_report_rejects_bad_arguments(workdir):
    rknn = _rknn(workdir)
    assert rknn.auto_hybrid_report(dataset="dataset.txt", max_points=1) is None
    assert rknn.auto_hybrid_report(dataset="dataset.txt", step1_dir="missing") is None


def test_cli_hybrid_pareto(workdir, capsys):
    from openrknn.cli.main import main
    code = main(["hybrid", "net.onnx", "--dataset", "dataset.txt", "-t", "rk3588", "--cos-thresh", "0.99",
                 "--pareto", "--points", "3", "--json", "points.json", "-o", "net.rknn"])
    assert code == 0
    points = json.loads((workdir / "points.json").read_text())
    assert [p["moves"] for p in points if not p["chosen"]] == [0, 1, 3] or len(points) == 4
    assert (workdir / "net.rknn").is_file()
    assert "auto_hybrid trade-off" in capsys.readouterr().out


def test_workbench_section_plots_the_choice(workdir):
    from openrknn.ui.hybrid import auto_hybrid_section
    assert auto_hybrid_section(None) == ""
    rknn = _rknn(workdir, auto_hybrid_cos_thresh=0.99)
    assert rknn.build(do_quantization=True, dataset="dataset.txt", auto_hybrid=True) == 0
    html = auto_hybrid_section(rknn._model.metadata["auto_hybrid"])
    assert 'id="auto-hybrid"' in html and "r2: float16" in html and "FPS on rk3588" in html
    assert html.count('class="pt') == 2 and html.count('class="pt chosen"') == 1   # plain and choice


def test_a_move_is_worth_its_regained_cosine_per_microsecond():
    from openrknn.analysis.mixed_precision import Choice
    cheap16, dear_fp16 = Choice("a", "int16", 0.1, 10.0), Choice("a", "float16", 0.1, 20.0)
    assert cheap16.gain_per_us > dear_fp16.gain_per_us                       # cheaper int16 wins
    assert Choice("a", "float16", 0.1, 10.0).gain_per_us > cheap16.gain_per_us   # a tie goes to float16 (exact)
    assert Choice("b", "float16", 0.01, 0.0).gain_per_us == pytest.approx(0.02)   # a free move costs 0.5 µs


def test_context_gains_score_layers_with_the_others_quantized(workdir):
    from openrknn.quant.sensitivity import context_gains
    plain = _rknn(workdir)
    assert plain.build(do_quantization=True, dataset="dataset.txt") == 0
    sample = [[np.load(workdir / "x0.npy")]]
    gains = context_gains(plain._model, sample, [])
    assert max(gains, key=gains.get) == "conv2" and gains["conv2"] > 0.01
    after = context_gains(plain._model, sample, ["conv2"])
    assert "conv2" not in after and max(after.values()) < gains["conv2"]


@pytest.fixture
def eight_samples(workdir):
    """The workdir with 8 calibration samples: 4 the search judges on, 4 held back."""
    rng = np.random.default_rng(5)
    for i in range(4, 8):
        np.save(workdir / f"x{i}.npy", rng.uniform(0, 1, (1, 3, 16, 16)).astype(np.float32))
    (workdir / "dataset.txt").write_text("".join(f"x{i}.npy\n" for i in range(8)))
    return workdir


def _held_back_scores(monkeypatch, scores):
    """Make the held-back check score a model by the layers it keeps in float16."""
    from openrknn.analysis import mixed_precision

    def score(self, model):
        self.last = scores(frozenset(model.metadata.get("quantization", {}).get("float_layers", [])))
        return self.last
    monkeypatch.setattr(mixed_precision._HeldBack, "score", score)


def test_a_choice_worse_than_plain_on_held_back_samples_gets_more_moves(eight_samples, monkeypatch, capsys):
    # conv2 alone meets the threshold on the judged samples but generalises worse than plain int8
    _held_back_scores(monkeypatch, lambda floats: {frozenset(): 0.99, frozenset({"conv2"}): 0.98}.get(floats, 0.995))
    rknn = _rknn(eight_samples, auto_hybrid_cos_thresh=0.99)
    assert rknn.build(do_quantization=True, dataset="dataset.txt", auto_hybrid=True) == 0
    facts = rknn._model.metadata["auto_hybrid"]
    assert facts["met"] and "conv2" in facts["float16_layers"] and len(facts["float16_layers"]) > 1
    out = capsys.readouterr().out
    assert "held-back calibration sample(s) is 0.98000, below plain int8's 0.99000; adding moves" in out


def test_no_choice_beating_plain_on_held_back_samples_keeps_plain(eight_samples, monkeypatch, capsys):
    _held_back_scores(monkeypatch, lambda floats: 0.99 if not floats else 0.98)
    rknn = _rknn(eight_samples, auto_hybrid_cos_thresh=0.99)
    assert rknn.build(do_quantization=True, dataset="dataset.txt", auto_hybrid=True) == 0
    facts = rknn._model.metadata["auto_hybrid"]
    assert not facts["met"] and facts["float16_layers"] == [] and facts["custom_quantize_layers"] == {}
    assert "W auto_hybrid: no choice meeting the threshold beats plain int8 on the held-back" in capsys.readouterr().out


def test_held_back_samples_alone_do_not_change_a_good_choice(eight_samples, capsys):
    rknn = _rknn(eight_samples, auto_hybrid_cos_thresh=0.99)
    assert rknn.build(do_quantization=True, dataset="dataset.txt", auto_hybrid=True) == 0
    assert rknn._model.metadata["auto_hybrid"]["float16_layers"] == ["conv2"]
    assert "held-back" not in capsys.readouterr().out


def test_mean_output_cosine_stacks_small_outputs():
    from openrknn.analysis.mixed_precision import mean_output_cosine
    golden = [[np.array([1.0, 0.0]), np.ones(32)], [np.array([0.0, 1.0]), np.ones(32)]]
    results = [[np.array([1.0, 0.0]), np.ones(32)], [np.array([1.0, 0.0]), -np.ones(32)]]
    # output 0 stacked: [1,0,0,1]·[1,0,1,0] / 2 = 0.5; output 1: mean of 1 and -1 = 0
    assert mean_output_cosine(golden, results) == pytest.approx(0.0)
    assert mean_output_cosine(golden, golden) == pytest.approx(1.0)


def test_a_move_costs_its_readers_too():
    # the cost model prices a layer by the dtype it reads: raising 'concat' makes the head that
    # reads it pay float16 time; raising both pays the head once
    costs = MoveCosts(1000.0, {"float16": {"concat": 10.0, "head": 400.0, "stem": 5.0}},
                      {"concat": {"head"}, "stem": {"concat"}})
    assert costs.move_cost_us("concat", "float16") == 410.0
    assert costs.set_cost_us([("concat", "float16"), ("head", "float16")]) == 410.0
    assert costs.time_us([("stem", "float16"), ("concat", "float16")]) == 1415.0


def test_move_costs_measured_on_a_model_follow_the_layer_graph(workdir):
    rknn = _rknn(workdir)
    assert rknn.build(do_quantization=True, dataset="dataset.txt") == 0
    readers = layer_readers(rknn._model)
    assert "conv2" in readers["conv1"] and "conv3" in readers["conv2"]


def _moves(count: int) -> list[Choice]:
    return [Choice(f"m{i}", "float16", 0.0, 10.0 + i) for i in range(count)]


def test_pruning_drops_every_unneeded_move_in_few_trials():
    needed, calls = {"m5", "m30", "m39"}, []

    def trial(moves):
        calls.append(len(moves))
        return moves if needed <= {c.layer for c in moves} else None

    kept = prune(_moves(40), trial, lambda moves: sum(c.cost_us for c in moves), max_trials=40)
    assert {c.layer for c in kept} == needed
    assert len(calls) < 37    # groups: fewer trials than one per removable move


def test_pruning_re_estimates_savings_after_a_removal():
    # 'head' saves nothing while 'concat' (its input) is raised: only after 'concat' goes is it tried
    moves = [Choice("concat", "float16", 0.0, 0.0), Choice("head", "float16", 0.0, 0.0)]
    costs = MoveCosts(1000.0, {"float16": {"concat": 10.0, "head": 400.0}}, {"concat": {"head"}})
    time_us = lambda ms: costs.time_us([(c.layer, c.precision) for c in ms])   # noqa: E731
    kept = prune(moves + [Choice("stem", "float16", 0.0, 0.0)], lambda ms: ms, time_us)
    assert [c.layer for c in kept] == ["stem"]


def test_the_report_says_which_moves_the_pruning_pass_dropped(workdir, monkeypatch, capsys):
    # an order that puts conv1 and conv3 before conv2 (the layer that needs raising): the shortest
    # passing prefix is all three moves, and the pruning pass drops conv1 and conv3 again
    from openrknn.analysis import mixed_precision
    from openrknn.ui.hybrid import auto_hybrid_section
    monkeypatch.setattr(mixed_precision, "output_sensitivity",
                        lambda *args, **kwargs: [("conv1", 0.005), ("conv3", 0.005), ("conv2", 0.003)])
    monkeypatch.setattr(mixed_precision.MoveCosts, "measure", classmethod(lambda cls, plain, raised, chip: cls(
        1000.0, {p: {"conv1": 50.0, "conv2": 100.0, "conv3": 50.0} for p in raised}, {})))
    rknn = _rknn(workdir, auto_hybrid_cos_thresh=0.99)
    points = rknn.auto_hybrid_report(dataset="dataset.txt", max_points=10)
    facts = rknn._model.metadata["auto_hybrid"]
    assert facts["float16_layers"] == ["conv2"] and facts["prefix_moves"] == 3
    assert sorted(facts["pruned_layers"]) == ["conv1", "conv3"]
    chosen = [p for p in points if p["chosen"]]
    assert chosen == [{**chosen[0], "step": "pruned", "moves": 1, "last_move": "2 of the first 3 moves pruned"}]
    assert {p["step"] for p in points if not p["chosen"]} == {"prefix"}
    out = capsys.readouterr().out
    assert "the pruning pass dropped 2 of the first 3 moves" in out and "pruned  2 of the first 3" in out
    assert "the pruning pass dropped 2 of the first 3 moves" in auto_hybrid_section(facts)


def test_pruning_keeps_needed_moves_without_a_trial():
    moves, tried = _moves(4), []

    def trial(kept):
        tried.append({c.layer for c in kept})
        return kept

    kept = prune(moves, trial, lambda ms: sum(c.cost_us for c in ms), needed=moves[:2])
    assert [c.layer for c in kept] == ["m0", "m1"] and all({"m0", "m1"} <= t for t in tried)
