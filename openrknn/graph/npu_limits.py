"""Rockchip's documented NPU operator limits per chip, and where each layer of a graph runs.

The limits are data: ``chips/data/op_limits/npu_op_limits.yaml`` restates Rockchip's "RKNN Compiler
Support Operator List" v2.3.2 per chip group (§3 NPU operators, §4 CPU operators, §5 model
input/output constraints). This module reads it and judges one ONNX node at a time:
:func:`placement` says whether the node's layer runs on the NPU, falls back to the CPU, cannot run at
all on that chip, or stays on the NPU but breaks a hardware limit (fails on the board), each with the
limit broken and its section of the operator list (:class:`Finding`).

Which limits decide what:

* no NPU entry, a data type, quantization granularity, Transpose perm, Resize mode/scale, Slice step,
  Pow exponent or other attribute outside the entry → the CPU operator of §4 if the chip has one
  (RK2118 has none, RV1103/RV1106/RV1103B/RV1106B a subset), otherwise *unsupported*;
* where rknn-toolkit2 2.5.0's converter was seen to do otherwise (the data file's
  ``converter_behaviour``, from ``bench/npu_limits_vs_rknn.py``): *rewrite* into more NPU layers
  (a convolution kernel > 31 split into 16-tap pieces, a Pad layer for pads > 15, …), *kept* on the
  NPU although the list does not cover it (nearest Resize by 1.5, …), or part of the layer on a
  named CPU operator (a ConvTranspose stride the chip lacks: §4.12 ConvTransposePad);
* the first-layer width rules of §5.1 and the other convolution hardware limits nothing works
  around → *board*: the layer stays on the NPU and fails at run time.

Judged per layer of the NPU layer graph (:mod:`openrknn.graph.npu_layers`): an activation fused into
a convolution follows the convolution's entry, a multi-node activation (GELU, SiLU, Mish) its ``ex*``
entry, a decomposed LayerNorm ``exNorm`` and an attention block ``exSDPAttention``.
"""
from __future__ import annotations

import ast
import functools
import itertools
import math
import re
from dataclasses import dataclass, field, replace
from fractions import Fraction
from importlib import resources
from typing import Any, Iterable

import onnx
import yaml
from onnx import numpy_helper

from openrknn.graph import npu_layers

DATA_FILE = ("data", "op_limits", "npu_op_limits.yaml")

CPU = "cpu"                  # falls back to the CPU operator of §4
UNSUPPORTED = "unsupported"  # neither an NPU nor a CPU implementation on this chip
BOARD = "board"              # stays on the NPU and breaks a hardware limit: fails on the board
REWRITE = "rewrite"          # rknn-toolkit2 2.5.0 rewrites it into more NPU layers
KEPT = "kept"                # rknn-toolkit2 2.5.0 keeps it on the NPU although the list does not cover it

_SKIPPED_OPS = frozenset({"Identity", "Dropout", "Constant", "Shape", "Size", "ConstantOfShape",
                          "QuantizeLinear", "DequantizeLinear"})
# ONNX op -> entry of the operator list, where the converter maps one to the other.
_ENTRY_OF_OP = {
    "Clip": "Clip/ReLU6", "Reshape": "Reshape", "Flatten": "Reshape", "Squeeze": "Reshape",
    "Unsqueeze": "Reshape", "Upsample": "Resize", "Gelu": "exGelu", "Mish": "exMish",
    "LayerNormalization": "exNorm", "InstanceNormalization": "exNorm", "Gemm": "Convolution",
    "ConvTranspose": "ConvTranspose",
}
_SAME_NAME_OPS = frozenset({
    "Add", "Sub", "Mul", "Div", "Max", "Min", "Greater", "Where", "Concat", "Split", "Slice", "Pad", "Tile",
    "Expand", "Gather", "Transpose", "Resize", "Softmax", "Relu", "Sigmoid", "Tanh", "Softplus", "HardSigmoid",
    "HardSwish", "LeakyRelu", "PRelu", "Elu", "LSTM", "GRU", "Pow", "BatchNormalization", "MaxPool",
    "AveragePool", "GlobalMaxPool", "GlobalAveragePool", "Hardmax",
})
# printed activation of a multi-node activation layer -> its entry
_ACTIVATION_ENTRY = {"Gelu": "exGelu", "Swish": "exSwish", "SiLU": "exSwish", "Mish": "exMish",
                     "HardSwish": "HardSwish", "HardSigmoid": "HardSigmoid", "Sigmoid": "Sigmoid", "Tanh": "Tanh",
                     "Relu": "Relu", "Clip": "Clip/ReLU6", "LeakyRelu": "LeakyRelu", "PRelu": "PRelu",
                     "Elu": "Elu", "Softplus": "Softplus"}
# entry -> the CPU operator (§4) it falls back to
_CPU_NAME = {"Convolution": "Convolution", "Depthwise Convolution": "Convolution",
             "ConvTranspose": "ConvTranspose/Deconvolution", "Clip/ReLU6": "Clip", "exMatMul": "MatMul",
             "exNorm": "exNorm", "Where": "where", "exSwish": "exSwish", "exGelu": "exGelu",
             "GlobalMaxPool": "MaxPool", "GlobalAveragePool": "AveragePool"}
_CONV_ENTRIES = frozenset({"Convolution", "Depthwise Convolution", "ConvTranspose"})
_POOL_ENTRIES = frozenset({"MaxPool", "AveragePool", "GlobalMaxPool", "GlobalAveragePool"})
_HARDWARE_KEYS = ("kernel_h", "kernel_w", "stride_h", "stride_w", "pad_top", "pad_left", "pad_bottom", "pad_right",
                  "dilation_h", "dilation_w")


# ----------------------------------------------------------------------------- results
@dataclass(frozen=True)
class Finding:
    """One layer outside the chip's NPU limits (or not runnable on the chip at all)."""

    chip: str           # display name, e.g. RK3566
    node: str           # ONNX node name (the layer's main node)
    op: str             # ONNX op type
    entry: str          # entry of the operator list ('' when the chip has none)
    limit: str          # the limit broken, in words
    section: str        # section of the operator list, e.g. '§3.1.5'
    consequence: str    # CPU / UNSUPPORTED / BOARD
    cpu_section: str = ""           # the CPU operator taking over (consequence CPU)
    suggestion: str = ""            # mechanical fix, printed as advice
    cpu_time_us: float | None = None   # estimated CPU time (added by profile.limits)
    reason: str = ""                # why there is no CPU fallback (consequence UNSUPPORTED)
    converter: str = ""             # what rknn-toolkit2 2.5.0 does instead (REWRITE, KEPT, partial CPU)

    @property
    def severity(self) -> str:
        """'E' for a layer that cannot run as built (unsupported, board failure), else 'W'."""
        return "E" if self.consequence in (UNSUPPORTED, BOARD) else "W"

    @property
    def outcome(self) -> str:
        if self.consequence == CPU:
            cost = f", est. {self.cpu_time_us / 1000:.3f} ms" if self.cpu_time_us is not None else ""
            how = f": rknn-toolkit2 2.5.0 {self.converter}" if self.converter else ""
            return f"runs on the CPU ({self.cpu_section}{cost}{how})"
        if self.consequence == BOARD:
            return "will fail on the board (the compiler keeps it on the NPU)"
        if self.consequence == REWRITE:
            return f"rewritten: rknn-toolkit2 2.5.0 {self.converter}"
        if self.consequence == KEPT:
            return (f"rknn-toolkit2 2.5.0 {self.converter} although the list does not cover it: "
                    "check the board's results")
        notes = [n for n in (self.reason, f"rknn-toolkit2 2.5.0 {self.converter}" if self.converter else "") if n]
        return f"unsupported on {self.chip}" + (f" ({'; '.join(notes)})" if notes else "")

    def line(self) -> str:
        """The report line: node, op, limit with its section, consequence."""
        entry = f" [{self.entry}]" if self.entry and self.entry != self.op else ""
        return f"{self.node} ({self.op}{entry}): {self.limit} ({self.section}) -> {self.outcome}"

    def to_dict(self) -> dict[str, Any]:
        return {"chip": self.chip, "node": self.node, "op": self.op, "entry": self.entry, "limit": self.limit,
                "section": self.section, "consequence": self.consequence, "severity": self.severity,
                "cpu_section": self.cpu_section, "reason": self.reason, "converter": self.converter,
                "cpu_time_us": self.cpu_time_us, "suggestion": self.suggestion, "line": self.line()}


