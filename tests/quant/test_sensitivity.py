"""Output sensitivity (gated fake quantization in one session) and the calibration cache auto_hybrid shares."""
from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from tests.helpers import cosine, quantized_build


def outlier_channel_model(path: Path) -> Path:
    """x → conv1+relu (channel 0 always ≈200: an outlier channel) → conv2 (1×1, reads channel 0 with a
    tiny weight) + relu → conv3 → y. conv1's stored tensor looks fine by its own cosine (channel 0
    dominates it) but its per-tensor int8 scale wipes out channels 1..7, which carry the output."""
    rng = np.random.default_rng(0)
    w1 = rng.normal(0, 0.5, (8, 4, 1, 1)).astype(np.float32)
    b1 = rng.normal(0.5, 0.1, 8).astype(np.float32)
    w1[0], b1[0] = 0.01, 200.0
    w2 = rng.normal(0, 0.5, (8, 8, 1, 1)).astype(np.float32)
    w2[:, 0] = 1e-4
    w3 = rng.normal(0, 0.5, (4, 8, 3, 3)).astype(np.float32)
    inits = [numpy_helper.from_array(a, n) for a, n in ((w1, "w1"), (b1, "b1"), (w2, "w2"), (w3, "w3"))]
    nodes = [helper.make_node("Conv", ["x", "w1", "b1"], ["c1"], name="conv1"),
             helper.make_node("Relu", ["c1"], ["r1"], name="relu1"),
             helper.make_node("Conv", ["r1", "w2"], ["c2"], name="conv2"),
             helper.make_node("Relu", ["c2"], ["r2"], name="relu2"),
             helper.make_node("Conv", ["r2", "w3"], ["y"], name="conv3", pads=[1, 1, 1, 1])]
    graph = helper.make_graph(nodes, "outlier", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 4, 16, 16])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 4, 16, 16])], inits)
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)]), path)
    return path


def _samples(count: int = 4) -> list[np.ndarray]:
    rng = np.random.default_rng(1)
    return [rng.uniform(-1, 1, (1, 4, 16, 16)).astype(np.float32) for _ in range(count)]


def test_output_ranking_puts_the_outlier_channel_tensor_first(tmp_path):
    from openrknn.analysis.mixed_precision import layer_sensitivity, output_ranking
    samples = _samples()
    model = quantized_build(outlier_channel_model(tmp_path / "m.onnx"), samples)._model
    ranking = output_ranking(model, [[s] for s in samples[:2]])
    assert ranking[0] == "conv1", ranking
    assert set(ranking) >= {"conv1", "conv2", "conv3"}
    # the layer's own (single-mode) cosine does not see it: channel 0 dominates the tensor
    single = dict(layer_sensitivity(model, [[samples[0]]]))
    assert single["conv1"] > 0.999, single


def test_gated_graph_spans_float_to_quantized(tmp_path):
    from openrknn.quant.sensitivity import gate_feeds, gated_graph
    from openrknn.sim.session import GraphRunner, lower
    samples = _samples()
    model = quantized_build(outlier_channel_model(tmp_path / "m.onnx"), samples)._model
    graph, gates = gated_graph(model)
    assert {"x", "r1", "r2", "w1", "w2", "w3"} <= set(gates)
    runner = GraphRunner(graph)
    feeds = {"x": samples[0]}
    off = runner.run({**feeds, **gate_feeds(gates)})[0]
    on = runner.run({**feeds, **gate_feeds(gates, set(gates))})[0]
    golden = GraphRunner(model.golden).run(feeds)[0]
    simulated = GraphRunner(lower(model)).run(feeds)[0]
    np.testing.assert_allclose(off, golden, rtol=1e-5, atol=1e-5)   # gates off: the float model
    assert cosine(on, golden) < 0.99                            # gates on: the quantization error...
    assert cosine(on, simulated) > 0.999                        # ...of the integer simulation


