"""``load_pytorch``: a TorchScript ``.pt`` file (traced or scripted) to ONNX.

The file is read with ``torch.jit.load`` and exported with torch's TorchScript-based ONNX
exporter (``torch.onnx.export(..., dynamo=False)``): it takes a ``ScriptModule`` directly and
needs no extra package, whereas the newer ``torch.export`` path cannot trace a ScriptModule and
needs ``onnxscript``. Shapes are fixed by ``input_size_list``, so shape arithmetic such as
``x.view(x.size(0), -1)`` is folded into constants.

Right after the export, the ONNX graph is run with onnxruntime on a random input and compared
with the TorchScript module itself; a mismatch is logged as a warning naming the output.

Example:
    >>> src = load_pytorch("resnet18.pt", [[1, 3, 224, 224]])  # doctest: +SKIP
    >>> src.input_layouts
    {'x': 'NCHW'}
"""
from __future__ import annotations

import inspect
import io
import re
import warnings
from typing import Any, Sequence

import numpy as np
import onnx
import onnxruntime as ort

from openrknn import log
from openrknn.errors import ModelLoadError, UnsupportedOpError
from openrknn.frontends import FRONTEND_OPSET, SourceModel, require_file
from openrknn.graph.custom_ops import CUSTOM_DOMAIN, CustomOpRegistry, apply_custom_ops
from openrknn.graph.rknn_model import LAYOUT_NCHW, LAYOUT_UNDEFINED

_INSTALL_HINT = "load_pytorch needs PyTorch: pip install 'openrknn[torch]'"
_CHECK_COSINE = 0.9999
_BUILTIN_NAMESPACES = frozenset({"aten", "prim", "quantized", "onnx", "torchvision", "_caffe2", "profiler"})


def load_pytorch(model: str, input_size_list: Sequence[Sequence[int]],
                 custom_ops: CustomOpRegistry | None = None) -> SourceModel:
    """Load a TorchScript model as documented for ``RKNN.load_pytorch``.

    Args:
        model: path of a ``.pt`` file written by ``torch.jit.save`` (or ``ScriptModule.save``)
            after ``torch.jit.trace`` or ``torch.jit.script``. A ``torch.save`` state dict holds
            no network structure and is refused.
        input_size_list: one full NCHW shape (with batch) per ``forward`` argument,
            e.g. ``[[1, 3, 224, 224]]``.
        custom_ops: registered custom ops: a TorchScript op outside ``aten``/``prim`` (e.g. one
            made with ``torch.library.custom_op("mylib::my_op", ...)``) whose name ``my_op`` is a
            registered ``op_type`` becomes an ONNX node of that type in the custom-op domain.

    Returns:
        The ONNX model (opset ``FRONTEND_OPSET``) with float32 inputs named after the
        ``forward`` arguments and outputs ``output0``, ``output1``, ...

    Raises:
        ModelLoadError: PyTorch is missing, the file is not TorchScript, or the export fails.
        UnsupportedOpError: an operator has no ONNX export in this torch version.

    Example:
        >>> src = load_pytorch("mobilenet_v2.pt", [[1, 3, 224, 224]])  # doctest: +SKIP
        >>> [i.name for i in src.model.graph.input]
        ['x']
    """
    torch = _import_torch()
    shapes = _check_sizes(model, input_size_list)
    module = _load_script_module(torch, model)
    generator = torch.Generator().manual_seed(0)
    example = tuple(torch.randn(*shape, generator=generator) for shape in shapes)
    with torch.no_grad():
        try:
            reference = _flatten(module(*example))
        except Exception as e:  # TorchScript raises RuntimeError and others for bad shapes
            raise ModelLoadError(f"{model}: running the TorchScript model on inputs of shapes {shapes} failed "
                                 f"(check input_size_list): {_last_line(e)}") from e
    in_names = _input_names(module, len(shapes))
    out_names = [f"output{i}" for i in range(len(reference))]
    custom = _register_custom_symbolics(torch, module, custom_ops)
    try:
        proto = _export(torch, module, example, in_names, out_names, model, bool(custom))
    finally:
        for kind in custom:
            torch.onnx.unregister_custom_op_symbolic(kind, FRONTEND_OPSET)
    _type_outputs(proto, reference)
    if custom:
        proto = apply_custom_ops(proto, custom_ops)
        log.info(f"load_pytorch: custom ops {sorted(custom)} mapped to registered custom ops")
    else:
        proto = _check(proto, model)
        _compare(proto, example, reference, out_names, model)
    layouts = {name: LAYOUT_NCHW if len(shape) == 4 else LAYOUT_UNDEFINED for name, shape in zip(in_names, shapes)}
    return SourceModel(model=proto, framework="pytorch", input_layouts=layouts)


