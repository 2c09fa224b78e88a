"""A ctypes binding of Rockchip's NPU runtime ``librknnrt.so`` (RKNPU2 runtime 1.5 – 2.x).

Pure Python (no compiled extension), so it works on any CPython ≥ 3.10. The structures and
constants follow the documented C API (seed 002 ch. 5, ``docs/deployment.md``); the call order is::

    rknn_init → rknn_query(IN_OUT_NUM / INPUT_ATTR / OUTPUT_ATTR) → [rknn_set_core_mask]
    → rknn_inputs_set → rknn_run → rknn_outputs_get → rknn_outputs_release → … → rknn_destroy

Every non-zero return code becomes a :class:`RknnRuntimeError` naming the function and the
code's documented meaning.

Example:
    >>> lib = load_library(find_library())                     # doctest: +SKIP
    >>> with Context(lib, open('model.rknn', 'rb').read()) as ctx:  # doctest: +SKIP
    ...     print(ctx.sdk_version())
"""
from __future__ import annotations

import ctypes
import os
import platform
import re
import weakref
from dataclasses import dataclass
from typing import Any

import numpy as np

from openrknn.errors import RKNNError
from openrknn.graph.rknn_model import LAYOUT_UNDEFINED, TensorSpec

LIBRARY_ENV = "OPENRKNN_LIBRKNNRT"
STANDARD_PATHS = ("/usr/lib/librknnrt.so", "/usr/lib64/librknnrt.so", "/usr/lib/aarch64-linux-gnu/librknnrt.so",
                  "/usr/local/lib/librknnrt.so")
INSTALL_HINT = ("install Rockchip's runtime: copy librknnrt.so from rknn-toolkit2 "
                "(rknpu2/runtime/Linux/librknn_api/aarch64/) to /usr/lib/, or set OPENRKNN_LIBRKNNRT to its path")
# The structures below match the 1.5 – 2.x headers; older runtimes lack fields of rknn_tensor_attr.
SUPPORTED_API = ((1, 5), (3, 0))
ROCKCHIP_MAGIC = b"RKNN"

# --- constants (c-api-abi.md) -------------------------------------------------------------------
MAX_DIMS = 16
MAX_NAME_LEN = 256

QUERY_IN_OUT_NUM, QUERY_INPUT_ATTR, QUERY_OUTPUT_ATTR, QUERY_PERF_DETAIL, QUERY_PERF_RUN = 0, 1, 2, 3, 4
QUERY_SDK_VERSION, QUERY_MEM_SIZE, QUERY_CUSTOM_STRING = 5, 6, 7

FLAG_ASYNC_MASK = 0x4
FLAG_COLLECT_PERF_MASK = 0x8

TENSOR_FLOAT32, TENSOR_FLOAT16, TENSOR_INT8, TENSOR_UINT8, TENSOR_INT16 = 0, 1, 2, 3, 4
FORMAT_NCHW, FORMAT_NHWC, FORMAT_NC1HWC2, FORMAT_UNDEFINED = 0, 1, 2, 3

TYPE_NAMES = {0: "FP32", 1: "FP16", 2: "INT8", 3: "UINT8", 4: "INT16", 5: "UINT16", 6: "INT32", 7: "UINT32",
              8: "INT64", 9: "BOOL", 10: "INT4", 11: "BF16"}
NUMPY_TYPES = {0: np.float32, 1: np.float16, 2: np.int8, 3: np.uint8, 4: np.int16, 5: np.uint16, 6: np.int32,
               7: np.uint32, 8: np.int64, 9: np.bool_}
TENSOR_TYPE_OF = {np.dtype(v): k for k, v in NUMPY_TYPES.items() if k in (0, 1, 2, 3, 4)}
FORMAT_NAMES = {0: "NCHW", 1: "NHWC", 2: "NC1HWC2", 3: "UNDEFINED"}
QNT_NAMES = {0: "NONE", 1: "DFP", 2: "AFFINE"}

