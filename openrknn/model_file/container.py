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

import errno
import hashlib
import json
import os
import struct
import tempfile
import time
from dataclasses import dataclass, field
from typing import Any

MAGIC = b"OPENRKNN"
FORMAT_VERSION = 1
FLAG_ENCRYPTED = 0x1
_FIXED = struct.Struct("<8sHHI")
_DIGEST = 32

from openrknn.errors import ModelFileError  # noqa: E402  (constants first: docs refer to them)
from openrknn.model_file.header_schema import check_container_header  # noqa: E402


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
    if version == 0 or flags & ~FLAG_ENCRYPTED:
        raise ModelFileError(f"'{source}': unknown format version {version} or flags {flags:#x}; the file is damaged "
                             "or was written by a newer openrknn")
    start = _FIXED.size + header_len
    if start > len(body):
        raise ModelFileError(f"'{source}': the header length ({header_len} bytes) runs past the end of the file; "
                             "the file is truncated")
    try:
        header = json.loads(body[_FIXED.size:start].decode("utf-8"), parse_constant=_refuse_constant)
    except (UnicodeDecodeError, ValueError, RecursionError) as e:
        raise ModelFileError(f"'{source}': the header is not valid JSON ({type(e).__name__}: {str(e)[:80]})") from e
    check_container_header(header, len(body) - start, source)
    sections = {}
    for entry in header.get("sections", []):
        lo = start + entry["offset"]
        blob = body[lo:lo + entry["length"]]
        if hashlib.sha256(blob).hexdigest() != entry["sha256"]:
            raise ModelFileError(f"'{source}': section '{entry['name']}' is damaged")
        sections[entry["name"]] = blob
    return Container(header=header, sections=sections, flags=flags)


def _refuse_constant(name: str) -> None:
    raise ValueError(f"{name} is not allowed in a header")


def _identify(data: bytes, source: str) -> None:
    if len(data) >= 4 and data[:4] == b"RKNN":
        raise ModelFileError(f"'{source}' is a Rockchip RKNN-Toolkit model (closed format, made by Rockchip's "
                             "toolkit); openrknn cannot read it. Convert the source model (onnx, tflite, ...) with "
                             "openrknn instead, or run it on a board with RKNNLite and Rockchip's runtime "
                             "librknnrt.so (docs/deployment.md)")
    if len(data) < _FIXED.size + _DIGEST or data[:8] != MAGIC:
        kind = "empty" if not data else "not an openrknn .rknn model"
        if len(data) > 2 and data[0] == 0x08 and data[1] < 16:   # ONNX: field 1 (ir_version) first
            kind = "an ONNX file, not an .rknn model (use load_onnx)"
        raise ModelFileError(f"'{source}' is {kind} (expected the 'OPENRKNN' signature)"
                             if kind != "empty" else f"'{source}' is empty")


TEMP_PREFIX = ".openrknn-"
TEMP_SUFFIX = ".part"
STALE_TEMP_SECONDS = 3600   # a temp file this old is left over from a killed export, whatever its pid says


def write_atomic(path: str, data: bytes, mode: int | None = None) -> None:
    """Write ``data`` to ``path`` so that readers never see a half-written file.

    The file gets the permissions a plain ``open()`` would give (0666 minus the umask) unless ``mode``
    says otherwise (key files: 0600). Temporary files left by an export that was killed are removed.
    File-system failures raise ``ModelFileError`` naming ``path`` and the cause.
    """
    folder = os.path.dirname(os.path.abspath(path))
    if not os.path.isdir(folder):
        raise ModelFileError(f"cannot write '{path}': folder '{folder}' does not exist")
    if os.path.isdir(path):
        raise ModelFileError(f"cannot write '{path}': it is a folder; give a file name such as "
                             f"'{os.path.join(path, 'model.rknn')}'")
    remove_stale_temp_files(folder)
    tmp = None
    try:
        # the pid in the name tells a later export whether the writer is still alive
        fd, tmp = tempfile.mkstemp(prefix=f"{TEMP_PREFIX}{os.getpid()}-", suffix=TEMP_SUFFIX, dir=folder)
        with os.fdopen(fd, "wb") as handle:
            os.fchmod(handle.fileno(), _default_mode() if mode is None else mode)
            handle.write(data)
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(tmp, path)
    except OSError as e:
        raise ModelFileError(f"cannot write '{path}': {e.strerror or e} "
                             f"({_os_error_hint(e)})") from e
    finally:
        if tmp is not None and os.path.exists(tmp):
            os.unlink(tmp)


def _default_mode() -> int:
    """0666 minus the process umask (read without a race through /proc when it exists)."""
    try:
        with open("/proc/self/status", encoding="ascii") as status:
            for line in status:
                if line.startswith("Umask:"):
                    return 0o666 & ~int(line.split()[1], 8)
    except OSError:
        pass
    umask = os.umask(0o022)
    os.umask(umask)
    return 0o666 & ~umask


def _os_error_hint(e: OSError) -> str:
    return {errno.ENOSPC: "the disk is full; free space or write elsewhere",
            errno.EDQUOT: "the disk quota is exceeded; free space or write elsewhere",
            errno.EACCES: "no permission to write in that folder; choose a writable folder",
            errno.EPERM: "no permission to write in that folder; choose a writable folder",
            errno.EROFS: "the file system is read-only; choose a writable folder",
            errno.EISDIR: "the target is a folder; give a file name"}.get(e.errno, "check the target path")


def remove_stale_temp_files(folder: str) -> None:
    """Delete ``.openrknn-<pid>-*.part`` files whose writer is gone (a killed export) or that are old."""
    try:
        names = [n for n in os.listdir(folder) if n.startswith(TEMP_PREFIX) and n.endswith(TEMP_SUFFIX)]
    except OSError:
        return
    for name in names:
        full = os.path.join(folder, name)
        pid_text = name[len(TEMP_PREFIX):].split("-", 1)[0]
        try:
            writer_alive = pid_text.isdigit() and _process_exists(int(pid_text))
            if not writer_alive or time.time() - os.path.getmtime(full) > STALE_TEMP_SECONDS:
                os.unlink(full)
        except OSError:
            continue   # another export removed it first, or the folder is not ours to clean


def _process_exists(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def read_file(path: str) -> Container:
    if not os.path.isfile(path):
        raise ModelFileError(f"RKNN model '{path}' does not exist (looked for '{os.path.abspath(path)}'); check the "
                             "path, or export the model first with export_rknn()")
    with open(path, "rb") as handle:
        return decode(handle.read(), path)
