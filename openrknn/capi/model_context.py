"""One ``rknn_context`` of the open librknnrt: an openrknn ``.rknn`` in ``RKNNLite`` plus the C API's I/O state.

Inference goes through ``RKNNLite.inference`` (the same backend choice and the same values as a
Python program), so a C program and ``RKNNLite`` give equal outputs for equal inputs. This module
turns C buffers into the arrays ``RKNNLite`` takes (type, layout, ``pass_through``) and its float32
results into what the caller asked for (``want_float``, zero-copy attribute type and layout).
"""
from __future__ import annotations

import os
import tempfile
import threading
import time
from dataclasses import dataclass, replace
from typing import Any

import numpy as np

from openrknn import __version__
from openrknn.capi import structs as s
from openrknn.capi.tensors import (ApiError, TensorDesc, c2_of, dequantize, input_desc, nc1hwc2_to_nchw,
                                   nchw_to_nc1hwc2, output_desc, quantize)
from openrknn.chips import get_chip
from openrknn.graph.rknn_model import LAYOUT_NCHW, LAYOUT_NHWC
from openrknn.graph.runner import has_custom_ops
from openrknn.profile.memory import estimate_memory
from openrknn.runtime.lite import RKNNLite

BACKEND_ENV = "OPENRKNN_CAPI_BACKEND"
API_VERSION = "2.3.0"
# Table 5-3: the types a caller may hand in per stored type (pass_through=0).
_FLOAT_FEEDS = (s.TENSOR_INT8, s.TENSOR_UINT8, s.TENSOR_FLOAT16, s.TENSOR_FLOAT32)
_CORES = {"rk3588": 3, "rk3576": 2}


@dataclass
class Feed:
    """One input as given to the C API (the bytes already copied or bound)."""

    data: np.ndarray          # uint8 bytes
    type: int
    fmt: int
    pass_through: bool


@dataclass
class Binding:
    """A zero-copy memory bound to an input or output with the caller's attribute."""

    mem_address: int
    desc: TensorDesc
    pass_through: bool


def load_lite(data: bytes) -> Any:
    """``RKNNLite`` with the model loaded (runtime not started yet)."""
    if data[:4] == b"RKNN":
        raise ApiError(s.ERR_MODEL_INVALID, "this .rknn was compiled by Rockchip's toolkit; run it with Rockchip's "
                                            "librknnrt.so on a board (this library runs openrknn .rknn files)")
    lite = RKNNLite(backend=os.environ.get(BACKEND_ENV) or None)
    with tempfile.TemporaryDirectory(prefix="openrknn-capi-") as folder:
        path = os.path.join(folder, "model.rknn")
        with open(path, "wb") as handle:
            handle.write(data)
        if lite.load_rknn(path) != 0:
            raise ApiError(s.ERR_MODEL_INVALID, "the data is not a valid openrknn .rknn file (see the E line above)")
    return lite