@dataclass(frozen=True)
class Placement:
    """Where a layer runs: 'NPU', 'CPU' or 'NONE' (unsupported), and why (``findings``)."""

    target: str
    findings: tuple[Finding, ...] = ()


NPU_PLACEMENT = Placement("NPU")


# ----------------------------------------------------------------------------- the data
@functools.cache
def _raw() -> dict[str, Any]:
    loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
    text = resources.files("openrknn.chips").joinpath(*DATA_FILE).read_text(encoding="utf-8")
    return yaml.load(text, Loader=loader)


@dataclass(frozen=True)
class ChipLimits:
    """The operator list of one chip group (e.g. RK3566_RK3568 for rk3566 and rk3568)."""

    group: str
    display: str
    section: str
    ops: dict[str, Any]
    not_listed: dict[str, str]
    cpu_availability: str | tuple[str, ...]   # 'all', 'none' or the subset's op names
    first_layer: dict[str, Any] = field(default_factory=dict)

    def entry(self, name: str) -> dict[str, Any] | None:
        """The entry ``name`` with ``same_as`` resolved (fused entries share their base op's limits)."""
        found = self.ops.get(name)
        if found is None:
            return None
        constraints = found.get("constraints") if isinstance(found.get("constraints"), dict) else {}
        base = found.get("same_as") or constraints.get("same_as")
        if base in self.ops:
            return {**self.ops[base], "section": found.get("section", self.ops[base].get("section"))}
        return found

    @property
    def has_cpu(self) -> bool:
        return self.cpu_availability != "none"

    def cpu_fallback(self, entry: str, op: str) -> str | None:
        """The CPU operator's section (e.g. '§4.66 Transpose') that takes over, None when there is none."""
        note = self.not_listed.get(entry)
        if note is not None:
            match = re.search(r"§4\.\d+", note)
            return f"{match.group(0)} {_cpu_label(note)}" if note.startswith("cpu") and match else None
        if self.cpu_availability == "none":
            return None
        for name in (_CPU_NAME.get(entry), entry, op):
            row = _cpu_ops().get((name or "").lower())
            if row is None:
                continue
            if isinstance(self.cpu_availability, tuple) and row["name"] not in self.cpu_availability:
                return None
            return f"§{row['section']} {row['name']}"
        return None


def _cpu_label(note: str) -> str:
    match = re.search(r"CPU (\w+)", note)
    return match.group(1) if match else ""


@functools.cache
def _cpu_ops() -> dict[str, dict[str, Any]]:
    rows = {}
    for row in _raw()["cpu_ops"]:
        rows.setdefault(row["name"].lower(), row)
    return rows


@functools.cache
def limits_for(chip_name: str) -> ChipLimits | None:
    """The operator list of ``chip_name`` (e.g. 'rk3566'); None for chips it does not cover (Toolkit 1)."""
    raw = _raw()
    wanted = chip_name.strip().upper()
    if wanted == "RK3588S":
        wanted = "RK3588"
    availability = raw["cpu_availability"]
    for group, data in raw["chips"].items():
        if wanted not in data["names"]:
            continue
        cpu = data.get("cpu_ops")
        if cpu == "subset":   # the RV1103/RV1106/RV1103B/RV1106B list of §4.1
            cpu = tuple(next(v for k, v in availability.items() if isinstance(v, list) and group in k))
        first_layer = (raw.get("first_layer_rules") or {}).get(group, {})
        return ChipLimits(group, wanted, data.get("section", ""), data["ops"],
                          dict(data.get("ops_not_listed_on_npu") or {}), cpu if isinstance(cpu, tuple) else str(cpu),
                          first_layer)
    return None


def covered_chips() -> list[str]:
    """Lower-case names of every chip the operator list covers."""
    return sorted(n.lower() for data in _raw()["chips"].values() for n in data["names"])


def transpose_rule(perm: tuple[int, ...], limits: ChipLimits, dtype: str) -> str:
    """The printed size rule of a 4-D ``perm`` on this chip for ``dtype`` data ('NOT SUPPORTED' if absent)."""
    entry = limits.entry("Transpose") or {}
    constraints = entry.get("constraints") or {}
    table = _raw()["transpose_perm_tables"].get(constraints.get("perm_table", "T-B"), {})
    row = table.get("perms", {}).get("[" + ",".join(str(p) for p in perm) + "]")
    if row is None:
        return "NOT SUPPORTED"
    columns = constraints.get("rule_column_by_dtype") or {}
    column = columns.get(dtype) or next(iter(columns.values()), "rule")
    return str(row.get(column, "NOT SUPPORTED"))


# ----------------------------------------------------------------------------- rule expressions
_ALLOWED_NODES = (ast.Expression, ast.BoolOp, ast.And, ast.Or, ast.Compare, ast.BinOp, ast.Mult, ast.Mod,
                  ast.Add, ast.Sub, ast.Name, ast.Load, ast.Constant, ast.Lt, ast.LtE, ast.Gt, ast.GtE, ast.Eq,
                  ast.NotEq, ast.UnaryOp, ast.USub)


def rule_holds(rule: str, values: dict[str, int]) -> bool:
    """Evaluate a printed size rule such as ``c1<8192, h1*w1%8=0, w1*c1<p*16`` (commas = and;
    ``a=b=1`` = equality; ``(…) or (…)`` alternatives) over ``values``. Parsed with a whitelist of
    arithmetic and comparisons, never ``eval`` of arbitrary text."""
    text = rule.strip()
    if text.lower().startswith("no restriction"):
        return True
    if text.upper().startswith("NOT SUPPORTED"):
        return False
    text = re.sub(r"\s*\((?:printed|presumably)[^()]*\)\s*$", "", text)   # an editorial note at the end
    text = re.sub(r"(\w)p\b(?!\s*[<>=*%])", r"\1<p", text)                 # 'c1*h1*w1p' printed without '<'
    text = re.sub(r"\bn(?=\s*[<>=])", "n1", text)                          # 'n<8192' = n1
    parts, depth, current = [], 0, ""
    for char in text:
        depth += char == "("
        depth -= char == ")"
        if char == "," and depth == 0:
            parts.append(current)
            current = ""
        else:
            current += char
    parts.append(current)
    expression = " and ".join("(" + re.sub(r"(?<![<>=!])=(?!=)", "==", p.replace(",", " and ")) + ")" for p in parts)
    tree = ast.parse(expression, mode="eval")
    for node in ast.walk(tree):
        if not isinstance(node, _ALLOWED_NODES):
            raise ValueError(f"rule '{rule}' has an unexpected term {type(node).__name__}")
    return bool(_evaluate(tree.body, values))


