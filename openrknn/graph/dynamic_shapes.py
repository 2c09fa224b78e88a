"""``config(dynamic_input=...)``: one model for a finite set of input shape sets (seed 002 §5.4).

Axes whose size differs between the sets become symbolic in the graph; the others stay fixed.
Quantization, eval_perf and eval_memory use the MaxShape set: the one whose input element counts
sum highest. Shape sets pair up by index across inputs (no cross combinations).
"""
from __future__ import annotations

import numpy as np
import onnx

from openrknn.errors import BuildError, ConfigError


def max_shape_index(sets: list[list[list[int]]]) -> int:
    """Index of the set with the largest total element count (first one on ties)."""
    totals = [sum(int(np.prod(shape)) for shape in shape_set) for shape_set in sets]
    return int(np.argmax(totals))


def make_dynamic(model: onnx.ModelProto, input_names: list[str], sets: list[list[list[int]]]) -> onnx.ModelProto:
    """Copy of ``model`` whose inputs are fixed where all sets agree and symbolic where they differ."""
    if any(len(shape_set) != len(input_names) for shape_set in sets):
        raise ConfigError(f"dynamic_input: every shape set must give {len(input_names)} shape(s), one per input "
                          f"{input_names}")
    out = onnx.ModelProto()
    out.CopyFrom(model)
    by_name = {v.name: v for v in out.graph.input}
    for index, name in enumerate(input_names):
        shapes = [shape_set[index] for shape_set in sets]
        ranks = {len(s) for s in shapes}
        dims = by_name[name].type.tensor_type.shape.dim
        if len(ranks) != 1 or (len(dims) and ranks != {len(dims)}):
            raise ConfigError(f"dynamic_input: input '{name}' has rank {len(dims)} but the sets give shapes {shapes}")
        _set_dims(by_name[name], name, shapes)
    del out.graph.value_info[:]
    return out


def _set_dims(value: onnx.ValueInfoProto, name: str, shapes: list[list[int]]) -> None:
    dims = value.type.tensor_type.shape.dim
    for axis in range(len(shapes[0])):
        sizes = {s[axis] for s in shapes}
        old = dims[axis]
        if old.HasField("dim_value") and old.dim_value > 0 and sizes != {old.dim_value} and len(sizes) == 1:
            raise ConfigError(f"dynamic_input: input '{name}' axis {axis} is fixed to {old.dim_value} in the model "
                              f"but the sets give {sorted(sizes)}")
        old.Clear()
        if len(sizes) == 1:
            old.dim_value = sizes.pop()
        else:
            old.dim_param = f"{name}_dim{axis}"


def fix_shapes(model: onnx.ModelProto, shapes: dict[str, list[int]]) -> onnx.ModelProto:
    """Static copy of ``model`` with the given input shapes (shape-inferred)."""
    out = onnx.ModelProto()
    out.CopyFrom(model)
    for value in out.graph.input:
        if value.name in shapes:
            dims = value.type.tensor_type.shape
            dims.ClearField("dim")
            for d in shapes[value.name]:
                dims.dim.add().dim_value = int(d)
    del out.graph.value_info[:]
    return onnx.shape_inference.infer_shapes(out)


def check_runs(model: onnx.ModelProto, input_names: list[str], sets: list[list[list[int]]], make_session) -> None:
    """Run the float graph once per shape set: a set the model cannot take is a build error."""
    session = make_session(model)
    types = {i.name: i.type for i in session.get_inputs()}
    for index, shape_set in enumerate(sets):
        feeds = {}
        for name, shape in zip(input_names, shape_set):
            dtype = np.float32 if types.get(name, "tensor(float)") == "tensor(float)" else np.int64
            feeds[name] = np.zeros(shape, dtype)
        try:
            session.run(None, feeds)
        except Exception as e:  # onnxruntime's own exception types
            raise BuildError(f"dynamic_input: shape set {index} {shape_set} does not run on this model "
                             f"(a constant shape inside the model blocks it?): {str(e).splitlines()[0]}") from e


def matching_set(sets: list[list[list[int]]], shapes: list[tuple[int, ...]]) -> int | None:
    """Index of the shape set equal to the given input shapes, if any."""
    for index, shape_set in enumerate(sets):
        if all(tuple(s) == tuple(g) for s, g in zip(shape_set, shapes)):
            return index
    return None