ERRORS = {
    -1: ("RKNN_ERR_FAIL", "failed"),
    -2: ("RKNN_ERR_TIMEOUT", "timed out"),
    -3: ("RKNN_ERR_DEVICE_UNAVAILABLE", "the NPU device is unavailable: check that the rknpu driver is loaded"),
    -4: ("RKNN_ERR_MALLOC_FAIL", "memory allocation failed"),
    -5: ("RKNN_ERR_PARAM_INVALID", "invalid parameter"),
    -6: ("RKNN_ERR_MODEL_INVALID", "invalid model: the .rknn is corrupt or made by an incompatible toolkit"),
    -7: ("RKNN_ERR_CTX_INVALID", "invalid context"),
    -8: ("RKNN_ERR_INPUT_INVALID", "invalid input"),
    -9: ("RKNN_ERR_OUTPUT_INVALID", "invalid output"),
    -10: ("RKNN_ERR_DEVICE_UNMATCH", "the device does not match: update the runtime library and the NPU driver"),
    -11: ("RKNN_ERR_INCOMPATILE_PRE_COMPILE_MODEL", "the pre-compiled model is incompatible with this driver"),
    -12: ("RKNN_ERR_INCOMPATILE_OPTIMIZATION_LEVEL_VERSION",
          "the model's optimization level is incompatible with this runtime"),
    -13: ("RKNN_ERR_TARGET_PLATFORM_UNMATCH",
          "the model was compiled for another target_platform: rebuild it for this chip"),
}


class RknnRuntimeError(RKNNError):
    """librknnrt is missing, incompatible, or one of its calls returned an error code."""


def describe_code(code: int) -> str:
    """``-6`` → ``'-6 RKNN_ERR_MODEL_INVALID (invalid model: …)'``."""
    name, meaning = ERRORS.get(code, ("unknown error code", "not in the documented RKNN_ERR_* table"))
    return f"{code} {name} ({meaning})"


# --- structures (field order and types exactly as in rknn_api.h) -------------------------------
# uint32_t on 32-bit ARM (the header's __arm__), uint64_t everywhere else (a 64-bit kernel may report aarch64
# under a 32-bit userland, so the pointer size decides).
_ARM32 = ctypes.sizeof(ctypes.c_void_p) == 4 and not platform.machine().lower().startswith(("i386", "i686", "x86"))
rknn_context = ctypes.c_uint32 if _ARM32 else ctypes.c_uint64


class rknn_input_output_num(ctypes.Structure):
    _fields_ = [("n_input", ctypes.c_uint32), ("n_output", ctypes.c_uint32)]


class rknn_tensor_attr(ctypes.Structure):
    _fields_ = [("index", ctypes.c_uint32), ("n_dims", ctypes.c_uint32), ("dims", ctypes.c_uint32 * MAX_DIMS),
                ("name", ctypes.c_char * MAX_NAME_LEN), ("n_elems", ctypes.c_uint32), ("size", ctypes.c_uint32),
                ("fmt", ctypes.c_int), ("type", ctypes.c_int), ("qnt_type", ctypes.c_int),
                ("fl", ctypes.c_int8), ("zp", ctypes.c_int32), ("scale", ctypes.c_float),
                ("w_stride", ctypes.c_uint32), ("size_with_stride", ctypes.c_uint32),
                ("pass_through", ctypes.c_uint8), ("h_stride", ctypes.c_uint32)]


class rknn_perf_detail(ctypes.Structure):
    _fields_ = [("perf_data", ctypes.c_void_p), ("data_len", ctypes.c_uint64)]   # char* owned by the library


class rknn_perf_run(ctypes.Structure):
    _fields_ = [("run_duration", ctypes.c_int64)]


class rknn_sdk_version(ctypes.Structure):
    _fields_ = [("api_version", ctypes.c_char * 256), ("drv_version", ctypes.c_char * 256)]


