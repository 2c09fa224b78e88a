"""Dynamic shapes, multi-batch and several contexts through the C API, equal to RKNNLite."""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from tests.capi.capi_tools import build_library, compile_program, run_program
from tests.helpers import lite_outputs, make_conv_model, three_convs


@pytest.fixture(scope="module")
def program(tmp_path_factory: pytest.TempPathFactory) -> Path:
    prefix = tmp_path_factory.mktemp("capi_multi") / "prefix"
    build_library(prefix)
    return compile_program(prefix, "multi.c", prefix / "multi")


def _build(folder: Path, onnx_path: Path, name: str, batch: int = 1, **config) -> Path:
    from rknn.api import RKNN
    rknn = RKNN()
    assert rknn.config(target_platform="rk3588", mean_values=[[0, 0, 0]], std_values=[[255, 255, 255]], **config) == 0
    assert rknn.load_onnx(str(onnx_path)) == 0
    assert rknn.build(do_quantization=False, rknn_batch_size=batch) == 0
    assert rknn.export_rknn(str(folder / name)) == 0
    return folder / name


def _images(folder: Path, shapes: list[tuple[int, ...]]) -> list[np.ndarray]:
    images = []
    for i, shape in enumerate(shapes):
        x = np.random.default_rng(10 + i).integers(0, 256, shape, dtype=np.uint8)
        x.tofile(folder / f"in_{i}.bin")
        images.append(x)
    return images


def test_dynamic_shapes(program, tmp_path):
    model = _build(tmp_path, three_convs(tmp_path / "t.onnx"), "dyn.rknn",
                   dynamic_input=[[[1, 3, 16, 16]], [[1, 3, 8, 8]]])
    images = _images(tmp_path, [(1, 16, 16, 3), (1, 8, 8, 3)])
    result = run_program(program, "dynamic", model, tmp_path)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "shape_number=2 fmt=1" in result.stdout
    assert "shape 1: input [1,8,8,3] output [1,4,8,8]" in result.stdout
    assert "unknown shape: -5" in result.stdout and "not one of the model's shape sets" in result.stderr
    for i, x in enumerate(images):
        expected = lite_outputs(model, [x])[0]
        np.testing.assert_array_equal(np.fromfile(tmp_path / f"out_{i}.bin", np.float32).reshape(expected.shape),
                                      expected)


def test_three_contexts_on_three_threads(program, tmp_path):
    model = _build(tmp_path, make_conv_model(tmp_path / "c.onnx"), "conv.rknn")
    images = _images(tmp_path, [(1, 16, 16, 3)] * 3)
    result = run_program(program, "contexts", model, tmp_path)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "core mask 0_1_2: 0, core mask 8: -5, batch core num 3: 0" in result.stdout
    assert "destroyed twice, then query: -7" in result.stdout
    for i, x in enumerate(images):
        np.testing.assert_array_equal(np.fromfile(tmp_path / f"out_{i}.bin", np.float32),
                                      lite_outputs(model, [x])[0].ravel())


def test_multi_batch(program, tmp_path):
    model = _build(tmp_path, make_conv_model(tmp_path / "c.onnx"), "b2.rknn", batch=2)
    (x,) = _images(tmp_path, [(2, 16, 16, 3)])
    result = run_program(program, "batch", model, tmp_path)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "batch input dims [2,16,16,3] size 3072" in result.stdout   # 2 frames, float16
    expected = lite_outputs(model, [x])[0]
    assert expected.shape[0] == 2
    np.testing.assert_array_equal(np.fromfile(tmp_path / "out_0.bin", np.float32).reshape(expected.shape), expected)
