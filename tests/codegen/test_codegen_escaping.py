"""codegen with hostile names: file and tensor names never become CMake or C++ code."""
from __future__ import annotations

import ast
import shutil
import subprocess
from pathlib import Path

import onnx
import pytest
from onnx import TensorProto, helper

from openrknn.codegen.escape import c_string, inert_text
from rknn.api import RKNN

# a model file name that closes the CMake comment / C string and runs commands
EVIL_FILE = 'm\nexecute_process(COMMAND ${CMAKE_COMMAND} -E touch PWNED_CMAKE)\n#"; int injected_cc = 1; "?\\.rknn'
# an output name that ends a // comment and adds a preprocessor line
EVIL_TENSOR = 'y\n#error injected\n"*/ \\'


@pytest.mark.parametrize("text", [EVIL_FILE, EVIL_TENSOR, "plain", "ünïcødé\x00\x7f", "??=trigraph", "a\\"])
def test_c_string_is_one_literal_with_the_same_bytes(text):
    literal = c_string(text)
    assert "\n" not in literal and literal.count('"') == 2
    assert ast.literal_eval("b" + literal) == text.encode("utf-8")   # C and Python agree on \ooo escapes


@pytest.mark.parametrize("text", [EVIL_FILE, EVIL_TENSOR, "#[[ bracket", "${HOME} @@{x}", "`code` | cell"])
def test_inert_text_has_no_line_break_or_active_character(text):
    safe = inert_text(text)
    assert all(0x20 <= ord(c) < 0x7F for c in safe)
    assert not set(safe) & set("`|$@[]") and safe.count("\\") == safe.count("\\x")


def _hostile_project(tmp_path: Path) -> Path:
    nodes = [helper.make_node("Relu", ["x"], [EVIL_TENSOR], name="relu")]
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 2, 4])],
                              [helper.make_tensor_value_info(EVIL_TENSOR, TensorProto.FLOAT, [1, 2, 4])])
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)]), tmp_path / "m.onnx")
    rknn = RKNN()
    assert rknn.config(target_platform="rk3588") == 0
    assert rknn.load_onnx(str(tmp_path / "m.onnx")) == 0
    assert rknn.build(do_quantization=False) == 0
    assert rknn.export_rknn(str(tmp_path / EVIL_FILE)) == 0
    assert rknn.codegen(output_path=str(tmp_path / "demo")) == 0
    return tmp_path / "demo"


def test_generated_files_carry_no_injected_line(tmp_path):
    demo = _hostile_project(tmp_path)
    cmake = (demo / "CMakeLists.txt").read_text()
    assert not any(line.lstrip().startswith("execute_process") for line in cmake.splitlines())
    header = (demo / "src" / "model_io.h").read_text()
    for line in header.splitlines():   # only inside the comment or the escaped literal, never as code
        assert "injected_cc" not in line or line.startswith("//") or '\\042; int injected_cc' in line, line
    for name in ("model_io.h", "process.cc"):
        lines = (demo / "src" / name).read_text().splitlines()
        assert not any(line.startswith("#error") for line in lines), name
    assert (demo / "model" / EVIL_FILE).is_file()


@pytest.mark.skipif(shutil.which("cmake") is None or shutil.which("c++") is None,
                    reason="cmake and a C++ compiler are needed to configure and build the generated demo")
def test_cmake_configure_and_build_run_nothing_injected(tmp_path):
    demo = _hostile_project(tmp_path)
    build = tmp_path / "build"
    configure = subprocess.run(["cmake", "-S", str(demo), "-B", str(build), "-DOPENRKNN_STUB_RUNTIME=ON",
                                "-DCMAKE_CXX_FLAGS=-Wall -Wextra -Werror"], capture_output=True, text=True,
                               timeout=300, cwd=tmp_path)   # an injected command would write PWNED_CMAKE here
    assert configure.returncode == 0, configure.stdout + configure.stderr
    assert not list(tmp_path.rglob("PWNED_CMAKE"))
    compiled = subprocess.run(["cmake", "--build", str(build), "-j2"], capture_output=True, text=True, timeout=600)
    assert compiled.returncode == 0, compiled.stdout + compiled.stderr
    run = subprocess.run([str(build / "rknn_app_demo"), str(demo / "model" / EVIL_FILE), str(demo / "data")],
                         capture_output=True, text=True, timeout=60)
    assert run.returncode == 0, run.stdout + run.stderr
    assert "y\n#error injected" in run.stdout      # the C literal holds exactly the tensor's name
