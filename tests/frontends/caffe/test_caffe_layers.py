"""Small Caffe nets written as real files, run through the RKNN facade, compared with numpy."""
from __future__ import annotations

import numpy as np
import pytest

import caffe_ref as ref
from caffe_files import input_layer, layer, run_rknn, write_model

RTOL = 1e-4


def close(actual: np.ndarray, expected: np.ndarray) -> None:
    assert actual.shape == expected.shape
    scale = max(float(np.abs(expected).max()), 1e-6)
    assert float(np.abs(actual - expected).max()) <= RTOL * scale


@pytest.fixture
def rng() -> np.random.Generator:
    return np.random.default_rng(7)


def test_conv_bn_scale_relu_pool_fc_softmax(tmp_path, rng):
    x = rng.normal(size=(1, 3, 11, 11)).astype(np.float32)
    w1, b1 = rng.normal(0, .3, (4, 3, 3, 3)).astype(np.float32), rng.normal(0, .1, 4).astype(np.float32)
    mean, var = rng.normal(0, .1, 4).astype(np.float32), rng.uniform(.5, 2, 4).astype(np.float32)
    factor = np.array([2.0], np.float32)
    gamma, beta = rng.uniform(.5, 1.5, 4).astype(np.float32), rng.normal(0, .1, 4).astype(np.float32)
    w2 = rng.normal(0, .3, (4, 1, 3, 2)).astype(np.float32)
    text = (input_layer("data", [1, 3, 11, 11])
            + layer("conv1", "Convolution", "data", params="convolution_param { num_output: 4 kernel_size: 3 "
                    "pad: 1 stride: 2 }")
            + layer("bn1", "BatchNorm", "conv1", "conv1", params="batch_norm_param { eps: 0.001 }")
            + layer("scale1", "Scale", "conv1", "conv1", params="scale_param { bias_term: true }")
            + layer("relu1", "ReLU", "conv1", "conv1", params="relu_param { negative_slope: 0.1 }")
            + layer("dw", "Convolution", "conv1", params="convolution_param { num_output: 4 group: 4 bias_term: false "
                    "kernel_h: 3 kernel_w: 2 pad_h: 2 pad_w: 0 dilation: 2 }")
            + layer("pool", "Pooling", "dw", params="pooling_param { pool: MAX kernel_size: 3 stride: 2 }")
            + layer("fc", "InnerProduct", "pool", params="inner_product_param { num_output: 5 }")
            + layer("prob", "Softmax", "fc"))
    y = ref.conv2d(x, w1, b1, stride=(2, 2), pad=(1, 1))
    y = ref.batch_norm(y, mean, var, 2.0, 1e-3, gamma, beta)
    y = np.where(y > 0, y, 0.1 * y)
    y = ref.conv2d(y, w2, None, pad=(2, 0), dilation=(2, 2), group=4)
    y = ref.pool(y, "max", (3, 3), (2, 2), (0, 0))
    wfc = rng.normal(0, .3, (5, y.size)).astype(np.float32)
    bfc = rng.normal(0, .1, 5).astype(np.float32)
    expected = ref.softmax(y.reshape(1, -1) @ wfc.T.astype(np.float64) + bfc, 1)
    weights = {"conv1": [w1, b1], "bn1": [mean, var, factor], "scale1": [gamma, beta], "dw": [w2], "fc": [wfc, bfc]}
    proto, model = write_model(tmp_path, text, weights)
    (out,) = run_rknn(proto, model, [x])
    close(out, expected)


