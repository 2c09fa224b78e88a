"""Reading an MXNet symbol ``.json``: nodes (op, name, attrs, inputs), arg_nodes and heads."""
from __future__ import annotations

import ast
import json
import os
import re
from dataclasses import dataclass, field
from typing import Any

from openrknn.errors import ModelLoadError
from openrknn.frontends import require_file


@dataclass
class MxNode:
    """One node of the symbol graph.

    Attributes:
        index: position in ``nodes``.
        op: operator name; 'null' for variables (inputs and parameters).
        name: node name (used as ONNX node and tensor name).
        attrs: operator attributes as strings, as MXNet writes them.
        inputs: (node index, output index) pairs.
    """

    index: int
    op: str
    name: str
    attrs: dict[str, str] = field(default_factory=dict)
    inputs: list[tuple[int, int]] = field(default_factory=list)

    def _bad(self, key: str, value: str, what: str) -> ModelLoadError:
        return ModelLoadError(f"node '{self.name}' ({self.op}): attribute {key}={value!r} is not {what}")

    def has(self, key: str) -> bool:
        """Whether attribute ``key`` is set (and not 'None')."""
        return key in self.attrs and self.attrs[key].strip() not in ("None", "")

    def get_str(self, key: str, default: str) -> str:
        """String attribute."""
        return self.attrs[key].strip() if self.has(key) else default

    def get_bool(self, key: str, default: bool) -> bool:
        """Boolean attribute ('True'/'False'/'1'/'0')."""
        if not self.has(key):
            return default
        value = self.attrs[key].strip().lower()
        if value not in ("true", "false", "1", "0"):
            raise self._bad(key, self.attrs[key], "a boolean")
        return value in ("true", "1")

    def get_float(self, key: str, default: float) -> float:
        """Float attribute."""
        if not self.has(key):
            return default
        try:
            return float(self.attrs[key])
        except ValueError as e:
            raise self._bad(key, self.attrs[key], "a number") from e

    def get_int(self, key: str, default: int) -> int:
        """Integer attribute."""
        return int(self.get_float(key, default))

    def get_ints(self, key: str, default: list[int]) -> list[int]:
        """Tuple attribute such as '(3, 3)', '[1,1]' or '2'."""
        if not self.has(key):
            return list(default)
        text = self.attrs[key].strip().replace("L", "")
        try:
            value: Any = ast.literal_eval(text)
        except (ValueError, SyntaxError) as e:
            raise self._bad(key, self.attrs[key], "an integer tuple") from e
        values = list(value) if isinstance(value, (tuple, list)) else [value]
        if not all(isinstance(v, int) or v is None for v in values):
            raise self._bad(key, self.attrs[key], "an integer tuple")
        return [v if v is not None else -1 for v in values]


@dataclass
class Symbol:
    """A parsed symbol file: the nodes and the (node, output) pairs of the heads."""

    nodes: list[MxNode]
    heads: list[tuple[int, int]]
    file: str


def _pairs(entries: Any, where: str, count: int, file: str) -> list[tuple[int, int]]:
    pairs = []
    for entry in entries or []:
        if not isinstance(entry, list) or len(entry) < 2 or not all(isinstance(v, int) for v in entry[:2]):
            raise ModelLoadError(f"{file}: {where} has a malformed input entry {entry!r} "
                                 "(expected [node, output, ...])")
        if not 0 <= entry[0] < count:
            raise ModelLoadError(f"{file}: {where} refers to node {entry[0]}, but there are {count} nodes")
        pairs.append((entry[0], entry[1]))
    return pairs


def parse_symbol(path: str) -> Symbol:
    """Parse a symbol ``.json`` file (``attrs``, ``attr`` and legacy ``param`` attribute keys alike).

    Raises:
        ModelLoadError: missing file, invalid JSON, missing keys, dangling node references.
    """
    require_file(path, "MXNet symbol file")
    file = os.path.basename(path)
    try:
        with open(path, encoding="utf-8") as f:
            doc = json.load(f)
    except (json.JSONDecodeError, UnicodeDecodeError) as e:
        raise ModelLoadError(f"{file} is not valid JSON: {e}") from e
    if not isinstance(doc, dict) or not isinstance(doc.get("nodes"), list) or "heads" not in doc:
        raise ModelLoadError(f"{file} is not an MXNet symbol file: it needs 'nodes' and 'heads'")
    raw_nodes = doc["nodes"]
    nodes = []
    for i, raw in enumerate(raw_nodes):
        if not isinstance(raw, dict) or "op" not in raw or "name" not in raw:
            raise ModelLoadError(f"{file}: node {i} needs 'op' and 'name'")
        attrs = raw.get("attrs", raw.get("attr", raw.get("param", {}))) or {}
        inputs = _pairs(raw.get("inputs"), f"node {i} ('{raw['name']}')", len(raw_nodes), file)
        if any(src >= i for src, _ in inputs):
            raise ModelLoadError(f"{file}: node {i} ('{raw['name']}') reads a later node; nodes must be in "
                                 "topological order")
        nodes.append(MxNode(i, str(raw["op"]), _clean_name(str(raw["name"])), {k: str(v) for k, v in attrs.items()},
                            inputs))
    heads = _pairs(doc["heads"], "heads", len(nodes), file)
    if not heads:
        raise ModelLoadError(f"{file}: 'heads' is empty: the symbol has no outputs")
    return Symbol(nodes, heads, file)


def _clean_name(name: str) -> str:
    return re.sub(r"\s+", "_", name)
