"""What ``openrknn serve`` keeps per loaded model: a bounded pool of RKNNLite contexts.

A context belongs to the connection that loaded it; when that connection ends (closed or killed)
its contexts are released, so a vanished client cannot leak board memory.
"""
from __future__ import annotations

import inspect
import itertools
import logging
import os
import tempfile
import threading
import time
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any, Iterator, Sequence

import numpy as np

from openrknn import log
from openrknn.runtime.lite import RKNNLite
from openrknn.runtime.protocol import shown


class Refused(Exception):
    """A request the server turns down; the text goes back to the client."""


def process_rss() -> int | None:
    """Resident memory of this process in bytes (Linux ``/proc``), None elsewhere."""
    try:
        with open("/proc/self/statm", encoding="ascii") as handle:
            return int(handle.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    except (OSError, ValueError, IndexError):
        return None


class _ThreadErrors(logging.Handler):
    """Collects the ``E`` lines RKNNLite logs on the current thread (others' requests run meanwhile)."""

    def __init__(self) -> None:
        super().__init__(logging.ERROR)
        self.thread = threading.get_ident()
        self.messages: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        if record.thread == self.thread:
            self.messages.append(record.getMessage())


@contextmanager
def captured_errors() -> Iterator[list[str]]:
    handler = _ThreadErrors()
    log.logger.addHandler(handler)
    try:
        yield handler.messages
    finally:
        log.logger.removeHandler(handler)


def _checked(result: Any, what: str, errors: list[str]) -> Any:
    """RKNNLite answers -1 / None on failure and logs why: turn that into a :class:`Refused`."""
    if result is None or (isinstance(result, int) and not isinstance(result, bool) and result != 0):
        raise Refused(f"{what} failed: {'; '.join(errors) or 'no reason given'}")
    return result


@dataclass
class Context:
    """One model loaded into RKNNLite on behalf of one connection."""

    id: int
    owner: int
    lite: Any
    model_size: int
    rss_delta: int | None
    options: dict[str, Any] = field(default_factory=dict)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def infer(self, inputs: Sequence[np.ndarray], data_format: Any, pass_through: Any) -> list[np.ndarray]:
        with self.lock, captured_errors() as errors:
            return _checked(self.lite.inference(inputs=list(inputs), data_format=data_format,
                                                inputs_pass_through=pass_through), "inference", errors)

    def time_runs(self, inputs: Sequence[np.ndarray], loop_cnt: int) -> dict[str, Any]:
        """Wall-clock time of whole-model inferences (the backend gives no per-layer timings)."""
        times = []
        for _ in range(loop_cnt):
            start = time.perf_counter_ns()
            self.infer(inputs, None, None)
            times.append((time.perf_counter_ns() - start) / 1000.0)
        timing = {"runs": loop_cnt, "total_time_us": float(np.median(times)), "min_time_us": float(min(times)),
                  "max_time_us": float(max(times)), "layers": None}
        if getattr(self.lite, "has_board_figures", False):   # a board backend with per-layer timings
            backend = self.lite.eval_perf
            with self.lock, captured_errors() as errors:
                report = _checked(backend(is_print=False), "eval_perf", errors)
            layers = report.get("layers") if isinstance(report, dict) else None
            if isinstance(layers, dict) and layers:   # wire maps have string keys: send the rows as a list
                timing["layers"] = [{**row, "id": key} for key, row in sorted(layers.items())]
                timing["backend_total_time_us"] = report.get("total_time")
        return timing

    def memory(self) -> dict[str, Any]:
        if getattr(self.lite, "has_board_figures", False):   # a board backend with NPU memory counters
            backend = self.lite.eval_memory
            with self.lock, captured_errors() as errors:
                return {"backend": _checked(backend(is_print=False), "eval_memory", errors),
                        "model_size": self.model_size, "rss_delta": self.rss_delta}
        return {"backend": None, "model_size": self.model_size, "rss_delta": self.rss_delta}

    def sdk_version(self) -> str:
        with self.lock, captured_errors() as errors:
            return _checked(self.lite.get_sdk_version(), "get_sdk_version", errors)


class ContextPool:
    """At most ``limit`` contexts; a load beyond that is refused (never evicts another client's model)."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self._contexts: dict[int, Context] = {}
        self._ids = itertools.count(1)
        self._lock = threading.Lock()
        self._loading = 0

    def __len__(self) -> int:
        with self._lock:
            return len(self._contexts)

    def load(self, owner: int, model: bytes, options: dict[str, Any]) -> Context:
        """Load ``model`` (.rknn bytes) into a new RKNNLite and start its runtime."""
        with self._lock:
            if len(self._contexts) + self._loading >= self.limit:
                raise Refused(f"the server already holds {self.limit} loaded model(s) (--max-contexts); release "
                              "one (rknn.release()) or restart the server with a larger --max-contexts")
            self._loading += 1
        try:
            lite, rss_delta = self._start(model, options)
            with self._lock:
                context = Context(next(self._ids), owner, lite, len(model), rss_delta, dict(options))
                self._contexts[context.id] = context
            return context
        finally:
            with self._lock:
                self._loading -= 1

    @staticmethod
    def _start(model: bytes, options: dict[str, Any]) -> tuple[Any, int | None]:
        before = process_rss()
        lite = RKNNLite()
        with captured_errors() as errors, tempfile.TemporaryDirectory(prefix="openrknn-serve-") as folder:
            path = os.path.join(folder, "model.rknn")
            with open(path, "wb") as handle:
                handle.write(model)
            _checked(lite.load_rknn(path), "load_rknn", errors)
            kwargs = {"async_mode": bool(options.get("async_mode", False))}
            accepted = inspect.signature(lite.init_runtime).parameters   # backends that measure take these
            kwargs.update({k: bool(options[k]) for k in ("perf_debug", "eval_mem") if k in accepted and options.get(k)})
            if options.get("core_mask") is not None:
                kwargs["core_mask"] = int(options["core_mask"])
            _checked(lite.init_runtime(**kwargs), "init_runtime", errors)
        after = process_rss()
        return lite, None if before is None or after is None else after - before

    def get(self, owner: int, context_id: Any) -> Context:
        with self._lock:
            context = self._contexts.get(context_id) if isinstance(context_id, int) else None
        if context is None or context.owner != owner:
            raise Refused(f"no loaded model with context id {shown(context_id)} on this connection")
        return context

    def release(self, owner: int, context_id: Any) -> None:
        context = self.get(owner, context_id)
        with self._lock:
            self._contexts.pop(context.id, None)
        with context.lock:
            context.lite.release()

    def release_owner(self, owner: int) -> int:
        with self._lock:
            mine = [c for c in self._contexts.values() if c.owner == owner]
            for context in mine:
                del self._contexts[context.id]
        for context in mine:
            with context.lock:
                context.lite.release()
        return len(mine)
