"""Independent numpy implementations of Caffe layers (written from Caffe's documented semantics).

Direct loops rather than vectorised tricks, so that they share no code or idea with the ONNX
lowering under test.
"""
from __future__ import annotations

import math

import numpy as np


def conv2d(x: np.ndarray, w: np.ndarray, b: np.ndarray | None, stride=(1, 1), pad=(0, 0), dilation=(1, 1),
           group: int = 1) -> np.ndarray:
    n, c, h, wd = x.shape
    o, cg, kh, kw = w.shape
    xp = np.zeros((n, c, h + 2 * pad[0], wd + 2 * pad[1]), np.float64)
    xp[:, :, pad[0]:pad[0] + h, pad[1]:pad[1] + wd] = x
    oh = (h + 2 * pad[0] - (dilation[0] * (kh - 1) + 1)) // stride[0] + 1
    ow = (wd + 2 * pad[1] - (dilation[1] * (kw - 1) + 1)) // stride[1] + 1
    out = np.zeros((n, o, oh, ow), np.float64)
    og = o // group
    for g in range(group):
        xs = xp[:, g * cg:(g + 1) * cg]
        ws = w[g * og:(g + 1) * og].astype(np.float64)
        for i in range(kh):
            for j in range(kw):
                patch = xs[:, :, i * dilation[0]:i * dilation[0] + stride[0] * (oh - 1) + 1:stride[0],
                           j * dilation[1]:j * dilation[1] + stride[1] * (ow - 1) + 1:stride[1]]
                out[:, g * og:(g + 1) * og] += np.einsum("nchw,oc->nohw", patch, ws[:, :, i, j])
    if b is not None:
        out += b.reshape(1, -1, 1, 1)
    return out


def deconv2d(x: np.ndarray, w: np.ndarray, b: np.ndarray | None, stride=(1, 1), pad=(0, 0),
             group: int = 1) -> np.ndarray:
    """Caffe Deconvolution: scatter every input pixel times the kernel; out = s*(in-1) + k - 2p."""
    n, c, h, wd = x.shape
    _, og, kh, kw = w.shape
    full = np.zeros((n, og * group, stride[0] * (h - 1) + kh, stride[1] * (wd - 1) + kw))
    cg = c // group
    for g in range(group):
        for y in range(h):
            for z in range(wd):
                contrib = np.einsum("nc,cokl->nokl", x[:, g * cg:(g + 1) * cg, y, z], w[g * cg:(g + 1) * cg])
                ys, zs = y * stride[0], z * stride[1]
                full[:, g * og:(g + 1) * og, ys:ys + kh, zs:zs + kw] += contrib
    out = full[:, :, pad[0]:full.shape[2] - pad[0], pad[1]:full.shape[3] - pad[1]]
    if b is not None:
        out = out + b.reshape(1, -1, 1, 1)
    return out


