"""``quantized_algorithm='adaround'``: learn which way each weight integer rounds (opt-in, needs torch).

Nearest rounding minimises each weight's own error, not the error of the layer's output. AdaRound
(Nagel et al., 2020) instead learns, layer by layer on the calibration set, whether each weight
rounds down or up. The scales stay those ``normal`` chooses (per-channel weights, per-tensor
activations, int32 bias), so the learned integers go through the same lowering as any other build.

For one weighted layer (Conv, Gemm or MatMul with a constant weight; ``W`` as a matrix per group,
``s`` its per-channel scale, ``z`` its zero point)::

    h(V)  = clip(sigmoid(V)·(ζ − γ) + γ, 0, 1)                 rectified sigmoid, ζ = 1.1, γ = −0.1
    W̃     = s·(clip(floor(W/s) + h(V) + z, q_min, q_max) − z)    soft-rounded weight
    loss  = ‖x̂·W̃ᵀ − x·Wᵀ‖² / ‖x̂·Ŵᵀ − x·Wᵀ‖²  +  λ·mean(1 − |2h(V) − 1|^β)

``x`` are rows of the layer's float input (Conv: patches at random output positions) collected
with onnxruntime over the calibration samples, ``x̂`` the same rows quantized with the input's
activation parameters (what the NPU reads), ``Ŵ`` the nearest-rounded weight (the loss starts
near 1). ``V`` starts where ``h(V)`` equals the fractional part of ``W/s``; the regulariser is
off for the first :data:`WARMUP` of the iterations, then ``β`` falls from 20 to 2, pushing every
``h`` to 0 or 1. The integer is ``floor(W/s) + [h ≥ 0.5]``.

Deterministic: rows and mini-batches come from fixed seeds, torch runs on the CPU, the number of
iterations is fixed — the same model and samples give the same integers.
"""
from __future__ import annotations

import contextlib
import math
import time
from typing import Collection, Sequence

import numpy as np
import onnx
from onnx import numpy_helper
from tqdm import tqdm

from openrknn import log
from openrknn.errors import ConfigError
from openrknn.graph.custom_ops import CustomOpRegistry
from openrknn.quant import numerics
from openrknn.quant.algorithms.normal import AdaRound
from openrknn.quant.calibrate import tensor_values
from openrknn.quant.numerics import QuantParams

INSTALL_HINT = AdaRound.install_hint
ROWS = 4096          # input rows kept per layer over all samples
HOLD_OUT = 4         # every 4th row judges the result instead of training it
ROWS_PER_INPUT = 4   # fewer training rows per input (per output) than this: too few to learn from
BATCH = 256          # rows per optimisation step
ITERATIONS = 300
ANNEAL = 0.7        # fraction of the remaining iterations over which β falls (then it stays at its end)
WARMUP = 0.1         # fraction of iterations without the rounding regulariser
LEARNING_RATE = 0.2
REG_WEIGHT = 1.0
BETA_START, BETA_END = 20.0, 2.0
ZETA, GAMMA = 1.1, -0.1
SEED = 0


def require_torch():
    """The torch module, or a ConfigError naming the extra to install."""
    try:
        import torch
    except ImportError as e:
        raise ConfigError(INSTALL_HINT) from e
    return torch


