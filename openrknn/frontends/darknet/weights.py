"""Reading a Darknet ``.weights`` file: a header, then float32 blobs in layer order."""
from __future__ import annotations

import os

import numpy as np

from openrknn.errors import ModelLoadError
from openrknn.frontends.darknet.cfg import Section
from openrknn.frontends import require_file


class WeightReader:
    """Hands out the float32 blobs of a ``.weights`` file in the order Darknet reads them.

    The header is three int32 (major, minor, revision) and the count of images seen during
    training: an int64 when ``major * 10 + minor >= 2``, an int32 before that.

    Args:
        path: the ``.weights`` file.
    """

    def __init__(self, path: str) -> None:
        require_file(path, "Darknet weights file")
        self.file = os.path.basename(path)
        with open(path, "rb") as f:
            self.data = f.read()
        if len(self.data) < 12:
            raise ModelLoadError(f"{self.file}: {len(self.data)} bytes is too short for a Darknet weights header "
                                 "(at least 16 bytes)")
        self.major, self.minor, self.revision = (int(v) for v in np.frombuffer(self.data, "<i4", 3))
        seen_size = 8 if self.major * 10 + self.minor >= 2 else 4
        if len(self.data) < 12 + seen_size:
            raise ModelLoadError(f"{self.file}: the header of version {self.major}.{self.minor} needs "
                                 f"{12 + seen_size} bytes, the file has {len(self.data)}")
        self.seen = int(np.frombuffer(self.data, "<i8" if seen_size == 8 else "<i4", 1, 12)[0])
        self.header_size = 12 + seen_size
        self.offset = self.header_size
        self.needed = self.header_size  # bytes the cfg asked for so far

    def read(self, count: int, section: Section, what: str) -> np.ndarray:
        """The next ``count`` float32 values, for blob ``what`` of ``section``.

        Raises:
            ModelLoadError: naming the layer, the blob and the byte counts when the file ends early.
        """
        nbytes = 4 * count
        self.needed += nbytes
        if self.offset + nbytes > len(self.data):
            remaining = len(self.data) - self.offset
            raise ModelLoadError(
                f"{self.file} is truncated: {section.where} needs {nbytes} bytes for its {what} "
                f"({count} float32) at offset {self.offset}, but only {remaining} bytes remain "
                f"(file is {len(self.data)} bytes); does the .weights file belong to this .cfg?")
        array = np.frombuffer(self.data, "<f4", count, self.offset).astype(np.float32)
        self.offset += nbytes
        return array

    @property
    def unused(self) -> int:
        """Bytes left after the last blob read."""
        return len(self.data) - self.offset