def _last_line(error: Exception) -> str:
    """The final line of a (TorchScript) error message, where the actual reason is."""
    lines = [ln.strip() for ln in str(error).splitlines() if ln.strip()]
    return lines[-1] if lines else type(error).__name__


def _import_torch() -> Any:
    try:
        import torch
    except ImportError as e:
        raise ModelLoadError(_INSTALL_HINT) from e
    return torch


def _check_sizes(model: str, sizes: Sequence[Sequence[int]] | None) -> list[list[int]]:
    if not sizes:
        raise ModelLoadError(f"{model}: load_pytorch needs input_size_list, one shape per input, "
                             "e.g. [[1, 3, 224, 224]]")
    shapes = []
    for k, size in enumerate(sizes):
        try:
            shape = [int(d) for d in size]
        except (TypeError, ValueError) as e:
            raise ModelLoadError(f"{model}: input_size_list[{k}] = {size!r} is not a list of integers") from e
        if not shape or any(d <= 0 for d in shape):
            raise ModelLoadError(f"{model}: input_size_list[{k}] = {shape} must list positive dimensions")
        shapes.append(shape)
    return shapes


def _load_script_module(torch: Any, path: str) -> Any:
    require_file(path, "model file")
    try:
        module = torch.jit.load(str(path), map_location="cpu")
    except Exception as e:  # torch raises RuntimeError/ValueError for foreign or truncated files
        unknown = re.search(r"Unknown builtin op: ([\w:.]+)", str(e))
        if unknown:
            raise ModelLoadError(
                f"{path}: the model calls '{unknown.group(1)}', which is not defined in this Python process: "
                "define or import that op (torch.library) before load_pytorch and register a custom op class "
                "for it with reg_custom_op") from e
        raise ModelLoadError(
            f"{path}: not a TorchScript model ({type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}). "
            "load_pytorch needs the network structure: save it with "
            "torch.jit.trace(model, example).save('model.pt'); a torch.save() state dict holds only weights") from e
    module.eval()
    return module


def _input_names(module: Any, count: int) -> list[str]:
    """``forward`` argument names from the TorchScript schema, else ``input0``, ``input1``..."""
    try:
        args = [a.name for a in module.forward.schema.arguments][1:]
    except (AttributeError, RuntimeError):
        args = []
    valid = [re.sub(r"\W", "_", a) for a in args]
    if len(valid) == count and len(set(valid)) == count and all(valid):
        return valid
    return [f"input{i}" for i in range(count)]


def _flatten(outputs: Any) -> list[Any]:
    if isinstance(outputs, (list, tuple)):
        return [t for item in outputs for t in _flatten(item)]
    if isinstance(outputs, dict):
        return [t for item in outputs.values() for t in _flatten(item)]
    return [outputs]


def _export(torch: Any, module: Any, example: tuple[Any, ...], in_names: list[str], out_names: list[str],
            path: str, custom: bool) -> onnx.ModelProto:
    buffer = io.BytesIO()
    kwargs: dict[str, Any] = dict(input_names=in_names, output_names=out_names, opset_version=FRONTEND_OPSET,
                                  do_constant_folding=True, custom_opsets={CUSTOM_DOMAIN: 1} if custom else None)
    if "dynamo" in inspect.signature(torch.onnx.export).parameters:
        kwargs["dynamo"] = False
    try:
        with warnings.catch_warnings(), torch.no_grad():
            warnings.simplefilter("ignore")
            torch.onnx.export(module, example, buffer, **kwargs)
    except Exception as e:  # torch.onnx raises several error types
        first = str(e).strip().splitlines()[0] if str(e).strip() else ""
        if type(e).__name__ == "UnsupportedOperatorError":
            found = re.search(r"([A-Za-z_]\w*::\w+(?:\.\w+)?)", first)
            op = found.group(1) if found else "?"
            hint = (f"torch {torch.__version__} cannot export it to ONNX opset {FRONTEND_OPSET}; rewrite that part "
                    "of the model" if op.split("::")[0] in _BUILTIN_NAMESPACES else
                    f"register a custom op class with op_type '{op.split('::')[-1]}' (reg_custom_op) before load_pytorch")
            raise UnsupportedOpError(op, framework="PyTorch", hint=hint) from e
        raise ModelLoadError(f"{path}: torch.onnx.export failed: {type(e).__name__}: {first}") from e
    try:
        return onnx.load_from_string(buffer.getvalue())
    except Exception as e:  # onnx raises DecodeError
        raise ModelLoadError(f"{path}: torch exported an unreadable ONNX graph: {e}") from e


