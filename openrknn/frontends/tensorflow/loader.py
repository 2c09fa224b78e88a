"""``load_tensorflow``: a frozen GraphDef ``.pb`` cut at named nodes, converted to ONNX.

The file is parsed with the schema of :mod:`.schema` (no TensorFlow needed). Only the nodes
between the given inputs and outputs are converted: the ``inputs`` become graph inputs of the
``input_size_list`` shapes (whatever op they were, so a graph can be cut after its
pre-processing), and the conversion walks back from the ``outputs``.

Example:
    >>> src = load_tensorflow("mobilenet_v1.pb", ["input"], [[1, 224, 224, 3]],  # doctest: +SKIP
    ...                       ["MobilenetV1/Predictions/Reshape_1"])
    >>> src.input_layouts
    {'input': 'NHWC'}
"""
from __future__ import annotations

import difflib
import os
from typing import Any, Sequence

import numpy as np
from google.protobuf import text_format

from openrknn import log
from openrknn.errors import ModelLoadError, UnsupportedOpError
from openrknn.frontends import SourceModel, require_file
from openrknn.frontends.onnx_builder import GraphBuilder
from openrknn.frontends.tensorflow.context import Context, Value, tensor_key
from openrknn.frontends.tensorflow.ops import CONVERTERS
from openrknn.frontends.tensorflow.schema import GraphDef, numpy_to_tensor, tensor_to_numpy
from openrknn.graph.rknn_model import LAYOUT_NCHW, LAYOUT_NHWC, LAYOUT_UNDEFINED

_VARIABLE_OPS = frozenset({"VariableV2", "Variable", "VarHandleOp", "ReadVariableOp", "Assign", "AssignVariableOp"})


def load_tensorflow(tf_pb: str, inputs: Sequence[str], input_size_list: Sequence[Sequence[int]],
                    outputs: Sequence[str], input_is_nchw: bool = False, predef_file: str | None = None,
                    mean_values: Any = None, std_values: Any = None) -> SourceModel:
    """Load a frozen TensorFlow graph as documented for ``RKNN.load_tensorflow``.

    Args:
        tf_pb: path of the frozen GraphDef (binary ``.pb``; text ``.pbtxt`` is accepted too).
        inputs: names of the nodes that become model inputs (``'name'`` or ``'name:0'``).
        input_size_list: one shape per input, NHWC with batch (``[[1, 224, 224, 3]]``); a shape
            without batch (Toolkit 1 style ``[[224, 224, 3]]``) gets batch 1 prepended when the
            placeholder declares one more axis.
        outputs: names of the nodes whose first output (or ``'name:k'``) become model outputs.
        input_is_nchw: the inputs are already NCHW (the graph's own layout is kept as is).
        predef_file: ``.npz`` of constant values for placeholders that drive control logic
            (keys are node names with ``/`` written as ``#``).
        mean_values: Toolkit 1 input mean of a quantized graph, checked and reported; float graphs
            take their normalisation from ``config(mean_values=...)``.
        std_values: Toolkit 1 input scale of a quantized graph (same treatment as ``mean_values``).

    Returns:
        The ONNX model; inputs and outputs keep TensorFlow's names, shapes and layouts.

    Raises:
        ModelLoadError: unreadable file, unknown input/output name, non-constant weights.
        UnsupportedOpError: a node between the inputs and outputs has an op without converter.

    Example:
        >>> src = load_tensorflow("ssd_mobilenet_v1.pb",  # doctest: +SKIP
        ...                       inputs=["FeatureExtractor/MobilenetV1/MobilenetV1/Conv2d_0/BatchNorm/batchnorm/mul_1"],
        ...                       input_size_list=[[1, 300, 300, 3]], outputs=["concat", "concat_1"])
        >>> [o.name for o in src.model.graph.output]
        ['concat', 'concat_1']
    """
    source = os.path.basename(str(tf_pb))
    graph = _read_graph(tf_pb)
    nodes = _index(graph, source)
    if predef_file:
        _apply_predef(nodes, predef_file, source)
    in_names = _node_names(inputs, nodes, "inputs", source)
    out_refs = [_output_ref(o, nodes, source) for o in _as_list(outputs, "outputs", source)]
    shapes = _input_shapes(in_names, input_size_list, nodes, source)
    _check_mean_std(mean_values, std_values, len(in_names), source)
    order = _cut(nodes, in_names, [tensor_key(r) for r in out_refs], source)
    builder = GraphBuilder(source)
    ctx = Context(builder, source)
    ctx.uses = _count_uses(order, out_refs)
    for name, shape in zip(in_names, shapes):
        ctx.values[f"{name}:0"] = Value(builder.add_input(name, shape), len(shape))
    for node in order:
        if node.name not in in_names:
            _convert(ctx, node)
    out_names = [_emit_output(ctx, ref) for ref in out_refs]
    model = builder.finish(out_names, graph_name=os.path.splitext(source)[0], producer="openrknn-tensorflow")
    layouts = {name: (LAYOUT_NCHW if input_is_nchw else LAYOUT_NHWC) if len(shape) == 4 else LAYOUT_UNDEFINED
               for name, shape in zip(in_names, shapes)}
    log.info(f"load_tensorflow: {len(order)} TensorFlow nodes -> {len(model.graph.node)} ONNX nodes")
    return SourceModel(model=model, framework="tensorflow", input_layouts=layouts)


