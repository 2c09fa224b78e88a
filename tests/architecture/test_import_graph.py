"""The package's import graph has no circles, and no import sits inside a function to dodge one.

Read from the source with ``ast`` (nothing is imported). An edge ``a → b`` is a module-level import
of ``b`` in ``a`` (``if TYPE_CHECKING:`` blocks excluded: they never run); importing ``p.q.r`` also runs
the package ``p.q``'s ``__init__``, so it counts as an edge to ``p.q`` too, except from inside ``p.q``
(a submodule importing a sibling is how every package works). docs/architecture.md draws the layers.
"""
from __future__ import annotations

import ast
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[2] / "openrknn"


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(PACKAGE.parent).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


MODULES = {_module_name(p): p for p in PACKAGE.rglob("*.py")}


def _is_package(name: str) -> bool:
    return MODULES[name].name == "__init__.py"


def _absolute(node: ast.ImportFrom, importer: str) -> str:
    if not node.level:
        return node.module or ""
    base = importer.split(".")
    base = base if _is_package(importer) else base[:-1]
    base = base[:len(base) - node.level + 1]
    return ".".join(base + ([node.module] if node.module else []))


def _targets(node: ast.AST, importer: str) -> list[str]:
    """The openrknn modules an import statement loads (a ``from`` name may itself be a submodule)."""
    if isinstance(node, ast.Import):
        names = [alias.name for alias in node.names]
    else:
        module = _absolute(node, importer)
        names = [f"{module}.{alias.name}" if f"{module}.{alias.name}" in MODULES else module
                 for alias in node.names]
    found = []
    for name in names:
        while name and name not in MODULES:    # `import a.b.c` of a non-module name: its nearest module
            name = name.rpartition(".")[0]
        if name.startswith("openrknn"):
            found.append(name)
    return found