def pool(x: np.ndarray, method: str, kernel, stride, pad, ceil: bool = True) -> np.ndarray:
    """Caffe pooling, window by window, as pooling_layer.cpp computes it."""
    n, c, h, w = x.shape
    sizes = []
    for size, k, s, p in zip((h, w), kernel, stride, pad):
        span = size + 2 * p - k
        sizes.append((int(math.ceil(span / s)) if ceil else span // s) + 1)
    if pad[0] or pad[1]:
        sizes = [o - 1 if (o - 1) * s >= size + p else o for o, s, size, p in zip(sizes, stride, (h, w), pad)]
    out = np.zeros((n, c, *sizes))
    for i in range(sizes[0]):
        for j in range(sizes[1]):
            hs, ws = i * stride[0] - pad[0], j * stride[1] - pad[1]
            he, we = min(hs + kernel[0], h + pad[0]), min(ws + kernel[1], w + pad[1])
            area = (he - hs) * (we - ws)
            hs, ws, he, we = max(hs, 0), max(ws, 0), min(he, h), min(we, w)
            win = x[:, :, hs:he, ws:we]
            out[:, :, i, j] = win.max(axis=(2, 3)) if method == "max" else win.sum(axis=(2, 3)) / area
    return out


def batch_norm(x, mean, var, factor, eps, gamma=None, beta=None):
    scale = 0.0 if factor == 0 else 1.0 / factor
    shape = (1, -1) + (1,) * (x.ndim - 2)
    y = (x - (mean * scale).reshape(shape)) / np.sqrt((var * scale).reshape(shape) + eps)
    if gamma is not None:
        y = y * gamma.reshape(shape) + beta.reshape(shape)
    return y


def lrn_across(x, size, alpha, beta, k):
    c = x.shape[1]
    out = np.empty_like(x, dtype=np.float64)
    half = (size - 1) // 2
    for ch in range(c):
        lo, hi = max(0, ch - half), min(c, ch + size - half)
        out[:, ch] = x[:, ch] / (k + alpha / size * (x[:, lo:hi] ** 2).sum(axis=1)) ** beta
    return out


def lrn_within(x, size, alpha, beta):
    half = (size - 1) // 2
    sq = pool(x ** 2, "ave", (size, size), (1, 1), (half, half))
    return x * (1 + alpha * sq) ** (-beta)


def softmax(x, axis):
    e = np.exp(x - x.max(axis=axis, keepdims=True))
    return e / e.sum(axis=axis, keepdims=True)


def normalize(x, scale, across_spatial, eps=1e-10):
    if across_spatial:
        norm = np.sqrt((x ** 2).sum(axis=(1, 2, 3), keepdims=True) + eps)
    else:
        norm = np.sqrt((x ** 2).sum(axis=1, keepdims=True) + eps)
    return x / norm * np.asarray(scale).reshape(1, -1, 1, 1)


# ------------------------------------------------------------------------------------------ SSD
def prior_box(layer_hw, img_hw, min_sizes, max_sizes, aspect_ratios, flip, clip, variances, offset=0.5,
              step=None):
    """SSD prior_box_layer.cpp, one prior at a time."""
    ratios = [1.0]
    for ar in aspect_ratios:
        if all(abs(ar - r) >= 1e-6 for r in ratios):
            ratios.append(ar)
            if flip:
                ratios.append(1.0 / ar)
    step_h, step_w = step if step else (img_hw[0] / layer_hw[0], img_hw[1] / layer_hw[1])
    boxes = []
    for h in range(layer_hw[0]):
        for w in range(layer_hw[1]):
            cx, cy = (w + offset) * step_w, (h + offset) * step_h
            for s, mn in enumerate(min_sizes):
                dims = [(mn, mn)]
                if max_sizes:
                    dims.append((math.sqrt(mn * max_sizes[s]),) * 2)
                dims += [(mn * math.sqrt(r), mn / math.sqrt(r)) for r in ratios if abs(r - 1) >= 1e-6]
                for bw, bh in dims:
                    boxes.append([(cx - bw / 2) / img_hw[1], (cy - bh / 2) / img_hw[0],
                                  (cx + bw / 2) / img_hw[1], (cy + bh / 2) / img_hw[0]])
    boxes = np.array(boxes)
    if clip:
        boxes = np.clip(boxes, 0, 1)
    var = np.tile(np.array(variances if len(variances) == 4 else [variances[0]] * 4), (len(boxes), 1))
    return np.stack([boxes.reshape(-1), var.reshape(-1)])[None]


def _iou(a, b):
    iw = min(a[2], b[2]) - max(a[0], b[0])
    ih = min(a[3], b[3]) - max(a[1], b[1])
    if iw <= 0 or ih <= 0:
        return 0.0
    inter = iw * ih
    area = lambda r: max(r[2] - r[0], 0) * max(r[3] - r[1], 0)  # noqa: E731
    return inter / (area(a) + area(b) - inter)


def _decode_one(p, v, l, code_type):
    pw, ph = p[2] - p[0], p[3] - p[1]
    if code_type == "CENTER_SIZE":
        pcx, pcy = (p[0] + p[2]) / 2, (p[1] + p[3]) / 2
        cx, cy = v[0] * l[0] * pw + pcx, v[1] * l[1] * ph + pcy
        w, h = math.exp(v[2] * l[2]) * pw, math.exp(v[3] * l[3]) * ph
        return [cx - w / 2, cy - h / 2, cx + w / 2, cy + h / 2]
    if code_type == "CORNER_SIZE":
        return [p[0] + v[0] * l[0] * pw, p[1] + v[1] * l[1] * ph, p[2] + v[2] * l[2] * pw, p[3] + v[3] * l[3] * ph]
    return list(p + v * l)


def detection_output(loc, conf, prior, num_classes, background=0, nms_threshold=0.45, top_k=-1,
                     keep_top_k=-1, confidence_threshold=None, code_type="CENTER_SIZE", share_location=True,
                     variance_encoded_in_target=False):
    """SSD detection_output_layer.cpp for batch 1."""
    pri = prior[0, 0].reshape(-1, 4)
    var = np.ones_like(pri) if variance_encoded_in_target else prior[0, 1].reshape(-1, 4)
    loc_classes = 1 if share_location else num_classes
    loc = loc.reshape(len(pri), loc_classes, 4)
    conf = conf.reshape(-1, num_classes)
    per_class = [[_decode_one(p, v, l[k], code_type) for p, v, l in zip(pri, var, loc)] for k in range(loc_classes)]
    thr = -np.inf if confidence_threshold is None else confidence_threshold
    kept = {}
    for c in range(num_classes):
        if c == background:
            continue
        boxes = per_class[0 if share_location else c]
        order = [i for i in sorted(range(len(boxes)), key=lambda i: -conf[i, c]) if conf[i, c] > thr]
        if top_k >= 0:
            order = order[:top_k]
        chosen = []
        for i in order:
            if all(_iou(boxes[i], boxes[j]) <= nms_threshold for j in chosen):
                chosen.append(i)
        kept[c] = chosen
    pairs = [(conf[i, c], c, i) for c, idx in kept.items() for i in idx]
    if 0 <= keep_top_k < len(pairs):
        pairs = sorted(pairs, key=lambda t: -t[0])[:keep_top_k]
        kept = {c: [i for s, cc, i in sorted(pairs, key=lambda t: -t[0]) if cc == c] for c in kept}
    rows = [[0, c, conf[i, c], *per_class[0 if share_location else c][i]] for c in sorted(kept) for i in kept[c]]
    if not rows:
        rows = [[0, -1, -1, -1, -1, -1, -1]]
    return np.array(rows, np.float64)[None, None]