# ------------------------------------------------------------------------------------ reading
def _read_graph(path: str) -> Any:
    require_file(path, "model file", "load_tensorflow needs a frozen GraphDef .pb file")
    with open(path, "rb") as f:
        data = f.read()
    graph = GraphDef()
    try:
        graph.ParseFromString(data)
        error: Exception | None = None
    except Exception as e:  # protobuf raises DecodeError (and RuntimeWarning-like errors) on bad bytes
        error = e
    if error is not None or not _plausible(graph):
        graph = _parse_text(data, path, error)
    if not _plausible(graph):
        raise ModelLoadError(f"{path}: not a frozen TensorFlow GraphDef (no nodes could be read); "
                             "freeze the model into a .pb file first")
    return graph


def _plausible(graph: Any) -> bool:
    return bool(graph.node) and all(n.op and n.name for n in graph.node)


def _parse_text(data: bytes, path: str, binary_error: Exception | None) -> Any:
    """Read a text-format GraphDef (``.pbtxt``); a failure reports the binary parse error."""
    try:
        return text_format.Parse(data.decode("utf-8"), GraphDef())
    except Exception as e:  # text_format raises ParseError, UnicodeDecodeError...
        reason = binary_error or e
        raise ModelLoadError(f"{path}: not a frozen TensorFlow GraphDef (the file is truncated or of another "
                             f"format: {reason})") from reason


def _index(graph: Any, source: str) -> dict[str, Any]:
    nodes: dict[str, Any] = {}
    for node in graph.node:
        if node.name in nodes:
            raise ModelLoadError(f"{source}: node name '{node.name}' appears twice in the GraphDef")
        nodes[node.name] = node
    return nodes


def _apply_predef(nodes: dict[str, Any], predef_file: str, source: str) -> None:
    """Replace each placeholder named in the ``.npz`` by a Const of its value."""
    try:
        with np.load(predef_file) as data:
            values = {key.replace("#", "/"): np.asarray(data[key]) for key in data.files}
    except (OSError, ValueError) as e:
        raise ModelLoadError(f"{source}: predef_file '{predef_file}' is not a readable .npz file: {e}") from e
    for name, value in values.items():
        if name not in nodes:
            log.warning(f"load_tensorflow: predef_file names '{name}', which is not a node of {source}; ignored")
            continue
        node = nodes[name]
        del node.input[:]
        node.op = "Const"
        node.attr.clear()
        node.attr["value"].tensor.CopyFrom(numpy_to_tensor(value))


