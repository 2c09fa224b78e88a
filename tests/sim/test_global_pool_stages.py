"""rknn-toolkit2 2.5.0 runs a GlobalAveragePool over more than 7×7 as a cascade of pooling stages,
each stored in int8 (measured on its simulator with PP-OCR's classifier: every stage equal integer
for integer). openrknn's layer record plans the same stages and its simulator stores them."""
from __future__ import annotations

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from openrknn.graph import npu_layers
from openrknn.quant.numerics import QuantParams
from tests.helpers import quantized_build


def test_stage_plan_is_the_vendors():
    stages = npu_layers.global_average_pool_stages(3, 96)
    assert [s.kernel for s in stages] == [(3, 7), (1, 7), (1, 2)]
    assert stages[0].pads == (0, 1, 0, 1)
    assert np.isclose(stages[0].factor, 288 ** (-1 / 3))
    # 12 → 2: a 7-wide window over one padded position (the same sums as two windows of 6)
    assert [s.kernel for s in npu_layers.global_average_pool_stages(12, 96)] == [(7, 7), (2, 7), (1, 2)]
    assert npu_layers.global_average_pool_stages(12, 96)[0].pads == (1, 1, 1, 1)


def test_stage_windows_are_seven_wide_as_the_vendors():
    """PP-OCRv3 det's SE pools, read from the vendor simulator's sessions: 15×15 runs a 7×7 kernel with
    3 padded positions each side (windows 4, 7, 4 wide, not 5, 5, 5), then 3×3; 120×120 → 18×18 (7×7,
    pads 3/3) → 3×3 (7×7, pads 1/2) → 1."""
    fifteen = npu_layers.global_average_pool_stages(15, 15)
    assert [(s.kernel, s.pads) for s in fifteen] == [((7, 7), (3, 3, 3, 3)), ((3, 3), (0, 0, 0, 0))]
    assert np.isclose(fifteen[0].factor, 1 / 15)
    wide = npu_layers.global_average_pool_stages(120, 120)
    assert [(s.kernel, s.pads) for s in wide] == [((7, 7), (3, 3, 3, 3)), ((7, 7), (1, 1, 2, 2)), ((3, 3), (0, 0, 0, 0))]
    assert [s.kernel for s in npu_layers.global_average_pool_stages(1, 48)] == [(1, 7), (1, 7)]
    assert npu_layers.global_average_pool_stages(1, 48)[0].pads == (0, 0, 0, 1)
    assert npu_layers.global_average_pool_stages(7, 7) == []


def test_every_first_stage_kernel_is_seven_wide():
    """rknn-toolkit2 2.5.0, a probe (Conv → Relu → GlobalAveragePool → Conv, rk3588): its layer
    table prints a (1,8,7,7) depthwise first stage for pools over 24², 16², 12² and 10² (outputs 4², 3²,
    2², 2²), and the first stage's calibrated maximum in its ``hybrid_quantization_step1`` config is
    that of a 7×7 window sum with the padding split smaller half first (24²: 1.017108, 16²: 1.351125,
    10²: 1.122628; a 6-wide kernel for 24² or 16² gives other ranges)."""
    for size, out, pad in ((24, 4, 4), (16, 3, 5), (12, 2, 2), (10, 2, 4)):
        stages = npu_layers.global_average_pool_stages(size, size)
        assert stages[0].kernel == (7, 7), size
        assert stages[0].pads == (pad // 2, pad // 2, pad - pad // 2, pad - pad // 2), size
        assert stages[1].kernel == (out, out), size
        assert np.isclose(stages[0].factor, size ** -1.0), size   # (H·W)^(-1/2) over two stages


def _model(path):
    rng = np.random.default_rng(0)
    w = numpy_helper.from_array(rng.normal(0, 1, (4, 4, 1, 1)).astype(np.float32), "w")
    nodes = [helper.make_node("Conv", ["x", "w"], ["c"], name="conv"),
             helper.make_node("Relu", ["c"], ["r"], name="relu"),
             helper.make_node("GlobalAveragePool", ["r"], ["gap"], name="gap")]
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 4, 3, 96])],
                              [helper.make_tensor_value_info("gap", TensorProto.FLOAT, [1, 4, 1, 1])], [w])
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)]), path)
    return path


def _int8(values, params: dict) -> np.ndarray:
    p = QuantParams.from_dict(params)
    s, z = float(p.scale.ravel()[0]), float(p.zero_point.ravel()[0])
    return (np.clip(np.round(values / s) + z, -128, 127) - z) * s


def test_simulator_stores_every_stage_in_int8(tmp_path):
    samples = [np.random.default_rng(i).normal(0, 1, (1, 3, 96, 4)).astype(np.float32) for i in range(4)]
    rknn = quantized_build(_model(tmp_path / "m.onnx"), samples)
    params = rknn._model.quant_params
    stage_names = [npu_layers.pool_stage_tensor("gap", j) for j in range(2)]
    assert all(n in params and params[n]["dtype"] == "int8" for n in stage_names), "each stage has its range"
    assert rknn.init_runtime() == 0
    sample = samples[0]
    got = np.asarray(rknn.inference(inputs=[sample])[0], np.float64).ravel()
    # the reference cascade, from the simulator's own stored Relu integers
    weight = np.random.default_rng(0).normal(0, 1, (4, 4, 1, 1))[:, :, 0, 0]   # _model's
    relu = _int8(np.maximum(np.einsum("oc,nchw->nohw", weight, sample.transpose(0, 3, 1, 2).astype(np.float64)), 0),
                 params["r"])
    x = relu[0]
    a = 288 ** (-1 / 3)
    padded = np.zeros((4, 3, 98))
    padded[:, :, 1:97] = x
    stage0 = _int8(padded.reshape(4, 3, 14, 7).sum(axis=(1, 3)) * a, params[stage_names[0]])
    stage1 = _int8(stage0.reshape(4, 2, 7).sum(axis=2) * a, params[stage_names[1]])
    expected = _int8(stage1.sum(axis=1) * a, params["gap"])
    step = QuantParams.from_dict(params["gap"]).scale.ravel()[0]
    # int8 weights make the Relu integers differ from the float ones by a step at most: allow one output step
    assert np.abs(got - expected).max() <= 1.01 * step
    rknn.release()


def test_a_float16_pool_names_its_vendor_stages_float16(tmp_path):
    """rknn-toolkit2 keeps the cascade's stages int8 unless they are listed with the pool's float16 layer."""
    from openrknn.export import rockchip
    from openrknn.quant import QuantSettings, quantize_model
    from openrknn.quant.hybrid import float_record
    from openrknn.quant.overrides import QuantOverrides
    samples = [np.random.default_rng(i).normal(0, 1, (1, 3, 96, 4)).astype(np.float32) for i in range(4)]
    built = quantized_build(_model(tmp_path / "m.onnx"), samples)._model
    assert not any(name.endswith("_2conv0") for name in rockchip.float16_layer_internals(built))
    hybrid = quantize_model(float_record(built), [[s.transpose(0, 3, 1, 2)] for s in samples], QuantSettings(),
                            QuantOverrides(float_layers=frozenset({"gap"})))
    assert npu_layers.pool_stage_tensor("gap", 0) not in hybrid.quant_params   # a float16 pool runs whole
    assert {"gap_2conv0", "gap_2conv1"} <= set(rockchip.float16_layer_internals(hybrid))
