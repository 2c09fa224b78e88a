"""``RKNNLite``: the RKNN-Toolkit Lite2 API (load_rknn → init_runtime → inference → release).

On a Rockchip board Rockchip's Lite2 drives the NPU; openrknn runs the same script anywhere by
executing the model on its simulator.
"""
from __future__ import annotations

from typing import Any, Sequence

import numpy as np

from openrknn import log
from openrknn.api import devices
from openrknn.api.rknn import api_call
from openrknn.errors import RuntimeStateError
from openrknn.graph.custom_ops import CustomOpRegistry
from openrknn.graph.rknn_model import RKNNModel


class RKNNLite:
    """Load an ``.rknn`` file and run it (simulator-backed)."""

    NPU_CORE_AUTO = 0x0
    NPU_CORE_0 = 0x1
    NPU_CORE_1 = 0x2
    NPU_CORE_2 = 0x4
    NPU_CORE_0_1 = 0x3
    NPU_CORE_0_1_2 = 0x7
    NPU_CORE_ALL = 0xFFFF

    def __init__(self, verbose: bool = False, verbose_file: str | None = None) -> None:
        log.configure(bool(verbose), verbose_file)
        self._model: RKNNModel | None = None
        self._runtime: Any = None
        self._custom_ops = CustomOpRegistry()

    def _failure(self, name: str) -> Any:
        return None if name in ("inference", "get_sdk_version", "list_support_target_platform") else -1

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
        self._model = load_model(path, master_model)
        self._runtime = None
        return 0

    @api_call
    def init_runtime(self, target: str | None = None, device_id: str | None = None, async_mode: bool = False,
                     core_mask: int = NPU_CORE_AUTO) -> int:
        """Start the runtime (the simulator: no NPU driver is used)."""
        from openrknn.sim.session import Simulator
        if self._model is None:
            raise RuntimeStateError("call load_rknn() before init_runtime()")
        if core_mask not in (0x0, 0x1, 0x2, 0x4, 0x3, 0x7, 0xFFFF):
            raise RuntimeStateError(f"core_mask {core_mask:#x} is not one of the NPU_CORE_* values")
        self._runtime = Simulator(self._model, self._custom_ops)
        log.info("init_runtime: running on the openrknn simulator")
        return 0

    @api_call
    def inference(self, inputs: Sequence[Any], data_type: str | None = None,
                  data_format: Sequence[str] | str | None = None, inputs_pass_through: Sequence[int] | None = None,
                  get_frame_id: bool = False) -> list[np.ndarray] | None:
        """Run the model; a list of float32 arrays, or None on error."""
        if self._runtime is None:
            raise RuntimeStateError("call init_runtime() before inference()")
        outputs = self._runtime.run(inputs, data_format, inputs_pass_through)
        return outputs + [0] if get_frame_id else outputs

    def get_sdk_version(self) -> str | None:
        if self._runtime is None:
            log.error("get_sdk_version: call load_rknn() and init_runtime() first")
            return None
        from openrknn import __version__
        text = ("==============================================\nRKNN VERSION:\n"
                f"  API: openrknn {__version__} (simulator)\n  DRV: simulator (no board driver)\n"
                "==============================================")
        print(text)
        return text

    @api_call
    def list_support_target_platform(self, rknn_model: str | None = None) -> dict[str, Any]:
        from openrknn.api.platforms import describe_platforms
        text, result = describe_platforms(rknn_model)
        print(text)
        return result

    def list_devices(self) -> tuple[list[str], list[str]]:
        return devices.list_devices()

    def get_custom_string(self) -> str | None:
        return None if self._model is None else self._model.custom_string

    def release(self) -> None:
        self._runtime = None
        self._model = None