def _type_outputs(proto: onnx.ModelProto, reference: list[Any]) -> None:
    """Set graph output dtypes/shapes to what TorchScript produced.

    With a custom op the exporter cannot infer types after it and may guess them wrong, so the
    outputs are taken from the reference run and the exporter's intermediate guesses are dropped.
    """
    for output, tensor in zip(proto.graph.output, reference):
        if hasattr(tensor, "detach"):
            array = tensor.detach().numpy()
            output.CopyFrom(onnx.helper.make_tensor_value_info(
                output.name, onnx.helper.np_dtype_to_tensor_dtype(array.dtype), list(array.shape)))
    del proto.graph.value_info[:]


def _check(proto: onnx.ModelProto, path: str) -> onnx.ModelProto:
    try:
        proto = onnx.shape_inference.infer_shapes(proto, strict_mode=True)
        onnx.checker.check_model(proto)
    except Exception as e:  # onnx raises ValidationError / InferenceError
        raise ModelLoadError(f"{path}: the ONNX graph exported by torch is invalid: {e}") from e
    return proto


def _register_custom_symbolics(torch: Any, module: Any, custom_ops: CustomOpRegistry | None) -> list[str]:
    """Map each non-builtin TorchScript op to its registered custom op; refuse unregistered ones.

    Checking before the export also keeps torch's exporter from dumping its IR on failure.
    """
    kinds = {node.kind() for node in module.inlined_graph.nodes()}
    registered = []
    for kind in sorted(kinds):
        namespace, _, name = kind.partition("::")
        if namespace in _BUILTIN_NAMESPACES:
            continue
        if custom_ops is None or name not in custom_ops:
            raise UnsupportedOpError(kind, framework="PyTorch",
                                     hint=f"register a custom op class with op_type '{name}' (reg_custom_op) "
                                          "before load_pytorch")
        torch.onnx.register_custom_op_symbolic(kind, _custom_symbolic(name), FRONTEND_OPSET)
        registered.append(kind)
    return registered


def _custom_symbolic(op_type: str) -> Any:
    """An exporter symbolic emitting ``op_type`` in the custom domain.

    A loaded TorchScript graph carries no dtypes, and without one the exporter types the
    constants around the custom node wrongly (int64), so untyped outputs are declared float32.
    """
    import torch

    def symbolic(g: Any, *args: Any) -> Any:
        original = list(g.original_node.outputs())
        result = g.op(f"{CUSTOM_DOMAIN}::{op_type}", *args, outputs=len(original))
        for value, source in zip(result if len(original) > 1 else [result], original):
            known = source.type()
            has_dtype = isinstance(known, torch._C.TensorType) and known.dtype() is not None
            value.setType(known if has_dtype else torch._C.TensorType.get().with_dtype(torch.float32))
        return result
    return symbolic


def _compare(proto: onnx.ModelProto, example: tuple[Any, ...], reference: list[Any], out_names: list[str],
             path: str) -> None:
    """Run the exported graph once and warn about outputs that differ from TorchScript's."""
    try:
        session = ort.InferenceSession(proto.SerializeToString(), providers=["CPUExecutionProvider"])
        feeds = {i.name: t.numpy() for i, t in zip(session.get_inputs(), example)}
        got = session.run(None, feeds)
    except Exception as e:  # onnxruntime raises its own exception classes
        log.warning(f"load_pytorch: could not run the exported graph of {path} to check it: {e}")
        return
    for name, ours, ref in zip(out_names, got, reference):
        ref = ref.detach().numpy() if hasattr(ref, "detach") else np.asarray(ref)
        a, b = np.asarray(ours, np.float64).ravel(), np.asarray(ref, np.float64).ravel()
        if a.shape != b.shape:
            log.warning(f"load_pytorch: output '{name}' has {a.size} values in ONNX but {b.size} in TorchScript")
            continue
        cos = float(a @ b / (np.linalg.norm(a) * np.linalg.norm(b) + 1e-30)) if a.size else 1.0
        if cos < _CHECK_COSINE and not np.allclose(a, b, rtol=1e-4, atol=1e-5):
            log.warning(f"load_pytorch: output '{name}' of the exported graph differs from TorchScript "
                        f"(cosine {cos:.6f}); the export of {path} may be wrong")
        else:
            log.debug(f"load_pytorch: output '{name}' matches TorchScript (cosine {cos:.6f})")
