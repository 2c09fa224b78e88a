"""Helpers of the C API tests: build openrknn's librknnrt once, compile C programs against it, run them."""
from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
PROGRAMS = Path(__file__).resolve().parent / "programs"


def need_compiler() -> str:
    compiler = os.environ.get("CC") or shutil.which("cc") or shutil.which("gcc")
    if not compiler:
        pytest.skip("no C compiler (Debian: apt install gcc): the C API tests compile C programs")
    return compiler


def build_library(prefix: Path) -> Path:
    """``openrknn capi build --prefix`` (skips when the machine cannot build it, saying why)."""
    need_compiler()
    from openrknn.capi.build import build
    from openrknn.errors import ConfigError
    try:
        return build(prefix)
    except ConfigError as e:
        pytest.skip(str(e))


def compile_program(prefix: Path, source: str, output: Path, extra: list[str] | None = None,
                    cxx: bool = False) -> Path:
    compiler = shutil.which("c++") if cxx else need_compiler()
    if compiler is None:
        pytest.skip("no C++ compiler (Debian: apt install g++)")
    command = [compiler, "-O1", "-Wall", "-Wextra", "-Werror", f"-I{prefix / 'include'}", f"-I{PROGRAMS}", str(PROGRAMS / source),
               "-o", str(output), f"-L{prefix / 'lib'}", "-lrknnrt", f"-Wl,-rpath,{prefix / 'lib'}", "-lpthread",
               *(extra or [])]
    result = subprocess.run(command, capture_output=True, text=True)
    assert result.returncode == 0, result.stderr
    return output


def run_program(program: Path, *args: object, timeout: float = 120) -> subprocess.CompletedProcess:
    """Run with this checkout's openrknn first on the embedded interpreter's path."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")])}
    return subprocess.run([str(program), *map(str, args)], capture_output=True, text=True, timeout=timeout, env=env)


def export(rknn, path: Path) -> Path:
    assert rknn.export_rknn(str(path)) == 0
    return path
