"""What RKNN and RKNNLite share: core-mask constants and the information calls."""
from __future__ import annotations

from typing import Any

from openrknn import __version__
from openrknn.api import devices
from openrknn.chips import NPUCoreMask

__all__ = ["NPUCoreMask", "RuntimeInfo", "sdk_version_text"]


def sdk_version_text() -> str:
    """The documented ``get_sdk_version`` banner, for the simulator runtime."""
    return ("==============================================\n"
            "RKNN VERSION:\n"
            f"  API: openrknn {__version__} (simulator)\n"
            "  DRV: simulator (no board driver)\n"
            "==============================================")


class RuntimeInfo(NPUCoreMask):
    """Information calls of both APIs; subclasses keep the loaded model in ``self._model``."""

    _model: Any
    _runtime: Any

    def list_support_target_platform(self, rknn_model: str | None = None) -> dict[str, Any] | None:
        """Print and return the platforms of a model file, or all platforms by NPU category."""
        from openrknn import log
        from openrknn.api.platforms import describe_platforms
        from openrknn.errors import RKNNError
        try:
            text, result = describe_platforms(rknn_model)
        except RKNNError as e:
            log.error(f"list_support_target_platform: {e}")
            return None
        print(text)
        return result

    def list_devices(self) -> tuple[list[str], list[str]]:
        """Boards reachable over adb (none when adb is absent); never raises."""
        return devices.list_devices()

    def _run_inference(self, inputs: Any, data_type: Any, data_format: Any, inputs_pass_through: Any,
                       get_frame_id: bool) -> list[Any]:
        """What RKNN.inference and RKNNLite.inference share (the caller turns errors into None)."""
        from openrknn.errors import RuntimeStateError
        if self._runtime is None:
            raise RuntimeStateError("the runtime is not initialised: call init_runtime() before inference()")
        if data_type is not None and str(data_type) not in ("float32", "float16", "int8", "uint8", "int16"):
            raise RuntimeStateError(f"data_type '{data_type}' is not valid")
        outputs = self._runtime.run(inputs, data_format, inputs_pass_through)
        return outputs + [0] if get_frame_id else outputs

    def get_custom_string(self) -> str | None:
        """The model's custom_string (what rknn_query(RKNN_QUERY_CUSTOM_STRING) returns on a board)."""
        return None if self._model is None else self._model.custom_string