# ------------------------------------------------------------------------------------ arguments
def _as_list(names: Any, what: str, source: str) -> list[str]:
    if isinstance(names, str):
        names = [names]
    if not names:
        raise ModelLoadError(f"{source}: load_tensorflow needs {what}, a list of node names")
    return [str(n) for n in names]


def _unknown(name: str, what: str, nodes: dict[str, Any], source: str) -> ModelLoadError:
    close = difflib.get_close_matches(name, list(nodes), n=3)
    hint = f"; similar names: {', '.join(close)}" if close else ""
    return ModelLoadError(f"{source}: the '{name}' in {what} is not a node of the graph{hint}")


def _node_names(names: Any, nodes: dict[str, Any], what: str, source: str) -> list[str]:
    result = []
    for name in _as_list(names, what, source):
        base = tensor_key(name).rpartition(":")[0]
        if base not in nodes:
            raise _unknown(name, what, nodes, source)
        if not tensor_key(name).endswith(":0"):
            raise ModelLoadError(f"{source}: input '{name}' must be a node's first output")
        result.append(base)
    return result


def _output_ref(name: str, nodes: dict[str, Any], source: str) -> str:
    base = tensor_key(name).rpartition(":")[0]
    if base not in nodes:
        raise _unknown(name, "outputs", nodes, source)
    return name if name != f"{base}:0" else base


def _input_shapes(names: list[str], sizes: Any, nodes: dict[str, Any], source: str) -> list[list[int]]:
    if sizes is None or len(sizes) != len(names):
        count = 0 if sizes is None else len(sizes)
        raise ModelLoadError(f"{source}: input_size_list has {count} shape(s) for {len(names)} input(s) {names}")
    shapes = []
    for name, size in zip(names, sizes):
        shape = [int(d) for d in size]
        if any(d <= 0 for d in shape):
            raise ModelLoadError(f"{source}: input_size_list entry {shape} of input '{name}' must be positive")
        declared = _declared_rank(nodes[name])
        if declared is not None and declared == len(shape) + 1:
            log.info(f"load_tensorflow: input '{name}': size {shape} has no batch axis, using {[1] + shape}")
            shape = [1] + shape
        shapes.append(shape)
    return shapes


def _declared_rank(node: Any) -> int | None:
    if "shape" not in node.attr or node.attr["shape"].WhichOneof("value") != "shape":
        return None
    shape = node.attr["shape"].shape
    return None if shape.unknown_rank or not shape.dim else len(shape.dim)


def _per_input(values: Any, count: int) -> list[np.ndarray]:
    """Toolkit 1 forms: a number, one number per input, or one list per input."""
    if np.ndim(values) == 0:
        return [np.asarray([values], np.float64)] * count
    if all(np.ndim(v) == 0 for v in values):
        flat = np.asarray(values, np.float64)
        return [flat[i:i + 1] for i in range(count)] if flat.size == count else [flat]
    return [np.asarray(v, np.float64).reshape(-1) for v in values]


def _check_mean_std(mean_values: Any, std_values: Any, count: int, source: str) -> None:
    """Validate Toolkit 1's mean/std (one value per input); they only describe quantized graphs."""
    for what, values in (("mean_values", mean_values), ("std_values", std_values)):
        if values is None:
            continue
        try:
            rows = _per_input(values, count)
        except (TypeError, ValueError) as e:
            raise ModelLoadError(f"{source}: {what}={values!r} is not a list of numbers") from e
        if len(rows) != count:
            raise ModelLoadError(f"{source}: {what} has {len(rows)} entries for {count} input(s)")
        if any(r.size == 0 or np.ptp(r) != 0 for r in rows):
            raise ModelLoadError(f"{source}: {what}={values!r}: Toolkit 1 takes one value per input (the same "
                                 "for all channels); use config(mean_values=..., std_values=...) for per-channel values")
        if what == "std_values" and any(r[0] == 0 for r in rows):
            raise ModelLoadError(f"{source}: std_values={values!r} contains 0 (division by zero)")
    if mean_values is not None or std_values is not None:
        log.warning("load_tensorflow: mean_values/std_values describe the inputs of quantized TensorFlow graphs; "
                    f"{source} is converted as a float graph, so they are not applied. Set the input "
                    "normalisation with config(mean_values=..., std_values=...)")


