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
from typing import Iterable

import numpy as np

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


def unpack(data: bytes) -> dict[str, np.ndarray]:
    with np.load(io.BytesIO(data), allow_pickle=False) as archive:
        return {name: archive[name] for name in archive.files}


class ResultCache:
    """Per-image results on disk (``path=None``: in memory, nothing kept)."""

    def __init__(self, path: str | None) -> None:
        if path:
            os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
        self.path = path
        self._db = sqlite3.connect(path or ":memory:", timeout=60)
        self._db.executescript(_SCHEMA)

    def cached_images(self, run: str, images: Iterable[str]) -> set[str]:
        """The images of ``images`` that have a record for ``run``."""
        names = list(images)
        found: set[str] = set()
        for start in range(0, len(names), 500):   # sqlite's bound-parameter limit
            chunk = names[start:start + 500]
            rows = self._db.execute(f"SELECT image FROM records WHERE run = ? AND image IN ({','.join('?' * len(chunk))})",
                                    [run, *chunk])
            found.update(r[0] for r in rows)
        return found

    def record(self, run: str, image: str) -> dict[str, np.ndarray] | None:
        row = self._db.execute("SELECT data FROM records WHERE run = ? AND image = ?", (run, image)).fetchone()
        return unpack(row[0]) if row else None

    def outputs(self, model: str, image: str) -> list[np.ndarray] | None:
        """The raw outputs of the float reference ``model`` for ``image``."""
        row = self._db.execute("SELECT data FROM outputs WHERE model = ? AND image = ?", (model, image)).fetchone()
        if row is None:
            return None
        arrays = unpack(row[0])
        return [arrays[f"o{i}"] for i in range(len(arrays))]

    def store(self, records: list[tuple[str, str, bytes]], outputs: list[tuple[str, str, bytes]]) -> None:
        """Write one shard's rows in one transaction."""
        with self._db:
            self._db.executemany("INSERT OR REPLACE INTO records VALUES (?, ?, ?)", records)
            self._db.executemany("INSERT OR REPLACE INTO outputs VALUES (?, ?, ?)", outputs)

    def close(self) -> None:
        self._db.close()
