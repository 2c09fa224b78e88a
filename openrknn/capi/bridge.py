"""The Python side of the open ``librknnrt.so``: one function per C entry point.

The C library (``capi/src/rknnrt.c``) embeds CPython (or joins the running interpreter when a
Python program loads it) and calls these functions with plain integers: contexts, sizes, and the
addresses of the caller's structures and buffers. The structures are read and written in place
through ctypes (``capi/structs.py``), so the caller's memory is the memory the runtime uses.

Every function returns the documented code (``RKNN_SUCC`` 0 or a negative ``RKNN_ERR_*``) and prints
one ``E <function>: <why>`` line on stderr when it refuses; the memory functions return an address
(0 = failure).
"""
from __future__ import annotations

import ctypes
import sys
from typing import Any, Callable

import numpy as np

from openrknn import log
from openrknn.capi import matmul
from openrknn.capi import structs as s
from openrknn.capi.custom_ops import get_op_attr, register
from openrknn.capi.handles import _contexts, _lock, _memories, context, entry, new_handle
from openrknn.capi.model_context import ModelContext
from openrknn.capi.tensors import ApiError

FLAG_FENCE_IN_OUTSIDE, FLAG_FENCE_OUT_OUTSIDE = 0x40, 0x80
def embedded_setup() -> int:
    """Called once when the library started its own interpreter: Python output goes to stderr so the
    C program's stdout stays its own; openrknn's I/W/E lines keep their form."""
    sys.stdout = sys.stderr
    log.configure(False)
    return 0


def _read_model(model: int, size: int, extend: int) -> bytes:
    if not model:
        raise ApiError(s.ERR_PARAM_INVALID, "model is NULL: pass the model bytes, or a file path with size 0")
    if size == 0:
        path = ctypes.string_at(model).decode("utf-8", "surrogateescape")
        try:
            with open(path, "rb") as handle:
                return handle.read()
        except OSError as e:
            raise ApiError(s.ERR_MODEL_INVALID, f"cannot read the model file '{path}': {e.strerror}") from e
    data = ctypes.string_at(model, size)
    if extend:
        ext = s.at(s.rknn_init_extend, extend)
        if ext.real_model_size:
            offset = int(ext.real_model_offset)
            data = data[offset:offset + int(ext.real_model_size)]
    return data


# ---- general API ---------------------------------------------------------------------------------
@entry("rknn_init")
def init(ctx_out: int, model: int, size: int, flags: int, extend: int) -> int:
    if not ctx_out:
        raise ApiError(s.ERR_PARAM_INVALID, "context is NULL: pass the address of an rknn_context")
    ext = s.at(s.rknn_init_extend, extend) if extend else None
    if flags & (FLAG_FENCE_IN_OUTSIDE | FLAG_FENCE_OUT_OUTSIDE):
        raise ApiError(s.ERR_PARAM_INVALID, "RKNN_FLAG_FENCE_IN_OUTSIDE / FENCE_OUT_OUTSIDE need the NPU driver's "
                                            "sync fences, which this CPU runtime has not; run without them")
    if flags & s.FLAG_SHARE_WEIGHT_MEM:
        if ext is None or not ext.ctx:
            raise ApiError(s.ERR_PARAM_INVALID, "RKNN_FLAG_SHARE_WEIGHT_MEM needs rknn_init_extend.ctx set to the "
                                                "context whose weights to share")
        owner = context(ext.ctx)
        if owner.shape_sets:
            raise ApiError(s.ERR_PARAM_INVALID, "a dynamic-shape model cannot share weights (seed 002 §5.4.4)")
        created = ModelContext(None, flags, shared=owner)
    else:
        created = ModelContext(_read_model(model, size, extend), flags)
    if flags & s.FLAG_ENABLE_SRAM:
        print("W rknn_init: RKNN_FLAG_ENABLE_SRAM: this runtime has no NPU SRAM; DDR memory is used",
              file=sys.stderr, flush=True)
    handle = new_handle(created)
    s.at(s.rknn_context, ctx_out).value = handle
    if ext is not None:
        ext.ctx = handle
    return s.SUCC


@entry("rknn_dup_context")
def dup_context(ctx_in: int, ctx_out: int) -> int:
    if not ctx_in or not ctx_out:
        raise ApiError(s.ERR_PARAM_INVALID, "context_in and context_out must be addresses of rknn_context values")
    owner = context(s.at(s.rknn_context, ctx_in).value)
    if owner.shape_sets:
        raise ApiError(s.ERR_PARAM_INVALID, "a dynamic-shape model cannot be duplicated (seed 002 §5.4.4)")
    s.at(s.rknn_context, ctx_out).value = new_handle(ModelContext(None, owner.flags, shared=owner))
    return s.SUCC


