"""config(): both generations' options are parsed into one validated record."""
from __future__ import annotations

import pytest

from openrknn.config import parse_config
from openrknn.errors import ConfigError


def test_defaults_toolkit2():
    cfg = parse_config()
    assert cfg.target_platform == ["rk3566"] and cfg.toolkit == 2
    assert (cfg.quantized_dtype, cfg.quantized_algorithm, cfg.quantized_method) == ("w8a8", "normal", "channel")
    assert cfg.optimization_level == 3 and cfg.float_dtype == "float16"


def test_toolkit1_forms():
    cfg = parse_config(channel_mean_value="103.94 116.78 123.68 58.82#0 0 0 255", reorder_channel="2 1 0#0 1 2",
                       target_platform=["rk1808", "rk3399pro"], batch_size=16, epochs=2)
    assert cfg.toolkit == 1 and cfg.target_platform == ["rk1808", "rk3399pro"]
    assert cfg.mean_values == [[103.94, 116.78, 123.68], [0, 0, 0]]
    assert cfg.std_values == [[58.82] * 3, [255.0] * 3]
    assert cfg.reorder_channel == [[2, 1, 0], [0, 1, 2]]
    assert cfg.quantized_dtype == "asymmetric_quantized-u8"
    assert parse_config(channel_mean_value="0 0 0 1").target_platform == ["rk1808"]


def test_aliases_and_case():
    assert parse_config(quantized_dtype="asymmetric_quantized-8", target_platform="RK3588").quantized_dtype == "w8a8"
    assert parse_config(quantized_dtype="dynamic_fixed_point-8", target_platform="rv1126").quantized_dtype == \
        "dynamic_fixed_point-i8"
    assert parse_config(target_platform="rk3588s").target_platform == ["rk3588"]
    assert parse_config(mean_values=[128, 128, 128]).mean_values == [[128.0] * 3]   # flat form of 1.1 examples


@pytest.mark.parametrize("kwargs", [
    {"quantized_method": "group32"},                       # only for w4a16
    {"quantized_dtype": "w8a16", "target_platform": "rk3588"},
    {"quantized_dtype": "w16a16i", "target_platform": "rk3566"},
    {"single_core_mode": True, "target_platform": "rk3566"},
    {"inputs_yuv_fmt": ["rgb565"]},
    {"op_target": {"conv1": "dsp"}},
    {"dynamic_input": [[[1, 3, 224, 224]], [[1, 3, 160, 160], [1, 3]]]},
    {"custom_string": 5},
    {"quant_img_RGB2BGR": "yes"},
    {"channel_mean_value": "1 2 3 4", "mean_values": [[1, 2, 3]]},
    {"epochs": 0},
])
def test_invalid_values(kwargs):
    with pytest.raises(ConfigError):
        parse_config(**kwargs)


def test_documented_later_features_are_stored():
    cfg = parse_config(target_platform="rk3576", quantized_dtype="w4a16", quantized_method="group64",
                       sparse_infer=True, single_core_mode=True, op_target={"conv": "cpu"},
                       dynamic_input=[[[1, 3, 224, 224]], [[1, 3, 160, 160]]], inputs_yuv_fmt=["nv12"],
                       model_pruning=True, remove_reshape=True, compress_weight=True, auto_hybrid_cos_thresh=0.99)
    assert cfg.quantized_method == "group64" and cfg.op_target == {"conv": "cpu"}
    assert cfg.dynamic_input[1] == [[1, 3, 160, 160]] and cfg.inputs_yuv_fmt == ["nv12"]


@pytest.mark.parametrize("kw", [{"mean_values": [[float("nan"), 0, 0]]}, {"std_values": [[1, float("inf"), 1]]},
                                {"mean_values": [[0, 0, -float("inf")]], "std_values": [[1, 1, 1]]},
                                {"channel_mean_value": "nan 0 0 1"}])
def test_nan_or_inf_normalisation_rejected(kw):
    with pytest.raises(ConfigError, match="NaN or Inf"):
        parse_config(**kw)