def _is_type_checking(node: ast.If) -> bool:
    test = node.test
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or \
        (isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING")


def _module_level_imports(tree: ast.Module) -> list[ast.AST]:
    """Import statements that run when the module is imported (top level, or in if/try at top level)."""
    found, stack = [], list(tree.body)
    while stack:
        node = stack.pop()
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            found.append(node)
        elif isinstance(node, ast.If):
            if not _is_type_checking(node):
                stack.extend(node.body + node.orelse)
        elif isinstance(node, ast.Try):
            stack.extend(node.body + node.orelse + node.finalbody + [s for h in node.handlers for s in h.body])
        elif isinstance(node, ast.With):
            stack.extend(node.body)
    return found


def _function_level_imports(tree: ast.Module) -> list[ast.AST]:
    deferred = []
    for function in ast.walk(tree):
        if isinstance(function, (ast.FunctionDef, ast.AsyncFunctionDef)):
            deferred.extend(n for n in ast.walk(function) if isinstance(n, (ast.Import, ast.ImportFrom)))
    return deferred


def _edges(name: str, targets: list[str]) -> set[str]:
    out = set()
    for target in targets:
        parts = target.split(".")
        for i in range(1, len(parts) + 1):
            ancestor = ".".join(parts[:i])
            # the target's packages run first, unless the importer lives inside them already
            if ancestor in MODULES and not (name == ancestor or name.startswith(ancestor + ".")):
                out.add(ancestor)
    out.discard(name)
    return out


def import_graph() -> dict[str, set[str]]:
    """module → the openrknn modules its import runs (module-level imports only)."""
    graph = {}
    for name, path in MODULES.items():
        tree = ast.parse(path.read_text(), str(path))
        graph[name] = _edges(name, [t for node in _module_level_imports(tree) for t in _targets(node, name)])
    return graph


def circles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components with more than one module (Tarjan), each sorted."""
    index, low, on_stack, stack, found = {}, {}, set(), [], []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in sorted(graph.get(v, ())):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return found


def test_the_import_graph_has_no_circles():
    found = circles(import_graph())
    assert not found, "import circles:\n" + "\n".join(" ↔ ".join(c) for c in found)


def test_no_circle_hides_behind_imports_inside_functions():
    """Counting the imports inside functions too, there is still no circle: a deferred import is fine for
    a heavy or optional dependency, not as a way to let two modules need each other."""
    graph = import_graph()
    deferred: dict[tuple[str, str], int] = {}
    for name, path in MODULES.items():
        for node in _function_level_imports(ast.parse(path.read_text(), str(path))):
            for target in _edges(name, _targets(node, name)):
                if target not in graph[name]:
                    deferred.setdefault((name, target), node.lineno)
    full = {name: graph[name] | {t for (n, t) in deferred if n == name} for name in graph}
    report = []
    for circle in circles(full):
        members = set(circle)
        hidden = sorted(f"{n}:{line} → {t}" for (n, t), line in deferred.items() if n in members and t in members)
        report.append(" ↔ ".join(circle) + "\n    closed inside functions by: " + "; ".join(hidden))
    assert not report, "circles hidden by function-level imports:\n" + "\n".join(report)


def test_the_checker_sees_a_circle():
    assert circles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
    assert circles({"a": {"b"}, "b": set()}) == []


# the stages below the facade; none of them may import it (docs/architecture.md)
STAGES = ("chips", "graph", "frontends", "quant", "sim", "profile", "analysis", "evaluation", "model_file",
          "export", "codegen", "runtime", "report", "compile", "pipeline")


def test_no_stage_imports_the_facade():
    """Counting imports inside functions too: the facade (``openrknn.api.rknn``) sits above every stage."""
    wrong = []
    for name, path in MODULES.items():
        if name.split(".")[1:2] and name.split(".")[1] in STAGES:
            tree = ast.parse(path.read_text(), str(path))
            nodes = [n for n in ast.walk(tree) if isinstance(n, (ast.Import, ast.ImportFrom))]
            for node in nodes:
                if "openrknn.api.rknn" in _targets(node, name) or \
                        ("openrknn.api" in _targets(node, name) and any(a.name == "RKNN" for a in node.names)):
                    wrong.append(f"{name}:{node.lineno}")
    assert not wrong, "stages importing the RKNN facade:\n" + "\n".join(wrong)


def test_importing_the_lite_runtime_does_not_load_the_facade():
    import subprocess
    import sys
    code = "import sys, openrknn.runtime.lite; print('openrknn.api.rknn' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                         cwd=PACKAGE.parent).stdout.strip()
    assert out == "False"


# the build flows down through one module: the facade calls it once per build-like API and holds no
# build logic of its own (issue 31: auto_hybrid and hybrid step 1/2 used to live in the facade)
FACADE = PACKAGE / "api" / "rknn.py"
PIPELINE_CALLS = {"build": "build", "auto_hybrid_report": "auto_hybrid_report",
                  "hybrid_quantization_step1": "hybrid_step1", "hybrid_quantization_step2": "hybrid_step2"}


def _facade_methods() -> dict[str, ast.FunctionDef]:
    tree = ast.parse(FACADE.read_text(), str(FACADE))
    facade = next(n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == "RKNN")
    return {n.name: n for n in facade.body if isinstance(n, ast.FunctionDef)}


def test_each_build_api_is_one_call_into_the_pipeline():
    methods = _facade_methods()
    for api, function in PIPELINE_CALLS.items():
        calls = [n.func.attr for n in ast.walk(methods[api]) if isinstance(n, ast.Call)
                 and isinstance(n.func, ast.Attribute) and isinstance(n.func.value, ast.Name)
                 and n.func.value.id == "pipeline"]
        assert calls == [function], f"RKNN.{api} should call pipeline.{function} once, calls {calls}"


def test_the_facade_holds_no_build_logic():
    """No auto_hybrid helper, and no use of what the pipeline orchestrates (compile, the precision
    search, calibration, hybrid files) in the facade."""
    methods = _facade_methods()
    assert not [name for name in methods if "hybrid" in name and name not in PIPELINE_CALLS], \
        "auto_hybrid orchestration belongs in openrknn/pipeline.py"
    for api in PIPELINE_CALLS:
        imported = [t for n in ast.walk(methods[api]) if isinstance(n, (ast.Import, ast.ImportFrom))
                    for t in _targets(n, "openrknn.api.rknn")]
        assert not imported, f"RKNN.{api} imports {imported} (the facade imports openrknn.pipeline at module level)"
    assert "openrknn.pipeline" in import_graph()["openrknn.api.rknn"]
    source = FACADE.read_text()
    for name in ("auto_hybrid_build", "calibration_setup", "CalibrationCache", "write_step1", "read_step2"):
        assert name not in source, f"the facade still uses {name}; the pipeline calls it"


def test_the_pipeline_sits_below_the_facade():
    graph = import_graph()
    assert "openrknn.pipeline" in MODULES
    assert not any(t.startswith("openrknn.api") or t.startswith("openrknn.cli") or t.startswith("openrknn.ui")
                   for t in graph["openrknn.pipeline"]), graph["openrknn.pipeline"]
    assert {"openrknn.compile", "openrknn.analysis.mixed_precision"} <= graph["openrknn.pipeline"]


# The package's required dependencies (pyproject [project] dependencies) and the standard library:
# importing them inside a function hides nothing and saves nothing worth a hidden import.
CORE_DEPENDENCIES = {"numpy", "onnx", "onnxruntime", "google", "PIL", "yaml", "tqdm"}
# runs inside rknn-toolkit2's own Python as a subprocess (never imported by openrknn), where `rknn` is
# Rockchip's package and only the vendor's libraries exist
VENDOR_SCRIPTS = {"openrknn.export.rockchip.job"}


def _third_party(node: ast.AST) -> list[str]:
    if isinstance(node, ast.Import):
        return [alias.name.split(".")[0] for alias in node.names]
    return [] if node.level else [(node.module or "").split(".")[0]]


def _optional_extras(name: str, tree: ast.Module) -> set[str]:
    """Top-level packages outside the standard library and the required dependencies that ``name``
    imports at module level."""
    import sys
    return {t for node in _module_level_imports(tree) for t in _third_party(node)
            if t not in sys.stdlib_module_names and t not in CORE_DEPENDENCIES
            and t not in ("openrknn", "rknn", "rknnlite")}


def _lazy_attribute_imports(tree: ast.Module) -> set[ast.AST]:
    """Imports inside a module-level ``__getattr__`` (PEP 562): a package attribute loaded on first use."""
    return {n for f in tree.body if isinstance(f, ast.FunctionDef) and f.name == "__getattr__"
            for n in ast.walk(f) if isinstance(n, (ast.Import, ast.ImportFrom))}


def function_level_imports_without_an_extra() -> list[str]:
    """``module:line statement`` of every import inside a function that loads no optional extra:
    neither a package outside the required dependencies nor an openrknn module that imports one."""
    trees = {name: ast.parse(path.read_text(), str(path)) for name, path in MODULES.items()}
    extras = {name: _optional_extras(name, tree) for name, tree in trees.items()}
    graph = import_graph()

    def reaches_an_extra(module: str) -> bool:
        seen, stack = set(), [module]
        while stack:
            current = stack.pop()
            if current in seen:
                continue
            seen.add(current)
            if extras.get(current):
                return True
            stack.extend(graph.get(current, ()))
        return False

    found = []
    for name, tree in sorted(trees.items()):
        if name in VENDOR_SCRIPTS:
            continue
        lazy = _lazy_attribute_imports(tree)
        for node in _function_level_imports(tree):
            if node in lazy:
                continue
            import sys
            third = [t for t in _third_party(node) if t not in sys.stdlib_module_names
                     and t not in CORE_DEPENDENCIES and t not in ("openrknn", "rknn", "rknnlite")]
            if third or any(reaches_an_extra(t) for t in _targets(node, name)):
                continue
            found.append(f"{name}:{node.lineno} {ast.unparse(node)}")
    return found


def test_imports_inside_functions_are_for_optional_extras_only():
    """An import inside a function is for an optional extra (torch, tflite, cryptography, …), directly or
    through the openrknn module it loads; everything else is imported at module level, where the import
    graph (and the circle check above) sees it."""
    found = function_level_imports_without_an_extra()
    assert not found, "imports inside functions that load no optional extra (move them to the top):\n" + \
        "\n".join(found)


def test_the_function_level_check_sees_a_plain_import(tmp_path):
    tree = ast.parse("def f():\n    import json\n    from openrknn import log\n")
    assert len(_function_level_imports(tree)) == 2
    assert not _optional_extras("x", ast.parse("import numpy\nimport json\n"))
    assert _optional_extras("x", ast.parse("try:\n    import torch\nexcept ImportError:\n    torch = None\n")) == {"torch"}


def test_only_the_pipeline_builds():
    """Every build of the package goes through openrknn/pipeline.py (the facade, the workbench's
    Hybrid page): no other module calls compile.build_model."""
    callers = sorted(name for name, path in MODULES.items()
                     if name not in ("openrknn.compile", "openrknn.pipeline")
                     and any(isinstance(n, ast.Call) and getattr(n.func, "id", getattr(n.func, "attr", None)) == "build_model"
                             for n in ast.walk(ast.parse(path.read_text(), str(path)))))
    assert not callers, f"build_model called outside openrknn/pipeline.py: {callers}"
