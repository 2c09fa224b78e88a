"""The simulator's Sigmoid: ``1 / (1 + exp(-x))`` written out as ONNX nodes.

onnxruntime's Sigmoid kernel is off by up to 3e-8 (absolute): an output of 1e-7 quantized with the
small scale its range gets would lose its value (tens of steps). Neg → Exp → Add(1) → Reciprocal is
exact to 2^-23. Whatever tabulates the simulator's Sigmoid (the TFLite export's int8 lookup tables)
uses these nodes too, so both give the same integers.
"""
from __future__ import annotations

import onnx
from onnx import helper


def exact_sigmoid_nodes(x: str, y: str, base: str, one: str) -> list[onnx.NodeProto]:
    """Nodes computing ``y = 1 / (1 + exp(-x))``; ``one`` names a float32 scalar constant 1 the caller
    provides, ``base`` prefixes the intermediate tensor and node names."""
    return [helper.make_node("Neg", [x], [f"{base}_neg"], name=f"{base}_neg"),
            helper.make_node("Exp", [f"{base}_neg"], [f"{base}_exp"], name=f"{base}_exp"),
            helper.make_node("Add", [f"{base}_exp", one], [f"{base}_den"], name=f"{base}_den"),
            helper.make_node("Reciprocal", [f"{base}_den"], [y], name=f"{base}_reciprocal")]