def test_deconv_crop_eltwise_concat_slice_activations(tmp_path, rng):
    x = rng.normal(size=(1, 4, 5, 5)).astype(np.float32)
    wd, bd = rng.normal(0, .3, (4, 3, 4, 4)).astype(np.float32), rng.normal(0, .1, 6).astype(np.float32)
    slope = rng.uniform(.1, .3, 6).astype(np.float32)
    text = (input_layer("data", [1, 4, 5, 5])
            + layer("up", "Deconvolution", "data", params="convolution_param { num_output: 6 group: 2 kernel_size: 4 "
                    "stride: 2 pad: 1 }")
            + layer("crop", "Crop", ["up", "data"], params="crop_param { axis: 2 offset: 1 offset: 2 }")
            + layer("prelu", "PReLU", "crop")
            + layer("slice", "Slice", "prelu", ["a", "b", "c"], params="slice_param { axis: 1 slice_point: 2 "
                    "slice_point: 4 }")
            + layer("sig", "Sigmoid", "a") + layer("tanh", "TanH", "b")
            + layer("pow", "Power", "c", params="power_param { power: 2 scale: 0.5 shift: 1.5 }")
            + layer("sum", "Eltwise", ["sig", "tanh", "pow"], params="eltwise_param { operation: SUM coeff: 2 "
                    "coeff: -1 coeff: 0.5 }")
            + layer("prod", "Eltwise", ["sig", "tanh"], params="eltwise_param { operation: PROD }")
            + layer("max", "Eltwise", ["sig", "pow"], params="eltwise_param { operation: MAX }")
            + layer("cat", "Concat", ["sum", "prod", "max"], params="concat_param { axis: 1 }")
            + layer("drop", "Dropout", "cat", "cat"))
    up = ref.deconv2d(x, wd, bd, stride=(2, 2), pad=(1, 1), group=2)           # (1, 6, 10, 10)
    crop = up[:, :, 1:6, 2:7]
    pre = np.where(crop > 0, crop, crop * slope.reshape(1, -1, 1, 1))
    a, b, c = pre[:, :2], pre[:, 2:4], pre[:, 4:]
    sig, th, pw = 1 / (1 + np.exp(-a)), np.tanh(b), (1.5 + 0.5 * c) ** 2
    expected = np.concatenate([2 * sig - th + 0.5 * pw, sig * th, np.maximum(sig, pw)], axis=1)
    proto, model = write_model(tmp_path, text, {"up": [wd, bd], "prelu": [slope]})
    (out,) = run_rknn(proto, model, [x])
    close(out, expected)


@pytest.mark.parametrize("params,args", [
    ("pool: AVE kernel_size: 3 stride: 2 pad: 1", ("ave", (3, 3), (2, 2), (1, 1), True)),
    ("pool: MAX kernel_h: 3 kernel_w: 2 stride_h: 2 stride_w: 3 pad_h: 1 pad_w: 0",
     ("max", (3, 2), (2, 3), (1, 0), True)),
    ("pool: AVE kernel_size: 2 stride: 2 round_mode: FLOOR", ("ave", (2, 2), (2, 2), (0, 0), False)),
    ("pool: MAX kernel_size: 3 stride: 2 ceil_mode: false", ("max", (3, 3), (2, 2), (0, 0), False)),
    ("pool: AVE global_pooling: true", ("ave", (8, 7), (1, 1), (0, 0), True)),
    ("pool: AVE kernel_size: 2 stride_h: 3 stride_w: 4 pad_h: 1 pad_w: 0", ("ave", (2, 2), (3, 4), (1, 0), True)),
])
def test_pooling_caffe_rounding(tmp_path, rng, params, args):
    x = rng.normal(size=(1, 2, 8, 7)).astype(np.float32)
    text = input_layer("data", [1, 2, 8, 7]) + layer("pool", "Pooling", "data", params=f"pooling_param {{ {params} }}")
    proto, _ = write_model(tmp_path, text, {"pool": []})
    (out,) = run_rknn(proto, str(tmp_path / "net.caffemodel"), [x])
    close(out, ref.pool(x, *args))


