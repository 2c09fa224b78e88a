"""Check an export against the int8 simulator, layer by layer: each layer is exported alone and run
by LiteRT on the simulator's int8 inputs of that layer, so differences do not accumulate
(docs/deployment.md states the expected agreement)."""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import onnx

from openrknn.export.tflite.convert import Exporter
from openrknn.export.tflite.flatbuffer import serialize
from openrknn.graph import npu_layers
from openrknn.graph.rknn_model import RKNNModel


@dataclass
class LayerCheck:
    layer: str
    ops: str
    max_steps: int          # largest |LiteRT − simulator| over the layer's int8 outputs
    differing: float        # fraction of values that differ


def simulator_integers(model: RKNNModel, feeds: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """Every stored int8 tensor of one simulator run (``feeds``: graph inputs in the model layout)."""
    from openrknn.sim.quantized import lower_quantized
    from openrknn.sim.session import make_session
    lowered = lower_quantized(model)
    names = {o for n in lowered.graph.node for o in n.output if o.endswith("__q")}
    for name in sorted(names):
        lowered.graph.output.append(onnx.ValueInfoProto(name=name))
    session = make_session(lowered)
    wanted = [o.name for o in session.get_outputs() if o.name in names]
    values = dict(zip(wanted, session.run(wanted, feeds)))
    result = {}
    for name, value in values.items():
        tensor = name[:-3]
        record = model.quant_params.get(tensor)
        if record is None or record["dtype"] != "int8":
            continue
        result[tensor] = (value.astype(np.int16) - 128).astype(np.int8) if value.dtype == np.uint8 else value
    return result


def run_litert(data: bytes, inputs: list[np.ndarray], kernels: str = "xnnpack") -> list[np.ndarray]:
    """LiteRT on ``data``: ``kernels`` 'xnnpack' (LiteRT's default CPU path), 'builtin' (its own
    optimized kernels) or 'reference'."""
    from ai_edge_litert.interpreter import Interpreter, OpResolverType
    resolver = {"xnnpack": OpResolverType.AUTO, "builtin": OpResolverType.BUILTIN_WITHOUT_DEFAULT_DELEGATES,
                "reference": OpResolverType.BUILTIN_REF}[kernels]
    interpreter = Interpreter(model_content=data, experimental_op_resolver_type=resolver)
    interpreter.allocate_tensors()
    for detail, value in zip(interpreter.get_input_details(), inputs):
        interpreter.set_tensor(detail["index"], np.ascontiguousarray(value))
    interpreter.invoke()
    return [interpreter.get_tensor(d["index"]) for d in interpreter.get_output_details()]


def compare_layers(model: RKNNModel, feeds: dict[str, np.ndarray], kernels: str = "xnnpack") -> list[LayerCheck]:
    """Per-layer agreement of LiteRT with the simulator for every layer with int8 inputs and outputs."""
    ints = simulator_integers(model, feeds)
    probe = Exporter(model, float_io=False)
    checks = []
    for group in npu_layers.layer_groups(model.graph.graph):
        made = {o for n in group.nodes for o in n.output}
        inputs = list(dict.fromkeys(i for n in group.nodes for i in n.input
                                    if i and i not in made and i not in probe.inits))
        outputs = [o for o in group.outputs if o in probe.params]
        if not inputs or not outputs or not all(i in ints for i in inputs + outputs):
            continue
        exporter = Exporter(model, float_io=False)
        graph = exporter.run(inputs=inputs, outputs=outputs)
        layouts = [exporter.storage(i) for i in inputs]
        got = run_litert(serialize(graph), [np.transpose(ints[i], p) for i, p in zip(inputs, layouts)], kernels)
        worst, differing, total = 0, 0, 0
        for name, value in zip(outputs, got):
            expected = np.transpose(ints[name], exporter.storage(name)).astype(np.int32)
            delta = np.abs(value.astype(np.int32) - expected)
            worst = max(worst, int(delta.max(initial=0)))
            differing += int((delta > 0).sum())
            total += delta.size
        ops = " ".join(dict.fromkeys(op.op for op in graph.operators))
        checks.append(LayerCheck(group.name, ops, worst, differing / max(total, 1)))
    return checks
