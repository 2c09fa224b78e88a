"""Test helper: write Darknet .cfg/.weights files and run the same network with plain numpy.

The numpy forward pass follows Darknet's own definitions (batch norm as
``(x - mean) / (sqrt(var) + 1e-6)``, max pooling over the valid part of a window starting at
``i * stride - padding // 2``, ...) and shares nothing with openrknn's converter.
"""
from __future__ import annotations

from pathlib import Path

import numpy as np
from numpy.lib.stride_tricks import sliding_window_view

ACT = {
    "linear": lambda x: x,
    "leaky": lambda x: np.where(x > 0, x, 0.1 * x),
    "relu": lambda x: np.maximum(x, 0),
    "logistic": lambda x: 1 / (1 + np.exp(-x)),
    "swish": lambda x: x / (1 + np.exp(-x)),
    "mish": lambda x: x * np.tanh(np.log1p(np.exp(x))),
}


def conv2d(x: np.ndarray, w: np.ndarray, stride: int, pad: int, groups: int) -> np.ndarray:
    """x: (c, h, w), w: (f, c/groups, k, k) -> (f, oh, ow)."""
    k = w.shape[2]
    xp = np.pad(x, ((0, 0), (pad, pad), (pad, pad)))
    win = sliding_window_view(xp, (k, k), axis=(1, 2))[:, ::stride, ::stride]
    cg, fg = x.shape[0] // groups, w.shape[0] // groups
    parts = [np.einsum("chwij,fcij->fhw", win[g * cg:(g + 1) * cg], w[g * fg:(g + 1) * fg]) for g in range(groups)]
    return np.concatenate(parts, axis=0)


def maxpool(x: np.ndarray, size: int, stride: int, padding: int) -> np.ndarray:
    """Darknet forward_maxpool_layer, written as its loops over output positions."""
    c, h, w = x.shape
    oh, ow = (h + padding - size) // stride + 1, (w + padding - size) // stride + 1
    offset = -(padding // 2)
    out = np.empty((c, oh, ow))
    for i in range(oh):
        for j in range(ow):
            y0, x0 = i * stride + offset, j * stride + offset
            ys = slice(max(y0, 0), min(y0 + size, h))
            xs = slice(max(x0, 0), min(x0 + size, w))
            out[:, i, j] = x[:, ys, xs].max(axis=(1, 2))
    return out


class DarknetNet:
    """A network given as ``[(section, {option: value})]`` after a [net] section.

    ``forward`` draws the weights in Darknet file order while it runs, so call it once before
    ``write``.
    """

    def __init__(self, width: int, height: int, channels: int, layers: list[tuple[str, dict]], seed: int = 0):
        self.width, self.height, self.channels = width, height, channels
        self.layers = layers
        self.rng = np.random.default_rng(seed)
        self.blobs: list[np.ndarray] = []

    def cfg_text(self) -> str:
        lines = ["[net]", "# test net", "batch=1", f"width={self.width}", f"height={self.height}",
                 f"channels={self.channels}", "momentum=0.9", ""]
        for kind, opts in self.layers:
            lines.append(f"[{kind}]")
            lines += [f"{k}={v}" for k, v in opts.items()]
            lines.append("")
        return "\n".join(lines)

    def write(self, folder: Path, version: tuple[int, int, int] = (0, 2, 0), drop_bytes: int = 0) -> tuple[Path, Path]:
        cfg, weights = folder / "net.cfg", folder / "net.weights"
        cfg.write_text(self.cfg_text())
        major, minor, revision = version
        seen = np.array([32013312], "<i8" if major * 10 + minor >= 2 else "<i4")
        data = np.array(version, "<i4").tobytes() + seen.tobytes() + b"".join(
            b.astype("<f4").tobytes() for b in self.blobs)
        weights.write_bytes(data[:len(data) - drop_bytes])
        return cfg, weights

    def _blob(self, shape, kind: str) -> np.ndarray:
        n = int(np.prod(shape))
        if kind == "positive":
            b = self.rng.uniform(0.5, 1.5, n)
        elif kind == "weights":
            b = self.rng.normal(0, np.sqrt(2.0 / (n / shape[0])), n)
        else:
            b = self.rng.normal(0, 0.1, n)
        b = b.astype(np.float32)
        self.blobs.append(b)
        return b.astype(np.float64).reshape(shape)

    def _batchnorm(self, x: np.ndarray, f: int) -> np.ndarray:
        scales, mean, var = self._blob([f], "positive"), self._blob([f], "small"), self._blob([f], "positive")
        shape = (f,) + (1,) * (x.ndim - 1)
        return (x - mean.reshape(shape)) / (np.sqrt(var.reshape(shape)) + 1e-6) * scales.reshape(shape)

    def forward(self, x: np.ndarray) -> list[np.ndarray]:
        """x: (c, h, w) -> the yolo inputs, or the last output; each (c, h, w)."""
        outs, heads = [], []
        for kind, o in self.layers:
            x = self._layer(kind, o, x, outs, heads)
            outs.append(x)
        return heads or [outs[-1]]

    def _layer(self, kind: str, o: dict, x: np.ndarray, outs: list, heads: list) -> np.ndarray:
        ref = lambda r: outs[len(outs) + r] if r < 0 else outs[r]  # noqa: E731
        if kind == "convolutional":
            f, k, g = o.get("filters", 1), o.get("size", 1), o.get("groups", 1)
            bias = self._blob([f], "small")
            bn = o.get("batch_normalize", 0)
            if bn:  # file order: biases, scales, mean, var, weights
                scales, mean, var = (self._blob([f], t) for t in ("positive", "small", "positive"))
            w = self._blob([f, x.shape[0] // g, k, k], "weights")
            y = conv2d(x, w, o.get("stride", 1), k // 2 if o.get("pad", 0) else 0, g)
            if bn:
                y = (y - mean[:, None, None]) / (np.sqrt(var[:, None, None]) + 1e-6) * scales[:, None, None]
            return ACT[o.get("activation", "logistic")](y + bias[:, None, None])
        if kind == "connected":
            n = o["output"]
            bias = self._blob([n], "small")
            w = self._blob([n, x.size], "weights")
            y = w @ x.reshape(-1)
            if o.get("batch_normalize", 0):
                y = self._batchnorm(y, n)
            return ACT[o.get("activation", "logistic")](y + bias).reshape(n, 1, 1)
        if kind == "maxpool":
            s = o.get("stride", 1)
            size = o.get("size", s)
            return maxpool(x, size, s, o.get("padding", size - 1))
        if kind == "avgpool":
            return x.mean(axis=(1, 2), keepdims=True)
        if kind == "route":
            g, gid = o.get("groups", 1), o.get("group_id", 0)
            parts = [ref(int(r)) for r in str(o["layers"]).split(",")]
            parts = [p[gid * p.shape[0] // g:(gid + 1) * p.shape[0] // g] for p in parts]
            return np.concatenate(parts, axis=0)
        if kind == "shortcut":
            return ACT[o.get("activation", "linear")](x + ref(int(o["from"])))
        if kind == "upsample":
            s = o.get("stride", 2)
            return x.repeat(s, axis=1).repeat(s, axis=2)
        if kind == "yolo":
            heads.append(x)
            return x
        if kind == "softmax":
            flat = x.reshape(o.get("groups", 1), -1)
            e = np.exp(flat - flat.max(axis=1, keepdims=True))
            return (e / e.sum(axis=1, keepdims=True)).reshape(x.shape)
        if kind == "dropout":
            return x
        raise ValueError(kind)