class ModelContext:
    """State of one context; ``shared`` (rknn_dup_context / SHARE_WEIGHT_MEM) reuses its loaded runtime."""

    def __init__(self, data: bytes | None, flags: int, shared: "ModelContext | None" = None) -> None:
        self.flags = flags
        if shared is not None:
            self._shared = shared._shared
        else:
            assert data is not None
            self._shared = {"lite": load_lite(data), "started": False, "lock": threading.Lock(), "users": 0}
        self._shared["users"] += 1
        self.model = self.lite._model   # the RKNNModel RKNNLite loaded (same package, read-only use)
        self.platform = (self.model.platforms or ["rk3588"])[0]
        self.core_mask = 0
        self.batch_core_num = 1
        self.feeds: dict[int, Feed] = {}
        self.input_mems: dict[int, Binding] = {}
        self.output_mems: dict[int, Binding] = {}
        self.weight_mem: int | None = None
        self.internal_mem: int | None = None
        self.results: list[np.ndarray] | None = None
        self.held: dict[int, np.ndarray] = {}
        self.frame_id = 0
        self.last_run_us = 0
        self.perf_text: Any = None
        self.custom_ops: Any = None
        self._descs: dict[tuple, TensorDesc] = {}
        self._thread: threading.Thread | None = None
        self._thread_error: ApiError | None = None
        sets = self.model.metadata.get("dynamic_input") or None
        self.shape_sets: list[list[list[int]]] | None = sets
        self.input_shapes: list[list[int]] = ([list(x) for x in sets[0]] if sets else
                                              [list(i.shape) for i in self.model.inputs])
        self.output_shapes: list[list[int]] = [list(o.shape) for o in self.model.outputs]
        if sets:
            self.output_shapes = self._infer_output_shapes()
        if not self.has_custom_ops:
            self.start()

    @property
    def lite(self) -> Any:
        return self._shared["lite"]

    @property
    def has_custom_ops(self) -> bool:
        return has_custom_ops(self.model.graph)

    def start(self) -> None:
        """Start the RKNNLite runtime once per loaded model (deferred while custom ops await registration)."""
        with self._shared["lock"]:
            if self._shared["started"]:
                return
            if self.lite.init_runtime() != 0:
                raise ApiError(s.ERR_FAIL, "the runtime could not start (see the E line above)")
            self._shared["started"] = True

    def release(self) -> None:
        self.wait(None)
        if self.custom_ops is not None:
            self.custom_ops.destroy()
        self._shared["users"] -= 1
        if self._shared["users"] == 0:
            self.lite.release()

    # ---- descriptions ---------------------------------------------------------------------------
    def input_desc(self, index: int, native: str | None = None) -> TensorDesc:
        self._check_index(index, len(self.model.inputs), "input")
        key = ("input", index, native, tuple(self.input_shapes[index]))
        if key not in self._descs:      # asked on every call of the hot path: describe each tensor once
            self._descs[key] = input_desc(self.model, index, self.input_shapes[index], native)
        return self._descs[key]

    def output_desc(self, index: int, native: str | None = None) -> TensorDesc:
        self._check_index(index, len(self.model.outputs), "output")
        key = ("output", index, native, tuple(self.output_shapes[index]))
        if key not in self._descs:
            self._descs[key] = output_desc(self.model, index, self.output_shapes[index], native)
        return self._descs[key]

    @staticmethod
    def _check_index(index: int, count: int, what: str) -> None:
        if not 0 <= index < count:
            raise ApiError(s.ERR_PARAM_INVALID,
                           f"{what} index {index} is out of range: the model has {count} {what}(s)")

    # ---- inputs -----------------------------------------------------------------------------------
    def set_input(self, index: int, data: np.ndarray, type_: int, fmt: int, pass_through: bool) -> None:
        self._check_index(index, len(self.model.inputs), "input")
        feed = Feed(np.array(data, np.uint8, copy=True), type_, fmt, pass_through)
        self._decode(index, feed)          # refuse a bad input now, as rknn_inputs_set does
        self.feeds[index] = feed

    def _decode(self, index: int, feed: Feed) -> tuple[np.ndarray, str, int]:
        """(array for RKNNLite, data_format, pass-through flag) of one input."""
        spec = self.model.inputs[index]
        stored = self.input_desc(index)
        shape = list(self.input_shapes[index])
        if feed.type not in s.NUMPY_OF_TYPE:
            raise ApiError(s.ERR_INPUT_INVALID, f"input {index}: tensor type {feed.type} is not supported "
                                                f"(use one of {', '.join(s.TYPE_NAMES[t] for t in _FLOAT_FEEDS)})")
        if feed.pass_through:
            if feed.type != stored.type:
                raise ApiError(s.ERR_INPUT_INVALID, f"input {index}: pass_through=1 takes the model's own type "
                                                    f"{s.TYPE_NAMES[stored.type]}, not {s.TYPE_NAMES[feed.type]}")
        elif stored.type in (s.TENSOR_INT8, s.TENSOR_UINT8, s.TENSOR_INT16, s.TENSOR_FLOAT16, s.TENSOR_FLOAT32) \
                and np.dtype(spec.dtype).kind == "f":
            if feed.type not in _FLOAT_FEEDS:
                raise ApiError(s.ERR_INPUT_INVALID, f"input {index}: type {s.TYPE_NAMES[feed.type]} cannot be "
                                                    f"converted; give INT8, UINT8, FLOAT16 or FLOAT32")
        elif feed.type != stored.type:
            raise ApiError(s.ERR_INPUT_INVALID, f"input {index}: the model takes {s.TYPE_NAMES[stored.type]}, "
                                                f"not {s.TYPE_NAMES[feed.type]}")
        dtype = np.dtype(s.NUMPY_OF_TYPE[feed.type])
        four_d = len(shape) == 4 and spec.layout in (LAYOUT_NCHW, LAYOUT_NHWC)
        if four_d:
            n, c, h, w = shape if spec.layout == LAYOUT_NCHW else (shape[0], shape[3], shape[1], shape[2])
            # §5.2.3: with a native NC1HWC2 attribute and pass_through=0 the data is NHWC (converted inside)
            if feed.fmt == s.FORMAT_NHWC or (feed.fmt == s.FORMAT_NC1HWC2 and not feed.pass_through):
                dims, data_format = (n, h, w, c), "nhwc"
            elif feed.fmt == s.FORMAT_NCHW:
                dims, data_format = (n, c, h, w), "nchw"
            elif feed.fmt == s.FORMAT_NC1HWC2:
                c2 = c2_of(feed.type)
                dims, data_format = (n, -(-c // c2), h, w, c2), "nchw"
            else:
                raise ApiError(s.ERR_INPUT_INVALID, f"input {index}: a 4-D input needs fmt NHWC, NCHW or NC1HWC2")
        else:
            dims, data_format = tuple(shape), "nhwc"
        needed = int(np.prod(dims)) * dtype.itemsize
        if feed.data.size < needed:
            raise ApiError(s.ERR_INPUT_INVALID, f"input {index}: {feed.data.size} bytes given, {needed} needed for "
                                                f"{list(dims)} {s.TYPE_NAMES[feed.type]} "
                                                f"{s.FORMAT_NAMES.get(feed.fmt, feed.fmt)}")
        array = feed.data[:needed].view(dtype).reshape(dims)
        if four_d and feed.fmt == s.FORMAT_NC1HWC2 and feed.pass_through:
            array = nc1hwc2_to_nchw(array, c)
        if feed.pass_through:
            affine = stored.qnt_type == s.QNT_AFFINE_ASYMMETRIC
            array = dequantize(array, stored) if affine else array.astype(np.float32)
        return array, data_format, int(feed.pass_through)

    # ---- run ----------------------------------------------------------------------------------
    def run(self, non_block: bool) -> int:
        """Start an inference; the frame id. ``non_block`` runs it on a thread (rknn_wait / outputs_get join)."""
        self.wait(None)
        if self.flags & s.FLAG_MEM_ALLOC_OUTSIDE and (self.weight_mem is None or self.internal_mem is None):
            raise ApiError(s.ERR_PARAM_INVALID, "the context was created with RKNN_FLAG_MEM_ALLOC_OUTSIDE: call "
                                                "rknn_set_weight_mem and rknn_set_internal_mem before rknn_run")
        self.start()
        arrays, formats, pass_through = [], [], []
        for index in range(len(self.model.inputs)):
            if index in self.input_mems:
                binding = self.input_mems[index]
                mem = s.at(s.rknn_tensor_mem, binding.mem_address)
                data = s.byte_view(mem.virt_addr + mem.offset, max(0, mem.size - mem.offset))
                feed = Feed(data, binding.desc.type, binding.desc.fmt, binding.pass_through)
            elif index in self.feeds:
                feed = self.feeds[index]
            else:
                raise ApiError(s.ERR_INPUT_INVALID, f"input {index} is not set: call rknn_inputs_set or "
                                                    "rknn_set_io_mem before rknn_run")
            array, data_format, flag = self._decode(index, feed)
            arrays.append(array)
            formats.append(data_format)
            pass_through.append(flag)
        if any(pass_through) and not all(pass_through) and self.model.preprocess:
            raise ApiError(s.ERR_INPUT_INVALID, "mixing pass_through=1 and 0 inputs on a model with mean/std is not "
                                                "supported by this runtime; pass all inputs the same way")
        self.frame_id += 1
        self.results = None
        if non_block or self.flags & s.FLAG_ASYNC_MASK:
            self._thread_error = None
            self._thread = threading.Thread(target=self._infer_guarded, args=(arrays, formats, pass_through),
                                            daemon=True)
            self._thread.start()
        else:
            self._infer(arrays, formats, pass_through)
        return self.frame_id

    def _infer_guarded(self, *args: Any) -> None:
        try:
            self._infer(*args)
        except ApiError as e:
            self._thread_error = e

    def _infer(self, arrays: list[np.ndarray], formats: list[str], pass_through: list[int]) -> None:
        begin = time.perf_counter_ns()
        outputs = self.lite.inference(inputs=arrays, data_format=formats,
                                      inputs_pass_through=pass_through if any(pass_through) else None)
        self.last_run_us = (time.perf_counter_ns() - begin) // 1000
        if outputs is None:
            raise ApiError(s.ERR_FAIL, "inference failed (see the E line above)")
        self.results = [np.asarray(o, np.float32) for o in outputs]
        for index, binding in self.output_mems.items():
            mem = s.at(s.rknn_tensor_mem, binding.mem_address)
            self._write_output(index, binding.desc, mem.virt_addr + mem.offset, max(0, mem.size - mem.offset))

    def wait(self, timeout_ms: int | None) -> None:
        if self._thread is None:
            return
        self._thread.join(None if not timeout_ms or timeout_ms <= 0 else timeout_ms / 1000.0)
        if self._thread.is_alive():
            raise ApiError(s.ERR_TIMEOUT, f"the inference is still running after {timeout_ms} ms")
        self._thread = None
        if self._thread_error is not None:
            error, self._thread_error = self._thread_error, None
            raise error

    # ---- outputs ------------------------------------------------------------------------------
    def encode_output(self, index: int, desc: TensorDesc) -> np.ndarray:
        """Result ``index`` in ``desc``'s type and layout, as contiguous bytes."""
        if self.results is None:
            raise ApiError(s.ERR_OUTPUT_INVALID, "no results: call rknn_run first")
        stored = self.output_desc(index)
        values = self.results[index]
        if desc.type == s.TENSOR_FLOAT32:
            typed = values.astype(np.float32)
        elif desc.type == s.TENSOR_FLOAT16:
            typed = values.astype(np.float16)
        elif desc.type == stored.type and stored.qnt_type == s.QNT_AFFINE_ASYMMETRIC:
            typed = quantize(values, stored, desc.type)
        elif desc.type == stored.type and desc.type in s.NUMPY_OF_TYPE:
            typed = values.astype(s.NUMPY_OF_TYPE[desc.type])
        else:
            raise ApiError(s.ERR_OUTPUT_INVALID, f"output {index}: the model stores {s.TYPE_NAMES[stored.type]}; it "
                                                 f"can be read as that, FLOAT16 or FLOAT32, not "
                                                 f"{s.TYPE_NAMES.get(desc.type, desc.type)}")
        spec = self.model.outputs[index]
        if typed.ndim == 4:
            nchw = typed if spec.layout != LAYOUT_NHWC else typed.transpose(0, 3, 1, 2)
            if desc.fmt == s.FORMAT_NC1HWC2:
                typed = nchw_to_nc1hwc2(nchw, c2_of(desc.type))
            elif desc.fmt == s.FORMAT_NHWC:
                typed = nchw.transpose(0, 2, 3, 1)
            elif desc.fmt in (s.FORMAT_NCHW, s.FORMAT_UNDEFINED):
                typed = nchw if desc.fmt == s.FORMAT_NCHW else typed
            else:
                raise ApiError(s.ERR_OUTPUT_INVALID, f"output {index}: layout {desc.fmt} is not a tensor format")
        return np.ascontiguousarray(typed).reshape(-1).view(np.uint8)

    def _write_output(self, index: int, desc: TensorDesc, address: int, capacity: int) -> None:
        data = self.encode_output(index, desc)
        if data.size > capacity:
            raise ApiError(s.ERR_OUTPUT_INVALID, f"output {index}: the buffer holds {capacity} bytes, "
                                                 f"{data.size} needed ({s.TYPE_NAMES[desc.type]})")
        s.byte_view(address, data.size)[:] = data

    def general_output(self, index: int, want_float: bool) -> np.ndarray:
        """``rknn_outputs_get``: float32 or the stored type, in OUTPUT_ATTR's layout."""
        self.wait(None)
        stored = self.output_desc(index)
        return self.encode_output(index, replace(stored, type=s.TENSOR_FLOAT32) if want_float else stored)

    # ---- zero-copy ----------------------------------------------------------------------------
    def bind(self, mem_address: int, attr: s.rknn_tensor_attr) -> None:
        name = attr.name.decode("utf-8", "replace")
        inputs = [i for i, spec in enumerate(self.model.inputs) if spec.name == name]
        outputs = [i for i, spec in enumerate(self.model.outputs) if spec.name == name]
        if not inputs and not outputs:
            raise ApiError(s.ERR_PARAM_INVALID, f"rknn_tensor_attr names '{name}', which is no input or output of the "
                                                "model; pass an attribute returned by rknn_query")
        dims = tuple(int(attr.dims[i]) for i in range(min(attr.n_dims, s.MAX_DIMS)))
        desc = TensorDesc(attr.index, name, dims, attr.fmt, attr.type, attr.qnt_type, attr.scale, attr.zp)
        mem = s.at(s.rknn_tensor_mem, mem_address)
        if inputs:
            index = inputs[0]
            feed = Feed(s.byte_view(mem.virt_addr + mem.offset, max(0, mem.size - mem.offset)), attr.type, attr.fmt,
                        bool(attr.pass_through))
            self._check_binding_size(mem, desc, "input", index)
            self._decode(index, feed)   # refuse a mismatching attribute now
            self.input_mems[index] = Binding(mem_address, desc, bool(attr.pass_through))
        else:
            index = outputs[0]
            self._check_binding_size(mem, desc, "output", index)
            self.output_mems[index] = Binding(mem_address, desc, False)

    @staticmethod
    def _check_binding_size(mem: s.rknn_tensor_mem, desc: TensorDesc, what: str, index: int) -> None:
        if desc.type not in s.NUMPY_OF_TYPE:
            raise ApiError(s.ERR_PARAM_INVALID, f"{what} {index}: tensor type {desc.type} is not supported")
        if mem.size - mem.offset < desc.size:
            raise ApiError(s.ERR_PARAM_INVALID, f"{what} {index}: the memory holds {mem.size - mem.offset} bytes, "
                                                f"the attribute needs {desc.size} ({list(desc.dims)} "
                                                f"{s.TYPE_NAMES[desc.type]}); create it with size_with_stride")

    def unbind(self, mem_address: int) -> None:
        for table in (self.input_mems, self.output_mems):
            for index in [i for i, b in table.items() if b.mem_address == mem_address]:
                del table[index]

    # ---- dynamic shapes -------------------------------------------------------------------------
    def set_input_shapes(self, attrs: list[s.rknn_tensor_attr]) -> None:
        if not self.shape_sets:
            raise ApiError(s.ERR_PARAM_INVALID, "the model has fixed input shapes; rknn_set_input_shapes needs a model "
                                                "built with config(dynamic_input=...)")
        if len(attrs) != len(self.model.inputs):
            raise ApiError(s.ERR_PARAM_INVALID, f"{len(attrs)} attributes given for {len(self.model.inputs)} inputs")
        wanted = []
        for spec, attr in zip(self.model.inputs, attrs):
            dims = [int(attr.dims[i]) for i in range(attr.n_dims)]
            if len(dims) == 4 and attr.fmt == s.FORMAT_NHWC and spec.layout == LAYOUT_NCHW:
                dims = [dims[0], dims[3], dims[1], dims[2]]
            elif len(dims) == 4 and attr.fmt == s.FORMAT_NCHW and spec.layout == LAYOUT_NHWC:
                dims = [dims[0], dims[2], dims[3], dims[1]]
            wanted.append(dims)
        if wanted not in [[list(x) for x in shape_set] for shape_set in self.shape_sets]:
            raise ApiError(s.ERR_PARAM_INVALID, f"input shapes {wanted} are not one of the model's shape sets "
                                                f"{self.shape_sets} (query RKNN_QUERY_INPUT_DYNAMIC_RANGE)")
        self.input_shapes = wanted
        self.output_shapes = self._infer_output_shapes()
        self.feeds.clear()

    def _infer_output_shapes(self) -> list[list[int]]:
        """Output shapes for the current input shapes (one run on zeros: the runtime's own shape answer)."""
        self.start()
        zeros = [np.zeros(shape, np.float32) for shape in self.input_shapes]
        formats = ["nhwc" if spec.layout == LAYOUT_NHWC else "nchw" for spec in self.model.inputs]
        outputs = self.lite.inference(inputs=zeros, data_format=formats)
        if outputs is None:
            raise ApiError(s.ERR_FAIL, "the model did not run with the shape set (see the E line above)")
        return [list(o.shape) for o in outputs]

    def fill_dynamic_range(self, info: s.rknn_input_range) -> None:
        index = int(info.index)
        self._check_index(index, len(self.model.inputs), "input")
        sets = self.shape_sets or [[list(i.shape) for i in self.model.inputs]]
        descs = [input_desc(self.model, index, shape_set[index]) for shape_set in sets[:s.MAX_DYNAMIC_SHAPE_NUM]]
        info.shape_number = len(descs)
        info.fmt = descs[0].fmt
        s.set_name(info, "name", self.model.inputs[index].name)
        info.n_dims = len(descs[0].dims)
        for k, desc in enumerate(descs):
            for axis, value in enumerate(desc.dims):
                info.dyn_range[k][axis] = value

    # ---- figures ------------------------------------------------------------------------------
    def sdk_version(self) -> tuple[str, str]:
        backend = type(getattr(self.lite, "_runtime", None)).__name__
        return (f"{API_VERSION} (openrknn {__version__})", f"openrknn {__version__} CPU runtime ({backend})")

    def mem_size(self) -> dict[str, int]:
        try:
            report = estimate_memory(self.model, get_chip(self.platform))
            weight, internal = int(report.weight_memory), int(report.internal_memory)
        except Exception:  # noqa: BLE001 - the estimate is a courtesy; a model it cannot cost reports its I/O only
            weight = internal = 0
        io_bytes = sum(self.input_desc(i).size for i in range(len(self.model.inputs)))
        io_bytes += sum(self.output_desc(i).size for i in range(len(self.model.outputs)))
        return {"total_weight_size": weight, "total_internal_size": internal,
                "total_dma_allocated_size": weight + internal + io_bytes, "total_sram_size": 0, "free_sram_size": 0}

    def perf_detail(self) -> str:
        if not self.flags & s.FLAG_COLLECT_PERF_MASK:
            raise ApiError(s.ERR_PARAM_INVALID, "RKNN_QUERY_PERF_DETAIL needs rknn_init(..., "
                                                "RKNN_FLAG_COLLECT_PERF_MASK, ...)")
        backend = self.sdk_version()[1]
        lines = [f"openrknn librknnrt perf detail ({backend})",
                 f"frames run: {self.frame_id}",
                 f"last run: {self.last_run_us} us (whole model; this CPU runtime does not time single layers)"]
        return "\n".join(lines) + "\n"

    def core_count(self) -> int:
        return _CORES.get(self.platform, 1)