def test_shape_layers_lrn_upsample_normalize(tmp_path, rng):
    x = rng.normal(size=(1, 6, 4, 5)).astype(np.float32)
    norm_scale = rng.uniform(5, 20, 6).astype(np.float32)
    text = (input_layer("data", [1, 6, 4, 5])
            + layer("lrn1", "LRN", "data", params="lrn_param { local_size: 3 alpha: 0.5 beta: 0.75 k: 2 }")
            + layer("lrn2", "LRN", "lrn1", params="lrn_param { local_size: 3 alpha: 0.3 beta: 0.5 "
                    "norm_region: WITHIN_CHANNEL }")
            + layer("norm", "Normalize", "lrn2", params="norm_param { across_spatial: false channel_shared: false }")
            + layer("upsample", "Upsample", "norm", params="upsample_param { scale: 2 }")
            + layer("perm", "Permute", "upsample", params="permute_param { order: 0 order: 2 order: 3 order: 1 }")
            + layer("flat", "Flatten", "perm", params="flatten_param { axis: 2 }")
            + layer("reshape", "Reshape", "flat", params="reshape_param { shape { dim: 0 dim: -1 dim: 3 } }")
            + layer("soft", "Softmax", "reshape", params="softmax_param { axis: 2 }"))
    y = ref.lrn_across(x.astype(np.float64), 3, 0.5, 0.75, 2)
    y = ref.lrn_within(y, 3, 0.3, 0.5)
    y = ref.normalize(y, norm_scale, across_spatial=False)
    y = y.repeat(2, axis=2).repeat(2, axis=3).transpose(0, 2, 3, 1).reshape(1, 8, 60).reshape(1, -1, 3)
    proto, model = write_model(tmp_path, text, {"norm": [norm_scale]})
    (out,) = run_rknn(proto, model, [x])
    close(out, ref.softmax(y, 2))


def test_legacy_v1_layers_with_input_dim(tmp_path, rng):
    """Old nets: top-level ``input``/``input_dim`` and ``layers { type: CONVOLUTION }`` with V1 weights."""
    x = rng.normal(size=(1, 2, 6, 6)).astype(np.float32)
    w, b = rng.normal(0, .3, (3, 2, 3, 3)).astype(np.float32), rng.normal(0, .1, 3).astype(np.float32)
    wfc, bfc = rng.normal(0, .3, (4, 12)).astype(np.float32), rng.normal(0, .1, 4).astype(np.float32)
    text = """name: "old"
input: "data"
input_dim: 1 input_dim: 2 input_dim: 6 input_dim: 6
layers { name: "conv" type: CONVOLUTION bottom: "data" top: "conv"
         blobs_lr: 1 blobs_lr: 2
         convolution_param { num_output: 3 kernel_size: 3 } }
layers { name: "relu" type: RELU bottom: "conv" top: "conv" }
layers { name: "pool" type: POOLING bottom: "conv" top: "pool" pooling_param { pool: AVE kernel_size: 2 stride: 2 } }
layers { name: "fc" type: INNER_PRODUCT bottom: "pool" top: "fc" inner_product_param { num_output: 4 } }
layers { name: "prob" type: SOFTMAX bottom: "fc" top: "prob" }
"""
    y = np.maximum(ref.conv2d(x, w, b), 0)
    y = ref.pool(y, "ave", (2, 2), (2, 2), (0, 0))
    expected = ref.softmax(y.reshape(1, -1) @ wfc.T.astype(np.float64) + bfc, 1)
    proto, model = write_model(tmp_path, text, {"conv": [w, b], "fc": [wfc.reshape(1, 1, 4, 12), bfc]}, v1=True)
    (out,) = run_rknn(proto, model, [x])
    close(out, expected)


def test_two_inputs_ordered_by_input_name(tmp_path, rng):
    a = rng.normal(size=(1, 2, 3, 3)).astype(np.float32)
    b = rng.normal(size=(1, 2, 3, 3)).astype(np.float32)
    text = (input_layer("a", [1, 2, 3, 3]) + input_layer("b", [1, 2, 3, 3])
            + layer("diff", "Eltwise", ["a", "b"], params="eltwise_param { operation: SUM coeff: 1 coeff: -1 }"))
    proto, _ = write_model(tmp_path, text, None)
    (out,) = run_rknn(proto, None, [b, a], input_name=["b", "a"])
    close(out, a - b)


def test_random_weights_when_no_caffemodel(tmp_path, capsys):
    text = (input_layer("data", [1, 3, 8, 8])
            + layer("conv", "Convolution", "data", params="convolution_param { num_output: 4 kernel_size: 3 }")
            + layer("bn", "BatchNorm", "conv", "conv") + layer("sc", "Scale", "conv", "conv")
            + layer("fc", "InnerProduct", "conv", params="inner_product_param { num_output: 2 }"))
    proto, _ = write_model(tmp_path, text, None)
    (out,) = run_rknn(proto, None, [np.ones((1, 3, 8, 8), np.float32)])
    assert out.shape == (1, 2) and np.isfinite(out).all()
    assert "RANDOM weights" in capsys.readouterr().out


