"""Check an export against the int8 simulator, layer by layer: each layer is exported alone and run
by LiteRT on the simulator's int8 inputs of that layer, so differences do not accumulate
(docs/deployment.md states the expected agreement)."""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import onnx

from openrknn.export.tflite.convert import Exporter
from openrknn.export.tflite.flatbuffer import serialize
from openrknn.export.tflite.target import without_pool_stages
from openrknn.graph import npu_layers
from openrknn.graph.rknn_model import RKNNModel
from openrknn.sim.fp16 import FLOAT16_SUFFIX
from openrknn.sim.quantized import INT_SUFFIX, lower_quantized, tensor_of_form
from openrknn.sim.session import make_session


# A float layer's outputs agree when |LiteRT − simulator| ≤ FLOAT_TOLERANCE · max(|simulator|) beyond
# the float16 rounding of each value (half a step: 2^-11 relative) and an absolute floor of 2^-23:
# LiteRT computes in float32, the simulator stores float16 (or float32 when simulating the export),
# float32 kernels differ in the last bits, and onnxruntime's logistic/exp approximations are good to
# about 1e-7 absolute (a sigmoid map that is ~1e-7 everywhere differs by 10 % relative).
FLOAT_TOLERANCE = 2e-3
FLOAT_FLOOR = 2.0 ** -23


@dataclass
class LayerCheck:
    layer: str
    ops: str
    max_steps: int          # largest |LiteRT − simulator| over the layer's int8 outputs
    differing: float        # fraction of values that differ
    max_float_error: float = 0.0   # float outputs: largest |LiteRT − simulator| / max |simulator|

    @property
    def float_ok(self) -> bool:
        return self.max_float_error <= FLOAT_TOLERANCE


def simulator_integers(model: RKNNModel, feeds: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """Every stored int8 tensor of one simulator run (``feeds``: graph inputs in the model layout)."""
    return simulator_tensors(model, feeds)[0]


def simulator_tensors(model: RKNNModel, feeds: dict[str, np.ndarray]
                      ) -> tuple[dict[str, np.ndarray], dict[str, np.ndarray]]:
    """(int8 tensors, stored float tensors) of one simulator run: the float ones are what float
    layers store (float16 values, as float32) and the graph's float inputs."""
    lowered = lower_quantized(without_pool_stages(model))   # the file's MEAN, not the NPU's cascade
    produced = {o for n in lowered.graph.node for o in n.output}
    declared = {o.name for o in lowered.graph.output}
    names = {o for o in produced if o.endswith((INT_SUFFIX, FLOAT16_SUFFIX))}
    for name in sorted(names - declared):
        lowered.graph.output.append(onnx.ValueInfoProto(name=name))
    session = make_session(lowered)
    wanted = [o.name for o in session.get_outputs() if o.name in names or o.name in declared]
    values = dict(zip(wanted, session.run(wanted, feeds)))
    integers, floats = {}, dict(feeds)
    for name, value in values.items():
        tensor = tensor_of_form(name, INT_SUFFIX)
        if tensor is not None:
            record = model.quant_params.get(tensor)
            if record is None or record["dtype"] != "int8":
                continue
            integers[tensor] = (value.astype(np.int16) - 128).astype(np.int8) if value.dtype == np.uint8 else value
        else:
            floats[tensor_of_form(name, FLOAT16_SUFFIX) or name] = np.asarray(value, np.float32)
    return integers, floats


def run_litert(data: bytes, inputs: list[np.ndarray], kernels: str = "xnnpack") -> list[np.ndarray]:
    """LiteRT on ``data``: ``kernels`` 'xnnpack' (LiteRT's default CPU path), 'builtin' (its own
    optimized kernels) or 'reference'."""
    from ai_edge_litert.interpreter import Interpreter, OpResolverType
    resolver = {"xnnpack": OpResolverType.AUTO, "builtin": OpResolverType.BUILTIN_WITHOUT_DEFAULT_DELEGATES,
                "reference": OpResolverType.BUILTIN_REF}[kernels]
    interpreter = Interpreter(model_content=data, experimental_op_resolver_type=resolver)
    interpreter.allocate_tensors()
    for detail, value in zip(interpreter.get_input_details(), inputs):
        interpreter.set_tensor(detail["index"], np.array(value, order="C"))   # (ascontiguousarray makes scalars 1-D)
    interpreter.invoke()
    return [interpreter.get_tensor(d["index"]) for d in interpreter.get_output_details()]


def compare_layers(model: RKNNModel, feeds: dict[str, np.ndarray], kernels: str = "xnnpack") -> list[LayerCheck]:
    """Per-layer agreement of LiteRT with the simulator for every layer: int8 outputs in steps, float
    outputs (layers the model runs in float) relative to the simulator's largest value."""
    ints, floats = simulator_tensors(model, feeds)
    probe = Exporter(model, float_io=False)
    checks = []
    for group in npu_layers.layer_groups(model.graph.graph):
        made = {o for n in group.nodes for o in n.output}
        inputs = list(dict.fromkeys(i for n in group.nodes for i in n.input
                                    if i and i not in made and i not in probe.inits))
        outputs = [o for o in group.outputs if o in ints or o in floats]
        known = all((i in ints and i in probe.params) or (i in floats and i not in probe.params) for i in inputs)
        if not inputs or not outputs or not known:
            continue
        exporter = Exporter(model, float_io=False)
        graph = exporter.run(inputs=inputs, outputs=outputs)
        layouts = [exporter.storage(i) for i in inputs]
        values = [ints[i] if i in probe.params else floats[i] for i in inputs]
        got = run_litert(serialize(graph), [np.transpose(v, p) for v, p in zip(values, layouts)], kernels)
        worst, differing, total, float_error = 0, 0, 0, 0.0
        for name, value in zip(outputs, got):
            if name in probe.params:
                expected = np.transpose(ints[name], exporter.storage(name)).astype(np.int32)
                delta = np.abs(value.astype(np.int32) - expected)
                worst = max(worst, int(delta.max(initial=0)))
                differing += int((delta > 0).sum())
                total += delta.size
            else:
                float_error = max(float_error, _float_error(value, np.transpose(floats[name], exporter.storage(name))))
        ops = " ".join(dict.fromkeys(op.op for op in graph.operators))
        checks.append(LayerCheck(group.name, ops, worst, differing / max(total, 1), float_error))
    return checks


def _float_error(got: np.ndarray, expected: np.ndarray) -> float:
    """Largest |got − expected| beyond the float16 rounding of ``expected``, relative to max |expected|."""
    got, expected = np.asarray(got, np.float64), np.asarray(expected, np.float64)
    if got.shape != expected.shape:
        return float("inf")
    half_step = np.maximum(np.abs(expected) * 2.0 ** -11, FLOAT_FLOOR)
    with np.errstate(invalid="ignore"):   # equal infinities agree; any other non-finite difference does not
        delta = np.where(got == expected, 0.0, np.abs(got - expected))
        excess = np.nan_to_num(np.maximum(delta - half_step, 0.0), nan=np.inf)
    finite = np.abs(expected[np.isfinite(expected)])
    reach = max(float(finite.max(initial=0.0)), 1e-30)
    return float(excess.max(initial=0.0)) / reach
