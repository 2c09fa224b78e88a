"""Bad evaluation caches and datasets name the file and the problem; a locked cache says it waits."""
from __future__ import annotations

import json
import logging
import sqlite3
import threading
import time
from contextlib import contextmanager
from typing import Iterator

import numpy as np
import pytest

from openrknn import log
from openrknn.errors import ConfigError
from openrknn.evaluation import cache as cache_module
from openrknn.evaluation.cache import ResultCache, pack
from openrknn.evaluation.datasets import open_dataset


@contextmanager
def warnings_logged() -> Iterator[list[str]]:
    lines: list[str] = []

    class Keep(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            lines.append(record.getMessage())
    handler = Keep(logging.WARNING)
    log.logger.addHandler(handler)
    try:
        yield lines
    finally:
        log.logger.removeHandler(handler)


def test_a_file_that_is_not_a_cache_is_named(tmp_path):
    path = tmp_path / "notes.sqlite"
    path.write_text("these are my notes, not a database\n" * 100)
    with pytest.raises(ConfigError, match=r"result cache '.*notes.sqlite' is not an openrknn result cache.*--cache"):
        ResultCache(str(path))


def test_a_damaged_record_is_named(tmp_path):
    path = str(tmp_path / "c.sqlite")
    cache = ResultCache(path)
    cache.store([("run", "im.png", b"not an npz")], [("m", "im.png", pack({"x": np.zeros(2)}))])
    with pytest.raises(ConfigError, match=r"c.sqlite' holds a damaged record"):
        cache.record("run", "im.png")
    with pytest.raises(ConfigError, match=r"c.sqlite' holds a damaged record"):
        cache.outputs("m", "im.png")
    cache.close()


def locked(path: str, seconds: float) -> threading.Thread:
    """Hold an exclusive lock on the cache for ``seconds`` (another evaluation writing it)."""
    holder = sqlite3.connect(path, check_same_thread=False)
    holder.execute("BEGIN EXCLUSIVE")

    def release() -> None:
        time.sleep(seconds)
        holder.rollback()
        holder.close()
    thread = threading.Thread(target=release, daemon=True)
    thread.start()
    return thread


def test_a_locked_cache_says_it_is_waiting(tmp_path):
    path = str(tmp_path / "c.sqlite")
    ResultCache(path).close()
    thread = locked(path, 1.5)
    with warnings_logged() as lines:
        cache = ResultCache(path)
        cache.store([("run", "a", pack({"x": np.ones(1)}))], [])
    thread.join()
    assert any("c.sqlite' is locked by another process" in line and "waiting up to 60 s" in line
               for line in lines), lines
    assert cache.cached_images("run", ["a", "b"]) == {"a"}
    cache.close()


def test_a_cache_locked_too_long_is_named(tmp_path, monkeypatch):
    monkeypatch.setattr(cache_module, "LOCK_WAIT_S", 1.5)
    path = str(tmp_path / "c.sqlite")
    ResultCache(path).close()
    thread = locked(path, 2.5)
    with pytest.raises(ConfigError, match=r"c.sqlite' stayed locked for 2 s.*--no-cache"):
        ResultCache(path).store([("run", "a", pack({"x": np.ones(1)}))], [])
    thread.join()


def coco(tmp_path, **changes):
    data = {"images": [{"id": 1, "file_name": "a.jpg", "width": 8, "height": 8}],
            "categories": [{"id": 1, "name": "cat"}],
            "annotations": [{"id": 1, "image_id": 1, "category_id": 1, "bbox": [0, 0, 4, 4], "area": 16}]}
    data.update(changes)
    path = tmp_path / "instances.json"
    path.write_text(json.dumps(data))
    return str(path)


@pytest.mark.parametrize("changes, message", [
    ({"images": [{"file_name": "a.jpg", "width": 8, "height": 8}]}, r"images\[0\] has no 'id'"),
    ({"images": [{"id": "1", "file_name": "a.jpg", "width": 8, "height": 8}]}, r"images\[0\]: 'id' must be"),
    ({"images": [[]]}, r"images\[0\] is a list, expected an object"),
    ({"images": "a.jpg"}, r"needs the lists 'images' and 'categories'"),
    ({"categories": [{"name": "cat"}]}, r"categories\[0\] has no 'id'"),
    ({"annotations": [{"image_id": 1, "category_id": 1, "bbox": [], "area": 1}]}, r"annotations\[0\]: 'bbox' must"),
    ({"annotations": [{"image_id": 1, "category_id": 1, "bbox": [0, 0, 1, 1]}]}, r"annotations\[0\] has no 'area'"),
])
def test_bad_coco_files_name_the_entry(tmp_path, changes, message):
    with pytest.raises(ConfigError, match=r"instances.json'.*" + message):
        open_dataset(coco(tmp_path, **changes))


def test_bad_json_and_binary_listings_are_named(tmp_path):
    (tmp_path / "bad.json").write_text("{not json")
    with pytest.raises(ConfigError, match=r"bad.json' is not a COCO annotation file \(not valid JSON"):
        open_dataset(str(tmp_path / "bad.json"))
    (tmp_path / "list.txt").write_bytes(b"\xff\xfe\x00a.png\n")
    with pytest.raises(ConfigError, match=r"list.txt' is not UTF-8 text"):
        open_dataset(str(tmp_path / "list.txt"))
    (tmp_path / "ok.txt").write_text("a.npy\n")
    (tmp_path / "labels.txt").write_bytes(b"\xff\xfe a.npy 1\n")
    with pytest.raises(ConfigError, match=r"labels.txt' is not UTF-8 text"):
        open_dataset(str(tmp_path / "ok.txt"), labels=str(tmp_path / "labels.txt"))
