"""The tests' own house rules: helpers are imported from ``tests/helpers.py``, never from a conftest,
another test module, or ``bench/`` put on ``sys.path``; unit tests assert no wall-clock time."""
from __future__ import annotations

import ast
from pathlib import Path

TESTS = Path(__file__).resolve().parents[1]


def _imports(path: Path) -> list[tuple[int, str]]:
    """(line, module) of every ``import`` / ``from … import`` in a file."""
    found = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.ImportFrom) and node.module:
            found.append((node.lineno, node.module))
        elif isinstance(node, ast.Import):
            found.extend((node.lineno, alias.name) for alias in node.names)
    return found


def _python_files() -> list[Path]:
    return sorted(TESTS.rglob("*.py"))


def test_helpers_are_not_imported_from_a_conftest_or_a_test_module():
    wrong = [f"{path.relative_to(TESTS)}:{line} imports {module}"
             for path in _python_files() for line, module in _imports(path)
             if module.split(".")[-1] == "conftest" or module.split(".")[-1].startswith("test_")]
    assert not wrong, "import shared helpers from tests.helpers:\n" + "\n".join(wrong)


def test_no_test_edits_sys_path():
    wrong = [f"{path.relative_to(TESTS)}" for path in _python_files()
             if path.name != Path(__file__).name
             and ("sys.path.insert" in path.read_text() or "sys.path.append" in path.read_text())]
    assert not wrong, "import bench modules as `bench.<name>` instead:\n" + "\n".join(wrong)


def _is_clock_call(node: ast.AST) -> bool:
    return (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
            and node.func.attr in {"perf_counter", "monotonic", "time"}
            and isinstance(node.func.value, ast.Name) and node.func.value.id == "time")


def test_unit_tests_do_not_assert_wall_clock_time():
    """A timing assert fails on a busy machine and proves nothing on a fast one: bench/ measures ratios."""
    wrong = []
    for path in _python_files():
        for function in ast.walk(ast.parse(path.read_text(), str(path))):
            if not isinstance(function, ast.FunctionDef) or not function.name.startswith("test"):
                continue
            timed = {target.id for node in ast.walk(function) if isinstance(node, ast.Assign)
                     and any(_is_clock_call(n) for n in ast.walk(node.value))
                     for target in node.targets if isinstance(target, ast.Name)}
            for node in ast.walk(function):
                if isinstance(node, ast.Assert) and any(
                        _is_clock_call(n) or isinstance(n, ast.Name) and n.id in timed for n in ast.walk(node.test)):
                    wrong.append(f"{path.relative_to(TESTS)}:{node.lineno}")
    assert not wrong, "move timing to bench/ as a ratio:\n" + "\n".join(wrong)