class rknn_mem_size(ctypes.Structure):
    _fields_ = [("total_weight_size", ctypes.c_uint32), ("total_internal_size", ctypes.c_uint32),
                ("total_dma_allocated_size", ctypes.c_uint64), ("total_sram_size", ctypes.c_uint32),
                ("free_sram_size", ctypes.c_uint32), ("reserved", ctypes.c_uint32 * 10)]


class rknn_custom_string(ctypes.Structure):
    _fields_ = [("string", ctypes.c_char * 1024)]


class rknn_input(ctypes.Structure):
    _fields_ = [("index", ctypes.c_uint32), ("buf", ctypes.c_void_p), ("size", ctypes.c_uint32),
                ("pass_through", ctypes.c_uint8), ("type", ctypes.c_int), ("fmt", ctypes.c_int)]


class rknn_output(ctypes.Structure):
    _fields_ = [("want_float", ctypes.c_uint8), ("is_prealloc", ctypes.c_uint8), ("index", ctypes.c_uint32),
                ("buf", ctypes.c_void_p), ("size", ctypes.c_uint32)]


class rknn_output_extend(ctypes.Structure):
    _fields_ = [("frame_id", ctypes.c_uint64)]


STRUCTS = (rknn_input_output_num, rknn_tensor_attr, rknn_perf_detail, rknn_perf_run, rknn_sdk_version,
           rknn_mem_size, rknn_custom_string, rknn_input, rknn_output, rknn_output_extend)

_P = ctypes.POINTER
_SIGNATURES = {   # name: argument types (every function returns int)
    "rknn_init": [_P(rknn_context), ctypes.c_void_p, ctypes.c_uint32, ctypes.c_uint32, ctypes.c_void_p],
    "rknn_destroy": [rknn_context],
    "rknn_query": [rknn_context, ctypes.c_int, ctypes.c_void_p, ctypes.c_uint32],
    "rknn_inputs_set": [rknn_context, ctypes.c_uint32, _P(rknn_input)],
    "rknn_set_core_mask": [rknn_context, ctypes.c_int],
    "rknn_run": [rknn_context, ctypes.c_void_p],
    "rknn_outputs_get": [rknn_context, ctypes.c_uint32, _P(rknn_output), _P(rknn_output_extend)],
    "rknn_outputs_release": [rknn_context, ctypes.c_uint32, _P(rknn_output)],
}


# --- the library --------------------------------------------------------------------------------
def find_library() -> str | None:
    """The path of librknnrt.so: ``$OPENRKNN_LIBRKNNRT``, else the first standard path that exists."""
    configured = os.environ.get(LIBRARY_ENV)
    if configured:
        return configured
    return next((p for p in STANDARD_PATHS if os.path.isfile(p)), None)


def searched_places() -> str:
    return f"${LIBRARY_ENV} and " + ", ".join(STANDARD_PATHS)


def load_library(path: str | None) -> ctypes.CDLL:
    """Open librknnrt at ``path`` and declare the signatures; a clear error if it is missing or partial."""
    if not path:
        raise RknnRuntimeError(f"Rockchip's runtime librknnrt.so was not found (looked in {searched_places()}); "
                               f"{INSTALL_HINT}")
    if not os.path.isfile(path):
        raise RknnRuntimeError(f"librknnrt '{path}' does not exist; {INSTALL_HINT}")
    try:
        lib = ctypes.CDLL(path)
    except OSError as e:
        raise RknnRuntimeError(f"cannot load librknnrt '{path}': {e} (is it built for this CPU?); "
                               f"{INSTALL_HINT}") from e
    for name, argtypes in _SIGNATURES.items():
        try:
            function = getattr(lib, name)
        except AttributeError as e:
            raise RknnRuntimeError(f"'{path}' has no function {name}: it is not Rockchip's RKNPU2 runtime "
                                   f"(1.5 or newer); {INSTALL_HINT}") from e
        function.argtypes = argtypes
        function.restype = ctypes.c_int
    return lib


