"""Shape arithmetic of frozen graphs: Shape, StridedSlice, Pack and Cast.

Input sizes are fixed by ``input_size_list``, so ``Shape`` is a constant and the slicing and
packing around it (``tf.shape(x)[0]``, ``tf.stack([n, -1])``) fold in numpy. StridedSlice
on a run-time tensor becomes ONNX Slice (+ Squeeze for ``shrink_axis_mask``).
"""
from __future__ import annotations

from typing import Any

import numpy as np

from openrknn.errors import ModelLoadError
from openrknn.frontends.tensorflow.context import Context, Value, attr
from openrknn.frontends.tensorflow.ops import CONVERTERS
from openrknn.frontends.tensorflow.schema import NUMPY_DTYPES

_BIG = 2 ** 62


@CONVERTERS.register("Shape")
def shape(ctx: Context, node: Any) -> Value:
    """The static shape of the input, as an int32 (or ``out_type``) constant."""
    dtype = NUMPY_DTYPES.get(attr(node, "out_type", 3), np.int32)
    return Value(node.name, 1, const=np.asarray(ctx.tf_shape(ctx.input(node, 0)), dtype))


@CONVERTERS.register("Cast")
def cast(ctx: Context, node: Any) -> Value:
    """Cast of a constant (folded) or of a float tensor to float (the graph stays float32)."""
    x = ctx.input(node, 0)
    target = NUMPY_DTYPES.get(attr(node, "DstT", 1))
    if x.const is not None and target is not None:
        return Value(node.name, x.rank, const=x.const.astype(target))
    if target in (np.float32, np.float16, np.float64):
        return x
    raise ModelLoadError(f"{ctx.source}: node '{node.name}' (Cast) converts a run-time tensor to {target}; only "
                         "float casts of run-time tensors are supported")


@CONVERTERS.register("Pack")
def pack(ctx: Context, node: Any) -> Value:
    """Stack tensors along a new ``axis`` (folds for constants, else Unsqueeze + Concat)."""
    values = ctx.data_inputs(node)
    rank = values[0].rank + 1
    axis = int(attr(node, "axis", 0)) % rank
    if all(v.const is not None for v in values):
        return Value(node.name, rank, const=np.stack([v.const for v in values], axis=axis))
    axes = ctx.const_name(np.asarray([axis], np.int64), f"{node.name}/axes", dtype=np.int64)
    parts = [ctx.b.node("Unsqueeze", [ctx.as_tf(v, f"{node.name}/in{i}"), axes], name=f"{node.name}/unsqueeze{i}")
             for i, v in enumerate(values)]
    return ctx.emit("Concat", parts, node, rank, axis=axis)


def _index(node: Any, begin: np.ndarray, end: np.ndarray, strides: np.ndarray) -> tuple[Any, ...]:
    """The numpy index equal to a StridedSlice's begin/end/strides and masks."""
    masks = {k: int(attr(node, k, 0)) for k in ("begin_mask", "end_mask", "ellipsis_mask", "new_axis_mask",
                                                 "shrink_axis_mask")}
    index: list[Any] = []
    for i in range(len(begin)):
        if masks["ellipsis_mask"] >> i & 1:
            index.append(Ellipsis)
        elif masks["new_axis_mask"] >> i & 1:
            index.append(None)
        elif masks["shrink_axis_mask"] >> i & 1:
            index.append(int(begin[i]))
        else:
            index.append(slice(None if masks["begin_mask"] >> i & 1 else int(begin[i]),
                               None if masks["end_mask"] >> i & 1 else int(end[i]), int(strides[i])))
    return tuple(index)


@CONVERTERS.register("StridedSlice")
def strided_slice(ctx: Context, node: Any) -> Value:
    """numpy-style slicing; run-time tensors support plain slices and shrunk axes."""
    x = ctx.input(node, 0)
    begin, end, strides = (ctx.const_input(node, i, what).astype(np.int64).reshape(-1)
                           for i, what in ((1, "begin"), (2, "end"), (3, "strides")))
    index = _index(node, begin, end, strides)
    if x.const is not None:
        result = np.asarray(x.const[index])
        return Value(node.name, result.ndim, const=result)
    if any(item is Ellipsis or item is None for item in index):
        raise ModelLoadError(f"{ctx.source}: node '{node.name}' (StridedSlice): ellipsis/new-axis masks on a "
                             "run-time tensor are not supported")
    starts, ends, axes, steps, shrink = [], [], [], [], []
    for axis, item in enumerate(index):
        if isinstance(item, int):
            start, stop, step = item, item + 1 if item != -1 else _BIG, 1
            shrink.append(axis)
        elif item != slice(None, None, 1):
            step = item.step or 1
            start = item.start if item.start is not None else (0 if step > 0 else _BIG)
            stop = item.stop if item.stop is not None else (_BIG if step > 0 else -_BIG)
        else:
            continue
        starts.append(start)
        ends.append(stop)
        axes.append(axis)
        steps.append(step)
    name = ctx.as_tf(x, node.name)
    if axes:
        args = [ctx.const_name(np.asarray(v, np.int64), f"{node.name}/{k}", dtype=np.int64)
                for k, v in (("starts", starts), ("ends", ends), ("axes", axes), ("steps", steps))]
        name = ctx.b.node("Slice", [name, *args], name=f"{node.name}/slice" if shrink else node.name)
    if shrink:
        squeeze_axes = ctx.const_name(np.asarray(shrink, np.int64), f"{node.name}/shrink", dtype=np.int64)
        return ctx.emit("Squeeze", [name, squeeze_axes], node, x.rank - len(shrink))
    return Value(name, x.rank)