def _evaluate(node: ast.AST, values: dict[str, int]) -> Any:
    if isinstance(node, ast.Constant):
        return node.value
    if isinstance(node, ast.Name):
        return values[node.id]
    if isinstance(node, ast.UnaryOp):
        return -_evaluate(node.operand, values)
    if isinstance(node, ast.BoolOp):
        results = [_evaluate(v, values) for v in node.values]
        return all(results) if isinstance(node.op, ast.And) else any(results)
    if isinstance(node, ast.BinOp):
        left, right = _evaluate(node.left, values), _evaluate(node.right, values)
        ops = {ast.Mult: lambda a, b: a * b, ast.Mod: lambda a, b: a % b, ast.Add: lambda a, b: a + b,
               ast.Sub: lambda a, b: a - b}
        return ops[type(node.op)](left, right)
    assert isinstance(node, ast.Compare)
    left = _evaluate(node.left, values)
    compare = {ast.Lt: lambda a, b: a < b, ast.LtE: lambda a, b: a <= b, ast.Gt: lambda a, b: a > b,
               ast.GtE: lambda a, b: a >= b, ast.Eq: lambda a, b: a == b, ast.NotEq: lambda a, b: a != b}
    for op, comparator in zip(node.ops, node.comparators):
        right = _evaluate(comparator, values)
        if not compare[type(op)](left, right):
            return False
        left = right
    return True


# ----------------------------------------------------------------------------- graph facts
class GraphFacts:
    """What the checks read from one graph: shapes, constants, dtypes, quantization, layers."""

    def __init__(self, model: onnx.ModelProto, tensor_dtypes: dict[str, str] | None = None,
                 quant_params: dict[str, dict[str, Any]] | None = None) -> None:
        try:
            inferred = onnx.shape_inference.infer_shapes(model, strict_mode=False, data_prop=True)
        except Exception:   # noqa: BLE001 - keep whatever shapes the graph already carries
            inferred = model
        graph = inferred.graph
        self.graph = graph
        self.shapes: dict[str, tuple[int, ...]] = {}
        for value in list(graph.input) + list(graph.output) + list(graph.value_info):
            t = value.type.tensor_type
            if t.HasField("shape") and all(d.HasField("dim_value") or d.HasField("dim_param") for d in t.shape.dim):
                self.shapes[value.name] = tuple(int(d.dim_value) if d.HasField("dim_value") else 1 for d in t.shape.dim)
        self.const_values: dict[str, Any] = {}
        for init in graph.initializer:
            self.shapes[init.name] = tuple(int(d) for d in init.dims)
            self.const_values[init.name] = init
        for node in graph.node:
            if node.op_type == "Constant":
                for attr in node.attribute:
                    if attr.name == "value":
                        self.const_values[node.output[0]] = attr.t
                        self.shapes[node.output[0]] = tuple(int(d) for d in attr.t.dims)
        self.inputs = [v.name for v in graph.input if v.name not in self.const_values]
        self.opset = next((o.version for o in model.opset_import if o.domain in ("", "ai.onnx")), 13)
        self.tensor_dtypes = dict(tensor_dtypes or {})
        self.quant_params = dict(quant_params or {})
        self.producer = {o: n for n in graph.node for o in n.output}
        self.layer_of: dict[str, npu_layers.LayerGroup] = {}
        for group in npu_layers.layer_groups(graph):
            for node in group.nodes:
                self.layer_of[node.output[0] if node.output else node.name] = group

    def shape(self, name: str) -> tuple[int, ...] | None:
        return self.shapes.get(name)

    def is_const(self, name: str) -> bool:
        return name in self.const_values

    def array(self, name: str) -> Any:
        value = self.const_values.get(name)
        return None if value is None else numpy_helper.to_array(value)

    def layer(self, node: onnx.NodeProto) -> npu_layers.LayerGroup | None:
        return self.layer_of.get(node.output[0] if node.output else node.name)

    def data_inputs(self, node: onnx.NodeProto) -> list[str]:
        return [i for i in node.input if i and not self.is_const(i)]

    def dtype(self, name: str, override: str | None = None) -> str | None:
        """Execution dtype on the NPU: int8 / int16 / float16 (uint8 counts as int8); None unknown."""
        found = self.tensor_dtypes.get(name)
        if found is None and name in self.inputs:
            consumer_dtypes = [self.tensor_dtypes.get(o) for n in self.graph.node if name in n.input for o in n.output]
            found = next((d for d in consumer_dtypes if d), None)
        if override and found in (None, "float16", "float32", "int8", "uint8", "int16"):
            return override
        return {"uint8": "int8", "float32": None}.get(found, found) if found else None

    def per_channel(self, name: str) -> bool:
        record = self.quant_params.get(name) or {}
        scale = record.get("scale")
        return record.get("axis") is not None or (isinstance(scale, list) and len(scale) > 1)

    def reads_graph_input(self, node: onnx.NodeProto) -> str | None:
        """The graph input ``node`` reads, directly or through the embedded mean/std steps."""
        for name in self.data_inputs(node):
            seen = 0
            while name not in self.inputs and seen < 8:
                producer = self.producer.get(name)
                if producer is None or not any(p.key == "openrknn.preprocess" for p in producer.metadata_props):
                    break
                name = next(iter(self.data_inputs(producer)), "")
                seen += 1
            if name in self.inputs:
                return name
        return None


# ----------------------------------------------------------------------------- placement
def placement(node: onnx.NodeProto, graph: GraphFacts | onnx.ModelProto, chip: Any,
              dtype_override: str | None = None) -> Placement:
    """Where ``node``'s layer runs on ``chip`` (a chip name or :class:`openrknn.chips.Chip`) by the
    operator list: NPU, CPU or NONE, with a :class:`Finding` per limit broken. Nodes inside a layer
    (not its main node), folded constants and the input stage always place NPU without findings."""
    facts = graph if isinstance(graph, GraphFacts) else GraphFacts(graph)
    limits = limits_for(getattr(chip, "name", chip))
    if limits is None or not _judged(node, facts):
        return NPU_PLACEMENT
    entry_name = _entry_name(node, facts)
    group = facts.layer(node)
    if group is not None and len(group.nodes) > 1 and entry_name not in _CONV_ENTRIES \
            and (entry_name is None or limits.entry(entry_name) is None):
        # a fused block (attention, LayerNorm, a multi-node activation) this chip has no entry for
        # runs node by node
        parts = [_place(member, facts, limits, dtype_override, _entry_name(member, facts, standalone=True))
                 for member in group.nodes if member.op_type not in _SKIPPED_OPS and facts.data_inputs(member)]
        findings = tuple(f for part in parts for f in part.findings)
        target = "NONE" if any(p.target == "NONE" for p in parts) else \
            "CPU" if any(p.target == "CPU" for p in parts) else "NPU"
        return Placement(target, findings)
    return _place(node, facts, limits, dtype_override, entry_name)


