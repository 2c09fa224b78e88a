"""The live handles of the C API (contexts, matmul contexts, memories) and the entry-point wrapper.

Below ``bridge`` (the model API) and ``matmul`` (the matmul API): both create and look up handles here,
so neither imports the other to reach them.
"""
from __future__ import annotations

import functools
import itertools
import sys
import threading
import traceback
from typing import Any, Callable

from openrknn.capi import structs as s
from openrknn.capi.model_context import ModelContext
from openrknn.capi.tensors import ApiError

_contexts: dict[int, Any] = {}
_memories: dict[int, int] = {}          # rknn_tensor_mem address -> context that created it
_ids = itertools.count(0x5100)          # never 0: a zeroed rknn_context is invalid
_lock = threading.RLock()


def _error(function: str, message: str) -> None:
    print(f"E {function}: {message}", file=sys.stderr, flush=True)


def entry(function: str, failure: int = s.ERR_FAIL) -> Callable:
    """Turn ApiError into its code and any other exception into RKNN_ERR_FAIL, each with one E line."""
    def wrap(body: Callable) -> Callable:
        @functools.wraps(body)
        def call(*args: Any) -> int:
            try:
                result = body(*args)
                return s.SUCC if result is None else int(result)
            except ApiError as e:
                _error(function, str(e))
                return failure if failure == 0 else e.code
            except Exception as e:  # noqa: BLE001 - a C caller gets a code, never a Python exception
                _error(function, f"internal error: {type(e).__name__}: {e}")
                traceback.print_exc(file=sys.stderr)
                return failure
        return call
    return wrap


def context(handle: int, kind: type | None = None) -> Any:
    found = _contexts.get(int(handle))
    expected = kind or ModelContext
    if found is None or not isinstance(found, expected):
        what = "matmul context" if expected is not ModelContext else "context"
        raise ApiError(s.ERR_CTX_INVALID, f"{handle:#x} is not a live {what} (rknn_init / rknn_matmul_create "
                                          "first; not after destroy)")
    return found


def new_handle(obj: Any) -> int:
    with _lock:
        handle = next(_ids)
        _contexts[handle] = obj
    return handle
