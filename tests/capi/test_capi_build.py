"""Building and finding openrknn's librknnrt: the CLI, CMake (SDK layout and package), pkg-config, the codegen demo."""
from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import numpy as np
import pytest

from tests.capi.capi_tools import PROGRAMS, build_library, need_compiler, run_program
from tests.helpers import lite_outputs, make_conv_model


@pytest.fixture(scope="module")
def prefix(tmp_path_factory: pytest.TempPathFactory) -> Path:
    folder = tmp_path_factory.mktemp("capi_build") / "prefix"
    build_library(folder)
    return folder


@pytest.fixture(scope="module")
def model(tmp_path_factory: pytest.TempPathFactory):
    from rknn.api import RKNN
    folder = tmp_path_factory.mktemp("capi_build_model")
    rknn = RKNN()
    rknn.config(target_platform="rk3588", mean_values=[[127.5] * 3], std_values=[[127.5] * 3])
    assert rknn.load_onnx(str(make_conv_model(folder / "conv.onnx"))) == 0
    assert rknn.build(do_quantization=False) == 0
    assert rknn.export_rknn(str(folder / "conv.rknn")) == 0
    return rknn, folder / "conv.rknn"


def _need(tool: str) -> None:
    if shutil.which(tool) is None:
        pytest.skip(f"{tool} is not installed (Debian: apt install {tool})")


def test_cli_installs_headers_library_cmake_and_pkgconfig(tmp_path):
    need_compiler()
    from openrknn.cli.main import main
    code = main(["capi", "build", "--prefix", str(tmp_path / "p")])
    if code != 0:
        pytest.skip("this machine cannot build the library (see the E line)")
    for path in ("include/rknn_api.h", "include/rknn_matmul_api.h", "include/rknn_custom_op.h", "lib/librknnrt.so",
                 "lib/cmake/librknnrt/librknnrtConfig.cmake", "lib/pkgconfig/librknnrt.pc"):
        assert (tmp_path / "p" / path).is_file(), path
    symbols = subprocess.run(["nm", "-D", "--defined-only", str(tmp_path / "p/lib/librknnrt.so")],
                             capture_output=True, text=True).stdout if shutil.which("nm") else ""
    for name in ("rknn_init", "rknn_outputs_get", "rknn_create_mem_from_fd", "rknn_matmul_run",
                 "rknn_register_custom_ops", "rknn_mem_sync", "rknn_set_input_shapes"):
        assert not symbols or f" {name}\n" in symbols


def test_missing_compiler_and_headers_name_the_debian_package(monkeypatch):
    from openrknn.capi import build
    from openrknn.errors import ConfigError
    monkeypatch.setenv("CC", "")
    monkeypatch.setattr(build.shutil, "which", lambda name: None)
    with pytest.raises(ConfigError, match="apt install gcc"):
        build.find_compiler()
    monkeypatch.setattr(build.sysconfig, "get_paths", lambda: {"include": "/nonexistent/include"})
    with pytest.raises(ConfigError, match=r"apt install libpython3\.\d+-dev"):
        build.python_link()
    monkeypatch.setattr(build.sys, "base_prefix", "/usr")
    with pytest.raises(ConfigError, match=r"Debian/Ubuntu: sudo apt install libpython3\.\d+-dev \(python3-dev"):
        build.python_link()


def test_a_failed_compile_installs_nothing(monkeypatch, tmp_path):
    from openrknn.capi import build
    from openrknn.errors import ConfigError
    if shutil.which("false") is None:
        pytest.skip("no 'false' command to stand in for a failing compiler")
    try:
        build.python_link()
    except ConfigError as e:
        pytest.skip(str(e))
    monkeypatch.setenv("CC", "false")
    with pytest.raises(ConfigError, match=r"the compiler failed \(false\)"):
        build.build(tmp_path / "p")
    assert not (tmp_path / "p").exists()


