"""Wire format between ``openrknn serve`` (board) and the PC: length-prefixed msgpack frames.

A frame is a 4-byte big-endian length followed by that many bytes of msgpack holding one map.
Nothing executable crosses the wire: msgpack carries only maps, lists, strings, numbers and bytes,
extension types are refused, and arrays travel as ``{dtype, shape, data}`` with a fixed list of
numeric dtypes. Every frame is size-checked before it is read.

Requests are ``{"cmd": name, ...arguments}``; answers ``{"ok": True, ...}`` or
``{"ok": False, "error": text}``. The first request of a connection must be
``{"cmd": "hello", "token": ..., "version": PROTOCOL_VERSION}``.
"""
from __future__ import annotations

import math
import socket
import struct
import time
from typing import Any, Callable

import numpy as np

from openrknn.errors import MissingExtraError

PROTOCOL_VERSION = 1
DEFAULT_PORT = 8788
HEADER = struct.Struct(">I")
HELLO_MAX_BYTES = 64 * 1024            # before the token is checked nobody may make us allocate more
DEFAULT_MAX_FRAME_MB = 256
ARRAY_DTYPES = frozenset({"float32", "float16", "float64", "int8", "uint8", "int16", "uint16", "int32", "uint32",
                          "int64", "bool"})


MAX_ARRAY_RANK = 16   # NPU tensors have at most 8 dimensions; numpy itself stops at 64
MAX_SHOWN = 80        # characters of a peer's value quoted back in an error


def shown(value: Any, limit: int = MAX_SHOWN) -> str:
    """``repr(value)`` cut to ``limit`` characters: errors never echo a peer's huge value back."""
    text = repr(value)
    return text if len(text) <= limit else f"{text[:limit]}… ({len(text)} characters)"


class ProtocolError(Exception):
    """A frame that breaks the wire format (too large, truncated, not msgpack, wrong shape)."""


class PeerClosed(ProtocolError):
    """The other side closed the connection between frames."""


def _msgpack() -> Any:
    try:
        import msgpack
    except ImportError as e:
        raise MissingExtraError("the board connection", "serve", "msgpack") from e
    return msgpack


READ_CHUNK = 1 << 20   # a frame's buffer grows by what arrives, never by what its header declares


class ReadDeadline(ProtocolError):
    """A frame did not arrive in full before its deadline."""


def _read_exactly(sock: socket.socket, size: int, deadline: float | None = None) -> bytearray:
    """``size`` bytes; ``deadline`` (``time.monotonic()``) bounds the whole read, not each ``recv``."""
    buffer = bytearray()
    chunk = bytearray(min(size, READ_CHUNK))
    view = memoryview(chunk)
    per_recv = sock.gettimeout()   # the silence allowed between two pieces stays in force
    while len(buffer) < size:
        if deadline is not None:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise ReadDeadline(f"only {len(buffer)} of {size} bytes arrived before the deadline")
            sock.settimeout(remaining if per_recv is None else min(remaining, per_recv))
        try:
            n = sock.recv_into(view, min(len(chunk), size - len(buffer)))
        except socket.timeout as e:
            if deadline is None:
                raise
            raise ReadDeadline(f"only {len(buffer)} of {size} bytes arrived before the deadline") from e
        if n == 0:
            if not buffer:
                raise PeerClosed("connection closed")
            raise ProtocolError(f"connection closed after {len(buffer)} of {size} bytes")
        buffer += view[:n]
    return buffer


def read_frame(sock: socket.socket, max_bytes: int, deadline: float | None = None,
               body_seconds: Callable[[int], float] | None = None) -> dict[str, Any]:
    """Read one frame; :class:`ProtocolError` when it is larger than ``max_bytes`` or not a msgpack map.

    ``deadline`` bounds the whole frame; ``body_seconds(size)`` gives the body its own deadline once the
    header has arrived (a trickling peer cannot hold the connection forever).
    """
    head = _read_exactly(sock, HEADER.size, deadline)
    (size,) = HEADER.unpack(head)
    if size > max_bytes:
        raise ProtocolError(f"frame of {size} bytes is larger than the limit of {max_bytes} bytes")
    if body_seconds is not None:
        body_deadline = time.monotonic() + body_seconds(size)
        deadline = body_deadline if deadline is None else min(deadline, body_deadline)
    body = _read_exactly(sock, size, deadline) if size else b""
    return decode_body(body)


def decode_body(body: bytes | bytearray) -> dict[str, Any]:
    msgpack = _msgpack()

    def refuse_ext(code: int, data: bytes) -> Any:
        raise ProtocolError(f"msgpack extension type {code} is not accepted")

    try:
        message = msgpack.unpackb(body, raw=False, strict_map_key=True, ext_hook=refuse_ext)
    except ProtocolError:
        raise
    except Exception as e:  # msgpack raises several unrelated types for bad input
        raise ProtocolError(f"frame is not valid msgpack ({type(e).__name__}: {e})") from e
    if not isinstance(message, dict):
        raise ProtocolError(f"frame holds a {type(message).__name__}, expected a map")
    return message


def encode_frame(message: dict[str, Any]) -> bytes:
    body = _msgpack().packb(message, use_bin_type=True)
    return HEADER.pack(len(body)) + body


def write_frame(sock: socket.socket, message: dict[str, Any], max_bytes: int | None = None) -> None:
    """Send one frame; a message larger than ``max_bytes`` is refused before anything is sent."""
    frame = encode_frame(message)
    if max_bytes is not None and len(frame) - HEADER.size > max_bytes:
        raise ProtocolError(f"message of {len(frame) - HEADER.size} bytes is larger than the limit of "
                            f"{max_bytes} bytes")
    sock.sendall(frame)


def pack_array(array: Any) -> dict[str, Any]:
    """An array as a plain map (C order); only :data:`ARRAY_DTYPES` travel."""
    array = np.ascontiguousarray(array)
    if array.dtype.name not in ARRAY_DTYPES:
        raise ProtocolError(f"arrays of dtype {array.dtype} cannot be sent (supported: {sorted(ARRAY_DTYPES)})")
    return {"dtype": array.dtype.name, "shape": list(array.shape), "data": array.tobytes()}


def unpack_array(value: Any) -> np.ndarray:
    """The array of :func:`pack_array`; checks dtype, shape and byte count."""
    if not isinstance(value, dict) or set(value) != {"dtype", "shape", "data"}:
        raise ProtocolError("an array must be a map with exactly 'dtype', 'shape' and 'data'")
    dtype, shape, data = value["dtype"], value["shape"], value["data"]
    if dtype not in ARRAY_DTYPES:
        raise ProtocolError(f"array dtype {dtype!r} is not accepted (supported: {sorted(ARRAY_DTYPES)})")
    if not isinstance(shape, list) or len(shape) > MAX_ARRAY_RANK:
        raise ProtocolError(f"array shape must be a list of at most {MAX_ARRAY_RANK} dimensions, got "
                            f"{shown(shape)}")
    if not all(type(d) is int and 0 <= d < 2**31 for d in shape):
        raise ProtocolError(f"array shape must hold non-negative integers below 2**31, got {shown(shape)}")
    if not isinstance(data, bytes):
        raise ProtocolError("array data must be bytes")
    expected = math.prod(shape) * np.dtype(dtype).itemsize   # Python integers: no overflow
    if expected != len(data):
        raise ProtocolError(f"array {dtype}{shown(shape)} needs {expected} bytes, {len(data)} were sent")
    return np.frombuffer(data, dtype=dtype).reshape(shape).copy()
