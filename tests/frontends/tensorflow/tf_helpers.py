"""Test helpers: a tiny frozen-GraphDef writer and NHWC numpy reference ops for the TensorFlow frontend tests."""
from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from openrknn.frontends.tensorflow import schema


class GraphWriter:
    """Write frozen GraphDefs node by node with the frontend's own schema."""

    def __init__(self, seed: int = 0) -> None:
        self.graph = schema.GraphDef()
        self.rng = np.random.default_rng(seed)
        self.consts: dict[str, np.ndarray] = {}

    def node(self, name: str, op: str, inputs: tuple[str, ...] | list[str] = (), **attrs: Any) -> str:
        node = self.graph.node.add(name=name, op=op, input=list(inputs))
        for key, value in attrs.items():
            slot = node.attr[key]
            if isinstance(value, np.ndarray):
                slot.tensor.CopyFrom(schema.numpy_to_tensor(value))
            elif isinstance(value, bool):
                slot.b = value
            elif isinstance(value, int):
                slot.i = value
            elif isinstance(value, float):
                slot.f = value
            elif isinstance(value, str):
                slot.s = value.encode()
            elif isinstance(value, (list, tuple)):
                slot.list.i.extend(int(v) for v in value)
            else:
                raise TypeError(key)
        if "T" not in attrs and op != "Const":
            node.attr["T"].type = schema.DT_FLOAT
        return name

    def placeholder(self, name: str, shape: list[int]) -> str:
        self.node(name, "Placeholder")
        self.graph.node[-1].attr["dtype"].type = schema.DT_FLOAT
        for d in shape:
            self.graph.node[-1].attr["shape"].shape.dim.add(size=d)
        return name

    def const(self, name: str, value: Any, dtype: Any = np.float32) -> str:
        array = np.asarray(value, dtype)
        self.consts[name] = array
        self.node(name, "Const", value=array)
        codes = {np.dtype(v): k for k, v in schema.NUMPY_DTYPES.items()}
        self.graph.node[-1].attr["dtype"].type = codes[array.dtype]
        return name

    def weight(self, name: str, shape: tuple[int, ...], scale: float = 0.3, low: float | None = None) -> str:
        if low is not None:
            return self.const(name, self.rng.uniform(low, low + 1.0, shape))
        return self.const(name, self.rng.normal(0, scale, shape))

    def save(self, path: Path) -> Path:
        path.write_bytes(self.graph.SerializeToString())
        return path


# ----------------------------------------------------------------------------- numpy reference (NHWC)
def same_pads(size: int, k: int, s: int, d: int = 1) -> tuple[int, int]:
    out = -(-size // s)
    total = max((out - 1) * s + (k - 1) * d + 1 - size, 0)
    return total // 2, total - total // 2


def _windows(x: np.ndarray, kh: int, kw: int, s: int, d: int, padding: str, fill: float = 0.0):
    n, h, w, c = x.shape
    ph = same_pads(h, kh, s, d) if padding == "SAME" else (0, 0)
    pw = same_pads(w, kw, s, d) if padding == "SAME" else (0, 0)
    xp = np.pad(x, [(0, 0), ph, pw, (0, 0)], constant_values=fill)
    oh = (xp.shape[1] - (kh - 1) * d - 1) // s + 1
    ow = (xp.shape[2] - (kw - 1) * d - 1) // s + 1
    for i in range(kh):
        for j in range(kw):
            yield i, j, xp[:, i * d: i * d + (oh - 1) * s + 1: s, j * d: j * d + (ow - 1) * s + 1: s, :]


def conv2d(x, w, s=1, padding="VALID", d=1):
    out = 0
    for i, j, patch in _windows(x, w.shape[0], w.shape[1], s, d, padding):
        out = out + np.einsum("nhwc,co->nhwo", patch, w[i, j])
    return out


def depthwise(x, w, s=1, padding="VALID"):
    out = 0
    for i, j, patch in _windows(x, w.shape[0], w.shape[1], s, 1, padding):
        prod = patch[..., :, None] * w[i, j]
        out = out + prod.reshape(*prod.shape[:3], -1)
    return out


def max_pool(x, k, s, padding):
    return np.max(np.stack([p for _, _, p in _windows(x, k, k, s, 1, padding, -np.inf)]), axis=0)


def avg_pool(x, k, s, padding):
    total = sum(p for _, _, p in _windows(x, k, k, s, 1, padding))
    count = sum(p for _, _, p in _windows(np.ones_like(x), k, k, s, 1, padding))
    return total / count


def batch_norm(x, scale, offset, mean, var, eps):
    return (x - mean) / np.sqrt(var + eps) * scale + offset


def softmax(x):
    e = np.exp(x - x.max(axis=-1, keepdims=True))
    return e / e.sum(axis=-1, keepdims=True)


def resize_bilinear(x, oh, ow, half_pixel=False, align=False):
    def coords(out, size):
        o = np.arange(out, dtype=np.float64)
        if align and out > 1:
            src = o * (size - 1) / (out - 1)
        elif half_pixel:
            src = (o + 0.5) * size / out - 0.5
        else:
            src = o * size / out
        low = np.floor(src)
        lerp = src - low
        return np.clip(low, 0, size - 1).astype(int), np.clip(np.ceil(src), 0, size - 1).astype(int), lerp
    y0, y1, ly = coords(oh, x.shape[1])
    x0, x1, lx = coords(ow, x.shape[2])
    top = x[:, y0][:, :, x0] + (x[:, y0][:, :, x1] - x[:, y0][:, :, x0]) * lx[None, None, :, None]
    bottom = x[:, y1][:, :, x0] + (x[:, y1][:, :, x1] - x[:, y1][:, :, x0]) * lx[None, None, :, None]
    return top + (bottom - top) * ly[None, :, None, None]


def resize_nearest(x, oh, ow, half_pixel=False, align=False):
    def index(out, size):
        o = np.arange(out, dtype=np.float64)
        if align and out > 1:
            src = np.floor(o * (size - 1) / (out - 1) + 0.5)
        elif half_pixel:
            src = np.floor((o + 0.5) * size / out)
        else:
            src = np.floor(o * size / out)
        return np.minimum(src, size - 1).astype(int)
    return x[:, index(oh, x.shape[1])][:, :, index(ow, x.shape[2])]
