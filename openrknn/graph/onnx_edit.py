"""``rknn.utils.onnx_edit`` (seed 002 §5.13): redefine ONNX input/output dimensions with einsum-like formulas.

A formula ``'a,b,c,d->1,ad,b,c'`` names each original dimension with letters (a multi-letter group is
split, with sizes from an assignment list such as ``[a=2,k=8]``; one unknown letter per group is
inferred), and writes the new shape as groups of those letters (merged in that order) and ``1``s.
The data moves as: reshape to the letters → transpose to their new order → reshape to the new groups.

An edited input receives the new shape and the graph gets the inverse Reshape/Transpose/Reshape in
front of the old consumers; an edited output gets the forward transform after its producer. With
``dataset``, every ``.npy`` listed for an edited input is transformed too and a new dataset file
(``dataset_for_<export name>.txt`` plus a folder ``dataset_for_<export name>/`` of ``.npy`` files, as
rknn-toolkit2 names them) is written beside ``export_path``.
"""
from __future__ import annotations

import math
import os
import re
from dataclasses import dataclass

import numpy as np
import onnx
from onnx import helper, numpy_helper

from openrknn import log
from openrknn.errors import ConfigError, ModelLoadError, RKNNError
from openrknn.frontends import require_file

_FORMULA = re.compile(r"^([a-z1,]+)(?:\[([a-z0-9=,\s]*)\])?->([a-z1,]+)$")


@dataclass
class Transform:
    """A parsed formula applied to one tensor of known shape."""

    formula: str
    letters: list[str]          # letter order on the left (the split shape)
    sizes: dict[str, int]
    target_groups: list[str]    # right-hand groups ('1' or letters)

    @property
    def split_shape(self) -> list[int]:
        return [self.sizes[c] for c in self.letters]

    @property
    def target_letters(self) -> list[str]:
        return [c for group in self.target_groups for c in group if c != "1"]

    @property
    def perm(self) -> list[int]:
        return [self.letters.index(c) for c in self.target_letters]

    @property
    def new_shape(self) -> list[int]:
        return [math.prod(self.sizes[c] for c in group if c != "1") for group in self.target_groups]

    def forward(self, array: np.ndarray) -> np.ndarray:
        return array.reshape(self.split_shape).transpose(self.perm).reshape(self.new_shape)


def parse_transform(formula: str, shape: list[int], where: str) -> Transform:
    """Parse ``formula`` for a tensor of ``shape``; ``ConfigError`` names the rule that is broken."""
    text = formula.replace(" ", "")
    match = _FORMULA.match(text)
    if not match:
        raise ConfigError(f"onnx_edit: {where}: formula '{formula}' must look like 'a,b,c->a,1,bc' (letters a-z, "
                          "',', '1', optional [x=2,...] after the left side)")
    left, assignments, right = match.group(1).split(","), match.group(2), match.group(3).split(",")
    if len(left) != len(shape):
        raise ConfigError(f"onnx_edit: {where}: the left side of '{formula}' has {len(left)} dimension(s) but the "
                          f"tensor has shape {shape}")
    given = _assignments(assignments or "", formula, where)
    sizes: dict[str, int] = {}
    letters: list[str] = []
    for group, dim in zip(left, shape):
        if dim <= 0:
            raise ConfigError(f"onnx_edit: {where}: dimension {dim} of {shape} is not fixed; give the model a static "
                              "shape first")
        if group == "1" or (set(group) == {"1"}):
            if dim != 1:
                raise ConfigError(f"onnx_edit: {where}: '1' in '{formula}' stands for a dimension of {dim}")
            continue
        if "1" in group or len(set(group)) != len(group):
            raise ConfigError(f"onnx_edit: {where}: group '{group}' of '{formula}' mixes '1' with letters or repeats one")
        for c in group:
            if c in sizes or c in letters:
                raise ConfigError(f"onnx_edit: {where}: letter '{c}' appears twice on the left of '{formula}'")
        _solve_group(group, dim, given, sizes, formula, where)
        letters += list(group)
    unused = set(given) - set(letters)
    if unused:
        raise ConfigError(f"onnx_edit: {where}: '{formula}' assigns {sorted(unused)}, which the left side does not use")
    target_letters = [c for group in right for c in group if c != "1"]
    if sorted(target_letters) != sorted(letters):
        missing, extra = set(letters) - set(target_letters), set(target_letters) - set(letters)
        raise ConfigError(f"onnx_edit: {where}: every letter of the left side of '{formula}' must appear once on the "
                          f"right (missing {sorted(missing)}, unknown or repeated {sorted(extra) or 'none'})")
    return Transform(formula, letters, sizes, right)


