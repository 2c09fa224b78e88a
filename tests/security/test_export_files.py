"""Exported files: permissions follow the umask, killed exports leave nothing that accumulates,
file-system errors name the target and the cause."""
from __future__ import annotations

import errno
import os
import stat

import pytest

from openrknn.errors import ModelFileError
from openrknn.model_file.container import write_atomic
from rknn.api import RKNN
from tests.helpers import exported_conv_model


def _mode(path) -> int:
    return stat.S_IMODE(os.stat(path).st_mode)


@pytest.fixture
def umask():
    saved = os.umask(0o022)
    yield os.umask
    os.umask(saved)


def test_mode_follows_umask_also_when_replacing(tmp_path, umask):
    target = tmp_path / "m.rknn"
    write_atomic(str(target), b"one")
    assert _mode(target) == 0o644
    umask(0o027)
    write_atomic(str(target), b"two")
    assert _mode(target) == 0o640 and target.read_bytes() == b"two"
    write_atomic(str(tmp_path / "model.key"), b"k", mode=0o600)
    assert _mode(tmp_path / "model.key") == 0o600


def test_exported_rknn_is_readable_by_group_and_others(tmp_path, umask):
    assert _mode(exported_conv_model(tmp_path, "rk3588")) == 0o644


def test_stale_temp_files_of_killed_exports_are_removed(tmp_path):
    dead = tmp_path / ".openrknn-999999999-abc123.part"     # no such pid: its export was killed
    legacy = tmp_path / ".openrknn-x7f3k.part"              # the old name had no pid
    alive = tmp_path / f".openrknn-{os.getpid()}-inflight.part"   # a concurrent export of a live process
    for part in (dead, legacy, alive):
        part.write_bytes(b"\0" * 1000)
    write_atomic(str(tmp_path / "m.rknn"), b"data")
    assert not dead.exists() and not legacy.exists() and alive.exists()
    os.utime(alive, (0, 0))                                  # an hour-old temp is stale whoever wrote it
    write_atomic(str(tmp_path / "m.rknn"), b"data")
    assert sorted(os.listdir(tmp_path)) == ["m.rknn"]


def _export_error(tmp_path, capsys, target) -> str:
    rknn = RKNN()
    from tests.helpers import make_conv_model
    assert rknn.load_onnx(str(make_conv_model(tmp_path / "conv.onnx"))) == 0
    assert rknn.build(do_quantization=False) == 0
    capsys.readouterr()
    assert rknn.export_rknn(str(target)) == -1
    lines = [line for line in capsys.readouterr().out.splitlines() if line.startswith("E")]
    assert len(lines) == 1
    assert "internal error" not in lines[0] and ".part" not in lines[0] and f"'{target}'" in lines[0]
    return lines[0]


def test_export_onto_a_folder_names_target(tmp_path, capsys):
    (tmp_path / "out").mkdir()
    assert "is a folder" in _export_error(tmp_path, capsys, tmp_path / "out")


@pytest.mark.parametrize("failure, words", [
    (OSError(errno.ENOSPC, "No space left on device"), "disk is full"),
    (PermissionError(errno.EACCES, "Permission denied"), "no permission"),
    (OSError(errno.EROFS, "Read-only file system"), "read-only"),
])
def test_file_system_errors_name_target_and_cause(tmp_path, capsys, monkeypatch, failure, words):
    def fail(*args, **kwargs):
        raise failure
    monkeypatch.setattr(os, "fsync", fail)
    message = _export_error(tmp_path, capsys, tmp_path / "m.rknn")
    assert words in message and failure.strerror in message
    assert sorted(os.listdir(tmp_path)) == ["conv.onnx"]    # nothing half-written


def test_write_atomic_raises_model_file_error(tmp_path, monkeypatch):
    monkeypatch.setattr(os, "replace", lambda a, b: (_ for _ in ()).throw(OSError(errno.EXDEV, "cross-device")))
    with pytest.raises(ModelFileError, match="cannot write"):
        write_atomic(str(tmp_path / "x"), b"1")
    assert os.listdir(tmp_path) == []
