"""The openrknn ``.rknn`` container (format described in ``docs/rknn-format.md``).

Layout (all integers little-endian)::

    0   8 bytes   magic  b"OPENRKNN"
    8   u16       format version (FORMAT_VERSION)
    10  u16       flags (bit 0: payload encrypted)
    12  u32       header length H
    16  H bytes   header: UTF-8 JSON (model description + section table)
    ..  sections  raw bytes, in the order of header["sections"]
    end 32 bytes  SHA-256 of everything before it

No pickle anywhere: the graph is ONNX protobuf bytes, everything else is JSON.
"""
from __future__ import annotations

import hashlib
import json
import os
import struct
import tempfile
from dataclasses import dataclass, field
from typing import Any

MAGIC = b"OPENRKNN"
FORMAT_VERSION = 1
FLAG_ENCRYPTED = 0x1
_FIXED = struct.Struct("<8sHHI")
_DIGEST = 32

from openrknn.errors import ModelFileError  # noqa: E402  (constants first: docs refer to them)


@dataclass
class Container:
    """Decoded file: the JSON header and the named binary sections."""

    header: dict[str, Any]
    sections: dict[str, bytes] = field(default_factory=dict)
    flags: int = 0


def encode(container: Container) -> bytes:
    """Serialise a container to bytes (header section table is rebuilt here)."""
    table, offset = [], 0
    for name, blob in container.sections.items():
        table.append({"name": name, "offset": offset, "length": len(blob),
                      "sha256": hashlib.sha256(blob).hexdigest()})
        offset += len(blob)
    header = dict(container.header, sections=table)
    header_bytes = json.dumps(header, sort_keys=True, separators=(",", ":")).encode("utf-8")
    body = _FIXED.pack(MAGIC, FORMAT_VERSION, container.flags, len(header_bytes)) + header_bytes
    body += b"".join(container.sections.values())
    return body + hashlib.sha256(body).digest()


def decode(data: bytes, source: str = "<bytes>") -> Container:
    """Parse and verify container bytes; ``ModelFileError`` says what is wrong."""
    _identify(data, source)
    body, digest = data[:-_DIGEST], data[-_DIGEST:]
    if hashlib.sha256(body).digest() != digest:
        raise ModelFileError(f"'{source}' is corrupt: its checksum does not match (the file was truncated or "
                             "modified after export); export it again")
    _, version, flags, header_len = _FIXED.unpack_from(data, 0)
    if version > FORMAT_VERSION:
        raise ModelFileError(f"'{source}' uses .rknn format version {version}, newer than this openrknn "
                             f"understands ({FORMAT_VERSION}); upgrade openrknn")
    try:
        header = json.loads(data[_FIXED.size:_FIXED.size + header_len].decode("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as e:
        raise ModelFileError(f"'{source}': the header is not valid JSON ({e})") from e
    start = _FIXED.size + header_len
    sections = {}
    for entry in header.get("sections", []):
        lo = start + int(entry["offset"])
        blob = body[lo:lo + int(entry["length"])]
        if len(blob) != int(entry["length"]) or hashlib.sha256(blob).hexdigest() != entry["sha256"]:
            raise ModelFileError(f"'{source}': section '{entry['name']}' is damaged")
        sections[entry["name"]] = blob
    return Container(header=header, sections=sections, flags=flags)


def _identify(data: bytes, source: str) -> None:
    if len(data) >= 4 and data[:4] == b"RKNN":
        raise ModelFileError(f"'{source}' is a Rockchip RKNN-Toolkit model (closed format, made by Rockchip's "
                             "toolkit); openrknn cannot read it. Convert the source model (onnx, tflite, ...) with "
                             "openrknn instead")
    if len(data) < _FIXED.size + _DIGEST or data[:8] != MAGIC:
        kind = "empty" if not data else "not an openrknn .rknn model"
        if len(data) > 2 and data[0] == 0x08 and data[1] < 16:   # ONNX: field 1 (ir_version) first
            kind = "an ONNX file, not an .rknn model (use load_onnx)"
        raise ModelFileError(f"'{source}' is {kind} (expected the 'OPENRKNN' signature)"
                             if kind != "empty" else f"'{source}' is empty")


def write_atomic(path: str, data: bytes) -> None:
    """Write ``data`` to ``path`` so that readers never see a half-written file."""
    folder = os.path.dirname(os.path.abspath(path))
    if not os.path.isdir(folder):
        raise ModelFileError(f"cannot write '{path}': folder '{folder}' does not exist")
    fd, tmp = tempfile.mkstemp(prefix=".openrknn-", suffix=".part", dir=folder)
    try:
        with os.fdopen(fd, "wb") as handle:
            handle.write(data)
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise


def read_file(path: str) -> Container:
    if not os.path.isfile(path):
        raise ModelFileError(f"RKNN model '{path}' does not exist (looked for '{os.path.abspath(path)}'); check the "
                             "path, or export the model first with export_rknn()")
    with open(path, "rb") as handle:
        return decode(handle.read(), path)
