"""``RKNNLite``: the RKNN-Toolkit Lite2 API (load_rknn → init_runtime → inference → release).

On a Rockchip board Rockchip's Lite2 drives the NPU; openrknn runs the same script anywhere by
executing the model on its simulator.
"""
from __future__ import annotations

from typing import Any, Sequence

import numpy as np

from openrknn import log
from openrknn.api.common import RuntimeInfo, sdk_version_text
from openrknn.api.rknn import api_call
from openrknn.errors import RuntimeStateError
from openrknn.graph.custom_ops import CustomOpRegistry
from openrknn.graph.rknn_model import RKNNModel


class RKNNLite(RuntimeInfo):
    """Load an ``.rknn`` file and run it (simulator-backed)."""

    def __init__(self, verbose: bool = False, verbose_file: str | None = None, backend: str | None = None) -> None:
        """``backend``: 'teflon', 'litert' or 'onnxruntime' forces one (default: the fastest present,
        see ``openrknn.runtime.backends``)."""
        log.configure(bool(verbose), verbose_file)
        self._backend = backend
        self._tflite: bytes | None = None
        self._model: RKNNModel | None = None
        self._runtime: Any = None
        self._custom_ops = CustomOpRegistry()

    def _failure(self, name: str) -> Any:
        return None if name == "inference" else -1

    @api_call
    def reg_custom_op(self, custom_op: Any) -> int:
        """Register the Python class of a custom op the model uses (before init_runtime)."""
        self._custom_ops.register(custom_op)
        return 0

    @api_call
    def load_rknn(self, path: str, master_model: str | None = None) -> int:
        """Load an openrknn ``.rknn`` file; 0 on success, -1 on failure.

        ``master_model``: for a model built with ``remove_weight=True``, the .rknn holding its weights.
        """
        from openrknn.model_file import load_model
        from openrknn.model_file.embedded import read_tflite
        self._model = load_model(path, master_model)
        self._tflite = read_tflite(path)
        self._runtime = None
        return 0

    @api_call
    def init_runtime(self, target: str | None = None, device_id: str | None = None, async_mode: bool = False,
                     core_mask: int = RuntimeInfo.NPU_CORE_AUTO) -> int:
        """Start the runtime on the fastest backend present (Teflon, LiteRT, onnxruntime; one I line says which)."""
        from openrknn.runtime import backends
        if self._model is None:
            raise RuntimeStateError("call load_rknn() before init_runtime()")
        if core_mask not in self.VALID_CORE_MASKS:
            raise RuntimeStateError(f"core_mask {core_mask:#x} is not one of the NPU_CORE_* values")
        backend, why = backends.choose(self._backend, self._model, self._tflite)
        self._runtime = backends.start(backend, self._model, self._tflite, self._custom_ops)
        log.info(f"init_runtime: backend {backend} ({why})")
        return 0

    @api_call
    def inference(self, inputs: Sequence[Any], data_type: str | None = None,
                  data_format: Sequence[str] | str | None = None, inputs_pass_through: Sequence[int] | None = None,
                  get_frame_id: bool = False) -> list[np.ndarray] | None:
        """Run the model; a list of float32 arrays, or None on error."""
        return self._run_inference(inputs, data_type, data_format, inputs_pass_through, get_frame_id)

    def get_sdk_version(self) -> str | None:
        """The version banner; needs load_rknn and init_runtime first (None otherwise)."""
        if self._runtime is None:
            log.error("get_sdk_version: call load_rknn() and init_runtime() first")
            return None
        text = sdk_version_text()
        print(text)
        return text

    def release(self) -> None:
        self._runtime = None
        self._model = None