def _place(node: onnx.NodeProto, facts: GraphFacts, limits: ChipLimits, dtype_override: str | None,
           entry_name: str | None) -> Placement:
    entry = limits.entry(entry_name) if entry_name else None
    if entry is None and _lowered_on_npu(node.op_type, limits.group):
        return NPU_PLACEMENT   # the converter rewrites it into listed NPU layers (converter_behaviour.unlisted_ops)
    if entry is None or entry.get("status") == "not_yet_supported":
        why = "no NPU entry" if entry is None else "the entry says not yet supported"
        section = f"§{entry['section']}" if entry else f"§{limits.section}"
        return _fallback(limits, node, entry_name or "", [(why, section, "")], facts)
    if entry.get("status") == "converted_to_conv":
        return NPU_PLACEMENT
    section = f"§{entry.get('section', '')}"
    found: dict[str, list[tuple[str, str, str, dict[str, Any]]]] = {}
    for check in _checks_for(entry_name):
        for family, text, advice in check(node, facts, entry, limits, dtype_override):
            behaviour = _converter_behaviour(family, limits.group)
            if behaviour.get("needs_npu") and limits.entry(behaviour["needs_npu"]) is None:
                behaviour = {**behaviour, "consequence": CPU, "cpu": behaviour["needs_npu"]}
            kind = behaviour.get("consequence") or (BOARD if family == BOARD else "fallback")
            found.setdefault(kind, []).append((text, section, advice, behaviour))
    kept = [_finding(limits, node, entry_name, t, s, kind, suggestion=a, converter=b.get("text", ""))
            for kind in (REWRITE, KEPT, BOARD) for t, s, a, b in found.get(kind, [])]
    if found.get("fallback"):
        return _fallback(limits, node, entry_name, [(t, s, a) for t, s, a, _ in found["fallback"]], facts, kept)
    if found.get(CPU):   # part of the layer goes to a named CPU operator (e.g. a ConvTranspose's zero insertion)
        parts = []
        for text, sec, advice, behaviour in found[CPU]:
            cpu = limits.cpu_fallback(behaviour.get("cpu", ""), behaviour.get("cpu", ""))
            consequence = CPU if cpu else UNSUPPORTED
            reason = "" if cpu else (f"{limits.display} has no CPU operators" if not limits.has_cpu
                                     else f"no CPU {behaviour.get('cpu')} on this chip (§4)")
            parts.append(_finding(limits, node, entry_name, text, sec, consequence, cpu or "", advice, reason,
                                  behaviour.get("text", "")))
        target = "CPU" if all(f.consequence == CPU for f in parts) else "NONE"
        return Placement(target, tuple(parts + kept))
    return Placement("NPU", tuple(kept)) if kept else NPU_PLACEMENT


_BATCH_FOLDED_OPS = frozenset({"Softmax"})


@functools.cache
def _unlisted_ops() -> dict[str, dict[str, Any]]:
    return dict((_raw().get("converter_behaviour") or {}).get("unlisted_ops") or {})


def _lowered_on_npu(op: str, group: str) -> bool:
    """Whether rknn-toolkit2 lowers ``op``, which the operator list has no NPU entry for, into NPU
    layers on the chip group ``group`` (``converter_behaviour.unlisted_ops`` of the data file)."""
    found = _unlisted_ops().get(op)
    return bool(found) and found.get("consequence") == "rewrite" and group in (found.get("groups") or ())


@functools.cache
def _behaviours() -> dict[str, dict[str, Any]]:
    return dict((_raw().get("converter_behaviour") or {}).get("families") or {})


def _converter_behaviour(family: str, group: str) -> dict[str, Any]:
    """What rknn-toolkit2 2.5.0 does with a layer outside this limit family on a chip group ({} = the
    list's rule)."""
    found = dict(_behaviours().get(family) or {})
    found.update((found.pop("chips", None) or {}).get(group) or {})
    if found.get("consequence") == "rewrite":
        found["consequence"] = REWRITE
    elif found.get("consequence") == "npu":
        found["consequence"] = KEPT
    return found


def _finding(limits: ChipLimits, node: onnx.NodeProto, entry: str, limit: str, section: str, consequence: str,
             cpu_section: str = "", suggestion: str = "", reason: str = "", converter: str = "") -> Finding:
    return Finding(limits.display, node.name or (node.output[0] if node.output else ""), node.op_type, entry, limit,
                   section, consequence, cpu_section, suggestion, reason=reason, converter=converter)


def _fallback(limits: ChipLimits, node: onnx.NodeProto, entry_name: str, reasons: list[tuple[str, str, str]],
              facts: GraphFacts, extra: Iterable[Finding] = ()) -> Placement:
    cpu = limits.cpu_fallback(entry_name, node.op_type)
    if cpu is not None and not _cpu_limit_broken(cpu, node, facts):
        findings = [_finding(limits, node, entry_name, t, s, CPU, cpu, a) for t, s, a in reasons]
        return Placement("CPU", tuple(findings) + tuple(extra))
    if not limits.has_cpu:
        why = f"{limits.display} has no CPU operators"
    elif cpu is not None:
        why = f"{cpu} takes batch size 1 only"
    else:
        why = "no CPU operator for it on this chip (§4)"
    findings = [_finding(limits, node, entry_name, t, s, UNSUPPORTED, suggestion=a, reason=why) for t, s, a in reasons]
    return Placement("NONE", tuple(findings) + tuple(extra))


def _cpu_limit_broken(cpu: str, node: onnx.NodeProto, facts: GraphFacts) -> bool:
    """The CPU operators' own limits that can be read from the graph (batch size 1 only). A Softmax
    is not held to it: rknn-toolkit2 folds the leading dimensions first (MobileSAM's window attention,
    64 windows, runs as ``exSoftmax13`` on RK3566's CPU)."""
    row = _cpu_ops().get(cpu.split(" ", 1)[-1].lower(), {})
    if "batch size 1" in str(row.get("limit", "")) and node.op_type not in _BATCH_FOLDED_OPS:
        shape = facts.shape(next(iter(facts.data_inputs(node)), ""))
        return bool(shape) and len(shape) >= 3 and shape[0] > 1
    return False


def _judged(node: onnx.NodeProto, facts: GraphFacts) -> bool:
    if node.op_type in _SKIPPED_OPS or node.domain not in ("", "ai.onnx"):
        return False
    if any(p.key == "openrknn.preprocess" for p in node.metadata_props):
        return False   # the mean/std steps build() adds: the NPU's input stage
    if not facts.data_inputs(node):
        return False   # folded at build time
    group = facts.layer(node)
    return group is None or group.main is node or group.main.output[:1] == node.output[:1]


def _entry_name(node: onnx.NodeProto, facts: GraphFacts, standalone: bool = False) -> str | None:
    op = node.op_type
    group = None if standalone else facts.layer(node)
    if group is not None and len(group.nodes) > 1:
        if group.activation == npu_layers.LAYER_NORM:
            return "exNorm"
        if group.activation == npu_layers.ATTENTION:
            return "exSDPAttention"
        if group.activation == npu_layers.ATTENTION_SOFTMAX:
            return None   # an unfused attention's Softmax layer (with the bias Add before it): judged node by node
        if group.activation and op not in npu_layers.FUSING_PRODUCERS:
            return _ACTIVATION_ENTRY.get(group.activation, group.activation)
    if op == "Conv":
        return "Depthwise Convolution" if _is_depthwise(node, facts) else "Convolution"
    if op == "MatMul":
        return "Convolution" if len(node.input) > 1 and facts.is_const(node.input[1]) else "exMatMul"
    if op in _ENTRY_OF_OP:
        return _ENTRY_OF_OP[op]
    return op if op in _SAME_NAME_OPS else None


