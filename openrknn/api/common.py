"""What RKNN and RKNNLite share: the error → ``E`` line + ``-1`` wrapper, core-mask constants and the
information calls. Importing it does not import the ``RKNN`` facade (``runtime/`` uses it)."""
from __future__ import annotations

import functools
import traceback
from typing import Any, Callable

from openrknn import __version__, log
from openrknn.api import devices
from openrknn.api.platforms import describe_platforms
from openrknn.chips import NPUCoreMask
from openrknn.errors import RKNNError, RuntimeStateError, missing_extra_from

__all__ = ["NPUCoreMask", "RuntimeInfo", "api_call", "sdk_version_text"]


def api_call(func: Callable[..., Any]) -> Callable[..., Any]:
    """Turn openrknn errors into the documented ``E`` log line and a ``-1`` return."""
    name = func.__name__

    @functools.wraps(func)
    def wrapper(self: Any, *args: Any, **kwargs: Any) -> Any:
        try:
            result = func(self, *args, **kwargs)
        except RKNNError as e:
            text = str(e)
            log.error(text if text.startswith(f"{name}:") else f"{name}: {text}")
            return self._failure(name)
        except ImportError as e:   # an optional module missing deep in a stage: name its extra
            missing = missing_extra_from(e, f"{name}: this step")
            log.error(str(missing) if missing else f"{name}: internal error: {type(e).__name__}: {e}")
            log.debug(traceback.format_exc())
            return self._failure(name)
        except Exception as e:  # an unexpected failure is still reported the documented way
            log.error(f"{name}: internal error: {type(e).__name__}: {e}")
            log.debug(traceback.format_exc())
            return self._failure(name)
        return result

    return wrapper


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
        if self._runtime is None:
            raise RuntimeStateError("the runtime is not initialised: call init_runtime() before inference()")
        if data_type is not None and str(data_type) not in ("float32", "float16", "int8", "uint8", "int16"):
            raise RuntimeStateError(f"data_type '{data_type}' is not valid")
        outputs = self._runtime.run(inputs, data_format, inputs_pass_through)
        return outputs + [0] if get_frame_id else outputs

    def get_custom_string(self) -> str | None:
        """The model's custom_string (what rknn_query(RKNN_QUERY_CUSTOM_STRING) returns on a board)."""
        return None if self._model is None else self._model.custom_string
