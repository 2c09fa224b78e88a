"""The matmul API (seed 002 §3.5): C = A·B with the documented types, layouts and quantization, on the CPU.

Arithmetic (CPU-independent, documented in docs/c-api.md):

* integer products: exact sums of ``(qA - zpA)·(qB - zpB)`` in int64; ``*_TO_INT32`` / ``*_TO_INT16``
  store the sum (INT16 saturates); ``INT8_MM_INT8_TO_INT8`` requantizes
  ``rint(sum · sA·sB / sC) + zpC`` (double precision, half to even, saturated);
  ``INT8_MM_INT8_TO_FLOAT32`` stores ``sum · sA·sB`` as float32;
* float16 A: the float16 values times B (float16, or int8/int4 dequantized ``(qB - zpB)·sB``),
  summed in double precision, rounded once to float32 (or float16).

int4 values are packed two per byte, element ``2i`` in the low nibble. ``set_io_mem`` reads A and B
when it is called (the guide: it rearranges the data, so call it after filling or updating them);
C is written by ``rknn_matmul_run``. The platform is ``$OPENRKNN_CAPI_PLATFORM`` (default rk3588).
"""
from __future__ import annotations

import ctypes
import os
from dataclasses import dataclass, field

import numpy as np

from openrknn.capi import handles
from openrknn.capi import structs as s
from openrknn.capi.tensors import ApiError

PLATFORM_ENV = "OPENRKNN_CAPI_PLATFORM"
NORM, NATIVE, TP_NORM = 0, 1, 2
PER_LAYER_SYM, PER_LAYER_ASYM, PER_CHANNEL_SYM, PER_CHANNEL_ASYM, PER_GROUP_SYM, PER_GROUP_ASYM = range(6)

# type -> (A, B, C) element types, in the guide's order
TYPES = {1: ("float16", "float16", "float32"), 2: ("int8", "int8", "int32"), 3: ("int8", "int8", "int8"),
         4: ("float16", "float16", "float16"), 5: ("float16", "int8", "float32"), 6: ("float16", "int8", "float16"),
         7: ("float16", "int4", "float32"), 8: ("float16", "int4", "float16"), 9: ("int8", "int8", "float32"),
         10: ("int4", "int4", "int16"), 11: ("int8", "int4", "int32")}
TYPE_NAMES = {1: "FLOAT16_MM_FLOAT16_TO_FLOAT32", 2: "INT8_MM_INT8_TO_INT32", 3: "INT8_MM_INT8_TO_INT8",
              4: "FLOAT16_MM_FLOAT16_TO_FLOAT16", 5: "FLOAT16_MM_INT8_TO_FLOAT32", 6: "FLOAT16_MM_INT8_TO_FLOAT16",
              7: "FLOAT16_MM_INT4_TO_FLOAT32", 8: "FLOAT16_MM_INT4_TO_FLOAT16", 9: "INT8_MM_INT8_TO_FLOAT32",
              10: "INT4_MM_INT4_TO_INT16", 11: "INT8_MM_INT4_TO_INT32"}
# table 3-13
SUPPORTED = {"rk356x": (2, 1), "rk3576": (4, 1, 2, 5, 8, 7, 11), "rk3588": (4, 1, 2, 9, 3, 10)}
TENSOR_TYPE = {"float16": s.TENSOR_FLOAT16, "float32": s.TENSOR_FLOAT32, "int8": s.TENSOR_INT8,
               "int16": s.TENSOR_INT16, "int32": s.TENSOR_INT32, "int4": s.TENSOR_INT4}
NUMPY = {"float16": np.float16, "float32": np.float32, "int8": np.int8, "int16": np.int16, "int32": np.int32}
# table 3-12: (A sub-K, B sub-N, B sub-K) per platform group and same-type element type
NATIVE_BLOCKS = {("rk3562", "int8"): (16, 16, 32), ("rk356x", "int8"): (8, 16, 32),
                 ("rk3562", "float16"): (8, 8, 32), ("rk356x", "float16"): (4, 8, 16),
                 ("rk3588", "int8"): (16, 32, 32), ("rk3588", "float16"): (8, 16, 32), ("rk3588", "int4"): (32, 64, 32)}
B_SEGMENT_K = {"rk3588": 8192, "rk3576": 4096}


def platform() -> str:
    return (os.environ.get(PLATFORM_ENV) or "rk3588").lower()


def group_of(name: str) -> str:
    return "rk356x" if name in ("rk3562", "rk3566", "rk3568") else name


