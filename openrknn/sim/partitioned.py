"""Run graphs that contain user custom ops: onnxruntime segments with numpy custom ops between.

The executable graph is cut, in topological order, into maximal runs of standard nodes (each one
onnxruntime session) and single custom-op nodes (run with the registered class's ``compute``).
Custom ops stay in float32, as the guide says they run on the CPU.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
import onnx
from onnx import helper

from openrknn.errors import RuntimeStateError
from openrknn.graph.custom_ops import CUSTOM_DOMAIN, CustomOpRegistry


def has_custom_ops(model: onnx.ModelProto) -> bool:
    return any(node.domain == CUSTOM_DOMAIN for node in model.graph.node)


@dataclass
class _Segment:
    nodes: list[onnx.NodeProto]
    custom: Any = None                  # an instance of the user's class for a custom node
    session: Any = None
    inputs: list[str] | None = None
    outputs: list[str] | None = None


class PartitionedRunner:
    """Executes ``model`` (with custom-domain nodes) segment by segment."""

    def __init__(self, model: onnx.ModelProto, registry: CustomOpRegistry | None, make_session) -> None:
        registry = registry or CustomOpRegistry()
        self.graph_inputs = [v.name for v in model.graph.input]
        self.graph_outputs = [v.name for v in model.graph.output]
        inits = {i.name: i for i in model.graph.initializer}
        self.constants = {name: onnx.numpy_helper.to_array(t) for name, t in inits.items()}
        self.segments = self._split(model, registry)
        needed_later = self._needed_after(model)
        try:   # element types of the tensors that cross segments (integer ones included)
            typed = onnx.shape_inference.infer_shapes(model, strict_mode=False)
        except Exception:  # noqa: BLE001 - onnx raises several types; untyped tensors default to float
            typed = model
        for index, seg in enumerate(self.segments):
            if seg.custom is not None:
                continue
            produced = [o for n in seg.nodes for o in n.output if o]
            consumed = [i for n in seg.nodes for i in n.input if i and i not in produced]
            seg.inputs = [i for i in dict.fromkeys(consumed) if i not in inits]
            seg.outputs = [o for o in produced if o in needed_later[index] or o in self.graph_outputs]
            seg.session = make_session(self._segment_model(typed, seg, inits))

    def _split(self, model: onnx.ModelProto, registry: CustomOpRegistry) -> list[_Segment]:
        segments: list[_Segment] = []
        for node in model.graph.node:
            if node.domain == CUSTOM_DOMAIN:
                op_class = registry.get(node.op_type)
                if op_class is None:
                    raise RuntimeStateError(f"the model uses custom op '{node.op_type}' (layer '{node.name}'); register "
                                            "its class with reg_custom_op() before loading the model")
                segments.append(_Segment(nodes=[node], custom=op_class()))
            elif segments and segments[-1].custom is None:
                segments[-1].nodes.append(node)
            else:
                segments.append(_Segment(nodes=[node]))
        return segments

    def _needed_after(self, model: onnx.ModelProto) -> list[set[str]]:
        needed: list[set[str]] = []
        later: set[str] = set(self.graph_outputs)
        for seg in reversed(self.segments):
            needed.append(set(later))
            for node in seg.nodes:
                later.update(i for i in node.input if i)
        return list(reversed(needed))

    def _segment_model(self, model: onnx.ModelProto, seg: _Segment, inits: dict) -> onnx.ModelProto:
        types = {v.name: v for v in list(model.graph.value_info) + list(model.graph.input) + list(model.graph.output)
                 if v.type.HasField("tensor_type")}   # outputs added for inspection carry no type
        used_inits = [inits[i] for n in seg.nodes for i in n.input if i in inits]
        graph = helper.make_graph(
            seg.nodes, "segment",
            [types.get(i) or helper.make_tensor_value_info(i, onnx.TensorProto.FLOAT, None) for i in seg.inputs],
            [types.get(o) or helper.make_empty_tensor_value_info(o) for o in seg.outputs],
            list({t.name: t for t in used_inits}.values()))
        opsets = [o for o in model.opset_import if o.domain != CUSTOM_DOMAIN]
        return helper.make_model(graph, opset_imports=opsets, ir_version=model.ir_version)

    def run(self, feeds: dict[str, np.ndarray]) -> list[np.ndarray]:
        values: dict[str, Any] = dict(self.constants)
        values.update(feeds)
        for seg in self.segments:
            if seg.custom is not None:
                node = seg.nodes[0]
                inputs = [values[i] for i in node.input if i]
                outputs = seg.custom.compute(node, inputs)
                for name, value in zip(node.output, outputs):
                    values[name] = np.asarray(value)
            else:
                result = seg.session.run(seg.outputs, {i: values[i] for i in seg.inputs})
                values.update(zip(seg.outputs, result))
        return [values[name] for name in self.graph_outputs]