def _assignments(text: str, formula: str, where: str) -> dict[str, int]:
    given = {}
    for item in filter(None, (t.strip() for t in text.split(","))):
        name, _, value = item.partition("=")
        if not re.fullmatch(r"[a-z]", name) or not value.isdigit() or int(value) < 1:
            raise ConfigError(f"onnx_edit: {where}: assignment '{item}' in '{formula}' must be letter=positive integer")
        given[name] = int(value)
    return given


def _solve_group(group: str, dim: int, given: dict[str, int], sizes: dict[str, int], formula: str, where: str) -> None:
    unknown = [c for c in group if c not in given]
    if len(group) == 1:
        if group in given and given[group] != dim:
            raise ConfigError(f"onnx_edit: {where}: '{formula}' assigns {group}={given[group]} but the dimension is {dim}")
        sizes[group] = dim
        return
    if len(unknown) > 1:
        raise ConfigError(f"onnx_edit: {where}: group '{group}' of '{formula}' needs sizes for all letters but one "
                          f"(e.g. [{unknown[0]}=2])")
    known = math.prod(given[c] for c in group if c in given)
    if unknown:
        if dim % known:
            raise ConfigError(f"onnx_edit: {where}: '{group}' = {dim} cannot be split with "
                              f"{', '.join(f'{c}={given[c]}' for c in group if c in given)} "
                              f"({unknown[0]} would be {dim / known:g}, not an integer)")
        given = dict(given, **{unknown[0]: dim // known})
    elif known != dim:
        raise ConfigError(f"onnx_edit: {where}: '{group}' multiplies to {known} but the dimension is {dim}")
    for c in group:
        sizes[c] = given[c]


def _static_shape(value: onnx.ValueInfoProto) -> list[int]:
    return [d.dim_value if d.HasField("dim_value") else -1 for d in value.type.tensor_type.shape.dim]


def _set_shape(value: onnx.ValueInfoProto, shape: list[int]) -> None:
    dims = value.type.tensor_type.shape
    dims.ClearField("dim")
    for size in shape:
        dims.dim.add().dim_value = size


def _reshape_chain(model: onnx.ModelProto, source: str, target: str, shapes: list[list[int]], perm: list[int],
                   tag: str) -> list[onnx.NodeProto]:
    """Reshape(shapes[0]) → Transpose(perm) → Reshape(shapes[1]) from ``source`` to ``target``."""
    first, second = f"{tag}_split_shape", f"{tag}_new_shape"
    model.graph.initializer.extend([numpy_helper.from_array(np.array(shapes[0], np.int64), first),
                                    numpy_helper.from_array(np.array(shapes[1], np.int64), second)])
    return [helper.make_node("Reshape", [source, first], [f"{tag}_split"], name=f"{tag}_reshape_split"),
            helper.make_node("Transpose", [f"{tag}_split"], [f"{tag}_moved"], name=f"{tag}_transpose", perm=perm),
            helper.make_node("Reshape", [f"{tag}_moved", second], [target], name=f"{tag}_reshape")]


def _rename_readers(graph: onnx.GraphProto, old: str, new: str) -> None:
    for node in graph.node:
        for i, name in enumerate(node.input):
            if name == old:
                node.input[i] = new


def edit_model(model: onnx.ModelProto, inputs_transform: dict[str, str],
               outputs_transform: dict[str, str]) -> dict[str, Transform]:
    """Apply the transforms to ``model`` in place; returns the input transforms (for the dataset)."""
    graph = model.graph
    by_input = {v.name: v for v in graph.input}
    by_output = {v.name: v for v in graph.output}
    done: dict[str, Transform] = {}
    for name, formula in inputs_transform.items():
        if name not in by_input:
            raise ConfigError(f"onnx_edit: inputs_transform names '{name}', not an input of the model "
                              f"(inputs: {list(by_input)})")
        shape = _static_shape(by_input[name])
        t = parse_transform(formula, shape, f"input '{name}'")
        inner = f"{name}__onnx_edit_in"
        _rename_readers(graph, name, inner)
        # the new input y = forward(x); the graph rebuilds x: reshape y to its letters, undo the permutation
        inverse = list(np.argsort(t.perm))
        nodes = _reshape_chain(model, name, inner, [[t.sizes[c] for c in t.target_letters], shape], inverse,
                               f"{name}__onnx_edit_in")
        for i, node in enumerate(nodes):
            graph.node.insert(i, node)
        _set_shape(by_input[name], t.new_shape)
        done[name] = t
    for name, formula in outputs_transform.items():
        if name not in by_output:
            raise ConfigError(f"onnx_edit: outputs_transform names '{name}', not an output of the model "
                              f"(outputs: {list(by_output)})")
        shape = _static_shape(by_output[name]) or _inferred_shape(model, name)
        t = parse_transform(formula, shape, f"output '{name}'")
        inner = f"{name}__onnx_edit_out"
        for node in graph.node:
            for i, out in enumerate(node.output):
                if out == name:
                    node.output[i] = inner
        _rename_readers(graph, name, inner)
        graph.node.extend(_reshape_chain(model, inner, name, [t.split_shape, t.new_shape], t.perm,
                                         f"{name}__onnx_edit_out"))
        _set_shape(by_output[name], t.new_shape)
    return done


def _inferred_shape(model: onnx.ModelProto, name: str) -> list[int]:
    inferred = onnx.shape_inference.infer_shapes(model)
    for value in list(inferred.graph.value_info) + list(inferred.graph.output):
        if value.name == name:
            return _static_shape(value)
    return []


def transform_dataset(dataset: str, model: onnx.ModelProto, transforms: dict[str, Transform],
                      export_path: str) -> str:
    """Write ``dataset_for_<export stem>.txt`` and ``dataset_for_<export stem>/`` (the transformed .npy files,
    each under its own name) beside ``export_path`` — the names rknn-toolkit2 uses, which its example
    scripts then pass to ``build``."""
    if not os.path.isfile(dataset):
        raise ConfigError(f"onnx_edit: dataset file '{dataset}' does not exist")
    inits = {i.name for i in model.graph.initializer}
    names = [v.name for v in model.graph.input if v.name not in inits]
    base = os.path.dirname(os.path.abspath(dataset))
    export_dir, export_name = os.path.split(os.path.abspath(export_path))
    stem = "dataset_for_" + os.path.splitext(export_name)[0]
    folder = os.path.join(export_dir, stem)
    os.makedirs(folder, exist_ok=True)
    used: set[str] = set()
    lines = []
    with open(dataset, encoding="utf-8") as handle:
        entries = [ln.split() for ln in handle.read().splitlines() if ln.strip() and not ln.strip().startswith("#")]
    for row, files in enumerate(entries):
        if len(files) != len(names):
            raise ConfigError(f"onnx_edit: dataset line {row + 1} lists {len(files)} file(s) for {len(names)} input(s)")
        out = []
        for name, file in zip(names, files):
            path = file if os.path.isabs(file) else os.path.join(base, file)
            if name not in transforms:
                out.append(path)
                continue
            if not path.lower().endswith(".npy"):
                raise ConfigError(f"onnx_edit: dataset line {row + 1}: '{file}' for edited input '{name}' is not a "
                                  ".npy file; onnx_edit transforms .npy data only (save the input as .npy first)")
            array = np.load(path, allow_pickle=False)
            t = transforms[name]
            original = math.prod(t.split_shape)
            if array.size != original:
                raise ConfigError(f"onnx_edit: dataset line {row + 1}: '{file}' has {array.size} values, input "
                                  f"'{name}' has {original}")
            file_name = os.path.basename(path)
            if file_name in used:   # the same name on two lines: keep both
                file_name = f"{row}_{len(out)}_{file_name}"
            used.add(file_name)
            np.save(os.path.join(folder, file_name), t.forward(array))
            out.append(f"./{stem}/{file_name}")   # relative to the new list, as the vendor writes it
        lines.append(" ".join(out))
    new_dataset = os.path.join(export_dir, stem + ".txt")
    with open(new_dataset, "w", encoding="utf-8") as handle:
        handle.write("\n".join(lines) + "\n")
    log.info(f"New dataset has been saved to '{new_dataset}'.")
    log.info(f"New dataset folder is '{folder}'.")
    return new_dataset


def onnx_edit(model: str, export_path: str, inputs_transform: dict[str, str] | None = None,
              outputs_transform: dict[str, str] | None = None, dataset: str | None = None) -> int:
    """Change the dimensions of ONNX inputs/outputs (seed 002 §5.13); returns 0, or -1 with an ``E`` line."""
    try:
        require_file(model, "onnx_edit: model file")
        if not export_path:
            raise ConfigError("onnx_edit: export_path is required (where to write the edited model)")
        try:
            graph = onnx.load(model)
        except Exception as e:
            raise ModelLoadError(f"onnx_edit: '{model}' is not a valid ONNX model ({type(e).__name__})") from e
        transforms = edit_model(graph, dict(inputs_transform or {}), dict(outputs_transform or {}))
        onnx.checker.check_model(graph)
        onnx.save(graph, export_path)
        log.info(f"onnx_edit: wrote {export_path}")
        if dataset:
            transform_dataset(dataset, graph, transforms, export_path)
    except (RKNNError, onnx.checker.ValidationError, OSError) as e:
        log.error(str(e) if str(e).startswith("onnx_edit") else f"onnx_edit: {e}")
        return -1
    return 0
