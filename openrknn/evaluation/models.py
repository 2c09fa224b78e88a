"""The models an evaluation runs, in a form any worker process (or Ray node) can rebuild.

A built or loaded ``.rknn`` model travels as its ``.rknn`` bytes and runs on the simulator (the
RKNNLite path); the float reference travels as the float32 ONNX graph the build kept
(``RKNNModel.golden``). Each has a digest of what decides its outputs, which keys the result cache.
"""
from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass

import numpy as np
import onnx

from openrknn.errors import RuntimeStateError
from openrknn.graph.rknn_model import LAYOUT_NCHW, RKNNModel, TensorSpec
from openrknn.graph.runner import GraphRunner
from openrknn.model_file import load_model_bytes, to_container
from openrknn.model_file.container import encode
from openrknn.sim.session import Simulator

KIND_RKNN, KIND_FLOAT = "rknn", "float"


@dataclass(frozen=True)
class EvalModel:
    """One model column of the evaluation."""

    name: str
    kind: str
    payload: bytes
    digest: str
    inputs: tuple[TensorSpec, ...]

    @classmethod
    def from_rknn(cls, name: str, model: RKNNModel) -> "EvalModel":
        """A built or loaded model, run on the simulator."""
        container = to_container(model)
        header = {k: v for k, v in container.header.items() if k not in ("created", "metadata", "toolkit_version")}
        digest = hashlib.sha256(json.dumps(header, sort_keys=True, default=str).encode())
        for section in sorted(container.sections):
            digest.update(container.sections[section])
        return cls(name, KIND_RKNN, encode(container), digest.hexdigest(), tuple(_batch1(model)))

    @classmethod
    def float_reference(cls, model: RKNNModel) -> "EvalModel":
        """The float32 model the build started from (needs a model built from its source)."""
        if model.golden is None:
            raise RuntimeStateError("the float reference needs the source model: a model read with load_rknn does "
                                    "not carry it; give the source model and its config")
        payload = model.golden.SerializeToString(deterministic=True)
        return cls("float", KIND_FLOAT, payload, hashlib.sha256(payload).hexdigest(), tuple(_batch1(model)))


def _batch1(model: RKNNModel) -> list[TensorSpec]:
    batch = max(1, model.rknn_batch_size)
    return [TensorSpec(s.name, [s.shape[0] // batch] + list(s.shape[1:]), s.dtype, s.layout) for s in model.inputs]


class ModelRunner:
    """A ready session for one :class:`EvalModel`, one onnxruntime thread (workers run side by side)."""

    def __init__(self, model: EvalModel) -> None:
        self.inputs = list(model.inputs)
        if model.kind == KIND_RKNN:
            simulator = Simulator(load_model_bytes(model.payload, model.name), threads=1)
            formats = ["nchw" if s.layout == LAYOUT_NCHW else "nhwc" for s in self.inputs]
            self._run = lambda arrays: simulator.run(arrays, data_format=formats)
        else:
            runner = GraphRunner(onnx.load_from_string(model.payload), threads=1)
            names = [s.name for s in self.inputs]

            def run(arrays: list[np.ndarray]) -> list[np.ndarray]:
                feeds = {n: np.ascontiguousarray(a, dtype=runner.input_types.get(n, np.float32))
                         for n, a in zip(names, arrays)}
                return [np.asarray(o, dtype=np.float32) for o in runner.run(feeds)]
            self._run = run

    def run(self, arrays: list[np.ndarray]) -> list[np.ndarray]:
        """Outputs (float32) for one sample given in the graph layout."""
        return self._run(arrays)
