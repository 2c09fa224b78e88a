"""Reading an MXNet ``.params`` file (the NDArray list format) without MXNet.

Layout (little endian): ``uint64 0x112`` (list magic), ``uint64`` reserved, ``uint64`` count, then
``count`` NDArrays, then ``uint64`` count of names and each name as ``uint64`` length + bytes.
An NDArray is ``uint32`` magic (V1 0xF993FAC8: shape only; V2 0xF993FAC9 / V3 0xF993FACA: ``int32``
storage type first), the shape (``uint32``/``int32`` ndim + ``int64`` dims), the context
(``int32`` device type and id), the ``int32`` dtype flag and the raw data. Files older than V1
start directly with the ``uint32`` ndim and ``uint32`` dims.
"""
from __future__ import annotations

import os
import struct

import numpy as np

from openrknn.errors import ModelLoadError
from openrknn.frontends import require_file

LIST_MAGIC = 0x112
NDARRAY_V1, NDARRAY_V2, NDARRAY_V3 = 0xF993FAC8, 0xF993FAC9, 0xF993FACA
DTYPES = {0: np.float32, 1: np.float64, 2: np.float16, 3: np.uint8, 4: np.int32, 5: np.int8, 6: np.int64}
STORAGE = {0: "default", 1: "row_sparse", 2: "csr"}


class _Reader:
    def __init__(self, data: bytes, file: str) -> None:
        self.data, self.file, self.pos = data, file, 0

    def take(self, n: int, what: str) -> bytes:
        if n < 0 or self.pos + n > len(self.data):
            raise ModelLoadError(f"{self.file} is truncated: {what} needs {n} bytes at offset {self.pos}, only "
                                 f"{len(self.data) - self.pos} remain (file is {len(self.data)} bytes)")
        chunk = self.data[self.pos:self.pos + n]
        self.pos += n
        return chunk

    def unpack(self, fmt: str, what: str) -> tuple:
        return struct.unpack("<" + fmt, self.take(struct.calcsize("<" + fmt), what))


def read_params(path: str) -> dict[str, np.ndarray]:
    """All arrays of a ``.params`` file by name, with the ``arg:``/``aux:`` prefixes removed.

    Raises:
        ModelLoadError: missing file, wrong magic, sparse arrays, unknown dtype, truncation.
    """
    require_file(path, "MXNet params file")
    with open(path, "rb") as f:
        r = _Reader(f.read(), os.path.basename(path))
    magic, _reserved = r.unpack("QQ", "the header")
    if magic != LIST_MAGIC:
        raise ModelLoadError(f"{r.file} is not an MXNet .params file (magic {magic:#x}, expected {LIST_MAGIC:#x}); "
                             "save it with mx.nd.save / model.save_checkpoint")
    (count,) = r.unpack("Q", "the array count")
    arrays = [_read_ndarray(r, i, count) for i in range(count)]
    (name_count,) = r.unpack("Q", "the name count")
    if name_count != count:
        raise ModelLoadError(f"{r.file}: {count} arrays but {name_count} names; only named parameter files "
                             "(mx.nd.save with a dict) can be loaded")
    names = []
    for i in range(name_count):
        (length,) = r.unpack("Q", f"the length of name #{i}")
        names.append(r.take(length, f"name #{i}").decode("utf-8", errors="replace"))
    params = {}
    for name, array in zip(names, arrays):
        key = name.split(":", 1)[1] if name.startswith(("arg:", "aux:")) else name
        params[key] = array
    return params


def _read_shape(r: _Reader, what: str, v3: bool) -> list[int] | None:
    (ndim,) = r.unpack("i" if v3 else "I", what)
    if (v3 and ndim < 0) or (not v3 and ndim == 0):
        return None  # an empty ("none") array
    return list(r.unpack(f"{ndim}q", what))


def _read_ndarray(r: _Reader, index: int, count: int) -> np.ndarray:
    what = f"array #{index} of {count}"
    (magic,) = r.unpack("I", what)
    if magic in (NDARRAY_V2, NDARRAY_V3):
        (stype,) = r.unpack("i", what)
        if stype != 0:
            raise ModelLoadError(f"{r.file}: {what} has storage type {STORAGE.get(stype, stype)}; only dense "
                                 "arrays are supported (call .tostype('default') before saving)")
        shape = _read_shape(r, what, magic == NDARRAY_V3)
    elif magic == NDARRAY_V1:
        shape = _read_shape(r, what, False)
    elif magic < 32:  # before V1: the first word is ndim, dims are uint32
        shape = list(r.unpack(f"{magic}I", what)) if magic else None
    else:
        raise ModelLoadError(f"{r.file}: {what} starts with unknown magic {magic:#x}; is this an MXNet .params file?")
    if shape is None:
        return np.zeros((0,), np.float32)
    r.unpack("ii", what)  # context: device type, device id
    (flag,) = r.unpack("i", what)
    if flag not in DTYPES:
        raise ModelLoadError(f"{r.file}: {what} has unknown dtype flag {flag}")
    dtype = np.dtype(DTYPES[flag]).newbyteorder("<")
    size = int(np.prod(shape)) if shape else 1
    data = r.take(size * dtype.itemsize, f"the data of {what} (shape {shape}, {dtype.name})")
    return np.frombuffer(data, dtype).reshape(shape).copy()
