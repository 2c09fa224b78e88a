"""SSD layers: PriorBox (a constant) and DetectionOutput (box decoding + per-class NMS in ONNX ops).

DetectionOutput is built from standard ONNX operators (``NonMaxSuppression``, ``TopK``, ``Gather``),
so it runs in the simulator without a custom op. Its output has Caffe's layout
``[1, 1, num_det, 7]`` with rows ``(image_id, label, score, xmin, ymin, xmax, ymax)``; ``num_det``
depends on the data (one row of ``[image_id, -1, ..., -1]`` per image when nothing is found).
"""
from __future__ import annotations

import math

import numpy as np
from onnx import numpy_helper

from openrknn.errors import ModelLoadError
from openrknn.frontends.caffe.context import CONVERTERS, CaffeContext, CaffeLayer

_CORNER, _CENTER_SIZE, _CORNER_SIZE = 1, 2, 3


def prior_sizes(min_sizes: list[float], max_sizes: list[float], aspect_ratios: list[float],
                flip: bool) -> list[tuple[float, float]]:
    """(width, height) of the priors at one position, in Caffe's order.

    For each ``min_size``: the square ``min``, then ``sqrt(min * max)`` when max sizes are given,
    then ``(min * sqrt(ar), min / sqrt(ar))`` for every distinct aspect ratio other than 1
    (with ``1 / ar`` after ``ar`` when ``flip``).
    """
    ratios = [1.0]
    for ar in aspect_ratios:
        if not any(abs(ar - r) < 1e-6 for r in ratios):
            ratios.append(ar)
            if flip:
                ratios.append(1.0 / ar)
    sizes = []
    for i, smin in enumerate(min_sizes):
        sizes.append((smin, smin))
        if max_sizes:
            side = math.sqrt(smin * max_sizes[i])
            sizes.append((side, side))
        sizes += [(smin * math.sqrt(r), smin / math.sqrt(r)) for r in ratios if abs(r - 1.0) >= 1e-6]
    return sizes