def parse_version(text: str) -> tuple[int, ...] | None:
    """``'1.5.2 (71720f3fc@2023-08-21T09:29:52)'`` → ``(1, 5, 2)``; None when there is no number."""
    found = re.match(r"\s*v?(\d+)\.(\d+)(?:\.(\d+))?", text)
    return None if found is None else tuple(int(g) for g in found.groups() if g is not None)


@dataclass(frozen=True)
class TensorAttr:
    """A readable ``rknn_tensor_attr``."""

    index: int
    name: str
    dims: tuple[int, ...]
    n_elems: int
    size: int
    fmt: str
    type: str
    qnt_type: str
    fl: int
    zp: int
    scale: float
    w_stride: int
    size_with_stride: int
    pass_through: int
    type_code: int
    fmt_code: int

    @classmethod
    def from_struct(cls, s: rknn_tensor_attr) -> "TensorAttr":
        return cls(index=s.index, name=s.name.decode("utf-8", "replace"), dims=tuple(s.dims[:min(s.n_dims, MAX_DIMS)]),
                   n_elems=s.n_elems, size=s.size, fmt=FORMAT_NAMES.get(s.fmt, "UNDEFINED"),
                   type=TYPE_NAMES.get(s.type, "UNKNOW"), qnt_type=QNT_NAMES.get(s.qnt_type, "NONE"), fl=s.fl,
                   zp=s.zp, scale=s.scale, w_stride=s.w_stride, size_with_stride=s.size_with_stride,
                   pass_through=s.pass_through, type_code=s.type, fmt_code=s.fmt)

    def to_spec(self) -> Any:
        """The openrknn ``TensorSpec`` of this tensor (shape and layout as the library reports them)."""
        layout = self.fmt if self.fmt in ("NCHW", "NHWC") else LAYOUT_UNDEFINED
        dtype = np.dtype(NUMPY_TYPES.get(self.type_code, np.float32)).name
        return TensorSpec(name=self.name, shape=list(self.dims), dtype=dtype, layout=layout)