def _is_depthwise(node: onnx.NodeProto, facts: GraphFacts) -> bool:
    group = _attr(node, "group", 1)
    weight = facts.shape(node.input[1]) if len(node.input) > 1 else None
    return group > 1 and bool(weight) and weight[1] == 1 and weight[0] == group


def _attr(node: onnx.NodeProto, name: str, default: Any) -> Any:
    for attr in node.attribute:
        if attr.name == name:
            return onnx.helper.get_attribute_value(attr)
    return default


# ----------------------------------------------------------------------------- the checks
# Each check yields (family, limit text, suggestion); family BOARD = hardware limit, else CPU fallback.
def _check_dtype(node, facts, entry, limits, override):
    allowed = set()
    for types in (entry.get("dtypes") or {}).values():
        allowed.update(t for t in types if t in ("int8", "int16", "float16"))
    data = facts.data_inputs(node)
    dtype = facts.dtype(data[0], override) if data else None
    if allowed and dtype and dtype not in allowed:
        # an int8 LayerNorm: rknn-toolkit2 prints exNorm INT8 on the NPU (PP-OCRv4 rec, FPN, a transformer encoder)
        norm = dtype == "int8" and _entry_name(node, facts) == "exNorm"
        yield ("norm_int8" if norm else "dtype"), f"data type {dtype} not in {sorted(allowed)}", ""


def _check_quant(node, facts, entry, limits, override):
    tensors = entry.get("tensors") or {}
    channel_ok = any("per-channel" in (t.get("quant") or []) for t in tensors.values() if t.get("io") == "in")
    activation_channel_ok = any("per-channel" in (t.get("quant") or []) for name, t in tensors.items()
                                if t.get("io") == "in" and name not in ("weight", "W", "R", "B"))
    for name in node.input:
        if not name or not facts.per_channel(name):
            continue
        const = facts.is_const(name)
        if (const and not channel_ok) or (not const and not activation_channel_ok):
            yield "quantization", f"'{name}' is quantized per-channel; the entry takes per-layer only", ""


def _as_4d(shape: tuple[int, ...] | None) -> tuple[int, ...] | None:
    if shape is None or len(shape) > 4:
        return None
    return (1,) * (4 - len(shape)) + tuple(shape)


_EXPAND_PATTERNS = ("b,c,1,w", "b,1,1,w", "b,c,h,1", "b,1,h,1", "b,c,1,1")


def _broadcast_ok(source: tuple[int, ...], target: tuple[int, ...], patterns: tuple[str, ...]) -> bool:
    if source == target or math.prod(source) == 1:
        return True
    for pattern in patterns:
        letters = pattern.split(",")
        if all((source[i] == target[i]) if letters[i] != "1" else source[i] == 1 for i in range(4)) \
                and all(1 <= target[i] <= 8192 for i in range(4) if letters[i] == "1"):
            return True
    return False


def _check_broadcast(node, facts, entry, limits, override):
    rules = entry.get("broadcast") or {}
    if not rules:
        return
    text = " ".join(str(v) for v in rules.values())
    out = _as_4d(facts.shape(node.output[0])) if node.output else None
    if out is None:
        return
    if "Expand rules" in text:
        patterns = _EXPAND_PATTERNS
        words = "one of the five Expand patterns ([b,c,1,w], [b,1,1,w], [b,c,h,1], [b,1,h,1], [b,c,1,1])"
    elif "[b,c,1,1]" in text:
        patterns, words = ("b,c,1,1",), "[b,c,1,1] or a scalar only"
    else:
        patterns, words = (), "no broadcasting"
    for name in node.input:
        shape = _as_4d(facts.shape(name)) if name else None
        if shape is None or len(shape) != 4:
            continue
        if not _broadcast_ok(shape, out, patterns):
            yield "broadcast", f"input '{name}' {list(facts.shape(name))} broadcasts to {list(out)}: allowed is {words}", ""


def _limit_text(key: str, value: int, rule: Any) -> str:
    """'kernel w 40 outside 1-31' / 'stride h 3 outside [1, 2, 4, 8]'."""
    return f"{key.replace('_', ' ')} {value} outside {_range_text(key, rule).split(' ', 1)[1]}"


def _range_text(key: str, rule: Any) -> str:
    if isinstance(rule, dict):
        return f"{key} {rule.get('min')}-{rule.get('max')}"
    return f"{key} in {rule}"


def _within(value: int, rule: Any) -> bool:
    if isinstance(rule, dict) and "min" in rule:
        return rule["min"] <= value <= rule["max"]
    if isinstance(rule, list) and all(isinstance(v, int) for v in rule):
        return value in rule
    return True


def _conv_geometry(node, facts) -> dict[str, int] | None:
    weight = facts.shape(node.input[1]) if len(node.input) > 1 else None
    x = facts.shape(node.input[0])
    if not weight or len(weight) not in (3, 4):
        return None
    kh, kw = (weight[2], weight[3]) if len(weight) == 4 else (1, weight[2])   # 1-D convolutions run as 1×k
    strides = list(_attr(node, "strides", [1, 1]))
    dilations = list(_attr(node, "dilations", [1, 1]))
    pads = list(_attr(node, "pads", [0, 0, 0, 0]))
    if len(weight) == 3:
        strides, dilations = [1] + strides[-1:], [1] + dilations[-1:]
        pads = [0, pads[0] if pads else 0, 0, pads[1] if len(pads) > 1 else 0]
    geo = {"kernel_h": kh, "kernel_w": kw, "stride_h": strides[0], "stride_w": strides[-1],
           "dilation_h": dilations[0], "dilation_w": dilations[-1],
           "pad_top": pads[0], "pad_left": pads[1], "pad_bottom": pads[2], "pad_right": pads[3]}
    if _attr(node, "auto_pad", b"NOTSET") not in (b"NOTSET", "NOTSET") and x:
        geo.update({k: 0 for k in ("pad_top", "pad_left", "pad_bottom", "pad_right")})   # computed by the runtime
    shape = _as_4d(x)
    geo["width"] = shape[3] if shape else 0
    geo["height"] = shape[2] if shape else 0
    return geo


