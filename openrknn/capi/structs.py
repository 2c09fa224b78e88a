"""ctypes mirrors of the C structures the open ``librknnrt`` receives (``capi/include/*.h``).

The general-API structures come from the ctypes binding of Rockchip's library
(``runtime/librknnrt.py``), so both directions share one record of the documented layout; the
zero-copy, dynamic-shape, matmul and custom-op structures are added here (seed 002 §3.5, §5.2,
§5.4.4, §5.5.4).
"""
from __future__ import annotations

import ctypes

import numpy as np

from openrknn.runtime.librknnrt import (MAX_DIMS, MAX_NAME_LEN, rknn_context, rknn_custom_string,  # noqa: F401
                                        rknn_input, rknn_input_output_num, rknn_mem_size, rknn_output,
                                        rknn_output_extend, rknn_perf_detail, rknn_perf_run, rknn_sdk_version,
                                        rknn_tensor_attr)

MAX_DYNAMIC_SHAPE_NUM = 512

# return codes (c-api-abi.md)
SUCC, ERR_FAIL, ERR_TIMEOUT, ERR_DEVICE_UNAVAILABLE, ERR_MALLOC_FAIL, ERR_PARAM_INVALID = 0, -1, -2, -3, -4, -5
ERR_MODEL_INVALID, ERR_CTX_INVALID, ERR_INPUT_INVALID, ERR_OUTPUT_INVALID = -6, -7, -8, -9
ERR_DEVICE_UNMATCH, ERR_TARGET_PLATFORM_UNMATCH = -10, -13

# rknn_init flags
FLAG_ASYNC_MASK, FLAG_COLLECT_PERF_MASK, FLAG_MEM_ALLOC_OUTSIDE, FLAG_SHARE_WEIGHT_MEM = 0x4, 0x8, 0x10, 0x20
FLAG_ENABLE_SRAM, FLAG_SHARE_SRAM = 0x800, 0x1000

# query commands
(QUERY_IN_OUT_NUM, QUERY_INPUT_ATTR, QUERY_OUTPUT_ATTR, QUERY_PERF_DETAIL, QUERY_PERF_RUN, QUERY_SDK_VERSION,
 QUERY_MEM_SIZE, QUERY_CUSTOM_STRING, QUERY_NATIVE_INPUT_ATTR, QUERY_NATIVE_OUTPUT_ATTR,
 QUERY_NATIVE_NHWC_INPUT_ATTR, QUERY_NATIVE_NHWC_OUTPUT_ATTR, QUERY_DEVICE_MEM_INFO, QUERY_INPUT_DYNAMIC_RANGE,
 QUERY_CURRENT_INPUT_ATTR, QUERY_CURRENT_OUTPUT_ATTR, QUERY_CURRENT_NATIVE_INPUT_ATTR,
 QUERY_CURRENT_NATIVE_OUTPUT_ATTR) = range(18)

# tensor types, formats, quantization types
(TENSOR_FLOAT32, TENSOR_FLOAT16, TENSOR_INT8, TENSOR_UINT8, TENSOR_INT16, TENSOR_UINT16, TENSOR_INT32,
 TENSOR_UINT32, TENSOR_INT64, TENSOR_BOOL, TENSOR_INT4, TENSOR_BFLOAT16) = range(12)
FORMAT_NCHW, FORMAT_NHWC, FORMAT_NC1HWC2, FORMAT_UNDEFINED = 0, 1, 2, 3
QNT_NONE, QNT_DFP, QNT_AFFINE_ASYMMETRIC = 0, 1, 2

TYPE_NAMES = {0: "FLOAT32", 1: "FLOAT16", 2: "INT8", 3: "UINT8", 4: "INT16", 5: "UINT16", 6: "INT32",
              7: "UINT32", 8: "INT64", 9: "BOOL", 10: "INT4", 11: "BFLOAT16"}
FORMAT_NAMES = {0: "NCHW", 1: "NHWC", 2: "NC1HWC2", 3: "UNDEFINED"}
NUMPY_OF_TYPE = {TENSOR_FLOAT32: np.float32, TENSOR_FLOAT16: np.float16, TENSOR_INT8: np.int8,
                 TENSOR_UINT8: np.uint8, TENSOR_INT16: np.int16, TENSOR_UINT16: np.uint16, TENSOR_INT32: np.int32,
                 TENSOR_UINT32: np.uint32, TENSOR_INT64: np.int64, TENSOR_BOOL: np.bool_}
TYPE_OF_NUMPY = {np.dtype(v).name: k for k, v in NUMPY_OF_TYPE.items()}

# zero-copy memory flags (rknn_tensor_mem.flags) and rknn_create_mem2 allocation flags
MEM_FLAGS_ALLOC_INSIDE, MEM_FLAGS_FROM_FD, MEM_FLAGS_FROM_PHYS = 1, 2, 3
MEMORY_NON_CACHEABLE, MEMORY_TRY_ALLOC_SRAM = 0x1, 0x2
SYNC_TO_DEVICE, SYNC_FROM_DEVICE, SYNC_BIDIRECTIONAL = 0x1, 0x2, 0x3


class rknn_tensor_mem(ctypes.Structure):
    _fields_ = [("virt_addr", ctypes.c_void_p), ("phys_addr", ctypes.c_uint64), ("fd", ctypes.c_int32),
                ("offset", ctypes.c_int32), ("size", ctypes.c_uint32), ("flags", ctypes.c_uint32),
                ("priv_data", ctypes.c_void_p)]