@contextlib.contextmanager
def _one_thread(torch):
    """Small matrices on a shared CPU: torch's thread pool costs far more than it saves (measured
    5 ms per step on one thread, 124 ms on two busy cores); one thread also fixes the summation order."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        yield
    finally:
        torch.set_num_threads(threads)


class _LinearLayer:
    """One weighted node seen as grouped matrix products ``rows[:, g] @ W[g]ᵀ``."""

    def __init__(self, node: onnx.NodeProto) -> None:
        self.node = node
        self.op = node.op_type
        attrs = {a.name: onnx.helper.get_attribute_value(a) for a in node.attribute}
        self.groups = int(attrs.get("group", 1))
        self.trans_b = bool(attrs.get("transB", 0))
        self.strides = list(attrs.get("strides", [1, 1]))
        self.dilations = list(attrs.get("dilations", [1, 1]))
        self.pads = list(attrs.get("pads", [0, 0, 0, 0]))
        self.auto_pad = attrs.get("auto_pad", b"NOTSET")
        self.auto_pad = self.auto_pad.decode() if isinstance(self.auto_pad, bytes) else self.auto_pad

    def to_matrix(self, weight: np.ndarray) -> np.ndarray:
        """[groups, outputs per group, inputs per group]."""
        if self.op == "Conv":
            return weight.reshape(self.groups, weight.shape[0] // self.groups, -1)
        return (weight if self.trans_b else weight.T)[None]

    def from_matrix(self, matrix: np.ndarray, shape: tuple[int, ...]) -> np.ndarray:
        if self.op == "Conv":
            return matrix.reshape(shape)
        return matrix[0] if self.trans_b else matrix[0].T

    def channel_scale(self, values: np.ndarray, shape: tuple[int, ...]) -> np.ndarray:
        """A per-output-channel (or per-tensor) array as [groups, outputs per group, 1]."""
        outputs = shape[0] if self.op == "Conv" or self.trans_b else shape[1]
        values = np.broadcast_to(np.asarray(values, np.float32).ravel(), (outputs,)) if np.size(values) == 1 \
            else np.asarray(values, np.float32).ravel()
        return values.reshape(self.groups if self.op == "Conv" else 1, -1, 1)

    def rows(self, torch, value: np.ndarray, kernel: tuple[int, ...], count: int,
             rng: np.random.Generator) -> np.ndarray | None:
        """Up to ``count`` random rows [n, groups, inputs per group] of one input tensor."""
        if self.op != "Conv":
            flat = value.reshape(-1, value.shape[-1])
            pick = rng.choice(flat.shape[0], min(count, flat.shape[0]), replace=False)
            return flat[np.sort(pick)][:, None, :]
        if value.ndim != 4 or len(kernel) != 2:
            return None
        pads = self._pads(value.shape[2:], kernel)
        if pads is None:
            return None
        import torch.nn.functional as F
        x = F.pad(torch.from_numpy(np.ascontiguousarray(value)), (pads[1], pads[3], pads[0], pads[2]))
        patches = F.unfold(x, kernel, dilation=self.dilations, stride=self.strides)[0].T   # [L, C·kh·kw]
        pick = np.sort(rng.choice(patches.shape[0], min(count, patches.shape[0]), replace=False))
        return patches[torch.from_numpy(pick)].numpy().reshape(len(pick), self.groups, -1)

    def _pads(self, size: Sequence[int], kernel: Sequence[int]) -> list[int] | None:
        if self.auto_pad in ("NOTSET", ""):
            return self.pads
        if self.auto_pad == "VALID":
            return [0, 0, 0, 0]
        if self.auto_pad not in ("SAME_UPPER", "SAME_LOWER"):
            return None
        pads = [0, 0, 0, 0]
        for i, (n, k, s, d) in enumerate(zip(size, kernel, self.strides, self.dilations)):
            total = max((math.ceil(n / s) - 1) * s + (k - 1) * d + 1 - n, 0)
            small, large = total // 2, total - total // 2
            pads[i], pads[i + 2] = (small, large) if self.auto_pad == "SAME_UPPER" else (large, small)
        return pads


class WeightRounder:
    """Collects the calibration rows of every weighted layer, then learns each weight's rounding.

    Built once per quantization (one pass of the float graph over the samples); the quantizer
    calls :meth:`round` where it computes a weight's integers.
    """

    def __init__(self, graph: onnx.ModelProto, weights: Collection[str], act_params: dict[str, QuantParams],
                 samples: Sequence[Sequence[np.ndarray]], custom_ops: CustomOpRegistry | None = None) -> None:
        self.torch = require_torch()
        inits = {i.name: i for i in graph.graph.initializer}
        self.layers: dict[str, _LinearLayer] = {}
        for node in graph.graph.node:   # integer layers, and the float16 ones of weight-only dtypes
            if (node.op_type in ("Conv", "Gemm", "MatMul") and len(node.input) > 1 and node.input[1] in weights
                    and node.input[1] in inits and node.input[1] not in self.layers):
                self.layers[node.input[1]] = _LinearLayer(node)
        self.kernels = {name: tuple(inits[name].dims[2:]) for name, layer in self.layers.items() if layer.op == "Conv"}
        self.act_params = act_params
        self.rows: dict[str, list[np.ndarray]] = {name: [] for name in self.layers}
        self.report: list[tuple[float, float]] = []
        self.seconds = 0.0
        with _one_thread(self.torch):
            self._collect(graph, samples, custom_ops)

    def _collect(self, graph: onnx.ModelProto, samples: Sequence[Sequence[np.ndarray]],
                 custom_ops: CustomOpRegistry | None) -> None:
        started = time.perf_counter()
        per_sample = max(1, -(-ROWS // max(1, len(samples))))
        rng = np.random.default_rng(SEED)
        inputs = sorted({layer.node.input[0] for layer in self.layers.values()})
        for values in tensor_values(graph, inputs, samples, custom_ops, label="adaround inputs"):
            for name, layer in self.layers.items():
                value = values.get(layer.node.input[0])
                if value is None:
                    continue
                rows = layer.rows(self.torch, value.astype(np.float32), self.kernels.get(name, ()), per_sample, rng)
                if rows is not None:
                    self.rows[name].append(rows)
        self.seconds += time.perf_counter() - started

    def round(self, name: str, weight: np.ndarray, q: np.ndarray, params: QuantParams) -> np.ndarray:
        """The learned integers of weight ``name`` (``q``, the nearest ones, when it is not learnable)."""
        layer = self.layers.get(name)
        if layer is None or not self.rows.get(name) or params.group_size:
            return q
        started = time.perf_counter()
        try:
            with _one_thread(self.torch):
                return self._round(layer, name, weight, q, params)
        finally:
            self.seconds += time.perf_counter() - started

    def _round(self, layer: _LinearLayer, name: str, weight: np.ndarray, q: np.ndarray,
               params: QuantParams) -> np.ndarray:
        rows = np.concatenate(self.rows.pop(name))
        if rows.shape[0] * (HOLD_OUT - 1) // HOLD_OUT < ROWS_PER_INPUT * rows.shape[-1]:
            # few rows per input: the rounding learns the rows rather than the layer
            log.debug(f"quantize: adaround '{name}': {rows.shape[0]} rows for {rows.shape[-1]} inputs, nearest kept")
            return q
        input_params = self.act_params.get(layer.node.input[0])
        quantized_rows = rows if input_params is None or input_params.dtype not in ("int8", "uint8") \
            else numerics.dequantize(numerics.quantize(rows, input_params), input_params).astype(np.float32)
        learned = self._learn(layer, name, weight, params, rows, quantized_rows, q)
        return q if learned is None else learned.astype(q.dtype)

    def _learn(self, layer: _LinearLayer, name: str, weight: np.ndarray, params: QuantParams,
               rows: np.ndarray, quantized_rows: np.ndarray, given: np.ndarray) -> np.ndarray | None:
        """The learned integers, or None when the ``given`` ones (the default rounding: nearest, or
        the running-sum rounding of 8-bit Conv weights) have the lower error on the held-out rows."""
        torch = self.torch
        torch.manual_seed(SEED)
        scale = layer.channel_scale(params.scale, weight.shape)
        zero = layer.channel_scale(params.zero_point, weight.shape)
        matrix = layer.to_matrix(weight.astype(np.float32))
        ratio = (matrix / scale).astype(np.float32)
        floor = np.floor(ratio)
        t = {k: torch.from_numpy(np.ascontiguousarray(v, np.float32)) for k, v in dict(
            x=rows, xq=quantized_rows, w=matrix, s=scale, z=zero, floor=floor, rest=ratio - floor).items()}
        rest = t["rest"].clamp(1e-4, 1 - 1e-4)
        v = (-torch.log((ZETA - GAMMA) / (rest - GAMMA) - 1)).requires_grad_(True)
        target = torch.einsum("ngk,gok->ngo", t["x"], t["w"])

        def soft(h):
            q = (t["floor"] + h + t["z"]).clamp(params.qmin, params.qmax)
            return t["s"] * (q - t["z"])

        def output_error(w, index):
            return ((torch.einsum("ngk,gok->ngo", t["xq"][index], w) - target[index]) ** 2).mean()

        held_out = torch.arange(0, rows.shape[0], HOLD_OUT)
        training = torch.from_numpy(np.setdiff1d(np.arange(rows.shape[0]), held_out.numpy()))
        with torch.no_grad():
            nearest_error = float(output_error(soft((t["rest"] >= 0.5).float()), training))
            given_steps = layer.to_matrix(given.astype(np.float32)) - zero - floor
            given_held_out = float(output_error(soft(torch.from_numpy(np.ascontiguousarray(given_steps, np.float32))),
                                                held_out))
        norm = max(nearest_error, 1e-30)
        optimizer = torch.optim.Adam([v], lr=LEARNING_RATE)
        generator = torch.Generator().manual_seed(SEED)
        warmup = int(WARMUP * ITERATIONS)
        for step in tqdm(range(ITERATIONS), desc=f"I quantize: adaround {layer.node.name or name}",
                         unit="it", disable=None, leave=False):
            index = training[torch.randperm(training.numel(), generator=generator)[:BATCH]]
            h = (torch.sigmoid(v) * (ZETA - GAMMA) + GAMMA).clamp(0, 1)
            loss = output_error(soft(h), index) / norm
            if step >= warmup:
                progress = min(1.0, (step - warmup) / (ANNEAL * (ITERATIONS - warmup)))
                beta = BETA_START * (BETA_END / BETA_START) ** progress
                loss = loss + REG_WEIGHT * (1 - (2 * h - 1).abs().pow(beta)).mean()
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
        with torch.no_grad():
            up = (torch.sigmoid(v) * (ZETA - GAMMA) + GAMMA) >= 0.5
            learned_held_out = float(output_error(soft(up.float()), held_out))
            integers = (t["floor"] + up.float() + t["z"]).clamp(params.qmin, params.qmax).numpy()
        log.debug(f"quantize: adaround '{name}': held-out output error {given_held_out:.3g} -> {learned_held_out:.3g}")
        power = max(float((target[held_out] ** 2).mean()), 1e-30)
        self.report.append((given_held_out / power, min(learned_held_out, given_held_out) / power))
        if learned_held_out >= given_held_out:   # the held-out rows say the default rounding is better: keep it
            return None
        return np.rint(layer.from_matrix(integers, weight.shape))

    def summary(self) -> str:
        if not self.report:
            return "adaround: no weighted layer learned"
        before, after = np.mean([r[0] for r in self.report]), np.mean([r[1] for r in self.report])
        return (f"adaround: {len(self.report)} layers, mean relative output error {before:.4g} -> {after:.4g}, "
                f"{self.seconds:.1f} s")
