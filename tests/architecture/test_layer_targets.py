"""Where a layer runs (NPU or CPU) is decided once, in ``graph/placement`` on the layer record;
the stages that read the record (profile, both simulators, analysis, …) decide no target."""
from __future__ import annotations

import re
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[2] / "openrknn"
# the record's readers; export/tflite places layers for Teflon's delegate (another target), and
# graph/, compile.py, config and model_file/ write or validate the inputs of the decision
READERS = ("profile", "sim", "analysis", "quant", "report", "ui", "cli", "evaluation", "runtime", "codegen", "capi")

# (pattern, why it means the module places layers by itself)
FORBIDDEN = [
    (r"\b(CPU_OPS|NPU_OPS)\b", "an op list that places layers"),
    (r"\b(cpu_ops|npu_ops)\b", "a chip table's placement lists"),
    (r"npu_limit_cpu_layers|\.get\(\s*(placement\.)?LIMIT_CPU_KEY", "the NPU-limit CPU layers read back"),
    (r"\bnpu_limits\.placement\b|\bfrom openrknn\.graph\.npu_limits import\b[^\n]*\bplacement\b",
     "a per-node NPU-limit placement"),
    (r"[\"']op_target[\"']\s*\)?\s*(\bor\b[^\n]*)?\)?\s*\.get\(|\.get\(\s*[\"']op_target[\"']",
     "op_target re-read outside the record"),
    (r"\bdef _target\b", "a target rule of its own"),
    (r"return\s+[\"']CPU[\"']", "a layer put on the CPU by a rule of its own"),
]


def _offences(root: Path) -> list[str]:
    found = []
    for folder in READERS:
        for path in sorted((root / folder).rglob("*.py")):
            text = path.read_text()
            for pattern, why in FORBIDDEN:
                for match in re.finditer(pattern, text):
                    line = text.count("\n", 0, match.start()) + 1
                    found.append(f"{path.relative_to(root.parent)}:{line}: {why}: {match.group(0).strip()[:60]}")
    return found


def test_no_reader_of_the_layer_record_decides_a_target():
    offences = _offences(PACKAGE)
    assert not offences, "place layers in openrknn/graph/placement.py:\n" + "\n".join(offences)


def test_the_grep_catches_the_old_placement_code():
    """Lines of the target rule that profile/layers.py and sim/session.py used to hold."""
    samples = ['                or op in op_support.CPU_OPS or op in self.cost.cpu_ops:',
               '        if op not in op_support.NPU_OPS and op not in self.cost.npu_ops:',
               '        self.limit_cpu = set((model.metadata or {}).get("npu_limit_cpu_layers") or ())',
               '        if (model.metadata.get("op_target") or {}).get(node.name) == "cpu":',
               '    def _target(self, node, layer, record) -> str:',
               '            return "CPU"            # a final Reshape is done by the CPU',
               '    found = npu_limits.placement(node, model, chip.name)']
    for sample in samples:
        assert any(re.search(p, sample) for p, _ in FORBIDDEN), sample