class rknn_init_extend(ctypes.Structure):
    _fields_ = [("ctx", rknn_context), ("real_model_offset", ctypes.c_int32), ("real_model_size", ctypes.c_uint32),
                ("model_buffer_fd", ctypes.c_int32), ("model_buffer_flags", ctypes.c_uint32),
                ("reserved", ctypes.c_uint8 * 112)]


class rknn_run_extend(ctypes.Structure):
    _fields_ = [("frame_id", ctypes.c_uint64), ("non_block", ctypes.c_int32), ("timeout_ms", ctypes.c_int32),
                ("fence_fd", ctypes.c_int32)]


class rknn_input_range(ctypes.Structure):
    _fields_ = [("index", ctypes.c_uint32), ("shape_number", ctypes.c_uint32), ("fmt", ctypes.c_int),
                ("name", ctypes.c_char * MAX_NAME_LEN),
                ("dyn_range", (ctypes.c_uint32 * MAX_DIMS) * MAX_DYNAMIC_SHAPE_NUM), ("n_dims", ctypes.c_uint32)]


# ---- matmul API (seed 002 §3.5, tables 3-10 / 3-11) -------------------------------------------
class rknn_matmul_tensor_attr(ctypes.Structure):
    _fields_ = [("name", ctypes.c_char * MAX_NAME_LEN), ("n_dims", ctypes.c_uint32),
                ("dims", ctypes.c_uint32 * MAX_DIMS), ("size", ctypes.c_uint32), ("type", ctypes.c_int)]


class rknn_matmul_io_attr(ctypes.Structure):
    _fields_ = [("A", rknn_matmul_tensor_attr), ("B", rknn_matmul_tensor_attr), ("C", rknn_matmul_tensor_attr)]


class rknn_matmul_info(ctypes.Structure):
    _fields_ = [("M", ctypes.c_int32), ("K", ctypes.c_int32), ("N", ctypes.c_int32), ("type", ctypes.c_int),
                ("B_layout", ctypes.c_int16), ("B_quant_type", ctypes.c_int16), ("AC_layout", ctypes.c_int16),
                ("AC_quant_type", ctypes.c_int16), ("iommu_domain_id", ctypes.c_int32),
                ("group_size", ctypes.c_int16), ("reserved", ctypes.c_int8 * 34)]


class rknn_matmul_shape(ctypes.Structure):
    _fields_ = [("M", ctypes.c_int32), ("K", ctypes.c_int32), ("N", ctypes.c_int32)]


class rknn_quant_params(ctypes.Structure):
    _fields_ = [("name", ctypes.c_char * MAX_NAME_LEN), ("scale", ctypes.POINTER(ctypes.c_float)),
                ("scale_len", ctypes.c_int32), ("zp", ctypes.POINTER(ctypes.c_int32)), ("zp_len", ctypes.c_int32)]


# ---- custom operators (seed 002 §5.5.4) ---------------------------------------------------------
TARGET_TYPE_CPU, TARGET_TYPE_GPU = 1, 2


class rknn_gpu_op_context(ctypes.Structure):
    _fields_ = [("cl_context", ctypes.c_void_p), ("cl_command_queue", ctypes.c_void_p),
                ("cl_kernel", ctypes.c_void_p)]


class rknn_custom_op_context(ctypes.Structure):
    _fields_ = [("target", ctypes.c_int), ("internal_ctx", ctypes.c_uint64), ("gpu_ctx", rknn_gpu_op_context),
                ("priv_data", ctypes.c_void_p)]


class rknn_custom_op_tensor(ctypes.Structure):
    _fields_ = [("attr", rknn_tensor_attr), ("mem", rknn_tensor_mem)]


class rknn_custom_op_attr(ctypes.Structure):
    _fields_ = [("name", ctypes.c_char * MAX_NAME_LEN), ("dtype", ctypes.c_int), ("n_elems", ctypes.c_uint32),
                ("data", ctypes.c_void_p)]


OP_CALLBACK = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.POINTER(rknn_custom_op_context),
                               ctypes.POINTER(rknn_custom_op_tensor), ctypes.c_uint32,
                               ctypes.POINTER(rknn_custom_op_tensor), ctypes.c_uint32)
DESTROY_CALLBACK = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.POINTER(rknn_custom_op_context))


class rknn_custom_op(ctypes.Structure):
    _fields_ = [("version", ctypes.c_uint32), ("target", ctypes.c_int), ("op_type", ctypes.c_char * MAX_NAME_LEN),
                ("cl_kernel_name", ctypes.c_char * MAX_NAME_LEN), ("cl_kernel_source", ctypes.c_char_p),
                ("cl_source_size", ctypes.c_uint64), ("cl_build_options", ctypes.c_char * MAX_NAME_LEN),
                ("init", ctypes.c_void_p), ("prepare", ctypes.c_void_p), ("compute", ctypes.c_void_p),
                ("compute_native", ctypes.c_void_p), ("destroy", ctypes.c_void_p)]


def at(struct: type, address: int) -> ctypes.Structure:
    """The ``struct`` living at ``address`` (no copy: writes go to the caller's memory)."""
    return struct.from_address(address)


def byte_view(address: int, size: int) -> np.ndarray:
    """A uint8 numpy array over ``size`` bytes at ``address`` (the memory itself, not a copy)."""
    if size == 0:
        return np.zeros(0, np.uint8)
    return np.frombuffer((ctypes.c_uint8 * size).from_address(address), dtype=np.uint8)


def set_name(field_owner: ctypes.Structure, field: str, text: str, limit: int = MAX_NAME_LEN) -> None:
    data = text.encode("utf-8")[:limit - 1]
    setattr(field_owner, field, data)
