"""load_mxnet: native symbol .json / .params files through the RKNN facade, checked against numpy."""
from __future__ import annotations

from math import erf

import numpy as np
import pytest
from mxnet_writer import SymbolWriter, batchnorm, conv2d, pool2d, softmax, write_params

from openrknn.frontends.mxnet import load_mxnet
from rknn.api import RKNN


def _params(rng):
    p = {
        "conv0_weight": rng.normal(0, 0.3, (8, 3, 3, 3)), "conv0_bias": rng.normal(0, 0.1, 8),
        "bn0_gamma": rng.uniform(0.5, 1.5, 8), "bn0_beta": rng.normal(0, 0.1, 8),
        "bn1_gamma": rng.uniform(0.5, 1.5, 8), "bn1_beta": rng.normal(0, 0.1, 8),
        "conv1_weight": rng.normal(0, 0.3, (8, 4, 3, 3)),
        "conv2_weight": rng.normal(0, 0.3, (4, 8, 1, 1)), "conv2_bias": rng.normal(0, 0.1, 4),
        "prelu2_gamma": rng.uniform(0.05, 0.3, 4),
        "fc_weight": rng.normal(0, 0.3, (5, 12)), "fc_bias": rng.normal(0, 0.1, 5),
        "fc2_weight": rng.normal(0, 0.3, (3, 5)), "fc2_bias": rng.normal(0, 0.1, 3),
    }
    p = {k: v.astype(np.float32) for k, v in p.items()}
    p["conv2_bias"] = p["conv2_bias"].astype(np.float64)  # a float64 array in the file
    aux = {"bn0_moving_mean": rng.normal(0, 0.1, 8), "bn0_moving_var": rng.uniform(0.5, 1.5, 8),
           "bn1_moving_mean": rng.normal(0, 0.1, 8), "bn1_moving_var": rng.uniform(0.5, 1.5, 8)}
    return p, {k: v.astype(np.float32) for k, v in aux.items()}


def _symbol(path):
    s = SymbolWriter()
    v = {name: s.var(name) for name in ("data",)}
    var = lambda name: v.setdefault(name, s.var(name))  # noqa: E731
    conv0 = s.op("Convolution", "conv0", [v["data"], var("conv0_weight"), var("conv0_bias")], kernel="(3, 3)",
                 pad="(1, 1)", num_filter=8)
    bn0 = s.op("BatchNorm", "bn0", [conv0] + [var(f"bn0_{k}") for k in ("gamma", "beta", "moving_mean", "moving_var")],
               fix_gamma="False", eps=1e-5)
    relu0 = s.op("Activation", "relu0", [bn0], act_type="relu")
    pool0 = s.op("Pooling", "pool0", [relu0], kernel="(3, 3)", stride="(2, 2)", pool_type="max",
                 pooling_convention="full")
    conv1 = s.op("Convolution", "conv1", [pool0, var("conv1_weight")], kernel="(3, 3)", pad="(1, 1)", num_filter=8,
                 num_group=2, no_bias="True")
    bn1 = s.op("BatchNorm", "bn1", [conv1] + [var(f"bn1_{k}") for k in ("gamma", "beta", "moving_mean", "moving_var")])
    lrelu1 = s.op("LeakyReLU", "lrelu1", [bn1], act_type="leaky", slope=0.1)
    add1 = s.op("elemwise_add", "add1", [lrelu1, pool0])
    conv2 = s.op("Convolution", "conv2", [add1, var("conv2_weight"), var("conv2_bias")], kernel="(1, 1)", num_filter=4)
    prelu2 = s.op("LeakyReLU", "prelu2", [conv2, var("prelu2_gamma")], act_type="prelu")
    sig2 = s.op("Activation", "sig2", [conv2], act_type="sigmoid")
    log2 = s.op("log", "log2", [sig2])
    minus2 = s.op("_minus_scalar", "minus2", [log2], scalar=0.5)
    mul2 = s.op("_mul_scalar", "mul2", [minus2], scalar=2.0)
    plus2 = s.op("_Plus", "plus2", [prelu2, mul2])
    cat = s.op("Concat", "cat", [add1, plus2], dim=1, num_args=2)
    up = s.op("UpSampling", "up", [cat], scale=2, sample_type="nearest", num_args=1)
    crop = s.op("Crop", "crop", [up], h_w="(10, 10)", center_crop="True", num_args=1)
    pool1 = s.op("Pooling", "pool1", [crop], kernel="(2, 2)", stride="(2, 2)", pool_type="avg")
    drop = s.op("Dropout", "drop", [pool1], p=0.5)
    gap = s.op("Pooling", "gap", [drop], kernel="(1, 1)", global_pool="True", pool_type="avg")
    flat = s.op("Flatten", "flat", [gap])
    fc = s.op("FullyConnected", "fc", [flat, var("fc_weight"), var("fc_bias")], num_hidden=5)
    prob = s.op("SoftmaxOutput", "prob", [fc, var("prob_label")])
    resh = s.op("Reshape", "resh", [pool1], shape="(0, -3, -1)")
    soft = s.op("softmax", "soft", [resh], axis=-1)
    fc2 = s.op("FullyConnected", "fc2", [drop, var("fc2_weight"), var("fc2_bias")], num_hidden=3, flatten="False")
    return s.write(path, [prob, soft, fc2])