def test_scale_bias_split_and_more_activations(tmp_path, rng):
    x = rng.normal(size=(1, 3, 4, 4)).astype(np.float32)
    factor = rng.normal(size=(1, 3, 4, 4)).astype(np.float32)
    bias = rng.normal(size=3).astype(np.float32)
    sbias = rng.normal(size=(1, 3, 4, 4)).astype(np.float32)
    wfc, bfc = rng.normal(0, .3, (4 * 4, 5)).astype(np.float32), rng.normal(0, .1, 5).astype(np.float32)
    text = (input_layer("data", [1, 3, 4, 4]) + input_layer("factor", [1, 3, 4, 4])
            + layer("split", "Split", "data", ["d1", "d2", "d3"])
            + layer("elu", "ELU", "d1", params="elu_param { alpha: 0.7 }")
            + layer("abs", "AbsVal", "d2") + layer("bnll", "BNLL", "d3")
            + layer("bias", "Bias", "elu")
            + layer("mul", "Scale", ["abs", "factor"], params="scale_param { axis: 0 bias_term: true }")
            + layer("sum", "Eltwise", ["bias", "mul", "bnll"])
            + layer("fc", "InnerProduct", "sum",
                    params="inner_product_param { num_output: 5 axis: 2 transpose: true }"))
    elu = np.where(x > 0, x, 0.7 * (np.exp(x) - 1))
    total = (elu + bias.reshape(1, 3, 1, 1) + np.abs(x) * factor + sbias
             + np.log1p(np.exp(x)))
    proto, model = write_model(tmp_path, text, {"bias": [bias], "mul": [sbias],
                                                "fc": [wfc, bfc]})
    (out,) = run_rknn(proto, model, [x, factor])
    close(out, total.reshape(1, 3, 16) @ wfc.astype(np.float64) + bfc)


def test_top_level_input_shape_and_dummy_data(tmp_path, rng):
    a = rng.normal(size=(1, 2, 3, 3)).astype(np.float32)
    b = rng.normal(size=(1, 2, 3, 3)).astype(np.float32)
    text = ('input: "a"\ninput_shape { dim: 1 dim: 2 dim: 3 dim: 3 }\n'
            'layer { name: "b" type: "DummyData" top: "b"\n'
            '        dummy_data_param { shape { dim: 1 dim: 2 dim: 3 dim: 3 } } }\n'
            + layer("norm", "Normalize", "a", params="norm_param { across_spatial: true channel_shared: true }")
            + layer("max", "Eltwise", ["norm", "b"], params="eltwise_param { operation: MAX }"))
    proto, model = write_model(tmp_path, text, {"norm": [np.array([3.0], np.float32)]})
    (out,) = run_rknn(proto, model, [a, b])
    close(out, np.maximum(ref.normalize(a.astype(np.float64), [3.0], across_spatial=True), b))


def test_default_float16_path_stays_close(tmp_path, rng):
    """Without float_dtype='float32' layers run in fp16: still close to the fp64 reference."""
    x = rng.normal(size=(1, 3, 8, 8)).astype(np.float32)
    w, bias = rng.normal(0, .3, (4, 3, 3, 3)).astype(np.float32), rng.normal(0, .1, 4).astype(np.float32)
    text = (input_layer("data", [1, 3, 8, 8])
            + layer("conv", "Convolution", "data", params="convolution_param { num_output: 4 kernel_size: 3 pad: 1 }")
            + layer("relu", "ReLU", "conv", "conv")
            + layer("pool", "Pooling", "conv", params="pooling_param { pool: AVE kernel_size: 3 stride: 2 pad: 1 }"))
    proto, model = write_model(tmp_path, text, {"conv": [w, bias]})
    (out,) = run_rknn(proto, model, [x], float_dtype="float16")
    expected = ref.pool(np.maximum(ref.conv2d(x, w, bias, pad=(1, 1)), 0), "ave", (3, 3), (2, 2), (1, 1))
    assert out.shape == expected.shape
    assert float(np.abs(out - expected).max()) < 1e-2 * float(np.abs(expected).max())
