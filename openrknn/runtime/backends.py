"""Backends ``RKNNLite.init_runtime`` can run a model on, fastest first (docs/deployment.md):

* ``teflon``: the TFLite export embedded in the ``.rknn`` on LiteRT with Mesa's Teflon delegate
  (``libteflon.so``: the mainline ``rocket`` NPU driver), found through ``OPENRKNN_TEFLON`` or the
  standard library folders;
* ``litert``: the same TFLite export on LiteRT's CPU kernels (XNNPACK);
* ``onnxruntime``: the openrknn simulator (every model, integer results exact).
"""
from __future__ import annotations

import glob
import importlib.util
import os
from typing import Any, Sequence

import numpy as np

from openrknn.errors import InferenceInputError, RuntimeStateError
from openrknn.graph.rknn_model import LAYOUT_NCHW, RKNNModel
from openrknn.sim.session import Simulator, _formats, _to_layout

BACKENDS = ("teflon", "litert", "onnxruntime")
TEFLON_ENV = "OPENRKNN_TEFLON"
TEFLON_PATHS = ("/usr/lib/*/libteflon.so", "/usr/lib/libteflon.so", "/usr/lib64/libteflon.so",
                "/usr/local/lib/libteflon.so", "/usr/local/lib/*/libteflon.so")


def find_teflon() -> str | None:
    """Path of Mesa's Teflon delegate: ``$OPENRKNN_TEFLON``, else the first standard path that exists."""
    forced = os.environ.get(TEFLON_ENV)
    if forced:
        return forced if os.path.isfile(forced) else None
    for pattern in TEFLON_PATHS:
        found = sorted(glob.glob(pattern))
        if found:
            return found[0]
    return None


def litert_present() -> bool:
    return importlib.util.find_spec("ai_edge_litert") is not None


def choose(requested: str | None, model: RKNNModel, tflite: bytes | None) -> tuple[str, str]:
    """(backend, why) for this model on this machine; a forced backend that cannot run is an error."""
    if requested is not None and requested not in BACKENDS:
        raise RuntimeStateError(f"backend '{requested}' is unknown; use one of {', '.join(BACKENDS)}")
    problems = {"teflon": _teflon_problem(model, tflite), "litert": _litert_problem(model, tflite), "onnxruntime": None}
    if requested is not None:
        if problems[requested]:
            raise RuntimeStateError(f"backend '{requested}' cannot run: {problems[requested]}")
        return requested, "forced by RKNNLite(backend=...)"
    for name in BACKENDS:
        if problems[name] is None:
            skipped = list(dict.fromkeys(problems[n] for n in BACKENDS[:BACKENDS.index(name)]))
            return name, "; ".join(skipped) if skipped else "the fastest present"
    raise RuntimeStateError("no backend can run this model")   # onnxruntime always can: not reached


def _litert_problem(model: RKNNModel, tflite: bytes | None) -> str | None:
    if tflite is None:
        return "the .rknn has no embedded TFLite export (export_rknn(path, embed_tflite=True))"
    if model.rknn_batch_size != 1:
        return "the embedded TFLite runs batch 1 only"
    if not litert_present():
        return "LiteRT is not installed (pip install 'openrknn[litert]')"
    return None


def _teflon_problem(model: RKNNModel, tflite: bytes | None) -> str | None:
    problem = _litert_problem(model, tflite)
    if problem:
        return problem
    if find_teflon() is None:
        forced = os.environ.get(TEFLON_ENV)
        return (f"{TEFLON_ENV}='{forced}' does not exist" if forced else
                f"no libteflon.so (Mesa ≥ 25.3) in {', '.join(TEFLON_PATHS)}; set {TEFLON_ENV}")
    return None


class LiteRTRuntime:
    """The embedded TFLite on LiteRT, with an external delegate (Teflon) or on the CPU."""

    def __init__(self, model: RKNNModel, tflite: bytes, delegate_path: str | None = None) -> None:
        from ai_edge_litert.interpreter import Interpreter, load_delegate
        self.model = model
        delegates = []
        if delegate_path:
            try:
                delegates.append(load_delegate(delegate_path))
            except (ValueError, OSError, RuntimeError) as e:
                raise RuntimeStateError(f"LiteRT could not load the delegate '{delegate_path}': {e}; check Mesa's "
                                        f"libteflon.so or unset {TEFLON_ENV}") from e
        try:
            self.interpreter = Interpreter(model_content=tflite, experimental_delegates=delegates)
            self.interpreter.allocate_tensors()
        except (ValueError, RuntimeError) as e:
            raise RuntimeStateError(f"LiteRT refused the embedded TFLite model: {e}") from e
        self.inputs = self.interpreter.get_input_details()
        self.outputs = self.interpreter.get_output_details()

    def run(self, inputs: Sequence[Any], data_format: Sequence[str] | str | None = None,
            inputs_pass_through: Sequence[int] | None = None) -> list[np.ndarray]:
        specs = self.model.inputs
        inputs = list(inputs) if isinstance(inputs, (list, tuple)) else [inputs]
        if len(inputs) != len(specs):
            raise InferenceInputError(f"the model has {len(specs)} input(s) but {len(inputs)} were given")
        if inputs_pass_through and any(inputs_pass_through):
            raise InferenceInputError("inputs_pass_through is not supported on the LiteRT backends; use "
                                      "RKNNLite(backend='onnxruntime')")
        for spec, value, fmt, detail in zip(specs, inputs, _formats(data_format, len(specs)), self.inputs):
            array = np.asarray(value, np.float32)
            if array.ndim == 3 and len(spec.shape) == 4:
                array = array[np.newaxis]
            if array.ndim == 4:
                array = _to_layout(array, fmt, spec.layout)
                if spec.layout == LAYOUT_NCHW:
                    array = array.transpose(0, 2, 3, 1)   # the export stores images NHWC
            if list(array.shape) != detail["shape"].tolist():
                raise InferenceInputError(f"input '{spec.name}' has shape {list(np.asarray(value).shape)}; the model "
                                          f"expects {detail['shape'].tolist()} (NHWC)")
            self.interpreter.set_tensor(detail["index"], np.ascontiguousarray(array.astype(detail["dtype"])))
        self.interpreter.invoke()
        return [np.asarray(self.interpreter.get_tensor(d["index"]), np.float32) for d in self.outputs]


def start(backend: str, model: RKNNModel, tflite: bytes | None, custom_ops: Any) -> Any:
    if backend == "onnxruntime":
        return Simulator(model, custom_ops)
    return LiteRTRuntime(model, tflite, find_teflon() if backend == "teflon" else None)
