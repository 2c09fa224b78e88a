"""RKNNLite's ``rknnrt`` backend: run a Rockchip-compiled ``.rknn`` through ``librknnrt.so``.

``load_rockchip_model`` reads the file and finds the library (refusing clearly when either is of the
wrong kind or absent); ``RockchipRuntime`` is what ``init_runtime`` starts: it turns the Lite2
``inference()`` arguments into ``rknn_input`` records, runs, and returns the outputs as float32.
"""
from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any, Sequence

import numpy as np

from openrknn import log
from openrknn.errors import InferenceInputError, ModelFileError, RuntimeStateError
from openrknn.profile.memory import memory_dump_text
from openrknn.runtime import librknnrt as rt
from openrknn.sim.session import check_inference_args

BACKEND_NAME = "rknnrt"
# Cores per chip that has more than one (seed 002 §5.3); other chips run on their single core.
MULTI_CORE_CHIPS = {"rk3588": 3, "rk3588s": 3, "rk3576": 2}
CORE_BITS = {0x1: 0, 0x2: 1, 0x4: 2, 0x3: 1, 0x7: 2}   # mask → highest core index it uses
DEVICE_TREE = "/proc/device-tree/compatible"


def is_rockchip_file(path: str) -> bool:
    """True when ``path`` starts with the magic of Rockchip's toolkit (``RKNN``)."""
    try:
        with open(path, "rb") as handle:
            return handle.read(4) == rt.ROCKCHIP_MAGIC
    except OSError:
        return False


@dataclass
class RockchipModel:
    """A Rockchip-compiled .rknn read into memory and the librknnrt that will run it."""

    path: str
    data: bytes
    library: str


def load_rockchip_model(path: str) -> RockchipModel:
    """Read a Rockchip .rknn for the rknnrt backend; clear errors for the other kind or no library."""
    if not os.path.isfile(path):
        raise ModelFileError(f"RKNN model '{path}' does not exist")
    with open(path, "rb") as handle:
        data = handle.read()
    if not data.startswith(rt.ROCKCHIP_MAGIC):
        raise ModelFileError(f"'{path}' is not a Rockchip-compiled .rknn (an openrknn .rknn or another file): the "
                             "rknnrt backend runs only models compiled by Rockchip's RKNN-Toolkit2. Run openrknn "
                             "models with RKNNLite() without backend='rknnrt'")
    library = rt.find_library()
    if library is not None and not os.path.isfile(library):
        raise ModelFileError(f"{rt.LIBRARY_ENV}='{library}' does not exist; {rt.INSTALL_HINT}")
    if library is None:
        raise ModelFileError(f"'{path}' is a Rockchip RKNN-Toolkit model (closed format); openrknn runs it through "
                             f"Rockchip's runtime librknnrt.so, which was not found (looked in "
                             f"{rt.searched_places()}); {rt.INSTALL_HINT}. Or convert the source model with openrknn")
    return RockchipModel(path=path, data=data, library=library)


def board_chip() -> str | None:
    """The Rockchip SoC this runs on, from the device tree (None off a board).

    The compatible list runs from the most specific entry (the board, e.g. ``rockchip,rk3588-evb1``) to the
    SoC (``rockchip,rk3588``), so the last Rockchip entry names the chip.
    """
    try:
        with open(DEVICE_TREE, "rb") as handle:
            words = handle.read().decode("ascii", "replace").split("\0")
    except OSError:
        return None
    chips = [w.split(",", 1)[1].split("-")[0] for w in words if w.startswith(("rockchip,rk", "rockchip,rv"))]
    return chips[-1] if chips else None