class Context:
    """One ``rknn_context``: a model loaded into the runtime. Close it (or use ``with``) to free it."""

    def __init__(self, lib: ctypes.CDLL, model: bytes, flags: int = 0) -> None:
        if not model.startswith(ROCKCHIP_MAGIC):
            raise RknnRuntimeError("librknnrt runs only .rknn files compiled by Rockchip's RKNN-Toolkit2 "
                                   "(they start with 'RKNN'); this is another kind of file")
        self._lib = lib
        self._model = model
        handle = rknn_context(0)
        self._call("rknn_init", ctypes.byref(handle), model, len(model), flags, None)
        self.handle = handle.value
        self._finalizer = weakref.finalize(self, lib.rknn_destroy, self.handle)
        try:
            self.api_version, self.drv_version = self.sdk_version()
            self._check_api_version()
            counts = self._query(QUERY_IN_OUT_NUM, rknn_input_output_num())
            self.inputs = [self._attr(QUERY_INPUT_ATTR, i) for i in range(counts.n_input)]
            self.outputs = [self._attr(QUERY_OUTPUT_ATTR, i) for i in range(counts.n_output)]
        except BaseException:
            self.close()
            raise

    # -- plumbing
    def _call(self, name: str, *args: Any) -> None:
        code = getattr(self._lib, name)(*args)
        if code != 0:
            raise RknnRuntimeError(f"{name} failed: {describe_code(code)}")

    def _query(self, cmd: int, info: ctypes.Structure) -> Any:
        self._call("rknn_query", self.handle, cmd, ctypes.byref(info), ctypes.sizeof(info))
        return info

    def _attr(self, cmd: int, index: int) -> TensorAttr:
        return TensorAttr.from_struct(self._query(cmd, rknn_tensor_attr(index=index)))

    def _check_api_version(self) -> None:
        version = parse_version(self.api_version)
        low, high = SUPPORTED_API
        if version is None or not low <= version[:2] < high:
            raise RknnRuntimeError(f"librknnrt reports API version '{self.api_version}'; openrknn's binding "
                                   f"matches the structures of versions {low[0]}.{low[1]} to {high[0] - 1}.x only; "
                                   f"{INSTALL_HINT} (a supported version)")

    # -- queries
    def sdk_version(self) -> tuple[str, str]:
        """``(api_version, drv_version)`` as the library reports them."""
        v = self._query(QUERY_SDK_VERSION, rknn_sdk_version())
        return v.api_version.decode("utf-8", "replace"), v.drv_version.decode("utf-8", "replace")

    def perf_run_us(self) -> int:
        """Duration of the last run in µs (valid after ``outputs_get``)."""
        return int(self._query(QUERY_PERF_RUN, rknn_perf_run()).run_duration)

    def perf_detail(self) -> str:
        """Per-layer timing text of the last run; needs ``FLAG_COLLECT_PERF_MASK`` at init."""
        detail = self._query(QUERY_PERF_DETAIL, rknn_perf_detail())
        if not detail.perf_data:
            return ""
        return ctypes.string_at(detail.perf_data, detail.data_len).decode("utf-8", "replace").rstrip("\0")

    def mem_size(self) -> dict[str, int]:
        """``rknn_mem_size`` as a dict (bytes)."""
        m = self._query(QUERY_MEM_SIZE, rknn_mem_size())
        return {name: int(getattr(m, name)) for name, _ in rknn_mem_size._fields_ if name != "reserved"}

    def custom_string(self) -> str:
        return self._query(QUERY_CUSTOM_STRING, rknn_custom_string()).string.decode("utf-8", "replace")

    # -- execution
    def set_core_mask(self, mask: int) -> None:
        self._call("rknn_set_core_mask", self.handle, mask)

    def inputs_set(self, arrays: list[np.ndarray], formats: list[int], pass_through: list[int]) -> None:
        """Hand the input buffers to the runtime (it copies them); dtype gives ``rknn_input.type``."""
        items = (rknn_input * len(arrays))()
        for i, (array, fmt, through) in enumerate(zip(arrays, formats, pass_through)):
            items[i].index, items[i].buf, items[i].size = i, array.ctypes.data, array.nbytes
            items[i].pass_through, items[i].type, items[i].fmt = int(bool(through)), TENSOR_TYPE_OF[array.dtype], fmt
        self._call("rknn_inputs_set", self.handle, len(arrays), items)

    def run(self) -> None:
        self._call("rknn_run", self.handle, None)

    def outputs_get(self, want_float: bool = True) -> tuple[list[np.ndarray], int]:
        """Copy every output out of the runtime's buffers (released before returning) and the frame id."""
        n = len(self.outputs)
        items = (rknn_output * n)()
        for i in range(n):
            items[i].index, items[i].want_float, items[i].is_prealloc = i, int(want_float), 0
        extend = rknn_output_extend()
        self._call("rknn_outputs_get", self.handle, n, items, ctypes.byref(extend))
        try:
            results = [self._copy_output(items[i], attr, want_float) for i, attr in enumerate(self.outputs)]
        finally:
            self._call("rknn_outputs_release", self.handle, n, items)
        return results, int(extend.frame_id)

    @staticmethod
    def _copy_output(item: rknn_output, attr: TensorAttr, want_float: bool) -> np.ndarray:
        dtype = np.dtype(np.float32 if want_float else NUMPY_TYPES.get(attr.type_code, np.uint8))
        if not item.buf or item.size < attr.n_elems * dtype.itemsize:
            raise RknnRuntimeError(f"rknn_outputs_get returned {item.size} bytes for output {attr.index} "
                                   f"'{attr.name}', expected {attr.n_elems} × {dtype.name}")
        data = np.frombuffer(ctypes.string_at(item.buf, attr.n_elems * dtype.itemsize), dtype=dtype)
        return data.reshape(attr.dims).copy() if attr.dims else data.copy()

    def close(self) -> None:
        """``rknn_destroy`` (once)."""
        self._finalizer()

    @property
    def closed(self) -> bool:
        return not self._finalizer.alive

    def __enter__(self) -> "Context":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()
