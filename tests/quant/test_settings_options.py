"""The quantization options are named and validated once (``quant/settings.py``); ``config()`` and
``QuantSettings.validate`` both call it, and an algorithm says itself whether its extra is installed."""
from __future__ import annotations

import sys

import pytest

from openrknn import config
from openrknn.chips import get_chip
from openrknn.errors import ConfigError
from openrknn.quant import settings
from openrknn.quant.algorithms import algorithm_class
from openrknn.quant.settings import QuantSettings


def test_config_uses_the_stage_s_names():
    for name in ("QUANT_ALGORITHMS", "QUANT_METHODS", "TOOLKIT1_QUANT_DTYPES", "TOOLKIT2_QUANT_DTYPES",
                 "QUANT_DTYPE_ALIASES"):
        assert getattr(config, name) is getattr(settings, name)
    assert all(algorithm_class(name) is not None for name in settings.QUANT_ALGORITHMS)


@pytest.mark.parametrize("options, message", [
    ({"quantized_dtype": "w3a3"}, "quantized_dtype='w3a3' is not valid"),
    ({"quantized_method": "row"}, "quantized_method='row' is not valid"),
    ({"quantized_method": "group32"}, "quantized_method 'group32' is only for quantized_dtype 'w4a16'"),
    ({"quantized_algorithm": "percentile"}, "quantized_algorithm='percentile' is not valid"),
])
def test_config_and_build_refuse_with_the_same_words(options, message):
    with pytest.raises(ConfigError, match=f"config: {message}"):
        config.parse_config(target_platform="rk3588", **options)
    record = QuantSettings(dtype=options.get("quantized_dtype", "w8a8"), method=options.get("quantized_method", "channel"),
                           algorithm=options.get("quantized_algorithm", "normal"))
    with pytest.raises(ConfigError, match=f"^{message}"):
        record.validate(get_chip("rk3588"))


def test_adaround_without_torch_names_the_extra(monkeypatch):
    monkeypatch.setitem(sys.modules, "torch", None)   # import blocked: find_spec raises, available() says no
    adaround = algorithm_class("adaround")
    assert adaround.available() is False
    with pytest.raises(ConfigError, match=r"config: quantized_algorithm 'adaround' needs PyTorch: pip install 'openrknn\[torch\]'"):
        config.parse_config(target_platform="rk3588", quantized_algorithm="adaround")
    with pytest.raises(ConfigError, match="needs PyTorch"):
        QuantSettings(algorithm="adaround").validate(get_chip("rk3588"))
