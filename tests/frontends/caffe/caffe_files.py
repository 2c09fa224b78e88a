"""Write real Caffe files for the tests: prototxt text and caffemodel protobuf bytes.

The ``.caffemodel`` is encoded here by hand from the public BVLC ``caffe.proto`` field numbers
(NetParameter.layer = 100, V1 ``layers`` = 2; LayerParameter.name = 1, blobs = 7; V1 name = 4,
blobs = 6; BlobProto.shape = 7, data = 5 (packed float); BlobShape.dim = 1 (packed int64)), so
the tests do not depend on the schema the loader declares.
"""
from __future__ import annotations

import struct
from pathlib import Path

import numpy as np


def _varint(value: int) -> bytes:
    out = bytearray()
    value &= (1 << 64) - 1
    while True:
        byte = value & 0x7F
        value >>= 7
        if value:
            out.append(byte | 0x80)
        else:
            out.append(byte)
            return bytes(out)


def _field(number: int, payload: bytes) -> bytes:
    """A length-delimited field (wire type 2)."""
    return _varint(number << 3 | 2) + _varint(len(payload)) + payload


def blob_bytes(array: np.ndarray, legacy_dims: bool = False) -> bytes:
    """BlobProto: shape{dim...} + packed float data (or the V1 num/channels/height/width ints)."""
    array = np.asarray(array, np.float32)
    if legacy_dims:
        dims = [1] * (4 - array.ndim) + list(array.shape)
        head = b"".join(_varint(n << 3) + _varint(d) for n, d in zip((1, 2, 3, 4), dims))
    else:
        head = _field(7, _field(1, b"".join(_varint(d) for d in array.shape)))
    return head + _field(5, struct.pack(f"<{array.size}f", *array.reshape(-1)))


def caffemodel_bytes(weights: dict[str, list[np.ndarray]], v1: bool = False) -> bytes:
    """NetParameter with one layer record (name + blobs) per entry of ``weights``."""
    out = bytearray()
    for name, arrays in weights.items():
        if v1:
            layer = _field(4, name.encode()) + b"".join(_field(6, blob_bytes(a, legacy_dims=True)) for a in arrays)
            out += _field(2, layer)
        else:
            layer = _field(1, name.encode()) + b"".join(_field(7, blob_bytes(a)) for a in arrays)
            out += _field(100, layer)
    return bytes(out)


def write_model(folder: Path, prototxt: str, weights: dict[str, list[np.ndarray]] | None,
                v1: bool = False, stem: str = "net") -> tuple[str, str | None]:
    """Write ``stem.prototxt`` (+ ``stem.caffemodel``) and return their paths."""
    proto = folder / f"{stem}.prototxt"
    proto.write_text(prototxt)
    if weights is None:
        return str(proto), None
    model = folder / f"{stem}.caffemodel"
    model.write_bytes(caffemodel_bytes(weights, v1=v1))
    return str(proto), str(model)


def input_layer(name: str, shape: list[int]) -> str:
    dims = " ".join(f"dim: {d}" for d in shape)
    return f'layer {{ name: "{name}" type: "Input" top: "{name}" input_param {{ shape {{ {dims} }} }} }}\n'


def layer(name: str, type_: str, bottoms: list[str] | str, tops: list[str] | str | None = None,
          params: str = "") -> str:
    """One V2 ``layer { }`` block; ``params`` is the text of its ``*_param`` blocks."""
    bottoms = [bottoms] if isinstance(bottoms, str) else bottoms
    tops = [name] if tops is None else ([tops] if isinstance(tops, str) else tops)
    lines = [f'  name: "{name}"', f'  type: "{type_}"'] + [f'  bottom: "{b}"' for b in bottoms]
    lines += [f'  top: "{t}"' for t in tops]
    if params:
        lines.append("  " + params)
    return "layer {\n" + "\n".join(lines) + "\n}\n"


def run_rknn(proto: str, weights: str | None, inputs: list[np.ndarray], input_name: list[str] | None = None,
             float_dtype: str = "float32") -> list[np.ndarray]:
    """Load through the RKNN facade, build without quantization and run the simulator (NCHW feed)."""
    from rknn.api import RKNN

    rknn = RKNN()
    assert rknn.config(target_platform="rk3588", float_dtype=float_dtype) == 0
    assert rknn.load_caffe(model=proto, blobs=weights, input_name=input_name) == 0
    assert rknn.build(do_quantization=False) == 0
    assert rknn.init_runtime() == 0
    outputs = rknn.inference(inputs=inputs, data_format="nchw")
    rknn.release()
    assert outputs is not None
    return outputs