def _check_conv(node, facts, entry, limits, override):
    constraints = entry.get("constraints") or {}
    geo = _conv_geometry(node, facts) if node.op_type in ("Conv", "ConvTranspose") else None
    if geo is None:
        return
    broken = [key for key in _HARDWARE_KEYS if key in constraints and not _within(geo[key], constraints[key])]
    for key in broken:
        if key.startswith("pad"):
            continue
        advice = _kernel_advice(geo, constraints, key) if key.startswith("kernel") else ""
        yield _conv_family(node, facts, key), f"{_limit_text(key, geo[key], constraints[key])}", advice
    pads = [key for key in broken if key.startswith("pad")]
    if pads:   # one finding for the four pads
        values = [geo[k] for k in ("pad_top", "pad_left", "pad_bottom", "pad_right")]
        allowed = _limit_text(pads[0], 0, constraints[pads[0]]).rsplit(" ", 1)[1]
        yield _conv_family(node, facts, pads[0]), f"pads {values} (top, left, bottom, right) outside {allowed}", ""
    dkh = geo["kernel_h"] * geo["dilation_h"] - geo["dilation_h"] + 1
    if dkh > 1 and geo["width"] >= 16383:
        yield BOARD, f"input width {geo['width']} must be < 16383 when the dilated kernel height is {dkh}", ""
    if node.op_type == "ConvTranspose":
        yield from _check_deconv(node, facts, geo, constraints)
    if not broken:   # a layer the converter rewrites has other kernels than the ones the rule would read
        yield from _check_first_layer(node, facts, geo, limits, override)


def _conv_family(node: onnx.NodeProto, facts: GraphFacts, key: str) -> str:
    """conv_kernel / conv_stride / conv_pad / conv_dilation, depthwise_kernel, deconv_stride ..."""
    kind = "deconv" if node.op_type == "ConvTranspose" else "depthwise" if _is_depthwise(node, facts) else "conv"
    return f"{kind}_{key.split('_')[0]}"