def _blocks(chip: str, dtype: str) -> tuple[int, int, int]:
    key_chip = "rk3562" if chip == "rk3562" and (chip, dtype) in NATIVE_BLOCKS else group_of(chip)
    key_chip = "rk3588" if key_chip == "rk3576" else key_chip   # same blocks as RK3588 (table 3-12)
    if (key_chip, dtype) not in NATIVE_BLOCKS:
        raise ApiError(s.ERR_PARAM_INVALID, f"{chip} has no native layout for {dtype} matrices")
    return NATIVE_BLOCKS[(key_chip, dtype)]


def elem_bytes(dtype: str, count: int) -> int:
    return (count + 1) // 2 if dtype == "int4" else count * np.dtype(NUMPY[dtype]).itemsize


def c_block(dtype: str) -> int:
    """Sub-N of C's native layout: 16-byte blocks ([N/4,M,4] for 32-bit, [N/8,M,8] for 16-bit, 16 for int8)."""
    return 16 // max(1, np.dtype(NUMPY[dtype]).itemsize)


def check_limits(chip: str, type_: int, k: int, n: int) -> None:
    """Table 3-14: K 32-aligned (at most 10240 on RK356x); N aligned and bounded per B type."""
    a, b, _ = TYPES[type_]
    group = group_of(chip)
    if b == "int4" and group == "rk3576":
        b = a            # RK3576: int4 B follows the limits of A's type ("*" in table 3-14)
    if k <= 0 or n <= 0:
        raise ApiError(s.ERR_PARAM_INVALID, f"K={k} and N={n} must be positive")
    if k % 32:
        raise ApiError(s.ERR_PARAM_INVALID, f"K={k} must be a multiple of 32 on {chip} (table 3-14)")
    if group == "rk356x" and k > 10240:
        raise ApiError(s.ERR_PARAM_INVALID, f"K={k} exceeds 10240 on {chip} (table 3-14)")
    align, most = (16, 4096) if group == "rk356x" else ((64, 8192) if b == "int4" else (32, 4096))
    if n % align or n > most:
        raise ApiError(s.ERR_PARAM_INVALID, f"N={n} must be a multiple of {align} and at most {most} on {chip} for "
                                            f"{TYPE_NAMES[type_]} (table 3-14)")


@dataclass
class Shape:
    m: int
    k: int
    n: int


