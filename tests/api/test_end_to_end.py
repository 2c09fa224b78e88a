"""The documented Toolkit2 and Toolkit1 flows, end to end on a generated model."""
from __future__ import annotations

import numpy as np
import pytest

from rknn.api import RKNN
from rknnlite.api import RKNNLite
from tests.helpers import cosine, reference_session

MEAN = [123.675, 116.28, 103.53]
STD = [58.395, 57.12, 57.375]


def _reference(model_path, img_nhwc, mean, std, order=(0, 1, 2)):
    x = img_nhwc.astype(np.float32)[..., list(order)]
    x = ((x - np.float32(mean)) / np.float32(std)).transpose(0, 3, 1, 2).astype(np.float32)
    return reference_session(str(model_path)).run(None, {"x": x})[0]


@pytest.fixture
def image():
    return np.random.default_rng(3).integers(0, 256, (1, 16, 16, 3), dtype=np.uint8)


def test_toolkit2_flow_fp32_and_fp16(conv_model, image, tmp_path):
    ref = _reference(conv_model, image, MEAN, STD)
    for float_dtype in ("float32", "float16"):
        rknn = RKNN(verbose=True, verbose_file=str(tmp_path / "build.log"))
        assert rknn.config(mean_values=[MEAN], std_values=[STD], target_platform="rk3588", float_dtype=float_dtype) == 0
        assert rknn.load_onnx(model=str(conv_model)) == 0
        assert rknn.build(do_quantization=False) == 0
        assert rknn.export_rknn(str(tmp_path / "m.rknn")) == 0
        assert rknn.init_runtime() == 0
        out = rknn.inference(inputs=[image])[0]
        assert out.dtype == np.float32 and out.shape == (1, 5)
        if float_dtype == "float32":
            np.testing.assert_allclose(out, ref, rtol=1e-4, atol=1e-6)
        else:
            assert cosine(out, ref) >= 0.9999
            assert not np.array_equal(out, ref)   # fp16 rounding is really applied
        # load_rknn of the exported file gives identical outputs
        again = RKNN()
        assert again.load_rknn(str(tmp_path / "m.rknn")) == 0
        assert again.init_runtime() == 0
        np.testing.assert_array_equal(again.inference(inputs=[image])[0], out)
        rknn.release()
    assert (tmp_path / "build.log").read_text().strip()


def test_nchw_input_and_hwc_without_batch(conv_model, image):
    rknn = RKNN()
    rknn.config(mean_values=[MEAN], std_values=[STD], float_dtype="float32")
    rknn.load_onnx(model=str(conv_model))
    rknn.build(do_quantization=False)
    rknn.init_runtime()
    nhwc = rknn.inference(inputs=[image])[0]
    nchw = rknn.inference(inputs=[image.transpose(0, 3, 1, 2)], data_format=["nchw"])[0]
    hwc = rknn.inference(inputs=[image[0]])[0]
    np.testing.assert_array_equal(nhwc, nchw)
    np.testing.assert_array_equal(nhwc, hwc)


def test_toolkit1_flow_with_reorder(conv_model, image, tmp_path):
    rknn = RKNN()
    assert rknn.config(channel_mean_value="103.94 116.78 123.68 58.82", reorder_channel="2 1 0",
                       target_platform=["rk1808"]) == 0
    assert rknn.load_onnx(model=str(conv_model)) == 0
    assert rknn.build(do_quantization=False) == 0
    assert rknn.export_rknn(str(tmp_path / "t1.rknn")) == 0
    assert rknn.init_runtime() == 0
    out = rknn.inference(inputs=[image])[0]
    ref = _reference(conv_model, image, [103.94, 116.78, 123.68], [58.82] * 3, order=(2, 1, 0))
    assert cosine(out, ref) >= 0.9999
    lite = RKNNLite()
    assert lite.load_rknn(str(tmp_path / "t1.rknn")) == 0
    assert lite.init_runtime() == 0
    np.testing.assert_array_equal(lite.inference(inputs=[image])[0], out)
    assert lite.list_support_target_platform(str(tmp_path / "t1.rknn"))["support_target_platform"] == ["RK1808", "RK3399PRO"]


def test_rknn_batch_size_expands_batch(conv_model, image):
    rknn = RKNN()
    rknn.config(mean_values=[MEAN], std_values=[STD], float_dtype="float32")
    rknn.load_onnx(model=str(conv_model))
    assert rknn.build(do_quantization=False, rknn_batch_size=3) == 0
    rknn.init_runtime()
    other = np.random.default_rng(9).integers(0, 256, image.shape, dtype=np.uint8)
    batch = np.concatenate([image, other, image], axis=0)
    out = rknn.inference(inputs=[batch])[0]
    assert out.shape == (3, 5)
    np.testing.assert_allclose(out[0], _reference(conv_model, image, MEAN, STD)[0], rtol=1e-5)
    np.testing.assert_allclose(out[1], _reference(conv_model, other, MEAN, STD)[0], rtol=1e-5)


def test_inputs_pass_through_takes_normalised_input(conv_model, image):
    rknn = RKNN()
    rknn.config(mean_values=[MEAN], std_values=[STD], float_dtype="float32")
    rknn.load_onnx(model=str(conv_model))
    rknn.build(do_quantization=False)
    rknn.init_runtime()
    normalised = ((image.astype(np.float32) - MEAN) / STD).astype(np.float32)
    out = rknn.inference(inputs=[normalised], inputs_pass_through=[1])[0]
    np.testing.assert_allclose(out, rknn.inference(inputs=[image])[0], rtol=1e-5, atol=1e-7)


def test_custom_string_sdk_version_and_devices(conv_model, tmp_path, capsys):
    rknn = RKNN()
    rknn.config(custom_string="v1.2-camera")
    rknn.load_onnx(model=str(conv_model))
    rknn.build(do_quantization=False)
    rknn.export_rknn(str(tmp_path / "c.rknn"))
    lite = RKNNLite()
    lite.load_rknn(str(tmp_path / "c.rknn"))
    assert lite.get_custom_string() == "v1.2-camera"
    assert "RKNN VERSION" in rknn.get_sdk_version()
    adb, ntb = rknn.list_devices()
    assert isinstance(adb, list) and ntb == []
    table = rknn.list_support_target_platform()
    assert any("RK3588" in names for names in table.values())
    assert "Target platforms supported" not in capsys.readouterr().out
