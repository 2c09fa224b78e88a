"""codegen: the generated C/C++ demo describes the model's real I/O, compiles and runs (stub runtime)."""
from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper

from openrknn.codegen import generate_demo
from openrknn.errors import ConfigError
from openrknn.sim.session import Simulator
from tests.helpers import make_conv_model


def _build(onnx_path: Path, rknn_path: Path, **config):
    from rknn.api import RKNN
    r = RKNN()
    r.config(target_platform="rk3588", **config)
    assert r.load_onnx(str(onnx_path)) == 0
    assert r.build(do_quantization=False) == 0
    assert r.export_rknn(str(rknn_path)) == 0
    return r._model


@pytest.fixture(scope="module")
def conv(tmp_path_factory: pytest.TempPathFactory):
    folder = tmp_path_factory.mktemp("cg")
    model = _build(make_conv_model(folder / "conv.onnx"), folder / "conv.rknn",
                   mean_values=[[127.5] * 3], std_values=[[127.5] * 3])
    return model, folder / "conv.rknn"


def _two_input_model(path: Path) -> Path:
    """a, b: [1, 2, 4] → Add → Relu → y: [1, 2, 4] (non-image inputs, non-classifier output)."""
    nodes = [helper.make_node("Add", ["a", "b"], ["s"], name="add"),
             helper.make_node("Relu", ["s"], ["y"], name="relu")]
    inputs = [helper.make_tensor_value_info(n, TensorProto.FLOAT, [1, 2, 4]) for n in "ab"]
    graph = helper.make_graph(nodes, "two", inputs, [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 2, 4])])
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)]), path)
    return path


def _cmake_build_and_run(project: Path) -> subprocess.CompletedProcess:
    build = project / "build"
    subprocess.run(["cmake", "-S", str(project), "-B", str(build), "-DOPENRKNN_STUB_RUNTIME=ON",
                    "-DCMAKE_CXX_FLAGS=-Wall -Wextra -Werror"], check=True, capture_output=True, text=True)
    result = subprocess.run(["cmake", "--build", str(build), "-j2"], capture_output=True, text=True)
    assert result.returncode == 0, result.stdout + result.stderr
    model = next((project / "model").glob("*.rknn"))
    return subprocess.run([str(build / "rknn_app_demo"), str(model), str(project / "data")],
                          capture_output=True, text=True, timeout=60)


def test_io_table_and_stubs_follow_the_model(conv, tmp_path: Path):
    model, rknn_path = conv
    files = generate_demo(model, str(tmp_path / "demo"), model_path=str(rknn_path))
    assert {"CMakeLists.txt", "README.md", "include/rknn_api.h", "src/main.cc", "src/process.cc",
            "src/model_io.h", "model/conv.rknn", "stub/rknn_stub.cc"} <= set(files)
    io = (tmp_path / "demo" / "src" / "model_io.h").read_text()
    assert '{"x", 4, {1, 16, 16, 3}, RKNN_TENSOR_UINT8, RKNN_TENSOR_NHWC}' in io        # NCHW image fed NHWC raw
    assert '{"prob", 2, {1, 5}, RKNN_TENSOR_FLOAT32, RKNN_TENSOR_UNDEFINED}' in io
    process = (tmp_path / "demo" / "src" / "process.cc").read_text()
    assert "mean [127.5, 127.5, 127.5]" in process and "top-" in process
    assert (tmp_path / "demo" / "model" / "conv.rknn").read_bytes() == rknn_path.read_bytes()
    assert "@@" not in io + process + (tmp_path / "demo" / "CMakeLists.txt").read_text()


def test_existing_folder_needs_overwrite(conv, tmp_path: Path):
    model, _ = conv
    out = tmp_path / "demo"
    generate_demo(model, str(out))
    with pytest.raises(ConfigError, match="overwrite=True"):
        generate_demo(model, str(out))
    (out / "src" / "main.cc").write_text("broken")
    generate_demo(model, str(out), overwrite=True)
    assert "rknn_outputs_get" in (out / "src" / "rknn_app.cc").read_text()
    assert "int main" in (out / "src" / "main.cc").read_text()


