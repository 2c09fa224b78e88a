"""Long work (build, analysis, perf, rebuild, inference) in a background thread; the page polls.

One job runs at a time (the ``RKNN`` object is not thread-safe); its ``I``/``W``/``E`` log lines are
collected from the ``openrknn`` logger while it runs.
"""
from __future__ import annotations

import itertools
import logging
import sys
import threading
import time
import traceback
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Callable, Iterator

from openrknn import log
from openrknn.errors import missing_extra_from

_PREFIX = {logging.DEBUG: "D", logging.INFO: "I", logging.WARNING: "W", logging.ERROR: "E", logging.CRITICAL: "E"}


class _Collect(logging.Handler):
    def __init__(self, lines: list[str]) -> None:
        super().__init__(logging.INFO)
        self.lines = lines

    def emit(self, record: logging.LogRecord) -> None:
        self.lines.append(f"{_PREFIX.get(record.levelno, 'I')} {record.getMessage()}")


@contextmanager
def collect_log(lines: list[str]) -> Iterator[list[str]]:
    """Append the ``openrknn`` log lines written inside the block to ``lines``."""
    handler = _Collect(lines)
    log.logger.addHandler(handler)
    try:
        yield lines
    finally:
        log.logger.removeHandler(handler)


def errors_in(lines: list[str]) -> list[str]:
    """The ``E`` lines, without the prefix."""
    return [line[2:] for line in lines if line.startswith("E ")]


@dataclass
class Job:
    """One piece of background work and what it printed."""

    id: int
    title: str
    next_url: str          # where the page goes when the job succeeded
    back_url: str          # ... and when it failed (errors are shown next to the fields there)
    state: str = "running"  # running / done / failed
    lines: list[str] = field(default_factory=list)
    progress: str = ""      # the job's last progress-bar line (tqdm, as a terminal would show it)
    started: float = field(default_factory=time.monotonic)
    ended: float | None = None

    @property
    def elapsed_s(self) -> float:
        return (self.ended if self.ended is not None else time.monotonic()) - self.started

    def to_dict(self) -> dict[str, object]:
        return {"id": self.id, "title": self.title, "state": self.state, "log": self.lines,
                "progress": self.progress, "elapsed_s": round(self.elapsed_s, 1),
                "redirect": self.next_url if self.state == "done" else self.back_url}


class _JobStderr:
    """``sys.stderr`` while a job runs: the job thread's progress bars go to ``job.progress`` (the
    page shows them), every other thread's writes to the real stderr."""

    def __init__(self, real, job: Job, thread_id: int) -> None:
        self.real, self.job, self.thread_id = real, job, thread_id

    def _mine(self) -> bool:
        return threading.get_ident() == self.thread_id

    def write(self, text: str) -> int:
        if not self._mine():
            return self.real.write(text)
        last = [part.strip() for part in text.replace("\r", "\n").split("\n") if part.strip()]
        if last:
            self.job.progress = last[-1]
        return len(text)

    def flush(self) -> None:
        if not self._mine():
            self.real.flush()

    def isatty(self) -> bool:   # progress bars draw for the page
        return True if self._mine() else self.real.isatty()

    def __getattr__(self, name: str):
        return getattr(self.real, name)


@contextmanager
def route_progress(job: Job) -> Iterator[None]:
    """Send the calling thread's stderr (tqdm bars) to ``job.progress`` inside the block."""
    real = sys.stderr
    sys.stderr = _JobStderr(real, job, threading.get_ident())
    try:
        yield
    finally:
        if isinstance(sys.stderr, _JobStderr) and sys.stderr.job is job:
            sys.stderr = real


class JobRunner:
    """Starts jobs one at a time; ``lock`` also guards the quick (synchronous) actions."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.jobs: dict[int, Job] = {}
        self._ids = itertools.count(1)

    @contextmanager
    def exclusive(self) -> Iterator[bool]:
        """Hold the lock for a quick action; yields False (without waiting) while a job runs."""
        acquired = self.lock.acquire(blocking=False)
        try:
            yield acquired
        finally:
            if acquired:
                self.lock.release()

    def start(self, title: str, work: Callable[[Job], bool], next_url: str, back_url: str) -> Job | None:
        """Run ``work(job)`` in a thread (it returns success); None when another job is running."""
        if not self.lock.acquire(blocking=False):
            return None
        job = Job(next(self._ids), title, next_url, back_url)
        self.jobs[job.id] = job

        def run() -> None:
            try:
                with collect_log(job.lines), route_progress(job):
                    ok = work(job)
                job.state = "done" if ok and not errors_in(job.lines) else "failed"
            except Exception as e:  # noqa: BLE001 - shown on the page instead of killing the thread
                missing = missing_extra_from(e, f"{title}: this step") if isinstance(e, ImportError) else None
                job.lines.append(f"E {missing}" if missing else f"E {title}: internal error: {type(e).__name__}: {e}")
                log.debug(traceback.format_exc())
                job.state = "failed"
            finally:
                job.ended = time.monotonic()
                self.lock.release()

        threading.Thread(target=run, name=f"openrknn-ui-job-{job.id}", daemon=True).start()
        return job
