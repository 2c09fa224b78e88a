"""The result cache: one sqlite file, one row per (run, image).

A *run* key hashes what decides a result: the executable model, the float reference it is compared
with and the post-processing. Rows are committed shard by shard, so an interrupted evaluation resumes
where it stopped; the float reference's raw outputs are kept too, so a second build of the same
model re-uses them instead of running the float model again. Values are numpy ``.npz`` bytes (no
pickle).
"""
from __future__ import annotations

import io
import os
import sqlite3
from typing import Callable, Iterable, TypeVar

import numpy as np

from openrknn import log
from openrknn.errors import ConfigError

T = TypeVar("T")

_SCHEMA = """
CREATE TABLE IF NOT EXISTS records (run TEXT, image TEXT, data BLOB, PRIMARY KEY (run, image));
CREATE TABLE IF NOT EXISTS outputs (model TEXT, image TEXT, data BLOB, PRIMARY KEY (model, image));
"""


def default_cache_path() -> str:
    """``$XDG_CACHE_HOME/openrknn/eval.sqlite`` (``~/.cache`` when unset)."""
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return os.path.join(base, "openrknn", "eval.sqlite")


def pack(arrays: dict[str, np.ndarray]) -> bytes:
    buffer = io.BytesIO()
    np.savez(buffer, **arrays)
    return buffer.getvalue()


def unpack(data: bytes, source: str = "the result cache") -> dict[str, np.ndarray]:
    try:
        with np.load(io.BytesIO(data), allow_pickle=False) as archive:
            return {name: archive[name] for name in archive.files}
    except Exception as e:  # noqa: BLE001 - zipfile/numpy raise several types for damaged bytes
        raise ConfigError(f"{source} holds a damaged record ({type(e).__name__}); delete the file or use "
                          "another --cache") from e


LOCK_WAIT_S = 60.0   # another evaluation writing the same cache: wait this long in all
_QUIET_WAIT_S = 1.0  # ... the first second without a word


class ResultCache:
    """Per-image results on disk (``path=None``: in memory, nothing kept).

    Raises:
        ConfigError: the file is not a cache (naming it), or it stayed locked by another process.
    """

    def __init__(self, path: str | None) -> None:
        self.path = path
        self.label = f"result cache '{path}'" if path else "the in-memory result cache"
        try:
            if path:
                os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
            self._db = sqlite3.connect(path or ":memory:", timeout=_QUIET_WAIT_S)
        except (OSError, sqlite3.Error) as e:
            raise ConfigError(f"{self.label} cannot be opened: {getattr(e, 'strerror', None) or e}; pass "
                              "--cache with a writable file or --no-cache") from e
        self._run(lambda: self._db.executescript(_SCHEMA))

    def _run(self, work: Callable[[], T]) -> T:
        """``work()``; a locked cache is waited for (saying so), a damaged one is named."""
        try:
            try:
                return work()
            except sqlite3.OperationalError as e:
                if "locked" not in str(e) and "busy" not in str(e):
                    raise
                log.warning(f"{self.label} is locked by another process (another evaluation writing it?); "
                            f"waiting up to {LOCK_WAIT_S:.0f} s")
                self._db.execute(f"PRAGMA busy_timeout = {int((LOCK_WAIT_S - _QUIET_WAIT_S) * 1000)}")
                try:
                    return work()
                finally:
                    self._db.execute(f"PRAGMA busy_timeout = {int(_QUIET_WAIT_S * 1000)}")
        except sqlite3.OperationalError as e:
            if "locked" in str(e) or "busy" in str(e):
                raise ConfigError(f"{self.label} stayed locked for {LOCK_WAIT_S:.0f} s; wait until the other "
                                  "evaluation ends, or pass --cache with another file or --no-cache") from e
            raise ConfigError(f"{self.label} cannot be used: {e}; delete it or pass --cache with another "
                              "file") from e
        except sqlite3.DatabaseError as e:   # "file is not a database", a damaged or foreign table
            raise ConfigError(f"{self.label} is not an openrknn result cache ({e}); delete it or pass --cache "
                              "with another file") from e

    def cached_images(self, run: str, images: Iterable[str]) -> set[str]:
        """The images of ``images`` that have a record for ``run``."""
        names = list(images)
        found: set[str] = set()
        for start in range(0, len(names), 500):   # sqlite's bound-parameter limit
            chunk = names[start:start + 500]
            rows = self._run(lambda: self._db.execute(
                f"SELECT image FROM records WHERE run = ? AND image IN ({','.join('?' * len(chunk))})",
                [run, *chunk]).fetchall())
            found.update(r[0] for r in rows)
        return found

    def record(self, run: str, image: str) -> dict[str, np.ndarray] | None:
        row = self._run(lambda: self._db.execute("SELECT data FROM records WHERE run = ? AND image = ?",
                                                 (run, image)).fetchone())
        return unpack(row[0], self.label) if row else None

    def outputs(self, model: str, image: str) -> list[np.ndarray] | None:
        """The raw outputs of the float reference ``model`` for ``image``."""
        row = self._run(lambda: self._db.execute("SELECT data FROM outputs WHERE model = ? AND image = ?",
                                                 (model, image)).fetchone())
        if row is None:
            return None
        arrays = unpack(row[0], self.label)
        try:
            return [arrays[f"o{i}"] for i in range(len(arrays))]
        except KeyError as e:
            raise ConfigError(f"{self.label} holds a damaged record; delete the file or use another --cache") from e

    def store(self, records: list[tuple[str, str, bytes]], outputs: list[tuple[str, str, bytes]]) -> None:
        """Write one shard's rows in one transaction."""
        def write() -> None:
            with self._db:
                self._db.executemany("INSERT OR REPLACE INTO records VALUES (?, ?, ?)", records)
                self._db.executemany("INSERT OR REPLACE INTO outputs VALUES (?, ?, ?)", outputs)
        self._run(write)

    def close(self) -> None:
        self._db.close()