def test_inputs_give_golden_outputs(conv, tmp_path: Path):
    model, _ = conv
    x = np.random.default_rng(1).integers(0, 256, (1, 3, 16, 16)).astype(np.uint8)   # model layout (NCHW)
    np.save(tmp_path / "x.npy", x)
    generate_demo(model, str(tmp_path / "demo"), inputs=[str(tmp_path / "x.npy")])
    fed = np.load(tmp_path / "demo" / "data" / "input_0.npy")
    np.testing.assert_array_equal(fed, x.transpose(0, 2, 3, 1))                      # stored as the API takes it
    golden = np.load(tmp_path / "demo" / "data" / "golden_output_0.npy")
    np.testing.assert_allclose(golden, Simulator(model).run([x], "nchw")[0], rtol=1e-6)


def test_image_input_is_resized(conv, tmp_path: Path):
    from PIL import Image
    model, _ = conv
    Image.fromarray(np.full((40, 30, 3), 200, np.uint8)).save(tmp_path / "img.png")
    generate_demo(model, str(tmp_path / "demo"), inputs=[str(tmp_path / "img.png")])
    fed = np.load(tmp_path / "demo" / "data" / "input_0.npy")
    assert fed.shape == (1, 16, 16, 3) and fed.dtype == np.uint8 and int(fed.min()) == 200


@pytest.mark.parametrize("name, shape, message", [("bad.npy", (1, 16, 3, 16), "takes"), ("x.txt", None, "not a .npy")])
def test_bad_input_files_are_refused(conv, tmp_path: Path, name, shape, message):
    model, _ = conv
    path = tmp_path / name
    if shape:
        np.save(path, np.zeros(shape, np.float32))
    else:
        path.write_text("1 2 3")
    with pytest.raises(ConfigError, match=message):
        generate_demo(model, str(tmp_path / "demo"), inputs=[str(path)])
    with pytest.raises(ConfigError, match="1 input"):
        generate_demo(model, str(tmp_path / "demo"), inputs=[str(path), str(path)])
    assert not (tmp_path / "demo").exists()


@pytest.mark.skipif(shutil.which("cmake") is None or shutil.which("c++") is None,
                    reason="cmake and a C++ compiler are needed to build the generated demo")
def test_generated_demo_builds_and_runs_with_stub_runtime(conv, tmp_path: Path):
    model, rknn_path = conv
    x = np.random.default_rng(2).integers(0, 256, (1, 16, 16, 3)).astype(np.uint8)
    np.save(tmp_path / "x.npy", x)
    generate_demo(model, str(tmp_path / "demo"), inputs=[str(tmp_path / "x.npy")], model_path=str(rknn_path))
    run = _cmake_build_and_run(tmp_path / "demo")
    assert run.returncode == 0, run.stdout + run.stderr
    assert "input 0 'x' dims [1, 16, 16, 3]" in run.stdout and "data/input_0.npy" in run.stdout
    assert "cosine similarity with the openrknn simulator" in run.stdout
    out = np.load(tmp_path / "demo" / "data" / "demo_output_0.npy")                 # the demo's own .npy writer
    assert out.shape == (1, 5) and out.dtype == np.float32


@pytest.mark.skipif(shutil.which("cmake") is None or shutil.which("c++") is None,
                    reason="cmake and a C++ compiler are needed to build the generated demo")
def test_multi_input_non_image_model_builds_and_runs(tmp_path: Path):
    model = _build(_two_input_model(tmp_path / "two.onnx"), tmp_path / "two.rknn")
    generate_demo(model, str(tmp_path / "demo"))
    io = (tmp_path / "demo" / "src" / "model_io.h").read_text()
    assert '{"a", 3, {1, 2, 4}, RKNN_TENSOR_FLOAT32, RKNN_TENSOR_UNDEFINED}' in io
    assert '{"b", 3, {1, 2, 4}, RKNN_TENSOR_FLOAT32, RKNN_TENSOR_UNDEFINED}' in io
    run = _cmake_build_and_run(tmp_path / "demo")
    assert run.returncode == 0, run.stdout + run.stderr
    assert "input 1 'b': test pattern" in run.stdout and "'y' [1, 2, 4]: min" in run.stdout
