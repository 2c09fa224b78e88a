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
    assert "type RKNN_INT8_MM_INT8_TO_INT32" in stdout
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


class InProcess:
    """The matmul API called through ctypes in this process (the library joins this interpreter)."""

    def __init__(self, library_path: Path) -> None:
        import ctypes
        from openrknn.capi import structs as s
        self.ct, self.s = ctypes, s
        self.lib = ctypes.CDLL(str(library_path))
        self.lib.rknn_create_mem.restype = ctypes.c_void_p
        self.lib.rknn_create_mem.argtypes = [ctypes.c_uint64, ctypes.c_uint32]

    def info(self, m: int, k: int, n: int, type_: int, b_layout: int = NORM, b_quant: int = 0,
             group_size: int = 0):
        return self.s.rknn_matmul_info(M=m, K=k, N=n, type=type_, B_layout=b_layout, B_quant_type=b_quant,
                                       group_size=group_size)

    def run(self, info, a: bytes, b: bytes, b_scale=None, b_zp=None, native_b: bool = False) -> bytes:
        ct, s, lib = self.ct, self.s, self.lib
        ctx, io = s.rknn_context(0), s.rknn_matmul_io_attr()
        assert lib.rknn_matmul_create(ct.byref(ctx), ct.byref(info), ct.byref(io)) == 0
        if b_scale is not None:
            scale = (ct.c_float * len(b_scale))(*b_scale)
            zp = (ct.c_int32 * len(b_zp))(*b_zp)
            params = s.rknn_quant_params(name=b"B", scale=scale, scale_len=len(b_scale), zp=zp, zp_len=len(b_zp))
            assert lib.rknn_matmul_set_quant_params(ctx, ct.byref(params)) == 0
        mems = [lib.rknn_create_mem(ctx.value, attr.size) for attr in (io.A, io.B, io.C)]
        data = [s.rknn_tensor_mem.from_address(mem).virt_addr for mem in mems]   # rknn_tensor_mem.virt_addr
        ct.memmove(data[0], a, len(a))
        if native_b:
            assert lib.rknn_B_normal_layout_to_native_layout(b, ct.c_void_p(data[1]), info.K, info.N,
                                                             ct.byref(info)) == 0
        else:
            ct.memmove(data[1], b, len(b))
        for mem, attr in zip(mems, (io.A, io.B, io.C)):
            assert lib.rknn_matmul_set_io_mem(ctx, ct.c_void_p(mem), ct.byref(attr)) == 0
        assert lib.rknn_matmul_run(ctx) == 0
        out = ct.string_at(data[2], io.C.size)
        for mem in mems:
            assert lib.rknn_destroy_mem(ctx, ct.c_void_p(mem)) == 0
        assert lib.rknn_matmul_destroy(ctx) == 0
        return out


@pytest.fixture(scope="module")
def in_process(program: Path) -> InProcess:
    return InProcess(program.parent / "lib" / "librknnrt.so")


def test_per_channel_and_per_group_quantized_b(in_process, monkeypatch):
    monkeypatch.setenv("OPENRKNN_CAPI_PLATFORM", "rk3576")
    rng = np.random.default_rng(5)
    m, k, n = 3, 64, 32
    a = rng.normal(size=(m, k)).astype(np.float16)
    b = rng.integers(-128, 128, (k, n), dtype=np.int8)
    scale = rng.uniform(0.01, 0.1, n).astype(np.float32)
    zp = rng.integers(-5, 5, n).astype(np.int32)
    out = in_process.run(in_process.info(m, k, n, 5, b_quant=3), a.tobytes(), b.tobytes(), list(scale), list(zp))
    real_b = (b.astype(np.float64) - zp) * scale.astype(np.float64)          # per channel: one (scale, zp) per column
    expected = (a.astype(np.float64) @ real_b).astype(np.float32)
    np.testing.assert_array_equal(np.frombuffer(out, np.float32).reshape(m, n), expected)
    # per group (int4 B, group 32): K/32 groups of N parameters, the groups first
    b4 = rng.integers(-8, 8, (k, n)).astype(np.int8)
    groups = k // 32
    g_scale = rng.uniform(0.05, 0.2, groups * n).astype(np.float32)
    out = in_process.run(in_process.info(m, k, n, 7, b_quant=4, group_size=32), a.tobytes(), pack_int4(b4),
                         list(g_scale), [0] * (groups * n))
    per_element = np.repeat(g_scale.reshape(groups, n).astype(np.float64), 32, axis=0)
    expected = (a.astype(np.float64) @ (b4.astype(np.float64) * per_element)).astype(np.float32)
    np.testing.assert_array_equal(np.frombuffer(out, np.float32).reshape(m, n), expected)


def test_int4_native_b_from_the_conversion_call(in_process):
    rng = np.random.default_rng(6)
    m, k, n = 2, 64, 128
    a = rng.integers(-8, 8, (m, k)).astype(np.int8)
    b = rng.integers(-8, 8, (k, n)).astype(np.int8)
    out = in_process.run(in_process.info(m, k, n, INT4_INT16, b_layout=NATIVE), pack_int4(a), pack_int4(b),
                         native_b=True)
    np.testing.assert_array_equal(np.frombuffer(out, np.int16).reshape(m, n), a.astype(np.int64) @ b.astype(np.int64))