@entry("rknn_destroy")
def destroy(handle: int) -> int:
    ctx = context(handle)
    with _lock:
        del _contexts[int(handle)]
        for address in [a for a, owner in _memories.items() if owner == int(handle)]:
            _memories[address] = 0     # still freed by rknn_destroy_mem; no longer tied to a context
    ctx.release()
    return s.SUCC


_ATTR_QUERIES = {s.QUERY_INPUT_ATTR: ("input", None), s.QUERY_OUTPUT_ATTR: ("output", None),
                 s.QUERY_NATIVE_INPUT_ATTR: ("input", "native"), s.QUERY_NATIVE_OUTPUT_ATTR: ("output", "native"),
                 s.QUERY_NATIVE_NHWC_INPUT_ATTR: ("input", "nhwc"), s.QUERY_NATIVE_NHWC_OUTPUT_ATTR: ("output", "nhwc"),
                 s.QUERY_CURRENT_INPUT_ATTR: ("input", None), s.QUERY_CURRENT_OUTPUT_ATTR: ("output", None),
                 s.QUERY_CURRENT_NATIVE_INPUT_ATTR: ("input", "native"),
                 s.QUERY_CURRENT_NATIVE_OUTPUT_ATTR: ("output", "native")}
_QUERY_STRUCTS = {s.QUERY_IN_OUT_NUM: s.rknn_input_output_num, s.QUERY_PERF_DETAIL: s.rknn_perf_detail,
                  s.QUERY_PERF_RUN: s.rknn_perf_run, s.QUERY_SDK_VERSION: s.rknn_sdk_version,
                  s.QUERY_MEM_SIZE: s.rknn_mem_size, s.QUERY_CUSTOM_STRING: s.rknn_custom_string,
                  s.QUERY_INPUT_DYNAMIC_RANGE: s.rknn_input_range}


@entry("rknn_query")
def query(handle: int, cmd: int, info: int, size: int) -> int:
    ctx = context(handle)
    struct = s.rknn_tensor_attr if cmd in _ATTR_QUERIES else _QUERY_STRUCTS.get(cmd)
    if struct is None:
        raise ApiError(s.ERR_PARAM_INVALID, f"query command {cmd} is not supported by this runtime "
                                            "(RKNN_QUERY_DEVICE_MEM_INFO needs a board driver)")
    if not info or size < ctypes.sizeof(struct):
        raise ApiError(s.ERR_PARAM_INVALID, f"info must point to a {struct.__name__} of {ctypes.sizeof(struct)} "
                                            f"bytes (size {size} given)")
    out = s.at(struct, info)
    if cmd in _ATTR_QUERIES:
        kind, native = _ATTR_QUERIES[cmd]
        desc = ctx.input_desc(out.index, native) if kind == "input" else ctx.output_desc(out.index, native)
        desc.fill(out)
    elif cmd == s.QUERY_IN_OUT_NUM:
        out.n_input, out.n_output = len(ctx.model.inputs), len(ctx.model.outputs)
    elif cmd == s.QUERY_PERF_RUN:
        out.run_duration = ctx.last_run_us
    elif cmd == s.QUERY_PERF_DETAIL:
        ctx.perf_text = ctypes.create_string_buffer(ctx.perf_detail().encode())   # owned by the context
        out.perf_data = ctypes.addressof(ctx.perf_text)
        out.data_len = len(ctx.perf_text.value)
    elif cmd == s.QUERY_SDK_VERSION:
        api, drv = ctx.sdk_version()
        s.set_name(out, "api_version", api)
        s.set_name(out, "drv_version", drv)
    elif cmd == s.QUERY_MEM_SIZE:
        for name, value in ctx.mem_size().items():
            setattr(out, name, value)
    elif cmd == s.QUERY_CUSTOM_STRING:
        s.set_name(out, "string", ctx.model.custom_string or "", 1024)
    elif cmd == s.QUERY_INPUT_DYNAMIC_RANGE:
        ctx.fill_dynamic_range(out)
    return s.SUCC


@entry("rknn_inputs_set")
def inputs_set(handle: int, count: int, inputs: int) -> int:
    ctx = context(handle)
    if not inputs or count == 0:
        raise ApiError(s.ERR_PARAM_INVALID, "inputs is NULL or n_inputs is 0")
    if count > len(ctx.model.inputs):
        raise ApiError(s.ERR_PARAM_INVALID, f"{count} inputs given; the model has {len(ctx.model.inputs)}")
    items = (s.rknn_input * count).from_address(inputs)
    for item in items:
        if not item.buf:
            raise ApiError(s.ERR_INPUT_INVALID, f"input {item.index}: buf is NULL")
        ctx.set_input(int(item.index), s.byte_view(item.buf, item.size), int(item.type), int(item.fmt),
                      bool(item.pass_through))
    return s.SUCC


