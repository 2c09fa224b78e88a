"""Darknet activations (the ``activation=`` option of convolutional, connected and shortcut layers)."""
from __future__ import annotations

import numpy as np

from openrknn.errors import UnsupportedOpError
from openrknn.frontends.darknet.cfg import Section
from openrknn.frontends.onnx_builder import GraphBuilder

SUPPORTED = ("linear", "leaky", "relu", "logistic", "tanh", "relu6", "swish", "mish", "elu", "selu", "hardtan")


def apply_activation(g: GraphBuilder, x: str, act: str, section: Section, name: str) -> str:
    """Append activation ``act`` to tensor ``x``; the result tensor is called ``name``.

    Math: leaky ``max(x, 0.1x)``, logistic ``1/(1+e^-x)``, swish ``x·σ(x)``,
    mish ``x·tanh(ln(1+e^x))``, relu6 ``min(max(x,0),6)``, hardtan ``min(max(x,-1),1)``.
    """
    if act == "linear":
        return g.node("Identity", [x], f"{name}_linear", output=name)
    simple = {"leaky": ("LeakyRelu", {"alpha": 0.1}), "relu": ("Relu", {}), "logistic": ("Sigmoid", {}),
              "tanh": ("Tanh", {}), "elu": ("Elu", {"alpha": 1.0}), "selu": ("Selu", {})}
    if act in simple:
        op, attrs = simple[act]
        return g.node(op, [x], f"{name}_{act}", output=name, **attrs)
    if act in ("relu6", "hardtan"):
        low, high = (0.0, 6.0) if act == "relu6" else (-1.0, 1.0)
        bounds = [g.const(f"{name}_{act}_min", np.float32(low)), g.const(f"{name}_{act}_max", np.float32(high))]
        return g.node("Clip", [x, *bounds], f"{name}_{act}", output=name)
    if act == "swish":
        gate = g.node("Sigmoid", [x], f"{name}_swish_sigmoid")
        return g.node("Mul", [x, gate], f"{name}_swish", output=name)
    if act == "mish":
        soft = g.node("Softplus", [x], f"{name}_mish_softplus")
        gate = g.node("Tanh", [soft], f"{name}_mish_tanh")
        return g.node("Mul", [x, gate], f"{name}_mish", output=name)
    raise UnsupportedOpError(f"activation={act}", name, "Darknet",
                             f"{section.where}; supported activations: {', '.join(SUPPORTED)}")