@pytest.mark.parametrize("find_package", [False, True])
def test_sdk_style_cmake_project_links_by_changing_only_the_paths(find_package, prefix, model, tmp_path):
    _need("cmake")
    options = [f"-DCMAKE_PREFIX_PATH={prefix}", "-DUSE_FIND_PACKAGE=ON"] if find_package else \
        [f"-DRKNN_API_PATH={prefix}"]
    build = tmp_path / "build"
    configure = subprocess.run(["cmake", "-S", str(PROGRAMS / "sdk_app"), "-B", str(build), *options,
                                "-DCMAKE_CXX_FLAGS=-Wall -Werror"], capture_output=True, text=True)
    assert configure.returncode == 0, configure.stdout + configure.stderr
    result = subprocess.run(["cmake", "--build", str(build)], capture_output=True, text=True)
    assert result.returncode == 0, result.stdout + result.stderr
    x = np.random.default_rng(3).integers(0, 256, (1, 16, 16, 3), dtype=np.uint8)
    x.tofile(tmp_path / "x.bin")
    ran = run_program(build / "rknn_general_demo", model[1], tmp_path / "x.bin", 3, 1, 0, 1, tmp_path / "o_")
    assert ran.returncode == 0, ran.stdout + ran.stderr
    np.testing.assert_array_equal(np.fromfile(tmp_path / "o_0.bin", np.float32), lite_outputs(model[1], [x])[0].ravel())


def test_pkg_config_builds_the_zero_copy_program(prefix, tmp_path):
    _need("pkg-config")
    env = {**os.environ, "PKG_CONFIG_PATH": str(prefix / "lib" / "pkgconfig")}
    flags = subprocess.run(["pkg-config", "--cflags", "--libs", "librknnrt"], capture_output=True, text=True, env=env)
    assert flags.returncode == 0, flags.stderr
    result = subprocess.run([need_compiler(), str(PROGRAMS / "zero_copy.c"), "-o", str(tmp_path / "zc"),
                             *flags.stdout.split()], capture_output=True, text=True)
    assert result.returncode == 0, result.stderr
    assert f"-I{prefix}/include" in flags.stdout and "-lrknnrt" in flags.stdout


def test_codegen_demo_runs_on_the_library(prefix, model, tmp_path):
    _need("cmake")
    if shutil.which("c++") is None:
        pytest.skip("no C++ compiler (Debian: apt install g++)")
    rknn, rknn_path = model
    x = np.random.default_rng(4).integers(0, 256, (1, 3, 16, 16)).astype(np.uint8)
    np.save(tmp_path / "x.npy", x)
    assert rknn.codegen(str(tmp_path / "demo"), inputs=[str(tmp_path / "x.npy")]) == 0
    demo = tmp_path / "demo"
    build = demo / "build"
    configure = subprocess.run(["cmake", "-S", str(demo), "-B", str(build), f"-DRKNN_API_INCLUDE={prefix}/include",
                                f"-DRKNN_RT_LIB={prefix}/lib/librknnrt.so"], capture_output=True, text=True)
    assert configure.returncode == 0, configure.stdout + configure.stderr
    result = subprocess.run(["cmake", "--build", str(build), "-j2"], capture_output=True, text=True)
    assert result.returncode == 0, result.stdout + result.stderr
    model_file = next((demo / "model").glob("*.rknn"))
    ran = run_program(build / "rknn_app_demo", model_file, demo / "data")
    assert ran.returncode == 0, ran.stdout + ran.stderr
    assert "cosine similarity with the openrknn simulator: 1.000000" in ran.stdout
    fed = np.load(demo / "data" / "input_0.npy")
    np.testing.assert_array_equal(np.load(demo / "data" / "demo_output_0.npy"), lite_outputs(model_file, [fed])[0])


def test_c_and_ctypes_structures_have_one_layout(tmp_path):
    """Every structure the bridge reads in place: sizes and offsets as the C compiler lays them out."""
    import ctypes

    from openrknn.capi import structs as s
    from openrknn.capi.build import API_HEADER, CAPI_DIR
    compiler = need_compiler()
    include = tmp_path / "include"
    include.mkdir()
    for header in (API_HEADER, CAPI_DIR / "include" / "rknn_matmul_api.h", CAPI_DIR / "include" / "rknn_custom_op.h"):
        shutil.copyfile(header, include / header.name)
    subprocess.run([compiler, f"-I{include}", str(PROGRAMS / "layout.c"), "-o", str(tmp_path / "layout")], check=True)
    printed = dict(line.rsplit(" ", 1) for line in
                   subprocess.run([str(tmp_path / "layout")], capture_output=True, text=True, check=True).stdout.split("\n")
                   if line)
    assert len(printed) > 40
    for key, value in printed.items():
        struct_name, _, field = key.partition(".")
        struct = getattr(s, struct_name)
        got = getattr(struct, field).offset if field else ctypes.sizeof(struct)
        assert got == int(value), f"{key}: ctypes {got}, C {value}"