@entry("rknn_run")
def run(handle: int, extend: int) -> int:
    ctx = context(handle)
    ext = s.at(s.rknn_run_extend, extend) if extend else None
    frame = ctx.run(bool(ext.non_block) if ext is not None else False)
    if ext is not None:
        ext.frame_id = frame
    return s.SUCC


@entry("rknn_wait")
def wait(handle: int, extend: int) -> int:
    ctx = context(handle)
    ext = s.at(s.rknn_run_extend, extend) if extend else None
    ctx.wait(int(ext.timeout_ms) if ext is not None else None)
    if ext is not None:
        ext.frame_id = ctx.frame_id
    return s.SUCC


@entry("rknn_outputs_get")
def outputs_get(handle: int, count: int, outputs: int, extend: int) -> int:
    ctx = context(handle)
    if not outputs or count == 0 or count > len(ctx.model.outputs):
        raise ApiError(s.ERR_PARAM_INVALID, f"n_outputs must be 1..{len(ctx.model.outputs)} with a non-NULL array")
    items = (s.rknn_output * count).from_address(outputs)
    for item in items:
        data = ctx.general_output(int(item.index), bool(item.want_float))
        if item.is_prealloc:
            if not item.buf or item.size < data.size:
                raise ApiError(s.ERR_OUTPUT_INVALID, f"output {item.index}: is_prealloc buffer of {item.size} bytes, "
                                                     f"{data.size} needed")
            s.byte_view(item.buf, data.size)[:] = data
        else:
            held = np.array(data, copy=True)
            ctx.held[int(item.index)] = held      # the library's buffer until rknn_outputs_release
            item.buf = held.ctypes.data
            item.size = held.size
    if extend:
        s.at(s.rknn_output_extend, extend).frame_id = ctx.frame_id
    return s.SUCC


@entry("rknn_outputs_release")
def outputs_release(handle: int, count: int, outputs: int) -> int:
    ctx = context(handle)
    if not outputs:
        raise ApiError(s.ERR_PARAM_INVALID, "outputs is NULL")
    for item in (s.rknn_output * count).from_address(outputs):
        if not item.is_prealloc and ctx.held.pop(int(item.index), None) is not None:
            item.buf = None
    return s.SUCC


@entry("rknn_set_core_mask")
def set_core_mask(handle: int, mask: int) -> int:
    ctx = context(handle)
    valid = {1: (0,), 2: (0, 1, 2, 3), 3: (0, 1, 2, 4, 3, 7, 0xFFFF)}[ctx.core_count()]
    if mask not in valid:
        raise ApiError(s.ERR_PARAM_INVALID, f"core mask {mask:#x} is not valid on {ctx.platform} "
                                            f"({ctx.core_count()} NPU core(s)): use one of "
                                            f"{', '.join(hex(v) for v in valid)}")
    ctx.core_mask = mask
    return s.SUCC


@entry("rknn_set_batch_core_num")
def set_batch_core_num(handle: int, count: int) -> int:
    ctx = context(handle)
    if not 1 <= count <= ctx.core_count():
        raise ApiError(s.ERR_PARAM_INVALID, f"core_num {count} is not valid on {ctx.platform}: 1..{ctx.core_count()}")
    ctx.batch_core_num = count
    return s.SUCC


@entry("rknn_set_input_shapes")
def set_input_shapes(handle: int, count: int, attrs: int) -> int:
    ctx = context(handle)
    if not attrs:
        raise ApiError(s.ERR_PARAM_INVALID, "attr is NULL")
    ctx.set_input_shapes(list((s.rknn_tensor_attr * count).from_address(attrs)))
    return s.SUCC


# ---- memory ------------------------------------------------------------------------------------
@entry("rknn_create_mem", failure=0)
def register_mem(handle: int, mem: int) -> int:
    """The C side allocated ``mem``; tie it to the context (a model or a matmul context)."""
    if int(handle) not in _contexts:
        raise ApiError(s.ERR_CTX_INVALID, f"{handle:#x} is not a live context")
    with _lock:
        _memories[mem] = int(handle)
    return mem


