"""Test helper: write MXNet symbol .json / .params files and numpy versions of MXNet ops.

The numpy ops follow MXNet's definitions (pooling windows and divisors, BatchNorm defaults) and
share nothing with openrknn's converter.
"""
from __future__ import annotations

import json
import math
import struct
from pathlib import Path

import numpy as np
from numpy.lib.stride_tricks import sliding_window_view

MAGIC = {"v1": 0xF993FAC8, "v2": 0xF993FAC9, "v3": 0xF993FACA}
FLAGS = {np.dtype(np.float32): 0, np.dtype(np.float64): 1, np.dtype(np.float16): 2}


class SymbolWriter:
    """Build the node list of a symbol file."""

    def __init__(self) -> None:
        self.nodes: list[dict] = []

    def var(self, name: str) -> int:
        self.nodes.append({"op": "null", "name": name, "inputs": []})
        return len(self.nodes) - 1

    def op(self, op: str, name: str, inputs: list[int], **attrs) -> int:
        self.nodes.append({"op": op, "name": name, "attrs": {k: str(v) for k, v in attrs.items()},
                           "inputs": [[i, 0, 0] for i in inputs]})
        return len(self.nodes) - 1

    def write(self, path: Path, heads: list[int]) -> Path:
        doc = {"nodes": self.nodes, "arg_nodes": [i for i, n in enumerate(self.nodes) if n["op"] == "null"],
               "node_row_ptr": list(range(len(self.nodes) + 1)), "heads": [[h, 0, 0] for h in heads],
               "attrs": {"mxnet_version": ["int", 10600]}}
        path.write_text(json.dumps(doc, indent=2))
        return path


def ndarray_bytes(array: np.ndarray, version: str) -> bytes:
    shape = array.shape
    if version == "legacy":
        head = struct.pack(f"<I{len(shape)}I", len(shape), *shape)
    else:
        head = struct.pack("<I", MAGIC[version])
        if version != "v1":
            head += struct.pack("<i", 0)  # dense storage
        head += struct.pack("<i" if version == "v3" else "<I", len(shape)) + struct.pack(f"<{len(shape)}q", *shape)
    head += struct.pack("<ii", 1, 0)  # cpu(0)
    return head + struct.pack("<i", FLAGS[array.dtype]) + array.astype(array.dtype.newbyteorder("<")).tobytes()


def write_params(path: Path, params: dict[str, np.ndarray], version: str = "v2") -> Path:
    """``params`` keys carry the 'arg:'/'aux:' prefixes."""
    data = struct.pack("<QQQ", 0x112, 0, len(params))
    data += b"".join(ndarray_bytes(a, version) for a in params.values())
    data += struct.pack("<Q", len(params))
    for name in params:
        raw = name.encode()
        data += struct.pack("<Q", len(raw)) + raw
    path.write_bytes(data)
    return path


# ------------------------------------------------------------------ numpy versions of MXNet ops
def conv2d(x, w, b=None, stride=1, pad=0, groups=1):
    """x (N, C, H, W), w (F, C/g, kh, kw)."""
    kh, kw = w.shape[2:]
    xp = np.pad(x, ((0, 0), (0, 0), (pad, pad), (pad, pad)))
    win = sliding_window_view(xp, (kh, kw), axis=(2, 3))[:, :, ::stride, ::stride]
    cg, fg = x.shape[1] // groups, w.shape[0] // groups
    y = np.concatenate([np.einsum("nchwij,fcij->nfhw", win[:, g * cg:(g + 1) * cg], w[g * fg:(g + 1) * fg])
                        for g in range(groups)], axis=1)
    return y if b is None else y + b[None, :, None, None]


def batchnorm(x, gamma, beta, mean, var, eps=1e-3, fix_gamma=True):
    if fix_gamma:
        gamma = np.ones_like(gamma)
    c = lambda v: v[None, :, None, None]  # noqa: E731
    return c(gamma) * (x - c(mean)) / np.sqrt(c(var) + eps) + c(beta)


def pool2d(x, kernel, stride, pad, pool_type="max", full=False, count_include_pad=True):
    """MXNet pooling: output size rounds down ('valid') or up ('full'); the average divides by the
    window clipped to the padded input (or to the input without count_include_pad)."""
    n, c, h, w = x.shape
    rnd = math.ceil if full else math.floor
    oh, ow = 1 + rnd((h + 2 * pad - kernel) / stride), 1 + rnd((w + 2 * pad - kernel) / stride)
    out = np.empty((n, c, oh, ow))
    for i in range(oh):
        for j in range(ow):
            y0, x0 = i * stride - pad, j * stride - pad
            y1, x1 = min(y0 + kernel, h + pad), min(x0 + kernel, w + pad)
            size = (y1 - y0) * (x1 - x0)
            ys, xs = slice(max(y0, 0), min(y1, h)), slice(max(x0, 0), min(x1, w))
            win = x[:, :, ys, xs]
            if pool_type == "max":
                out[:, :, i, j] = win.max(axis=(2, 3))
            else:
                div = size if count_include_pad else win.shape[2] * win.shape[3]
                out[:, :, i, j] = win.sum(axis=(2, 3)) / (div if pool_type == "avg" else 1)
    return out


def softmax(x, axis=-1):
    e = np.exp(x - x.max(axis=axis, keepdims=True))
    return e / e.sum(axis=axis, keepdims=True)