def _reference(x, p, a):
    y = conv2d(x, p["conv0_weight"], p["conv0_bias"], pad=1)
    y = batchnorm(y, p["bn0_gamma"], p["bn0_beta"], a["bn0_moving_mean"], a["bn0_moving_var"], 1e-5, False)
    pool0 = pool2d(np.maximum(y, 0), 3, 2, 0, "max", full=True)
    y = conv2d(pool0, p["conv1_weight"], pad=1, groups=2)
    y = batchnorm(y, p["bn1_gamma"], p["bn1_beta"], a["bn1_moving_mean"], a["bn1_moving_var"])
    add1 = np.where(y > 0, y, 0.1 * y) + pool0
    conv2 = conv2d(add1, p["conv2_weight"], p["conv2_bias"])
    prelu = np.where(conv2 > 0, conv2, p["prelu2_gamma"][None, :, None, None] * conv2)
    plus2 = prelu + (np.log(1 / (1 + np.exp(-conv2))) - 0.5) * 2.0
    up = np.concatenate([add1, plus2], axis=1).repeat(2, axis=2).repeat(2, axis=3)
    top = (up.shape[2] - 10) // 2
    pool1 = pool2d(up[:, :, top:top + 10, top:top + 10], 2, 2, 0, "avg")
    fc = pool1.mean(axis=(2, 3)) @ p["fc_weight"].T + p["fc_bias"]
    fc2 = pool1 @ p["fc2_weight"].T + p["fc2_bias"]
    return [softmax(fc, 1), softmax(pool1.reshape(1, -1, pool1.shape[3]), -1), fc2]


def run_facade(symbol, params, sizes, inputs):
    rknn = RKNN()
    assert rknn.config(target_platform="rk3588", float_dtype="float32") == 0
    assert rknn.load_mxnet(str(symbol), str(params), sizes) == 0
    assert rknn.build(do_quantization=False) == 0
    assert rknn.init_runtime() == 0
    outputs = rknn.inference(inputs=inputs, data_format="nchw")
    rknn.release()
    return outputs


def assert_close(got, want):
    assert [g.shape for g in got] == [w.shape for w in want]
    for g, w in zip(got, want):
        rel = np.abs(g - w).max() / max(np.abs(w).max(), 1e-12)
        assert rel <= 1e-4, rel


@pytest.mark.parametrize("version", ["v2", "v1", "v3", "legacy"])
def test_small_cnn_all_ndarray_versions(tmp_path, version):
    rng = np.random.default_rng(0)
    p, a = _params(rng)
    symbol = _symbol(tmp_path / "net-symbol.json")
    params = write_params(tmp_path / "net-0000.params", {**{f"arg:{k}": v for k, v in p.items()},
                                                        **{f"aux:{k}": v for k, v in a.items()}}, version)
    x = rng.uniform(-1, 1, (1, 3, 12, 12)).astype(np.float32)
    got = run_facade(symbol, params, [[1, 3, 12, 12]], [x])
    assert_close(got, _reference(x.astype(np.float64), p, a))