@entry("rknn_destroy_mem")
def unregister_mem(handle: int, mem: int) -> int:
    if mem not in _memories:
        raise ApiError(s.ERR_PARAM_INVALID, "mem was not created by rknn_create_mem* (or was destroyed already)")
    owner = _memories[mem]
    if owner and owner != int(handle):
        raise ApiError(s.ERR_CTX_INVALID, f"mem belongs to context {owner:#x}, not {handle:#x}")
    with _lock:
        del _memories[mem]
    found = _contexts.get(owner)
    if found is not None and hasattr(found, "unbind"):
        found.unbind(mem)
    return s.SUCC


def _known_mem(handle: int, mem: int) -> s.rknn_tensor_mem:
    if not mem or mem not in _memories:
        raise ApiError(s.ERR_PARAM_INVALID, "mem must come from rknn_create_mem / _from_fd / _from_phys")
    return s.at(s.rknn_tensor_mem, mem)


@entry("rknn_set_io_mem")
def set_io_mem(handle: int, mem: int, attr: int) -> int:
    ctx = context(handle)
    _known_mem(handle, mem)
    if not attr:
        raise ApiError(s.ERR_PARAM_INVALID, "attr is NULL: pass the rknn_tensor_attr of the input or output")
    ctx.bind(mem, s.at(s.rknn_tensor_attr, attr))
    return s.SUCC


def _checked_backing_mem(handle: int, mem: int, kind: str) -> int:
    """``mem`` after checking it holds what RKNN_QUERY_MEM_SIZE asks for the ``kind`` memory."""
    need = context(handle).mem_size()[f"total_{kind}_size"]
    if _known_mem(handle, mem).size < need:
        raise ApiError(s.ERR_PARAM_INVALID, f"the {kind} memory holds {s.at(s.rknn_tensor_mem, mem).size} bytes; "
                                            f"RKNN_QUERY_MEM_SIZE says {need}")
    return mem


@entry("rknn_set_weight_mem")
def set_weight_mem(handle: int, mem: int) -> int:
    context(handle).weight_mem = _checked_backing_mem(handle, mem, "weight")
    return s.SUCC


@entry("rknn_set_internal_mem")
def set_internal_mem(handle: int, mem: int) -> int:
    context(handle).internal_mem = _checked_backing_mem(handle, mem, "internal")
    return s.SUCC


@entry("rknn_mem_sync")
def mem_sync(handle: int, mem: int, mode: int) -> int:
    if int(handle) not in _contexts:
        raise ApiError(s.ERR_CTX_INVALID, f"{handle:#x} is not a live context")
    _known_mem(handle, mem)
    if mode not in (s.SYNC_TO_DEVICE, s.SYNC_FROM_DEVICE, s.SYNC_BIDIRECTIONAL):
        raise ApiError(s.ERR_PARAM_INVALID, f"mode {mode} is not an rknn_mem_sync_mode (1, 2 or 3)")
    return s.SUCC   # the CPU runtime reads and writes the buffers through the CPU cache: always coherent


# ---- custom operators ----------------------------------------------------------------------------
@entry("rknn_register_custom_ops")
def register_custom_ops(handle: int, ops: int, count: int) -> int:
    ctx = context(handle)
    if not ops or count == 0:
        raise ApiError(s.ERR_PARAM_INVALID, "op is NULL or custom_op_num is 0")
    register(ctx, list((s.rknn_custom_op * count).from_address(ops)))
    return s.SUCC


@entry("rknn_custom_op_get_op_attr")
def custom_op_get_op_attr(op_ctx: int, name: int, attr: int) -> int:
    get_op_attr(op_ctx, ctypes.string_at(name).decode("utf-8", "replace"), attr)
    return s.SUCC


# ---- matmul API ----------------------------------------------------------------------------------
def _matmul(function: str) -> Callable:
    def run_it(*args: Any) -> int:
        return entry(function)(getattr(matmul, function.replace("rknn_matmul_", "").replace("rknn_", "")))(*args)
    return run_it


matmul_create = _matmul("rknn_matmul_create")
matmul_create_dynamic_shape = _matmul("rknn_matmul_create_dynamic_shape")
matmul_set_io_mem = _matmul("rknn_matmul_set_io_mem")
matmul_set_core_mask = _matmul("rknn_matmul_set_core_mask")
matmul_set_quant_params = _matmul("rknn_matmul_set_quant_params")
matmul_get_quant_params = _matmul("rknn_matmul_get_quant_params")
matmul_set_dynamic_shape = _matmul("rknn_matmul_set_dynamic_shape")
matmul_run = _matmul("rknn_matmul_run")
matmul_destroy = _matmul("rknn_matmul_destroy")
B_normal_layout_to_native_layout = _matmul("rknn_B_normal_layout_to_native_layout")