# ------------------------------------------------------------------------------------ graph walk
def _cut(nodes: dict[str, Any], inputs: list[str], outputs: list[str], source: str) -> list[Any]:
    """Nodes needed for ``outputs`` when the graph is fed at ``inputs``, in topological order."""
    stop, order, state = set(inputs), [], {}
    stack = [(key.rpartition(":")[0], False) for key in reversed(outputs)]
    while stack:
        name, done = stack.pop()
        if done:
            state[name] = 2
            order.append(nodes[name])
            continue
        if state.get(name) == 2:
            continue
        if state.get(name) == 1:
            raise ModelLoadError(f"{source}: the graph has a cycle through node '{name}' (control flow is not "
                                 "supported; cut the graph with inputs/outputs around it)")
        state[name] = 1
        stack.append((name, True))
        if name in stop:
            continue
        for ref in reversed(nodes[name].input):
            if ref.startswith("^"):
                continue
            producer = tensor_key(ref).rpartition(":")[0]
            if producer not in nodes:
                raise ModelLoadError(f"{source}: node '{name}' reads '{ref}', which is not in the graph")
            if state.get(producer) != 2:
                stack.append((producer, False))
    unused = [n for n in inputs if state.get(n) != 2]
    if unused:
        log.warning(f"load_tensorflow: inputs {unused} are not used by outputs {[o.rpartition(':')[0] for o in outputs]}")
    return order


def _count_uses(order: list[Any], out_refs: list[str]) -> dict[str, int]:
    uses: dict[str, int] = {}
    for node in order:
        for ref in node.input:
            if not ref.startswith("^"):
                uses[tensor_key(ref)] = uses.get(tensor_key(ref), 0) + 1
    for ref in out_refs:
        uses[tensor_key(ref)] = uses.get(tensor_key(ref), 0) + 1
    return uses


def _convert(ctx: Context, node: Any) -> None:
    if node.op == "Const":
        try:
            value = tensor_to_numpy(node.attr["value"].tensor)
        except ValueError as e:
            raise ModelLoadError(f"{ctx.source}: Const node '{node.name}': {e}") from e
        ctx.values[f"{node.name}:0"] = Value(node.name, value.ndim, const=value)
        return
    if node.op == "PlaceholderWithDefault":
        ctx.values[f"{node.name}:0"] = ctx.input(node, 0)
        return
    if node.op == "Placeholder":
        raise ModelLoadError(f"{ctx.source}: Placeholder '{node.name}' feeds the outputs but is not listed in inputs; "
                             "add it to inputs (with its size) or give its value in predef_file")
    if node.op in _VARIABLE_OPS:
        raise UnsupportedOpError(node.op, node.name, "TensorFlow",
                                 "the graph is not frozen: turn variables into constants (freeze the graph) first")
    converter = CONVERTERS.get(node.op, node.name)
    result = converter(ctx, node)
    for index, value in enumerate(result if isinstance(result, list) else [result]):
        ctx.values[f"{node.name}:{index}"] = value


def _emit_output(ctx: Context, ref: str) -> str:
    """ONNX name of output ``ref`` in TensorFlow layout, named like the TensorFlow node."""
    key = tensor_key(ref)
    if key not in ctx.values:
        raise ModelLoadError(f"{ctx.source}: output '{ref}' does not exist (its node has fewer outputs)")
    value = ctx.values[key]
    name = ref if ":" in ref else key.rpartition(":")[0]
    if value.const is not None:
        return ctx.b.node("Identity", [ctx.as_tf(value, name)], name=f"{name}/const", outputs=[name])
    onnx_name = ctx.as_tf(value, name, name=name)
    if onnx_name != name:
        return ctx.b.node("Identity", [onnx_name], name=f"{name}/output", outputs=[name])
    return onnx_name