def test_calibration_cache_gives_the_same_parameters_without_recalibrating(tmp_path, monkeypatch):
    from openrknn.quant import QuantSettings, calibrate, quantize_model, quantizer
    from openrknn.quant.calibrate import CalibrationCache
    from openrknn.quant.hybrid import float_record
    from openrknn.quant.overrides import QuantOverrides
    samples = [[s] for s in _samples()]
    built = quantized_build(outlier_channel_model(tmp_path / "m.onnx"), [s[0] for s in samples])._model
    float_model, settings = float_record(built), QuantSettings()
    plain = quantize_model(float_model, samples, settings, QuantOverrides(float_layers=frozenset({"conv2"})))
    calls = []
    real = calibrate.collect_stats
    monkeypatch.setattr(quantizer, "collect_stats", lambda *a, **k: calls.append(a[1]) or real(*a, **k))
    cache = CalibrationCache()
    quantize_model(float_model, samples, settings, QuantOverrides(), cache=cache)
    cached = quantize_model(float_model, samples, settings, QuantOverrides(float_layers=frozenset({"conv2"})),
                            cache=cache)
    assert len(calls) == 1                                      # the second trial calibrated nothing
    assert cached.quant_params == plain.quant_params


def residual_concat_model(path: Path) -> Path:
    """conv1+relu → conv2 → Add(residual) → Concat(with conv1's output) → conv3: integer Add and
    Concat layers beside the Convs, each storing a quantized tensor."""
    rng = np.random.default_rng(2)
    weights = {"w1": rng.normal(0, 0.5, (8, 4, 3, 3)), "w2": rng.normal(0, 0.3, (8, 8, 1, 1)),
               "w3": rng.normal(0, 0.3, (4, 16, 3, 3))}
    inits = [numpy_helper.from_array(a.astype(np.float32), n) for n, a in weights.items()]
    nodes = [helper.make_node("Conv", ["x", "w1"], ["c1"], name="conv1", pads=[1, 1, 1, 1]),
             helper.make_node("Relu", ["c1"], ["r1"], name="relu1"),
             helper.make_node("Conv", ["r1", "w2"], ["c2"], name="conv2"),
             helper.make_node("Add", ["c2", "r1"], ["a"], name="add"),
             helper.make_node("Concat", ["a", "r1"], ["cat"], name="concat", axis=1),
             helper.make_node("Conv", ["cat", "w3"], ["y"], name="conv3", pads=[1, 1, 1, 1])]
    graph = helper.make_graph(nodes, "residual", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 4, 16, 16])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 4, 16, 16])], inits)
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)]), path)
    return path


def test_every_stored_tensor_is_movable_so_a_near_float_threshold_is_met(tmp_path):
    """The ranking covers every layer that stores an integer tensor (Add and Concat included), so
    the search can reach the whole model in float16: a threshold only float16 meets is met."""
    from openrknn.analysis.mixed_precision import _layer_of_tensor, auto_hybrid, output_ranking
    from openrknn.compile import calibration_setup
    from openrknn.sim.session import GraphRunner, lower
    samples = _samples()
    rknn = quantized_build(residual_concat_model(tmp_path / "m.onnx"), samples)
    model = rknn._model
    integer = [t for t, dtype in model.tensor_dtypes.items() if dtype == "int8" and t in _layer_of_tensor(model)]
    ranking = output_ranking(model, [[samples[0]]])
    assert {_layer_of_tensor(model)[t] for t in integer} <= set(ranking)
    assert {"conv1", "conv2", "concat", "conv3"} <= set(ranking)   # the residual Add is conv2's layer
    settings, calibration = calibration_setup(model, rknn._cfg(), str(tmp_path / "ds.txt"))
    plain = cosine(GraphRunner(model.golden).run({"x": samples[0]})[0],
                   GraphRunner(lower(model)).run({"x": samples[0]})[0])
    result = auto_hybrid(model, calibration, settings, cos_thresh=0.99999)
    assert plain < 0.99999 and result.met, (plain, result.output_cosine)
    assert min(result.output_cosine) >= 0.99999