class RockchipRuntime:
    """An initialised librknnrt context, driven with the Lite2 ``inference()`` arguments."""

    def __init__(self, model: RockchipModel, core_mask: int = 0, async_mode: bool = False,
                 perf_debug: bool = False, eval_mem: bool = False) -> None:
        lib = rt.load_library(model.library)
        flags = (rt.FLAG_ASYNC_MASK if async_mode else 0) | (rt.FLAG_COLLECT_PERF_MASK if perf_debug else 0)
        if perf_debug:
            log.warning("Flag perf_debug has been set, it will affect the performance of inference!")
        if eval_mem:
            log.warning("Flag eval_mem has been set, it will affect the performance of inference!")
        self.model = model
        self.perf_debug, self.eval_mem = perf_debug, eval_mem
        self.context = rt.Context(lib, model.data, flags)
        self.frame_id = 0
        try:
            self._apply_core_mask(core_mask)
        except BaseException:
            self.context.close()
            raise
        log.info(f"init_runtime: running '{model.path}' on the NPU through {model.library} "
                 f"(API {self.context.api_version}, driver {self.context.drv_version})")

    def _apply_core_mask(self, core_mask: int) -> None:
        if core_mask == 0:
            return
        chip = board_chip()
        if chip is not None and chip not in MULTI_CORE_CHIPS:
            log.warning(f"init_runtime: core_mask applies only to RK3588/RK3576; ignored on {chip}")
            return
        cores = MULTI_CORE_CHIPS.get(chip or "", 3)
        if CORE_BITS.get(core_mask, 0) >= cores:
            raise RuntimeStateError(f"core_mask {core_mask:#x} uses a core {chip or 'this chip'} does not have "
                                    f"({cores} cores)")
        self.context.set_core_mask(core_mask)

    # -- inference
    def run(self, inputs: Sequence[Any], data_type: str | None = None,
            data_format: Sequence[str] | str | None = None, inputs_pass_through: Sequence[int] | None = None,
            want_float: bool = True) -> list[np.ndarray]:
        """One inference; the outputs are float32 (``want_float``) or the model's native type."""
        attrs = self.context.inputs
        inputs, formats, flags = check_inference_args([a.name for a in attrs], inputs, data_format,
                                                      inputs_pass_through)
        through = [int(bool(p)) for p in flags]
        arrays, fmts = [], []
        for attr, value, fmt, passing in zip(attrs, inputs, formats, through):
            array, code = _prepare_input(attr, value, data_type, fmt, bool(passing))
            arrays.append(array)
            fmts.append(code)
        self.context.inputs_set(arrays, fmts, through)
        self.context.run()
        outputs, self.frame_id = self.context.outputs_get(want_float)
        return outputs

    def zero_inputs(self) -> list[np.ndarray]:
        """Inputs of the model's shape and type (NHWC for 4-D) filled with zeros, for eval_perf."""
        return [np.zeros(_user_dims(a, "nhwc"), dtype=rt.NUMPY_TYPES.get(a.type_code, np.float32)) for a in
                self.context.inputs]

    # -- information
    def sdk_version_text(self) -> str:
        """The documented ``get_sdk_version`` banner with the library's own versions."""
        return ("==============================================\n"
                "RKNN VERSION:\n"
                f"  API: {self.context.api_version}\n"
                f"  DRV: {self.context.drv_version}\n"
                "==============================================")

    def eval_perf(self, inputs: Sequence[Any] | None = None, is_print: bool = True,
                  loop_cnt: int | None = None) -> dict[str, Any]:
        """Run ``loop_cnt`` times (default 1) and report librknnrt's timing: the mean ``PERF_RUN`` total in µs
        and, with perf_debug, the per-layer text of the last run (``PERF_DETAIL``)."""
        runs = []
        for _ in range(max(1, int(loop_cnt or 1))):
            self.run(inputs if inputs is not None else self.zero_inputs())
            runs.append(self.context.perf_run_us())
        total = round(sum(runs) / len(runs))
        detail = self.context.perf_detail() if self.perf_debug else None
        if is_print:
            print((detail + "\n" if detail else "") + f"Total Operator Elapsed Per Frame Time(us): {total}")
        return {"total_time_us": total, "perf_detail": detail}

    def eval_memory(self, is_print: bool = True) -> dict[str, int]:
        """``RKNN_QUERY_MEM_SIZE`` as the documented eval_memory dict (bytes); needs eval_mem=True."""
        if not self.eval_mem:
            raise RuntimeStateError("When init runtime, parameter <eval_mem> should be set to True, or we can not "
                                    "eval memory!")
        sizes = self.context.mem_size()
        weight, internal = sizes["total_weight_size"], sizes["total_internal_size"]
        total = max(sizes["total_dma_allocated_size"], weight + internal)
        result = {"weight_memory": weight, "internal_memory": internal, "other_memory": total - weight - internal,
                  "total_memory": total, "total_sram_size": sizes["total_sram_size"],
                  "free_sram_size": sizes["free_sram_size"]}
        if is_print:
            print(memory_dump_text(weight, internal, total - weight - internal, len(self.model.data)))
        return result

    def release(self) -> None:
        self.context.close()


def _user_dims(attr: rt.TensorAttr, data_format: str) -> tuple[int, ...]:
    """The shape a caller's buffer has: for 4-D inputs NHWC or NCHW as asked, else the model's dims."""
    dims = attr.dims
    if len(dims) != 4:
        return dims
    nhwc = (dims[0], dims[2], dims[3], dims[1]) if attr.fmt_code == rt.FORMAT_NCHW else dims
    return nhwc if data_format == "nhwc" else (nhwc[0], nhwc[3], nhwc[1], nhwc[2])


def _prepare_input(attr: rt.TensorAttr, value: Any, data_type: str | None, data_format: str,
                   pass_through: bool) -> tuple[np.ndarray, int]:
    """A contiguous array of a type librknnrt converts from, and its rknn_tensor_format code."""
    label = f"input {attr.index} ('{attr.name}')"
    try:
        array = np.asarray(value) if data_type is None else np.asarray(value).astype(data_type, copy=False)
    except (TypeError, ValueError) as e:
        raise InferenceInputError(f"{label} cannot be used as a {data_type or 'numeric'} array: {e}") from e
    if array.dtype.kind not in "biuf":
        raise InferenceInputError(f"{label} has dtype {array.dtype}; give a numeric ndarray")
    if pass_through:
        array = np.ascontiguousarray(array)
        if array.dtype not in rt.TENSOR_TYPE_OF or array.nbytes not in (attr.size, attr.size_with_stride):
            raise InferenceInputError(f"{label} is passed through, so it must already be the model's "
                                      f"{attr.type} {attr.fmt} data of {attr.size} bytes; got {array.nbytes} bytes "
                                      f"of {array.dtype}")
        return array, attr.fmt_code
    expected = _user_dims(attr, data_format)
    if array.ndim == len(expected) - 1 and len(expected) == 4 and expected[0] == 1:
        array = array[np.newaxis]          # an HxWxC image without its batch axis
    if tuple(array.shape) != tuple(expected):
        layout = data_format.upper() if len(expected) == 4 else attr.fmt
        raise InferenceInputError(f"{label} has shape {tuple(np.asarray(value).shape)} but the model expects "
                                  f"{tuple(expected)} ({layout})")
    if array.dtype not in rt.TENSOR_TYPE_OF:
        array = array.astype(np.float32)   # librknnrt converts from float32, float16, int8, uint8 and int16 only
    code = (rt.FORMAT_NHWC if data_format == "nhwc" else rt.FORMAT_NCHW) if len(expected) == 4 else attr.fmt_code
    return np.ascontiguousarray(array), code