def prior_boxes(layer_hw: tuple[int, int], img_hw: tuple[float, float], step_hw: tuple[float, float],
                sizes: list[tuple[float, float]], offset: float, clip: bool, variances: list[float]) -> np.ndarray:
    """Caffe PriorBox output ``[1, 2, H*W*len(sizes)*4]``: normalised corner boxes, then variances.

    Prior ``k`` at cell ``(h, w)`` is centred at ``((w + offset) * step_w, (h + offset) * step_h)``
    and spans ``sizes[k]``; coordinates are divided by the image width / height.
    """
    (lh, lw), (ih, iw), (sh, sw) = layer_hw, img_hw, step_hw
    cy, cx = np.meshgrid((np.arange(lh) + offset) * sh, (np.arange(lw) + offset) * sw, indexing="ij")
    wh = np.asarray(sizes, np.float64)                      # (K, 2)
    cx, cy = cx[..., None], cy[..., None]                    # (H, W, 1)
    half_w, half_h = wh[:, 0] / 2.0, wh[:, 1] / 2.0
    boxes = np.stack([(cx - half_w) / iw, (cy - half_h) / ih, (cx + half_w) / iw, (cy + half_h) / ih], axis=-1)
    if clip:
        boxes = np.clip(boxes, 0.0, 1.0)
    var = np.asarray(variances if variances else [0.1], np.float64)
    var = np.broadcast_to(var if var.size == 4 else var[:1], (boxes.size // 4, 4))
    return np.stack([boxes.reshape(-1), var.reshape(-1)])[None].astype(np.float32)


@CONVERTERS.register("PriorBox")
def prior_box(ctx: CaffeContext, layer: CaffeLayer) -> list[str]:
    """The priors depend only on shapes: emitted as a Constant node named after the layer."""
    p = layer.msg.prior_box_param
    fmap = ctx.shape(ctx.input(layer, 0))
    if not p.min_size:
        raise ModelLoadError(f"layer '{layer.name}' (PriorBox): prior_box_param needs at least one min_size")
    if p.max_size and len(p.max_size) != len(p.min_size):
        raise ModelLoadError(f"layer '{layer.name}' (PriorBox): {len(p.max_size)} max_size for "
                             f"{len(p.min_size)} min_size; give one per min_size")
    if len(p.variance) not in (0, 1, 4):
        raise ModelLoadError(f"layer '{layer.name}' (PriorBox): variance needs 1 or 4 values, has {len(p.variance)}")
    if p.HasField("img_h") or p.HasField("img_w"):
        img = (float(p.img_h), float(p.img_w))
    elif p.HasField("img_size"):
        img = (float(p.img_size),) * 2
    else:
        image = ctx.shape(ctx.input(layer, 1))
        img = (float(image[2]), float(image[3]))
    if p.HasField("step_h") or p.HasField("step_w"):
        step = (p.step_h, p.step_w)
    elif p.HasField("step"):
        step = (p.step, p.step)
    else:
        step = (0.0, 0.0)
    if 0 in step:
        step = (img[0] / fmap[2], img[1] / fmap[3])
    sizes = prior_sizes(list(p.min_size), list(p.max_size), list(p.aspect_ratio), p.flip)
    value = prior_boxes((fmap[2], fmap[3]), img, step, sizes, p.offset, p.clip, list(p.variance))
    tensor = numpy_helper.from_array(value, f"{layer.name}/value")
    return [ctx.b.node("Constant", [], layer.name, outputs=ctx.out_name(layer), value=tensor)]


def _decode(ctx: CaffeContext, layer: CaffeLayer, loc: str, prior: str, num_priors: int) -> str:
    """Decoded corner boxes ``[N, L, P, 4]`` from ``loc`` ``[N, L, P, 4]`` and the priors."""
    p = layer.msg.detection_output_param
    b, name = ctx.b, layer.name
    pri = b.node("Reshape", [prior, b.ints(f"{name}/prior_shape", [-1, num_priors, 4])], f"{name}/prior")
    split = b.node("Split", [pri, b.ints(f"{name}/prior_split", [1, 1])], f"{name}/prior_split", n_outputs=2, axis=0)
    boxes, var = (b.node("Squeeze", [t, b.ints(f"{name}/axis0", [0])], f"{name}/{w}") for t, w in
                  zip(split, ("prior_boxes", "variances")))
    if not p.variance_encoded_in_target:
        loc = b.node("Mul", [loc, var], f"{name}/loc_var")
    if p.code_type == _CORNER:
        return b.node("Add", [boxes, loc], f"{name}/decoded")
    lo, hi = b.node("Split", [boxes, b.ints(f"{name}/halves", [2, 2])], f"{name}/prior_lohi", n_outputs=2, axis=-1)
    size = b.node("Sub", [hi, lo], f"{name}/prior_size")
    if p.code_type == _CORNER_SIZE:
        size4 = b.node("Concat", [size, size], f"{name}/prior_size4", axis=-1)
        return b.node("Add", [boxes, b.node("Mul", [loc, size4], f"{name}/loc_size")], f"{name}/decoded")
    if p.code_type != _CENTER_SIZE:
        raise ModelLoadError(f"layer '{name}' (DetectionOutput): unknown code_type {p.code_type}")
    half = b.const(f"{name}/half", np.float32(0.5))
    center = b.node("Mul", [b.node("Add", [lo, hi], f"{name}/prior_sum"), half], f"{name}/prior_center")
    loc_c, loc_s = b.node("Split", [loc, b.ints(f"{name}/halves2", [2, 2])], f"{name}/loc_cs", n_outputs=2, axis=-1)
    c = b.node("Add", [b.node("Mul", [loc_c, size], f"{name}/offset"), center], f"{name}/center")
    s = b.node("Mul", [b.node("Exp", [loc_s], f"{name}/exp"), size], f"{name}/size")
    half_s = b.node("Mul", [s, half], f"{name}/half_size")
    return b.node("Concat", [b.node("Sub", [c, half_s], f"{name}/min"), b.node("Add", [c, half_s], f"{name}/max")],
                  f"{name}/decoded", axis=-1)


def _scores_and_boxes(ctx: CaffeContext, layer: CaffeLayer, boxes: str, conf: str, n: int, num_priors: int,
                      classes: list[int]) -> tuple[str, str, int]:
    """Per-class candidates: scores ``[N*C', K]`` and boxes ``[N*C', K, 4]`` after Caffe's pre-NMS ``top_k``."""
    p = layer.msg.detection_output_param
    b, name = ctx.b, layer.name
    c_all, c_kept = p.num_classes, len(classes)
    conf = b.node("Reshape", [conf, b.ints(f"{name}/conf_shape", [n, num_priors, c_all])], f"{name}/conf")
    conf = b.node("Transpose", [conf], f"{name}/conf_t", perm=[0, 2, 1])
    keep = b.ints(f"{name}/classes", classes)
    scores = b.node("Gather", [conf, keep], f"{name}/class_scores", axis=1)          # [N, C', P]
    if p.share_location:
        boxes = b.node("Expand", [boxes, b.ints(f"{name}/box_shape", [n, c_kept, num_priors, 4])], f"{name}/boxes")
    else:
        boxes = b.node("Gather", [boxes, keep], f"{name}/class_boxes", axis=1)        # [N, C', P, 4]
    top_k = p.nms_param.top_k if p.nms_param.HasField("top_k") and p.nms_param.top_k >= 0 else num_priors
    k = min(top_k, num_priors)
    if k < num_priors:
        scores, index = b.node("TopK", [scores, b.ints(f"{name}/top_k", [k])], f"{name}/top_k", n_outputs=2, axis=-1)
        index = b.node("Unsqueeze", [index, b.ints(f"{name}/axis_last", [-1])], f"{name}/top_k_index")
        index = b.node("Expand", [index, b.ints(f"{name}/index_shape", [n, c_kept, k, 4])], f"{name}/top_k_index4")
        boxes = b.node("GatherElements", [boxes, index], f"{name}/top_k_boxes", axis=2)
    scores = b.node("Reshape", [scores, b.ints(f"{name}/flat_scores", [n * c_kept, k])], f"{name}/scores")
    boxes = b.node("Reshape", [boxes, b.ints(f"{name}/flat_boxes", [n * c_kept, k, 4])], f"{name}/boxes_flat")
    return scores, boxes, k


def _rows(ctx: CaffeContext, layer: CaffeLayer, scores: str, boxes: str, k: int, classes: list[int]) -> tuple[str, str]:
    """NMS, then one row ``(image, label, score, box)`` per kept box; also returns the scores."""
    p = layer.msg.detection_output_param
    b, name = ctx.b, layer.name
    nms_inputs = [boxes, b.node("Unsqueeze", [scores, b.ints(f"{name}/axis1", [1])], f"{name}/nms_scores"),
                  b.ints(f"{name}/max_boxes", [k]), b.const(f"{name}/iou", [p.nms_param.nms_threshold])]
    if p.HasField("confidence_threshold"):
        nms_inputs.append(b.const(f"{name}/score_threshold", [p.confidence_threshold]))
    selected = b.node("NonMaxSuppression", nms_inputs, f"{name}/nms")                # [M, 3]: batch, 0, box
    cols = b.node("Split", [selected, b.ints(f"{name}/sel_split", [1, 1, 1])], f"{name}/sel", n_outputs=3, axis=1)
    batch = b.node("Squeeze", [cols[0], b.ints(f"{name}/axis1b", [1])], f"{name}/sel_batch")
    box_index = b.node("Squeeze", [cols[2], b.ints(f"{name}/axis1c", [1])], f"{name}/sel_box")
    flat = b.node("Add", [b.node("Mul", [batch, b.ints(f"{name}/k", [k])], f"{name}/sel_base"), box_index],
                  f"{name}/sel_flat")
    score = b.node("Gather", [b.node("Reshape", [scores, b.ints(f"{name}/all", [-1])], f"{name}/scores_1d"), flat],
                   f"{name}/sel_scores")
    box = b.node("Gather", [b.node("Reshape", [boxes, b.ints(f"{name}/all4", [-1, 4])], f"{name}/boxes_2d"), flat],
                 f"{name}/sel_boxes")
    count = b.ints(f"{name}/num_classes", [len(classes)])
    image = b.node("Cast", [b.node("Div", [batch, count], f"{name}/sel_image")], f"{name}/image_f", to=1)
    label = b.node("Gather", [b.const(f"{name}/labels", np.asarray(classes, np.float32)),
                              b.node("Mod", [batch, count], f"{name}/sel_class")], f"{name}/label")
    axis1 = b.ints(f"{name}/col", [1])
    columns = [b.node("Unsqueeze", [t, axis1], f"{name}/{w}_col") for t, w in
               ((image, "image"), (label, "label"), (score, "score"))]
    return b.node("Concat", columns + [box], f"{name}/rows", axis=1), score


def _keep_top_k(ctx: CaffeContext, layer: CaffeLayer, rows: str, score: str) -> str:
    """The ``keep_top_k`` best rows by score, left in (label, descending score) order as Caffe writes them."""
    b, name = ctx.b, layer.name
    found = b.node("Shape", [rows], f"{name}/found", start=0, end=1)
    kk = b.node("Min", [found, b.ints(f"{name}/keep_top_k", [layer.msg.detection_output_param.keep_top_k])],
                f"{name}/kept")
    _, best = b.node("TopK", [score, kk], f"{name}/best", n_outputs=2, axis=0)
    ordered, _ = b.node("TopK", [best, kk], f"{name}/best_sorted", n_outputs=2, axis=0, largest=0)
    return b.node("Gather", [rows, ordered], f"{name}/best_rows", axis=0)


def _with_empty_rows(ctx: CaffeContext, layer: CaffeLayer, rows: str, n: int) -> str:
    """Caffe writes one ``[image, -1, -1, -1, -1, -1, -1]`` row per image when nothing is detected."""
    b, name = ctx.b, layer.name
    fake = np.full((n, 7), -1.0, np.float32)
    fake[:, 0] = np.arange(n)
    both = b.node("Concat", [rows, b.const(f"{name}/no_detection", fake)], f"{name}/rows_or_empty", axis=0)
    found = b.node("Shape", [rows], f"{name}/num_rows", start=0, end=1)
    empty = b.node("Equal", [found, b.ints(f"{name}/zero", [0])], f"{name}/is_empty")
    end = b.node("Where", [empty, b.ints(f"{name}/n", [n]), found], f"{name}/end")
    return b.node("Slice", [both, b.ints(f"{name}/start", [0]), end, b.ints(f"{name}/axis0s", [0])], f"{name}/slice")


@CONVERTERS.register("DetectionOutput")
def detection_output(ctx: CaffeContext, layer: CaffeLayer) -> list[str]:
    """SSD detection output: decode ``loc`` against the priors, per-class ``top_k`` + NMS, ``keep_top_k``.

    Bottoms: ``loc`` ``[N, P*L*4]`` (``L`` = 1 with ``share_location``, else ``num_classes``),
    ``conf`` ``[N, P*num_classes]`` (already softmaxed), ``prior`` ``[1, 2, P*4]``. Candidates of a
    class are its ``top_k`` best scores above ``confidence_threshold``; greedy NMS keeps a box when
    its IoU with every kept box is at most ``nms_threshold``. Differences from Caffe: batch 1 only
    when ``keep_top_k`` is set, ``eta`` must be 1, and an inverted decoded box (``xmax < xmin``,
    possible with CORNER coding) is measured by its corners rather than as an empty box.
    """
    p = layer.msg.detection_output_param
    b, name = ctx.b, layer.name
    loc, conf, prior = ctx.input(layer, 0), ctx.input(layer, 1), ctx.input(layer, 2)
    n = ctx.shape(loc)[0]
    num_priors = int(np.prod(ctx.shape(prior))) // 8
    if not p.HasField("num_classes") or p.num_classes < 1:
        raise ModelLoadError(f"layer '{name}' (DetectionOutput): detection_output_param needs num_classes")
    if p.nms_param.eta != 1.0:
        raise ModelLoadError(f"layer '{name}' (DetectionOutput): adaptive NMS (eta={p.nms_param.eta}) is not "
                             "supported; use eta: 1")
    if p.keep_top_k >= 0 and n != 1:
        raise ModelLoadError(f"layer '{name}' (DetectionOutput): keep_top_k is supported for batch 1 only "
                             f"(the input batch is {n})")
    loc_classes = 1 if p.share_location else p.num_classes
    for what, tensor, per_prior in (("loc", loc, 4 * loc_classes), ("conf", conf, p.num_classes)):
        size = int(np.prod(ctx.shape(tensor)[1:]))
        if size != num_priors * per_prior:
            raise ModelLoadError(f"layer '{name}' (DetectionOutput): bottom '{what}' has {size} values per image, "
                                 f"{num_priors} priors need {num_priors * per_prior}")
    loc = b.node("Reshape", [loc, b.ints(f"{name}/loc_shape", [n, num_priors, loc_classes, 4])], f"{name}/loc")
    loc = b.node("Transpose", [loc], f"{name}/loc_t", perm=[0, 2, 1, 3])
    boxes = _decode(ctx, layer, loc, prior, num_priors)
    classes = [c for c in range(p.num_classes) if c != p.background_label_id]
    scores, boxes, k = _scores_and_boxes(ctx, layer, boxes, conf, n, num_priors, classes)
    rows, score = _rows(ctx, layer, scores, boxes, k, classes)
    if p.keep_top_k >= 0:
        rows = _keep_top_k(ctx, layer, rows, score)
    rows = _with_empty_rows(ctx, layer, rows, n)
    return [b.node("Reshape", [rows, b.ints(f"{name}/out_shape", [1, 1, -1, 7])], name, outputs=ctx.out_name(layer))]
