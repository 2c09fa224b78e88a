"""The matmul API (seed 002 §3.5): a C program in the guide's style gets exactly the documented products."""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from tests.capi.capi_tools import build_library, compile_program, run_program

NORM, NATIVE, TP_NORM = 0, 1, 2
FP16_FP32, INT8_INT32, INT8_INT8, FP16_FP16, FP16_INT4_FP32, INT8_FP32, INT4_INT16 = 1, 2, 3, 4, 7, 9, 10


@pytest.fixture(scope="module")
def program(tmp_path_factory: pytest.TempPathFactory) -> Path:
    prefix = tmp_path_factory.mktemp("capi_mm") / "prefix"
    build_library(prefix)
    return compile_program(prefix, "matmul.c", prefix / "matmul")


def pack_int4(values: np.ndarray) -> bytes:
    flat = values.reshape(-1).astype(np.int16) & 0x0F
    return (flat[0::2] | (flat[1::2] << 4)).astype(np.uint8).tobytes()


def _run(program: Path, folder: Path, m: int, k: int, n: int, type_: int, b_layout: int, ac_layout: int,
         a: bytes, b: bytes, *quant: float, platform: str | None = None) -> tuple[str, bytes]:
    (folder / "a.bin").write_bytes(a)
    (folder / "b.bin").write_bytes(b)
    import os
    if platform:
        os.environ["OPENRKNN_CAPI_PLATFORM"] = platform
    try:
        result = run_program(program, m, k, n, type_, b_layout, ac_layout, folder / "a.bin", folder / "b.bin",
                             folder / "c.bin", *quant)
    finally:
        os.environ.pop("OPENRKNN_CAPI_PLATFORM", None)
    assert result.returncode == 0, result.stdout + result.stderr
    return result.stdout, (folder / "c.bin").read_bytes()


@pytest.mark.parametrize("b_layout,ac_layout", [(NORM, NORM), (NATIVE, NATIVE), (TP_NORM, NORM), (NATIVE, NORM)])
def test_int8_to_int32_is_the_exact_integer_product(program, tmp_path, b_layout, ac_layout):
    rng = np.random.default_rng(0)
    m, k, n = 5, 64, 64
    a = rng.integers(-128, 128, (m, k), dtype=np.int8)
    b = rng.integers(-128, 128, (k, n), dtype=np.int8)
    stdout, c = _run(program, tmp_path, m, k, n, INT8_INT32, b_layout, ac_layout, a.tobytes(), b.tobytes())
    np.testing.assert_array_equal(np.frombuffer(c, np.int32).reshape(m, n), a.astype(np.int64) @ b.astype(np.int64))
    if b_layout == NATIVE:
        assert "B native conversion matches" in stdout
        assert "B dims=[2,2,32,32]" in stdout            # RK3588 int8: [N/32, K/32, 32, 32]
    if ac_layout == NATIVE:
        assert "A dims=[4,5,16]" in stdout and "C dims=[16,5,4]" in stdout   # [K/16,M,16], [N/4,M,4]


@pytest.mark.parametrize("ac_layout", [NORM, NATIVE])
def test_float16_products_round_once_to_float32(program, tmp_path, ac_layout):
    rng = np.random.default_rng(1)
    m, k, n = 3, 96, 32
    a = rng.normal(size=(m, k)).astype(np.float16)
    b = rng.normal(size=(k, n)).astype(np.float16)
    stdout, c = _run(program, tmp_path, m, k, n, FP16_FP32, NATIVE, ac_layout, a.tobytes(), b.tobytes())
    expected = (a.astype(np.float64) @ b.astype(np.float64)).astype(np.float32)
    np.testing.assert_array_equal(np.frombuffer(c, np.float32).reshape(m, n), expected)
    assert "B native conversion matches" in stdout and "B dims=[2,3,16,32]" in stdout
    _, c16 = _run(program, tmp_path, m, k, n, FP16_FP16, NORM, NORM, a.tobytes(), b.tobytes())
    np.testing.assert_array_equal(np.frombuffer(c16, np.float16).reshape(m, n), expected.astype(np.float16))


def test_int8_to_int8_requantizes_with_the_quant_params(program, tmp_path):
    rng = np.random.default_rng(2)
    m, k, n = 4, 32, 32
    a = rng.integers(-128, 128, (m, k), dtype=np.int8)
    b = rng.integers(-128, 128, (k, n), dtype=np.int8)
    sa, sb, sc, zc = 0.02, 0.01, 0.5, 3
    _, c = _run(program, tmp_path, m, k, n, INT8_INT8, NORM, NORM, a.tobytes(), b.tobytes(), sa, 0, sb, 0, sc, zc)
    acc = a.astype(np.int64) @ b.astype(np.int64)
    real = acc * np.float64(np.float32(sa)) * np.float64(np.float32(sb))
    expected = np.clip(np.rint(real / np.float64(np.float32(sc))) + zc, -128, 127).astype(np.int8)
    np.testing.assert_array_equal(np.frombuffer(c, np.int8).reshape(m, n), expected)
    _, f = _run(program, tmp_path, m, k, n, INT8_FP32, NORM, NORM, a.tobytes(), b.tobytes(), sa, 0, sb, 0, sc, zc)
    np.testing.assert_array_equal(np.frombuffer(f, np.float32).reshape(m, n), real.astype(np.float32))


def test_int4_products(program, tmp_path):
    rng = np.random.default_rng(3)
    m, k, n = 2, 64, 64
    a = rng.integers(-8, 8, (m, k)).astype(np.int8)
    b = rng.integers(-8, 8, (k, n)).astype(np.int8)
    _, c = _run(program, tmp_path, m, k, n, INT4_INT16, NORM, NORM, pack_int4(a), pack_int4(b))
    np.testing.assert_array_equal(np.frombuffer(c, np.int16).reshape(m, n), a.astype(np.int64) @ b.astype(np.int64))
    # RK3576: float16 A times int4 B dequantized with B's per-layer scale and zero point
    a16 = rng.normal(size=(m, k)).astype(np.float16)
    _, c = _run(program, tmp_path, m, k, n, FP16_INT4_FP32, NORM, NORM, a16.tobytes(), pack_int4(b), 1, 0, 0.25, 0,
                1, 0, platform="rk3576")
    expected = (a16.astype(np.float64) @ (b.astype(np.float64) * np.float64(np.float32(0.25)))).astype(np.float32)
    np.testing.assert_array_equal(np.frombuffer(c, np.float32).reshape(m, n), expected)


def test_unsupported_combinations_return_param_invalid(program, tmp_path):
    a = np.zeros((2, 32), np.int8).tobytes()
    (tmp_path / "a.bin").write_bytes(a)
    (tmp_path / "b.bin").write_bytes(np.zeros((32, 32), np.int8).tobytes())
    result = run_program(program, 2, 32, 32, FP16_INT4_FP32, NORM, NORM, tmp_path / "a.bin", tmp_path / "b.bin",
                         tmp_path / "c.bin")   # RK3588 has no FLOAT16 x INT4 (table 3-13)
    assert result.returncode == 3 and "ret=-5" in result.stdout
    assert "FLOAT16_MM_INT4_TO_FLOAT32 is not supported on rk3588" in result.stderr
    result = run_program(program, 2, 40, 32, INT8_INT32, NORM, NORM, tmp_path / "a.bin", tmp_path / "b.bin",
                         tmp_path / "c.bin")
    assert result.returncode == 3 and "K=40 must be a multiple of 32" in result.stderr