def test_names_without_prefix_and_node_names_kept(tmp_path):
    rng = np.random.default_rng(1)
    p, a = _params(rng)
    symbol = _symbol(tmp_path / "net-symbol.json")
    params = write_params(tmp_path / "net.params", {**p, **a})
    source = load_mxnet(str(symbol), str(params), [[3, 12, 12]])  # no batch: 1 is prepended
    graph = source.model.graph
    assert [i.name for i in graph.input] == ["data"]
    assert {"conv0", "bn0", "relu0", "pool0", "crop", "prob"} <= {n.name for n in graph.node}
    assert [o.name for o in graph.output] == ["prob", "soft", "fc2"]
    assert source.framework == "mxnet" and source.input_layouts == {"data": "NCHW"}


def test_second_net_other_op_options(tmp_path):
    """sum / full avg pooling without padding count, gelu, 4-D SoftmaxOutput, Reshape -4 and
    reverse, softmax temperature, two inputs, Crop to a reference input, bilinear UpSampling."""
    rng = np.random.default_rng(2)
    up_w = np.tile(rng.uniform(0, 1, (1, 1, 4, 4)), (2, 1, 1, 1)).astype(np.float32)
    s = SymbolWriter()
    a, b, w = s.var("a"), s.var("b"), s.var("up_weight")
    sp = s.op("Pooling", "sp", [a], kernel="(2, 2)", stride="(2, 2)", pool_type="sum")
    ap = s.op("Pooling", "ap", [a], kernel="(3, 3)", stride="(2, 2)", pool_type="avg",
              pooling_convention="full", count_include_pad="False")
    gelu = s.op("LeakyReLU", "gelu", [s.op("_rminus_scalar", "rsub", [ap], scalar=1.0)], act_type="gelu")
    so = s.op("SoftmaxOutput", "so", [s.op("broadcast_mul", "mul", [sp, gelu]), s.var("so_label")])
    r1 = s.op("Reshape", "r1", [so], shape="(-4, 1, -1, 0, -2)")
    r2 = s.op("Reshape", "r2", [r1], shape="(-1, 3)", reverse="True")
    t = s.op("softmax", "t", [r2], axis=1, temperature=2.0)
    up = s.op("UpSampling", "bil", [gelu, w], scale=2, sample_type="bilinear", num_filter=2, num_args=2)
    cr = s.op("Crop", "cr", [up, b], num_args=2, offset="(1, 2)")
    symbol = s.write(tmp_path / "two-symbol.json", [t, cr])
    params = write_params(tmp_path / "two.params", {"arg:up_weight": up_w})
    xa = rng.uniform(-2, 2, (1, 2, 6, 6)).astype(np.float32)
    xb = rng.uniform(-2, 2, (1, 2, 3, 4)).astype(np.float32)
    got = run_facade(symbol, params, [[1, 2, 6, 6], [1, 2, 3, 4]], [xa, xb])

    x = xa.astype(np.float64)
    sp_ = pool2d(x, 2, 2, 0, "sum")
    ap_ = pool2d(x, 3, 2, 0, "avg", full=True, count_include_pad=False)
    v = 1.0 - ap_
    gelu_ = v * 0.5 * (1 + np.vectorize(erf)(v / np.sqrt(2)))
    so_ = softmax((sp_ * gelu_).reshape(1, -1), 1).reshape(sp_.shape)
    t_ = softmax(so_.reshape(-1, 3) / 2.0, 1)
    full = np.zeros((1, 2, 8, 8))  # transposed conv: kernel 4, stride 2, then pad 1 cropped
    for i in range(3):
        for j in range(3):
            full[:, :, 2 * i:2 * i + 4, 2 * j:2 * j + 4] += gelu_[:, :, i:i + 1, j:j + 1] * up_w[None, :, 0]
    up_ = full[:, :, 1:7, 1:7]
    assert_close(got, [t_, up_[:, :, 1:4, 2:6]])
