"""``RKNNLite``: the RKNN-Toolkit Lite2 API (load_rknn → init_runtime → inference → release).

openrknn's own .rknn files run anywhere: on Mesa's Teflon delegate or LiteRT when the file embeds
its TFLite export, else on the simulator (``runtime/backends.py``). A .rknn compiled by Rockchip's toolkit runs
on the NPU through Rockchip's ``librknnrt.so`` (``runtime/rockchip_backend.py``) when that library is
installed; ``RKNNLite(backend='rknnrt')`` insists on it.
"""
from __future__ import annotations

from typing import TYPE_CHECKING, Any, Sequence

import numpy as np

from openrknn import log
from openrknn.api.common import RuntimeInfo, api_call, sdk_version_text
from openrknn.errors import NotSupportedError, RuntimeStateError
from openrknn.graph.custom_ops import CustomOpRegistry
from openrknn.graph.rknn_model import RKNNModel
from openrknn.model_file import load_model
from openrknn.model_file.embedded import read_tflite
from openrknn.runtime import backends, rockchip_backend
from openrknn.runtime.rockchip_backend import RockchipRuntime

if TYPE_CHECKING:
    from openrknn.runtime.rockchip_backend import RockchipModel


class RKNNLite(RuntimeInfo):
    """Load an ``.rknn`` file and run it (simulator, or librknnrt for Rockchip-compiled models)."""

    def __init__(self, verbose: bool = False, verbose_file: str | None = None, backend: str | None = None) -> None:
        """``backend``: 'rknnrt' (a Rockchip-compiled .rknn through librknnrt), 'teflon', 'litert' or
        'onnxruntime' forces one (default: librknnrt for Rockchip files, else the fastest present, see
        ``openrknn.runtime.backends``)."""
        log.configure(bool(verbose), verbose_file)
        self._backend = backend
        self._rockchip: RockchipModel | None = None
        self._tflite: bytes | None = None
        self._model: RKNNModel | None = None
        self._runtime: Any = None
        self._custom_ops = CustomOpRegistry()

    def _failure(self, name: str) -> Any:
        return None if name in ("inference", "eval_perf", "eval_memory") else -1

    @api_call
    def reg_custom_op(self, custom_op: Any) -> int:
        """Register the Python class of a custom op the model uses (before init_runtime)."""
        self._custom_ops.register(custom_op)
        return 0

    @api_call
    def load_rknn(self, path: str, master_model: str | None = None) -> int:
        """Load an ``.rknn`` file (openrknn's, or Rockchip's for librknnrt); 0 on success, -1 on failure.

        ``master_model``: for a model built with ``remove_weight=True``, the .rknn holding its weights.
        """
        self.release()
        rockchip_file = rockchip_backend.is_rockchip_file(path)
        if self._backend == rockchip_backend.BACKEND_NAME or (self._backend is None and rockchip_file):
            self._rockchip = rockchip_backend.load_rockchip_model(path)
            return 0
        self._model = load_model(path, master_model)
        self._tflite = read_tflite(path)
        return 0

    @api_call
    def init_runtime(self, target: str | None = None, device_id: str | None = None, async_mode: bool = False,
                     core_mask: int = RuntimeInfo.NPU_CORE_AUTO, *, perf_debug: bool = False,
                     eval_mem: bool = False) -> int:
        """Start the runtime: librknnrt for a Rockchip-compiled model, else the fastest backend present
        for an openrknn model (Teflon, LiteRT, onnxruntime; one I line says which).

        ``perf_debug`` / ``eval_mem`` (openrknn extras, librknnrt only) enable eval_perf's per-layer
        times and eval_memory.
        """
        if self._model is None and self._rockchip is None:
            raise RuntimeStateError("call load_rknn() before init_runtime()")
        if core_mask not in self.VALID_CORE_MASKS:
            raise RuntimeStateError(f"core_mask {core_mask:#x} is not one of the NPU_CORE_* values")
        self._release_runtime()
        if self._rockchip is not None:
            self._runtime = RockchipRuntime(self._rockchip, core_mask, async_mode, perf_debug, eval_mem)
            return 0
        backend, why = backends.choose(self._backend, self._model, self._tflite)
        self._runtime = backends.start(backend, self._model, self._tflite, self._custom_ops)
        log.info(f"init_runtime: backend {backend} ({why})")
        return 0

    @api_call
    def inference(self, inputs: Sequence[Any], data_type: str | None = None,
                  data_format: Sequence[str] | str | None = None, inputs_pass_through: Sequence[int] | None = None,
                  get_frame_id: bool = False) -> list[np.ndarray] | None:
        """Run the model; a list of float32 arrays, or None on error."""
        if self._rockchip is not None and self._runtime is not None:
            outputs = self._runtime.run(inputs, data_type, data_format, inputs_pass_through)
            return outputs + [self._runtime.frame_id] if get_frame_id else outputs
        return self._run_inference(inputs, data_type, data_format, inputs_pass_through, get_frame_id)

    def get_sdk_version(self) -> str | None:
        """The version banner; needs load_rknn and init_runtime first (None otherwise)."""
        if self._runtime is None:
            log.error("get_sdk_version: call load_rknn() and init_runtime() first")
            return None
        text = self._runtime.sdk_version_text() if self._rockchip is not None else sdk_version_text()
        print(text)
        return text

    @api_call
    def eval_perf(self, is_print: bool = True, fix_freq: bool = True, inputs: Sequence[Any] | None = None,
                  loop_cnt: int | None = None) -> dict[str, Any] | None:
        """librknnrt only: the mean time per run (µs) and, with perf_debug, the per-layer text.

        ``fix_freq`` is accepted for RKNN compatibility; the board's frequencies are left as they are.
        """
        return self._require_rockchip("eval_perf").eval_perf(inputs, is_print, loop_cnt)

    @api_call
    def eval_memory(self, is_print: bool = True) -> dict[str, Any] | None:
        """librknnrt only (init_runtime(eval_mem=True)): weight, internal, other and total memory in bytes."""
        return self._require_rockchip("eval_memory").eval_memory(is_print)

    @property
    def has_board_figures(self) -> bool:
        """Whether ``eval_perf`` / ``eval_memory`` report the runtime's own figures (librknnrt)."""
        return self._rockchip is not None

    def _require_rockchip(self, name: str) -> Any:
        if self._rockchip is None:
            raise NotSupportedError(f"RKNNLite.{name} reports librknnrt's own figures, so it needs a Rockchip-compiled "
                                    f".rknn; for openrknn models use RKNN.{name}() (the simulator's estimate)")
        if self._runtime is None:
            raise RuntimeStateError(f"call init_runtime() before {name}()")
        return self._runtime

    def _io_specs(self) -> tuple[list[Any], list[Any]]:
        """Input and output ``TensorSpec`` lists of the loaded model (after init_runtime for librknnrt)."""
        if self._rockchip is not None:
            context = self._require_rockchip("inference").context
            return [a.to_spec() for a in context.inputs], [a.to_spec() for a in context.outputs]
        if self._model is None:
            raise RuntimeStateError("call load_rknn() first")
        return self._model.inputs, self._model.outputs

    def _release_runtime(self) -> None:
        if self._runtime is not None and hasattr(self._runtime, "release"):
            self._runtime.release()
        self._runtime = None

    def release(self) -> None:
        self._release_runtime()
        self._model = None
        self._rockchip = None
        self._tflite = None
