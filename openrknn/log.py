"""Logging in the style of RKNN-Toolkit: ``I``/``W``/``E``/``D`` prefixed lines.

One module-level logger named ``openrknn``; each ``RKNN`` object sets the console level
(verbose or not) and an optional ``verbose_file``.
"""
from __future__ import annotations

import contextlib
import logging
import os
import sys
from collections.abc import Iterator

_PREFIX = {logging.DEBUG: "D", logging.INFO: "I", logging.WARNING: "W", logging.ERROR: "E", logging.CRITICAL: "E"}


class _ToolkitFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        return f"{_PREFIX.get(record.levelno, 'I')} {record.getMessage()}"


class _StdoutHandler(logging.StreamHandler):
    """Writes to whatever ``sys.stdout`` is now (so redirection after set-up still works)."""

    @property  # type: ignore[override]
    def stream(self):  # noqa: D401
        return sys.stdout

    @stream.setter
    def stream(self, value) -> None:
        pass


logger = logging.getLogger("openrknn")
logger.propagate = False
logger.setLevel(logging.DEBUG)


def configure(verbose: bool | str = False, verbose_file: str | None = None) -> None:
    """(Re)configure console and file handlers.

    Args:
        verbose: True (or ``'debug'``) prints debug detail; False prints info and above.
        verbose_file: also write the full log there (only when ``verbose`` is set, as documented).
    """
    for handler in list(logger.handlers):
        logger.removeHandler(handler)
        handler.close()
    console = _StdoutHandler()
    console.setFormatter(_ToolkitFormatter())
    console.setLevel(logging.DEBUG if verbose else logging.INFO)
    logger.addHandler(console)
    if verbose and verbose_file:
        folder = os.path.dirname(os.path.abspath(verbose_file))
        if os.path.isdir(folder):
            file_handler = logging.FileHandler(verbose_file, mode="w", encoding="utf-8")
            file_handler.setFormatter(_ToolkitFormatter())
            file_handler.setLevel(logging.DEBUG)
            logger.addHandler(file_handler)
        else:
            logger.warning(f"verbose_file '{verbose_file}': folder does not exist, log goes to the screen only")


if not logger.handlers:
    configure(False)


def debug(msg: str) -> None:
    logger.debug(msg)


def info(msg: str) -> None:
    logger.info(msg)


def warning(msg: str) -> None:
    logger.warning(msg)


def error(msg: str) -> None:
    logger.error(msg)


@contextlib.contextmanager
def muted() -> Iterator[None]:
    """Only errors are logged inside (a trial whose lines the real run prints again)."""
    level = logger.level
    logger.setLevel(logging.ERROR)
    try:
        yield
    finally:
        logger.setLevel(level)


def in_ci() -> bool:
    """True when progress bars should stay quiet (CI, no terminal)."""
    return bool(os.environ.get("CI")) or not sys.stderr.isatty()
