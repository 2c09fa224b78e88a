"""``codegen()``: write a C/C++ deployment demo (CMake project) for a built model (seed 002 §5.12).

Static files are copied from ``templates/``; files ending in ``.in`` are rendered with
:class:`string.Template` using the ``@@{name}`` delimiter (so CMake's ``${...}`` stays untouched).
"""
from __future__ import annotations

import os
import shutil
import string
from importlib import resources
from pathlib import Path
from typing import Any, Sequence

import numpy as np

from openrknn import log
from openrknn.codegen.escape import c_string, inert_text
from openrknn.codegen.golden import golden_data
from openrknn.codegen.io_table import DemoTensor, demo_inputs, demo_outputs, describe, io_table_values
from openrknn.codegen.process_code import process_values
from openrknn.errors import ConfigError
from openrknn.graph.rknn_model import RKNNModel
from openrknn.model_file import save_model

PROJECT_NAME = "rknn_app_demo"
_EXECUTABLE = ("build_linux.sh", "build_android.sh")


class _Template(string.Template):
    delimiter = "@@"


def _template_files() -> list[tuple[str, Any]]:
    """``(relative path, resource)`` of every template file."""
    root = resources.files("openrknn.codegen") / "templates"
    found: list[tuple[str, Any]] = []
    stack: list[tuple[str, Any]] = [("", root)]
    while stack:
        prefix, folder = stack.pop()
        for item in folder.iterdir():
            rel = f"{prefix}{item.name}"
            if item.is_dir():
                stack.append((rel + "/", item))
            elif not item.name.startswith("."):
                found.append((rel, item))
    return sorted(found, key=lambda pair: pair[0])


def _prepare_folder(output_path: str, overwrite: bool) -> Path:
    out = Path(output_path)
    if out.exists() and not out.is_dir():
        raise ConfigError(f"codegen: output_path '{output_path}' is a file; give a folder")
    if out.is_dir() and any(out.iterdir()) and not overwrite:
        raise ConfigError(f"codegen: '{output_path}' already exists and is not empty; pass overwrite=True to "
                          "replace the generated files, or choose another output_path")
    out.mkdir(parents=True, exist_ok=True)
    return out


def _precision(model: RKNNModel) -> str:
    return f"quantized ({model.quantized_dtype})" if model.is_quantized else f"float ({model.float_dtype})"


def _values(model: RKNNModel, model_file: str, inputs: list[DemoTensor], outputs: list[DemoTensor],
            has_golden: bool) -> dict[str, str]:
    rows = [describe(t, "input") for t in inputs] + [describe(t, "output") for t in outputs]
    data_note = ("`input_<i>.npy` from codegen(inputs=...) and the simulator's `golden_output_<i>.npy`"
                 if has_golden else "empty: put `input_<i>.npy` files here (or call codegen with inputs=[...])")
    # names come from the model's maker: comment/Markdown text and C literals are escaped (codegen/escape.py)
    values = {
        "project_name": PROJECT_NAME,
        "model_name": inert_text(Path(model_file).stem),
        "model_file": inert_text(model_file),
        "model_name_c": c_string(Path(model_file).stem),
        "model_file_c": c_string(model_file),
        "platforms": inert_text(", ".join(model.platforms) or "-"),
        "precision": inert_text(_precision(model)),
        "io_rows": "\n".join(rows),
        "data_note": data_note,
    }
    values.update(io_table_values(inputs, outputs))
    values.update(process_values(inputs, outputs))
    return values


def _render(files: list[tuple[str, Any]], out: Path, values: dict[str, str]) -> list[str]:
    written = []
    for rel, resource in files:
        target = out / (rel[:-3] if rel.endswith(".in") else rel)
        target.parent.mkdir(parents=True, exist_ok=True)
        text = resource.read_text(encoding="utf-8")
        if rel.endswith(".in"):
            try:
                text = _Template(text).substitute(values)
            except (KeyError, ValueError) as e:
                raise ConfigError(f"codegen: template '{rel}' needs a value that was not given ({e})") from e
        target.write_text(text, encoding="utf-8")
        if target.name in _EXECUTABLE:
            target.chmod(0o755)
        written.append(str(target.relative_to(out)))
    return written


def _write_model(model: RKNNModel, out: Path, model_path: str | None) -> str:
    (out / "model").mkdir(exist_ok=True)
    name = Path(model_path).name if model_path else "model.rknn"
    if model_path:
        shutil.copyfile(model_path, out / "model" / name)
    else:
        save_model(model, str(out / "model" / name))
    return f"model/{name}"


def generate_demo(model: RKNNModel, output_path: str, inputs: Sequence[str] | None = None, overwrite: bool = False,
                  model_path: str | None = None, custom_ops: Any = None) -> list[str]:
    """Generate the C/C++ demo project for ``model`` in ``output_path``.

    Args:
        model: the built (or loaded) model.
        output_path: folder to create; an existing non-empty folder needs ``overwrite=True``.
        inputs: optional files (one per model input, .npy or image) to run through the simulator;
            the demo then compares its outputs with the simulator's by cosine similarity.
        overwrite: replace the generated files in an existing folder.
        model_path: the exported ``.rknn`` to copy into ``model/`` (else the model is saved there).
        custom_ops: the custom-op registry, for models with custom ops (golden run only).

    Returns:
        The generated files, relative to ``output_path``.

    Example:
        >>> # rknn.export_rknn('mobilenet.rknn'); rknn.codegen('./rknn_app_demo', inputs=['dog.jpg'])
    """
    in_tensors, out_tensors = demo_inputs(model), demo_outputs(model)
    golden = golden_data(model, in_tensors, list(inputs), custom_ops) if inputs else None
    out = _prepare_folder(output_path, overwrite)
    model_file = _write_model(model, out, model_path)
    written = _render(_template_files(), out, _values(model, model_file, in_tensors, out_tensors, golden is not None))
    (out / "data").mkdir(exist_ok=True)
    if golden is not None:
        for i, array in enumerate(golden[0]):
            np.save(out / "data" / f"input_{i}.npy", array)
        for i, array in enumerate(golden[1]):
            np.save(out / "data" / f"golden_output_{i}.npy", array)
    files = sorted(written + [model_file] + [f"data/{p.name}" for p in (out / "data").iterdir()])
    log.info(f"codegen: C/C++ demo for {len(in_tensors)} input(s) / {len(out_tensors)} output(s) written to "
             f"'{os.path.abspath(output_path)}'; see its README.md")
    return files