def _kernel_advice(geo: dict[str, int], constraints: dict[str, Any], key: str) -> str:
    axis = key.split("_")[1]
    size, limit = geo[key], constraints[key].get("max", 31) if isinstance(constraints[key], dict) else 31
    parts = -(-size // limit)
    first = -(-size // parts)
    pieces = [first] * (parts - 1) + [size - first * (parts - 1)]
    shape = (lambda k: f"{geo['kernel_h']}×{k}") if axis == "w" else (lambda k: f"{k}×{geo['kernel_w']}")
    column = "columns" if axis == "w" else "rows"
    return (f"split the {shape(size)} kernel into {len(pieces)} convolutions of "
            f"{' + '.join(shape(k) for k in pieces)} over the same input, the part starting at kernel offset "
            f"{first} reading the input shifted by {first * geo['dilation_' + axis]} {column} (a Slice), and add "
            f"their outputs; each kernel then stays within {limit}")


def _check_deconv(node, facts, geo, constraints):
    group = _attr(node, "group", 1)
    weight = facts.shape(node.input[1]) or ()
    x = _as_4d(facts.shape(node.input[0]))
    if group != 1 and not (x and weight and group == x[1] and weight[1] == 1):
        yield BOARD, f"group {group}: only 1, or group == channels (depthwise)", ""
    if (geo["dilation_h"], geo["dilation_w"]) != (1, 1) and (geo["kernel_h"], geo["kernel_w"]) != (1, 1):
        yield BOARD, "dilation other than 1 needs a 1×1 kernel", ""
    out = _as_4d(facts.shape(node.output[0]))
    if not x or not out:
        return
    values = {**geo, "height": x[2], "width": x[3], "output_h": out[2], "output_w": out[3]}
    for condition in constraints.get("pad_rejected_if") or []:
        if "output_" in condition:
            # read as printed, the output-size conditions reject every ConvTranspose whose bottom pad is
            # below kernel-1 (the common k4 s2 p1 upsampler included): not applied (docs/npu-limits.md)
            continue
        try:
            rejected = rule_holds(condition, values)
        except (KeyError, ValueError, SyntaxError):
            continue
        if rejected:
            yield BOARD, f"pads rejected: {condition}", ""


def _check_first_layer(node, facts, geo, limits, override):
    source = facts.reads_graph_input(node)
    shape = _as_4d(facts.shape(source)) if source else None
    if not source or not shape or len(facts.shape(source)) != 4 or shape[1] not in (1, 3, 4):
        return
    dtype = facts.dtype(node.input[0], override) or facts.dtype(source, override) or "float16"
    rule = limits.first_layer.get(dtype) or limits.first_layer.get("int8" if dtype != "float16" else "float16")
    if not rule:
        return
    kind = "deconv" if node.op_type == "ConvTranspose" else "depthwise" if _is_depthwise(node, facts) else "conv"
    dkh = geo["kernel_h"] * geo["dilation_h"] - geo["dilation_h"] + 1
    dkw = geo["kernel_w"] * geo["dilation_w"] - geo["dilation_w"] + 1
    n_rule = rule[kind]
    n = n_rule["base"] - max(math.ceil(dkh * dkw / n_rule["divisor"]), n_rule["floor"])
    width = shape[3]
    if n < 1:   # the list says 1-7, but RK3588's own formula gives up to 9: only the lower bound is read
        yield BOARD, f"first layer: N = {n} for a {dkh}×{dkw} dilated kernel (must be at least 1)", ""
        return
    product, bound = width * dkh, rule["dkh_width_factor"] * n
    over = product >= bound if rule["strict"] else product > bound
    if over or width > rule["width_max"]:
        relation = "<" if rule["strict"] else "<="
        yield BOARD, (f"first layer ({dtype}): input width {width} × dilated kernel height {dkh} = {product} must be "
                      f"{relation} {rule['dkh_width_factor']}·N = {bound} (N = {n}) and width <= {rule['width_max']}"), ""


def _check_pool(node, facts, entry, limits, override):
    constraints = entry.get("constraints") or {}
    x = _as_4d(facts.shape(node.input[0]))
    if node.op_type in ("MaxPool", "AveragePool"):
        kernel = list(_attr(node, "kernel_shape", [1, 1]))
        strides = list(_attr(node, "strides", [1] * len(kernel)))
        pads = list(_attr(node, "pads", [0] * 2 * len(kernel)))
        if len(kernel) == 1:
            kernel, strides, pads = [1] + kernel, [1] + strides, [0, pads[0], 0, pads[1]]
        values = {"kernel_h": kernel[0], "kernel_w": kernel[-1], "stride_h": strides[0], "stride_w": strides[-1],
                  "pad_top": pads[0], "pad_left": pads[1], "pad_bottom": pads[2], "pad_right": pads[3]}
        for key, value in values.items():
            if key in constraints and not _within(value, constraints[key]):
                family = "pool_kernel" if key.startswith("kernel") else "pool_stride_pad"
                yield family, _limit_text(key, value, constraints[key]), ""
        auto_pad = _attr(node, "auto_pad", b"NOTSET")
        auto_pad = auto_pad.decode() if isinstance(auto_pad, bytes) else auto_pad
        if auto_pad not in constraints.get("auto_pad", ["NOTSET"]):
            yield "pool_auto_pad", f"auto_pad {auto_pad}: only {constraints.get('auto_pad', ['NOTSET'])}", ""
        if _attr(node, "ceil_mode", 0) and "not supported" in str(constraints.get("ceil_mode", "")):
            yield "pool_ceil_mode", "ceil_mode=1 is not supported", ""
        if "kernel_1x1" in constraints and kernel[0] == kernel[-1] == 1:
            yield "pool_kernel_1x1", f"a 1×1 kernel: {constraints['kernel_1x1']}", ""
    if x:
        for key, index in (("input_channel", 1), ("input_height", 2), ("input_width", 3)):
            if node.op_type == "GlobalAveragePool" and key != "input_channel":
                # a larger plane becomes a cascade of depthwise convolutions of at most 7×7 each (rknn-toolkit2
                # 2.5.0's layer tables; profile.layers._pooling_cascade), never a CPU layer
                continue
            if key in constraints and not _within(x[index], constraints[key]):
                family = "global_pool_size" if node.op_type.startswith("Global") else "pool_input_size"
                yield family, "input " + _limit_text(key.split("_")[1], x[index], constraints[key]), ""


def _check_transpose(node, facts, entry, limits, override):
    constraints = entry.get("constraints") or {}
    shape = facts.shape(node.input[0])
    if shape is None:
        return
    rank = len(shape)
    perm = tuple(_attr(node, "perm", list(range(rank))[::-1]))
    if rank > 4:   # axes that stay neighbours merge (the converter reshapes around the transpose)
        reduced = _merged_perm(tuple(shape), perm)
        if reduced is None:
            yield "transpose_rank", f"a {rank}-D Transpose: the NPU permutes the four NCHW axes only", ""
            return
        shape, perm = reduced
        rank = len(shape)
    lead = 4 - rank
    perm4 = tuple(range(lead)) + tuple(p + lead for p in perm)
    shape4 = _as_4d(shape)
    dtype = facts.dtype(node.input[0], override) or "float16"
    rule = transpose_rule(perm4, limits, dtype)
    values = _transpose_values(shape4, constraints)
    if rule_holds(rule, values):
        return
    what = "not supported" if rule.upper().startswith("NOT SUPPORTED") else f"size rule {rule} fails for {list(shape4)}"
    family = "transpose_perm" if rule.upper().startswith("NOT SUPPORTED") else "transpose_size"
    yield family, f"perm {list(perm4)} ({dtype}): {what}", _transpose_advice(perm4, shape4, limits, dtype, constraints)


def _merged_perm(shape: tuple[int, ...], perm: tuple[int, ...]) -> tuple[tuple[int, ...], tuple[int, ...]] | None:
    """The same transpose with size-1 axes dropped and neighbouring axes that move together merged;
    None when it still has more than 4 axes."""
    keep = [a for a in range(len(shape)) if shape[a] != 1]
    order = [a for a in perm if shape[a] != 1]
    groups: list[list[int]] = []
    for axis in order:
        if groups and axis == groups[-1][-1] + 1 and keep.index(axis) == keep.index(groups[-1][-1]) + 1:
            groups[-1].append(axis)
        else:
            groups.append([axis])
    if len(groups) > 4:
        return None
    by_input = sorted(groups, key=lambda g: g[0])
    merged_shape = tuple(math.prod(shape[a] for a in g) for g in by_input)
    merged_perm = tuple(by_input.index(g) for g in groups)
    return merged_shape or (1,), merged_perm or (0,)


def _transpose_values(shape4: tuple[int, ...], constraints: dict[str, Any]) -> dict[str, int]:
    n1, c1, h1, w1 = shape4
    return {"n1": n1, "c1": c1, "h1": h1, "w1": w1,
            "p": int(constraints.get("p", 8192)), "q": int(constraints.get("q", 2048))}


def _transpose_advice(perm, shape4, limits, dtype, constraints) -> str:
    """Two perms this chip runs that compose to ``perm`` for this shape, or the perms it runs."""
    runs = []
    for candidate in itertools.permutations(range(4)):
        if candidate != tuple(range(4)) and not transpose_rule(candidate, limits, dtype).upper().startswith("NOT"):
            runs.append(candidate)
    for first in runs:
        if not rule_holds(transpose_rule(first, limits, dtype), _transpose_values(shape4, constraints)):
            continue
        middle = tuple(shape4[i] for i in first)
        for second in runs:
            if tuple(first[i] for i in second) == perm and \
                    rule_holds(transpose_rule(second, limits, dtype), _transpose_values(middle, constraints)):
                return f"run it as Transpose {list(first)} then {list(second)} (both on the NPU for this shape)"
    listed = ", ".join(str(list(p)) for p in runs) or "none"
    return (f"{limits.display} runs only these perms on the NPU: {listed}; move the layout change out of the model "
            f"(e.g. read the NCHW output directly) or keep it on the CPU")


def _check_resize(node, facts, entry, limits, override):
    constraints = entry.get("constraints") or {}
    mode = _text_attr(node, "mode", "nearest")
    default_coordinate = "half_pixel" if node.op_type == "Resize" else "asymmetric"   # Upsample: asymmetric
    coordinate = _text_attr(node, "coordinate_transformation_mode", default_coordinate)
    x, y = _as_4d(facts.shape(node.input[0])), _as_4d(facts.shape(node.output[0]))
    factors = [y[i] / x[i] for i in (2, 3)] if x and y and x[2] and x[3] else None
    scales = facts.array(node.input[2]) if len(node.input) > 2 and node.input[2] else None
    if factors and scales is not None and scales.size == 4:
        factors = [float(scales[2]), float(scales[3])]   # the factors as written (sizes are rounded down)
    integer_up = bool(factors) and all(f == int(f) and f >= 1 for f in factors)
    if mode not in constraints.get("mode", ["nearest", "linear"]):
        yield "resize_mode", f"mode {mode}: only {constraints.get('mode')}", ""
    # nearest with integer factors picks the same pixels with any coordinate mode and rounding, so an
    # 'asymmetric'/'floor' exporter default is the listed half_pixel resize
    listed = constraints.get("coordinate_transformation_mode", [])
    if coordinate not in listed and not (mode == "nearest" and integer_up):
        yield "resize_coordinate", f"coordinate_transformation_mode {coordinate}: only {listed}", ""
    for name, default in (("antialias", 0), ("exclude_outside", 0)):
        if _attr(node, name, default) != default:
            yield "resize_attribute", f"attribute {name} must keep its default", ""
    if _attr(node, "axes", None) is not None:
        yield "resize_attribute", "attribute axes must keep its default", ""
    # roi is only read by tf_crop_and_resize, which the coordinate-mode check already reports
    if not factors:
        return
    special = x[2] == x[3] == 1   # [1,c,1,1] -> [1,c,h,w]
    in_range = all(f == int(f) and (f == 1 or 2 <= f <= 8) for f in factors) and any(f != 1 for f in factors)
    if not special and not in_range:
        printed = " × ".join(f"{f:g}" for f in factors)
        yield _resize_family(factors, mode), f"scale (H × W) {printed} ({x[2]}×{x[3]} -> {y[2]}×{y[3]}): integer factors 2-8 only", \
            _resize_advice(factors, x, mode)


def _resize_family(factors: list[float], mode: str) -> str:
    if mode == "nearest":
        return "resize_nearest_scale"
    if all(0 < f < 1 and abs(1 / f - round(1 / f)) < 1e-6 for f in factors if f != 1):
        return "resize_downscale"
    return "resize_scale"


def _resize_advice(factors: list[float], x: tuple[int, ...], mode: str) -> str:
    tips = []
    for axis, factor in zip(("H", "W"), factors):
        if factor == int(factor) and 1 <= factor <= 8:
            continue
        fraction = Fraction(factor).limit_denominator(8)
        size = x[2 if axis == "H" else 3]
        choices = sorted({min(8, max(2, math.floor(factor))), min(8, max(2, math.ceil(factor)))})
        tip = f"{axis}: " + " or ".join(f"×{c}" for c in choices) + f" (size{'s' if len(choices) > 1 else ''} " \
            + " / ".join(str(size * c) for c in choices) + ")"
        if fraction.denominator > 1 and 2 <= fraction.numerator <= 8 and fraction.denominator <= 8 and \
                abs(float(fraction) - factor) < 1e-6:
            tip += (f", or ×{fraction.numerator} on the NPU then a stride-{fraction.denominator} 1×1 pooling "
                    f"(= ×{factor:g}; {mode} values differ slightly from a direct resize)")
        tips.append(tip)
    return "use an integer scale — " + "; ".join(tips) if tips else ""


def _text_attr(node: onnx.NodeProto, name: str, default: str) -> str:
    value = _attr(node, name, default)
    return value.decode() if isinstance(value, bytes) else str(value)


def _check_axis(node, facts, entry, limits, override):
    constraints = entry.get("constraints") or {}
    allowed = constraints.get("axis")
    shape = facts.shape(node.input[0])
    if not isinstance(allowed, list) or shape is None:
        return
    rank = len(shape)
    softmax = node.op_type in ("Softmax", "Hardmax")
    default = (-1 if facts.opset >= 13 else 1) if softmax else 0   # Softmax's default axis changed in opset 13
    axis = int(_attr(node, "axis", default))
    axis4 = (axis + rank if axis < 0 else axis) + (4 - rank)
    if rank > 4 and not (shape[0] == 1 and axis4 >= 1):
        axis4 = None   # a batch-1 5-D tensor is folded to 4-D (its leading dimensions merged; _check_rank)
    if axis4 is None or axis4 not in allowed:
        yield ("softmax_axis" if softmax else "axis"), f"axis {axis} (axis {axis4} of the 4-D NCHW tensor) not in {allowed}", ""
        return
    x = _as_4d(shape)
    channel = constraints.get("input_channel")
    if isinstance(channel, dict) and not _within(x[1], channel):
        yield "softmax_size", "input " + _limit_text("channel", x[1], channel), ""
    if axis4 == 3 and "1-8192" in str(constraints.get("input_width", "")) and not 1 <= x[3] <= 8192:
        yield "softmax_size", f"input width {x[3]} outside 1-8192 for axis 3", ""


def _check_slice(node, facts, entry, limits, override):
    steps = facts.array(node.input[4]) if len(node.input) > 4 and node.input[4] else None
    if steps is not None and any(int(s) != 1 for s in steps.ravel()):
        x = _as_4d(facts.shape(node.input[0]))
        if not (x and x[2] * x[3] == 1):
            # strided along the height/width only (a space-to-depth "Focus"): the converter rewrites it
            family = "slice_spatial_step" if x and _strided_axes(node, facts, steps) <= {2, 3} else "slice_step"
            yield family, f"steps {[int(s) for s in steps.ravel()]}: all steps must be 1", ""


def _strided_axes(node, facts, steps) -> set[int]:
    """The axes (of the 4-D input) a Slice steps by more than 1."""
    rank = len(facts.shape(node.input[0]) or ())
    axes = facts.array(node.input[3]) if len(node.input) > 3 and node.input[3] else None
    axes = [int(a) for a in axes.ravel()] if axes is not None else list(range(len(steps.ravel())))
    return {a % rank + (4 - rank) for a, step in zip(axes, steps.ravel()) if int(step) != 1}


def _check_pad(node, facts, entry, limits, override):
    constraints = entry.get("constraints") or {}
    mode = _text_attr(node, "mode", "constant")
    if mode not in constraints.get("mode", ["constant", "reflect"]):
        yield "pad_mode", f"mode {mode}: only {constraints.get('mode')}", ""
    reflect = constraints.get("reflect")
    x = _as_4d(facts.shape(node.input[0]))
    if mode == "reflect" and isinstance(reflect, dict) and x:
        for key, index in (("channel", 1), ("height", 2), ("width", 3)):
            if key in reflect and not _within(x[index], reflect[key]):
                yield "pad_size", "reflect pad: input " + _limit_text(key, x[index], reflect[key]), ""


def _check_pow(node, facts, entry, limits, override):
    allowed = (entry.get("constraints") or {}).get("exponent_values")
    exponent = facts.array(node.input[1]) if len(node.input) > 1 else None
    if allowed and exponent is not None and (exponent.size != 1 or float(exponent.ravel()[0]) not in allowed):
        yield "pow_exponent", f"exponent {exponent.ravel().tolist()[:4]}: only a single value in {allowed}", ""


def _check_rank(node, facts, entry, limits, override):
    for name in list(facts.data_inputs(node)) + [o for o in node.output if o]:
        shape = facts.shape(name)
        if shape is not None and len(shape) > 4:
            # batch 1: rknn-toolkit2 folds the leading dimensions into 4-D and keeps the layer (yolov5's decode)
            family = "rank_folded" if shape[0] == 1 else "rank"
            yield family, f"tensor '{name}' is {len(shape)}-D: NPU entries take at most 4-D (NCHW)", ""
            return


_COMMON_CHECKS = (_check_dtype, _check_quant)


def _checks_for(entry_name: str) -> tuple:
    specific = {
        "Convolution": (_check_conv,), "Depthwise Convolution": (_check_conv,), "ConvTranspose": (_check_conv,),
        "Transpose": (_check_transpose,), "Resize": (_check_resize, _check_rank), "Softmax": (_check_axis, _check_rank),
        "Hardmax": (_check_axis,), "Concat": (_check_axis, _check_rank), "Split": (_check_axis, _check_rank),
        "Gather": (_check_axis,), "Slice": (_check_slice,), "Pad": (_check_pad,), "Pow": (_check_pow,),
        **{name: (_check_pool,) for name in _POOL_ENTRIES},
        **{name: (_check_broadcast, _check_rank) for name in ("Add", "Sub", "Mul", "Div", "Max", "Min", "Greater", "Where")},
    }
    return _COMMON_CHECKS + specific.get(entry_name, ())


# ----------------------------------------------------------------------------- whole graphs
def check_graph(model: onnx.ModelProto, chip: Any, tensor_dtypes: dict[str, str] | None = None,
                quant_params: dict[str, dict[str, Any]] | None = None,
                dtype_override: str | None = None) -> list[Finding]:
    """Every finding of every layer of ``model`` on ``chip``, in graph order."""
    facts = GraphFacts(model, tensor_dtypes, quant_params)
    findings: list[Finding] = []
    for node in facts.graph.node:
        findings.extend(placement(node, facts, chip, dtype_override).findings)
    return findings


def placements(model: onnx.ModelProto, chip: Any, tensor_dtypes: dict[str, str] | None = None,
               quant_params: dict[str, dict[str, Any]] | None = None) -> dict[str, Placement]:
    """Node name -> placement for every node that does not stay on the NPU without remarks."""
    facts = GraphFacts(model, tensor_dtypes, quant_params)
    out = {}
    for node in facts.graph.node:
        found = placement(node, facts, chip)
        if found.findings:
            out[node.name or node.output[0]] = found
    return out


def with_cost(finding: Finding, cpu_time_us: float | None) -> Finding:
    return replace(finding, cpu_time_us=cpu_time_us)


__all__ = ["Finding", "Placement", "ChipLimits", "GraphFacts", "placement", "check_graph", "placements",
           "limits_for", "covered_chips", "rule_holds", "transpose_rule", "CPU", "UNSUPPORTED", "BOARD", "REWRITE", "KEPT"]
