"""The .rknn container: round trip, checksum, version, foreign files, atomic writes."""
from __future__ import annotations

import struct

import pytest

from openrknn.errors import ModelFileError
from openrknn.model_file.container import FORMAT_VERSION, MAGIC, Container, decode, encode, write_atomic


def _sample() -> Container:
    return Container(header={"format": "openrknn-model", "x": [1, 2]}, sections={"a": b"abc", "b": b"\x00" * 10})


def test_round_trip():
    back = decode(encode(_sample()))
    assert back.header["x"] == [1, 2] and back.sections == {"a": b"abc", "b": b"\x00" * 10}
    assert [s["name"] for s in back.header["sections"]] == ["a", "b"]


def test_every_single_byte_flip_is_detected():
    data = encode(_sample())
    for i in range(0, len(data), 7):
        bad = bytearray(data)
        bad[i] ^= 0x01
        with pytest.raises(ModelFileError):
            decode(bytes(bad))


def test_newer_version_is_refused_with_upgrade_hint():
    import hashlib
    data = bytearray(encode(_sample())[:-32])
    struct.pack_into("<H", data, 8, FORMAT_VERSION + 1)
    data += hashlib.sha256(bytes(data)).digest()
    with pytest.raises(ModelFileError, match="upgrade openrknn"):
        decode(bytes(data))


@pytest.mark.parametrize("data, words", [
    (b"", "empty"),
    (b"RKNN" + b"\x00" * 100, "Rockchip"),
    (b"\x08\x07\x12\x04test" + b"\x00" * 100, "ONNX file"),
    (b"hello world" * 10, "not an openrknn"),
    (MAGIC + b"\x01", "not an openrknn"),
])
def test_foreign_files(data, words):
    with pytest.raises(ModelFileError, match=words):
        decode(data)


def test_write_atomic_leaves_no_partial_file(tmp_path):
    target = tmp_path / "m.rknn"
    write_atomic(str(target), b"first")


    with pytest.raises(TypeError):
        write_atomic(str(target), None)  # type: ignore[arg-type]
    assert target.read_bytes() == b"first"
    assert [p.name for p in tmp_path.iterdir()] == ["m.rknn"]