@dataclass
class MatmulContext:
    """One matmul context: its spec, the current shape, quantization parameters and bound memories."""

    info: dict
    chip: str
    shapes: list[Shape]
    current: int = 0
    quant: dict[str, tuple[np.ndarray, np.ndarray]] = field(default_factory=dict)
    a: np.ndarray | None = None       # [M, K] values as read at set_io_mem
    b: np.ndarray | None = None       # [K, N]
    c_mem: int | None = None
    core_mask: int = 0
    kept: list = field(default_factory=list)

    @property
    def types(self) -> tuple[str, str, str]:
        return TYPES[self.info["type"]]

    @property
    def shape(self) -> Shape:
        return self.shapes[self.current]

    def attrs(self, shape: Shape) -> dict[str, tuple[tuple[int, ...], str]]:
        """name -> (dims, element type) of A, B and C for ``shape``."""
        a_t, b_t, c_t = self.types
        m, k, n = shape.m, shape.k, shape.n
        if self.info["AC_layout"] == NATIVE:
            sub_k = _blocks(self.chip, a_t)[0]
            sub_c = c_block(c_t)
            a_dims, c_dims = (-(-k // sub_k), m, sub_k), (-(-n // sub_c), m, sub_c)
        else:
            a_dims, c_dims = (m, k), (m, n)
        if self.info["B_layout"] == NATIVE:
            _, sub_n, sub_k = _blocks(self.chip, self.b_native_type)
            b_dims = (-(-n // sub_n), -(-k // sub_k), sub_n, sub_k)
        elif self.info["B_layout"] == TP_NORM:
            b_dims = (n, k)
        else:
            b_dims = (k, n)
        return {"A": (a_dims, a_t), "B": (b_dims, b_t), "C": (c_dims, c_t)}

    @property
    def b_native_type(self) -> str:
        a_t, b_t, c_t = self.types
        if a_t == b_t:
            return b_t
        return "int8" if c_t == "int32" else "float16"   # mixed types: the same-type layout of C's type (§3.5.4)

    def fill_io_attr(self, io: s.rknn_matmul_io_attr, shape: Shape) -> None:
        for name, (dims, dtype) in self.attrs(shape).items():
            attr = getattr(io, name)
            s.set_name(attr, "name", name)
            attr.n_dims = len(dims)
            for i in range(s.MAX_DIMS):
                attr.dims[i] = dims[i] if i < len(dims) else 0
            attr.size = elem_bytes(dtype, int(np.prod(dims)))
            attr.type = TENSOR_TYPE[dtype]


# ---- layout helpers ---------------------------------------------------------------------------------
def _unpack_int4(raw: np.ndarray, count: int) -> np.ndarray:
    low = (raw & 0x0F).astype(np.int8)
    high = (raw >> 4).astype(np.int8)
    both = np.stack([low, high], axis=1).reshape(-1)[:count]
    return np.where(both > 7, both - 16, both).astype(np.int8)


def _pack_int4(values: np.ndarray) -> np.ndarray:
    flat = values.reshape(-1).astype(np.int16) & 0x0F
    if flat.size % 2:
        flat = np.concatenate([flat, np.zeros(1, np.int16)])
    return (flat[0::2] | (flat[1::2] << 4)).astype(np.uint8)


def read_matrix(address: int, dims: tuple[int, ...], dtype: str) -> np.ndarray:
    count = int(np.prod(dims))
    raw = s.byte_view(address, elem_bytes(dtype, count))
    if dtype == "int4":
        return _unpack_int4(raw, count).reshape(dims)
    return raw.view(NUMPY[dtype]).reshape(dims).copy()


def to_bytes(values: np.ndarray, dtype: str) -> np.ndarray:
    if dtype == "int4":
        return _pack_int4(values)
    return np.ascontiguousarray(values.astype(NUMPY[dtype])).reshape(-1).view(np.uint8)


def ac_from_native(blocks: np.ndarray, rows: int, cols: int) -> np.ndarray:
    """[cols/sub, rows, sub] → [rows, cols]."""
    return blocks.transpose(1, 0, 2).reshape(rows, -1)[:, :cols]


def ac_to_native(matrix: np.ndarray, sub: int) -> np.ndarray:
    rows, cols = matrix.shape
    padded = np.zeros((rows, -(-cols // sub) * sub), matrix.dtype)
    padded[:, :cols] = matrix
    return np.ascontiguousarray(padded.reshape(rows, -1, sub).transpose(1, 0, 2))


def b_to_native(b: np.ndarray, sub_n: int, sub_k: int, segment_k: int | None) -> np.ndarray:
    """[K, N] → [N/subN, K/subK, subN, subK] per K segment (K above the segment size is split, §3.5.4.1)."""
    k, n = b.shape
    if segment_k and k > segment_k:
        return np.concatenate([b_to_native(b[i:i + segment_k], sub_n, sub_k, None).reshape(-1)
                               for i in range(0, k, segment_k)])
    kp, np_ = -(-k // sub_k) * sub_k, -(-n // sub_n) * sub_n
    padded = np.zeros((kp, np_), b.dtype)
    padded[:k, :n] = b
    return np.ascontiguousarray(padded.reshape(kp // sub_k, sub_k, np_ // sub_n, sub_n).transpose(2, 0, 3, 1))


def b_from_native(flat: np.ndarray, k: int, n: int, sub_n: int, sub_k: int, segment_k: int | None) -> np.ndarray:
    if segment_k and k > segment_k:
        parts, offset = [], 0
        for start in range(0, k, segment_k):
            seg_k = min(segment_k, k - start)
            size = (-(-seg_k // sub_k) * sub_k) * (-(-n // sub_n) * sub_n)
            parts.append(b_from_native(flat[offset:offset + size], seg_k, n, sub_n, sub_k, None))
            offset += size
        return np.concatenate(parts, axis=0)
    kp, np_ = -(-k // sub_k) * sub_k, -(-n // sub_n) * sub_n
    blocks = flat[:kp * np_].reshape(np_ // sub_n, kp // sub_k, sub_n, sub_k)
    return blocks.transpose(1, 3, 0, 2).reshape(kp, np_)[:k, :n]


# ---- the product ----------------------------------------------------------------------------------
def _params(ctx: MatmulContext, name: str) -> tuple[np.ndarray, np.ndarray]:
    """(scales, zero points) set for ``name``; scale 1 and zero point 0 when never set (§3.5.2 step 3)."""
    scale, zp = ctx.quant.get(name, (np.ones(1), np.zeros(1, np.int64)))
    return scale.astype(np.float64), zp.astype(np.int64)


def _b_dequant_params(ctx: MatmulContext) -> tuple[np.ndarray, np.ndarray]:
    """Per-(k, n) scale and zero point of B ([K, N] broadcastable)."""
    shape = ctx.shape
    scale, zp = _params(ctx, "B")
    quant_type = ctx.info["B_quant_type"]
    if quant_type in (PER_GROUP_SYM, PER_GROUP_ASYM):
        group = ctx.info["group_size"]
        groups = shape.k // group
        # stored: K/group_size groups' parameters for each of the N columns
        scale_kn = np.repeat(scale.reshape(groups, shape.n) if scale.size == groups * shape.n else
                             np.broadcast_to(scale, (groups, shape.n)), group, axis=0)
        zp_kn = np.repeat(zp.reshape(groups, shape.n) if zp.size == groups * shape.n else
                          np.broadcast_to(zp, (groups, shape.n)), group, axis=0)
        return scale_kn, zp_kn
    return scale.reshape(1, -1), zp.reshape(1, -1)


def compute(ctx: MatmulContext) -> np.ndarray:
    a_t, b_t, c_t = ctx.types
    a, b = ctx.a, ctx.b
    assert a is not None and b is not None
    b_scale, b_zp = _b_dequant_params(ctx)
    if a_t == "float16":
        b_real = b.astype(np.float64) if b_t == "float16" else (b.astype(np.int64) - b_zp) * b_scale
        total = a.astype(np.float64) @ b_real
        return total.astype(np.float32).astype(NUMPY[c_t])
    a_scale, a_zp = _params(ctx, "A")
    acc = (a.astype(np.int64) - a_zp[0]) @ (b.astype(np.int64) - b_zp)
    if c_t in ("int32", "int16"):
        info = np.iinfo(NUMPY[c_t])
        return np.clip(acc, info.min, info.max).astype(NUMPY[c_t])
    real = acc.astype(np.float64) * a_scale[0] * b_scale
    if c_t == "float32":
        return real.astype(np.float32)
    c_scale, c_zp = _params(ctx, "C")
    return np.clip(np.rint(real / c_scale[0]) + c_zp[0], -128, 127).astype(np.int8)


# ---- entry points (bridge.matmul_* call these through handles.entry) -----------------------------------
def _info(address: int) -> dict:
    if not address:
        raise ApiError(s.ERR_PARAM_INVALID, "info is NULL")
    info = s.at(s.rknn_matmul_info, address)
    return {name: getattr(info, name) for name, _ in s.rknn_matmul_info._fields_ if name != "reserved"}


def _new_context(info: dict) -> MatmulContext:
    chip = platform()
    if info["type"] not in TYPES:
        raise ApiError(s.ERR_PARAM_INVALID, f"matmul type {info['type']} is not an rknn_matmul_type")
    supported = SUPPORTED.get(group_of(chip))
    if supported is None:
        raise ApiError(s.ERR_PARAM_INVALID, f"{chip} has no matmul API (RK2118 / RV1103 / RV1106, §3.5); set "
                                            f"{PLATFORM_ENV} to rk3562, rk3566, rk3568, rk3576 or rk3588")
    if info["type"] not in supported:
        raise ApiError(s.ERR_PARAM_INVALID, f"{TYPE_NAMES[info['type']]} is not supported on {chip}; it supports "
                                            f"{', '.join(TYPE_NAMES[t] for t in supported)} (table 3-13)")
    for key in ("B_layout", "AC_layout"):
        if info[key] not in (NORM, NATIVE, TP_NORM) or (key == "AC_layout" and info[key] == TP_NORM):
            raise ApiError(s.ERR_PARAM_INVALID, f"{key}={info[key]} is not a valid rknn_matmul_layout here")
    if info["B_layout"] == TP_NORM and chip in ("rk3566", "rk3568"):
        raise ApiError(s.ERR_PARAM_INVALID, f"RKNN_MM_LAYOUT_TP_NORM is not supported on {chip} (§3.5.4.1)")
    if info["B_quant_type"] in (PER_GROUP_SYM, PER_GROUP_ASYM) and info["group_size"] <= 0:
        raise ApiError(s.ERR_PARAM_INVALID, "per-group quantization needs group_size > 0")
    return MatmulContext(info, chip, [])


def create(ctx_out: int, info: int, io_attr: int) -> int:
    spec = _info(info)
    ctx = _new_context(spec)
    check_limits(ctx.chip, spec["type"], spec["K"], spec["N"])
    if spec["M"] <= 0:
        raise ApiError(s.ERR_PARAM_INVALID, f"M={spec['M']} must be positive")
    ctx.shapes = [Shape(spec["M"], spec["K"], spec["N"])]
    if not ctx_out or not io_attr:
        raise ApiError(s.ERR_PARAM_INVALID, "ctx and io_attr must not be NULL")
    ctx.fill_io_attr(s.at(s.rknn_matmul_io_attr, io_attr), ctx.shape)
    s.at(s.rknn_context, ctx_out).value = handles.new_handle(ctx)


def create_dynamic_shape(ctx_out: int, info: int, count: int, shapes: int, io_attrs: int) -> int:
    spec = _info(info)
    ctx = _new_context(spec)
    if count <= 0 or not shapes or not io_attrs or not ctx_out:
        raise ApiError(s.ERR_PARAM_INVALID, "shape_num must be > 0 with dynamic_shapes and io_attrs arrays")
    for item in (s.rknn_matmul_shape * count).from_address(shapes):
        check_limits(ctx.chip, spec["type"], item.K, item.N)
        ctx.shapes.append(Shape(item.M, item.K, item.N))
    attrs = (s.rknn_matmul_io_attr * count).from_address(io_attrs)
    for shape, attr in zip(ctx.shapes, attrs):
        ctx.fill_io_attr(attr, shape)
    s.at(s.rknn_context, ctx_out).value = handles.new_handle(ctx)


def set_dynamic_shape(handle: int, shape: int) -> int:
    ctx = handles.context(handle, MatmulContext)
    item = s.at(s.rknn_matmul_shape, shape)
    wanted = Shape(item.M, item.K, item.N)
    if wanted not in ctx.shapes:
        raise ApiError(s.ERR_PARAM_INVALID, f"shape M={item.M} K={item.K} N={item.N} is not one of the shapes given "
                                            "to rknn_matmul_create_dynamic_shape")
    ctx.current = ctx.shapes.index(wanted)
    ctx.a = ctx.b = None


def set_core_mask(handle: int, mask: int) -> int:
    ctx = handles.context(handle, MatmulContext)
    valid = {"rk3588": (0, 1, 2, 4, 3, 7, 0xFFFF), "rk3576": (0, 1, 2, 3)}.get(ctx.chip, (0,))
    if mask not in valid:
        raise ApiError(s.ERR_PARAM_INVALID, f"core mask {mask:#x} is not valid on {ctx.chip}")
    ctx.core_mask = mask


def set_quant_params(handle: int, params: int) -> int:
    ctx = handles.context(handle, MatmulContext)
    item = s.at(s.rknn_quant_params, params)
    name = item.name.decode()
    if name not in ("A", "B", "C"):
        raise ApiError(s.ERR_PARAM_INVALID, f"quant params name '{name}' is not A, B or C (the io_attr names)")
    if item.scale_len <= 0 or item.zp_len <= 0 or not item.scale or not item.zp:
        raise ApiError(s.ERR_PARAM_INVALID, f"{name}: scale and zp arrays with scale_len / zp_len > 0 are needed")
    scale = np.ctypeslib.as_array(item.scale, (item.scale_len,)).astype(np.float32).copy()
    zp = np.ctypeslib.as_array(item.zp, (item.zp_len,)).astype(np.int64).copy()
    shape = ctx.shape
    if name == "B":
        quant_type = ctx.info["B_quant_type"]
        expected = {PER_CHANNEL_SYM: shape.n, PER_CHANNEL_ASYM: shape.n,
                    PER_GROUP_SYM: shape.n * shape.k // max(1, ctx.info["group_size"]),
                    PER_GROUP_ASYM: shape.n * shape.k // max(1, ctx.info["group_size"])}.get(quant_type, 1)
        sym = quant_type in (PER_LAYER_SYM, PER_CHANNEL_SYM, PER_GROUP_SYM)
    else:
        expected, sym = 1, ctx.info["AC_quant_type"] == PER_LAYER_SYM
    if scale.size != expected or zp.size != expected:
        raise ApiError(s.ERR_PARAM_INVALID, f"{name}: {expected} scale / zero-point value(s) expected for its "
                                            f"quantization type, got {scale.size} / {zp.size}")
    if sym and np.any(zp != 0):
        raise ApiError(s.ERR_PARAM_INVALID, f"{name}: symmetric quantization needs every zero point to be 0")
    ctx.quant[name] = (scale, zp)


def get_quant_params(handle: int, params: int, scale_out: int) -> int:
    """Fill ``params`` (name given) with the context's values; ``scale_out`` (optional) receives the scales."""
    ctx = handles.context(handle, MatmulContext)
    item = s.at(s.rknn_quant_params, params)
    name = item.name.decode() or "B"
    scale, zp = ctx.quant.get(name, (np.ones(1, np.float32), np.zeros(1, np.int64)))
    keep_scale, keep_zp = (ctypes.c_float * scale.size)(*scale), (ctypes.c_int32 * zp.size)(*zp.astype(int))
    ctx.kept.extend([keep_scale, keep_zp])     # owned by the context, as the library's buffers are
    item.scale = ctypes.cast(keep_scale, ctypes.POINTER(ctypes.c_float))
    item.scale_len = scale.size
    item.zp = ctypes.cast(keep_zp, ctypes.POINTER(ctypes.c_int32))
    item.zp_len = zp.size
    if scale_out:
        (ctypes.c_float * scale.size).from_address(scale_out)[:] = [float(v) for v in scale]


def set_io_mem(handle: int, mem: int, attr: int) -> int:
    ctx = handles.context(handle, MatmulContext)
    if not mem or mem not in handles._memories or not attr:
        raise ApiError(s.ERR_PARAM_INVALID, "mem (from rknn_create_mem) and attr (from io_attr) are needed")
    tensor = s.at(s.rknn_matmul_tensor_attr, attr)
    name = tensor.name.decode()
    attrs = ctx.attrs(ctx.shape)
    if name not in attrs:
        raise ApiError(s.ERR_PARAM_INVALID, f"attr name '{name}' is not A, B or C")
    dims, dtype = attrs[name]
    memory = s.at(s.rknn_tensor_mem, mem)
    needed = elem_bytes(dtype, int(np.prod(dims)))
    if memory.size - memory.offset < needed:
        raise ApiError(s.ERR_PARAM_INVALID, f"{name}: the memory holds {memory.size - memory.offset} bytes, "
                                            f"{needed} needed ({list(dims)} {dtype})")
    address = memory.virt_addr + memory.offset
    shape = ctx.shape
    if name == "C":
        ctx.c_mem = mem
        return s.SUCC
    values = read_matrix(address, dims, dtype)
    if name == "A":
        ctx.a = ac_from_native(values, shape.m, shape.k) if ctx.info["AC_layout"] == NATIVE else values
    else:
        if ctx.info["B_layout"] == NATIVE:
            _, sub_n, sub_k = _blocks(ctx.chip, ctx.b_native_type)
            ctx.b = b_from_native(values.reshape(-1), shape.k, shape.n, sub_n, sub_k, B_SEGMENT_K.get(ctx.chip))
        else:
            ctx.b = values.T.copy() if ctx.info["B_layout"] == TP_NORM else values


def run(handle: int) -> int:
    ctx = handles.context(handle, MatmulContext)
    if ctx.a is None or ctx.b is None or ctx.c_mem is None:
        missing = [n for n, v in (("A", ctx.a), ("B", ctx.b), ("C", ctx.c_mem)) if v is None]
        raise ApiError(s.ERR_PARAM_INVALID, f"call rknn_matmul_set_io_mem for {', '.join(missing)} first")
    if ctx.c_mem not in handles._memories:
        raise ApiError(s.ERR_PARAM_INVALID, "C's memory was destroyed")
    result = compute(ctx)
    _, _, c_t = ctx.types
    if ctx.info["AC_layout"] == NATIVE:
        result = ac_to_native(result, c_block(c_t))
    data = to_bytes(result, c_t)
    memory = s.at(s.rknn_tensor_mem, ctx.c_mem)
    s.byte_view(memory.virt_addr + memory.offset, data.size)[:] = data


def destroy(handle: int) -> int:
    handles.context(handle, MatmulContext)
    with handles._lock:
        del handles._contexts[int(handle)]


def B_normal_layout_to_native_layout(source: int, target: int, k: int, n: int, info: int) -> int:  # noqa: N802
    spec = _info(info)
    ctx = _new_context(spec)
    if not source or not target:
        raise ApiError(s.ERR_PARAM_INVALID, "B_input and B_output must not be NULL")
    _, b_t, _ = ctx.types
    _, sub_n, sub_k = _blocks(ctx.chip, ctx.b_native_type)
    b = read_matrix(source, (k, n), b_t)
    data = to_bytes(b_to_native(b, sub_n, sub_k, B_SEGMENT_K.get(ctx.chip)), b_t)
    s.byte_view(target, data.size)[:] = data
