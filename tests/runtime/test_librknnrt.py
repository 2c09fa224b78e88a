"""RKNNLite over librknnrt (ctypes), against a fake librknnrt built here with the system C compiler.

The fake (fake_librknnrt.c) implements the documented signatures and structures: one 1x4x4x3 uint8
NHWC input; output 0 = x*2+1 (float32), output 1 = the same quantized to int8 (scale 4, zero point -128).
"""
from __future__ import annotations

import ctypes
import shutil
import subprocess
from pathlib import Path

import numpy as np
import pytest

from openrknn.model_file.container import Container, encode
from openrknn.runtime import librknnrt as rt
from openrknn.runtime import rockchip_backend
from rknnlite.api import RKNNLite

SOURCE = Path(__file__).with_name("fake_librknnrt.c")
HEADER_DIR = Path(__file__).resolve().parents[2] / "openrknn" / "codegen" / "templates" / "include"   # rknn_api.h


def _compiler(folder: Path) -> str:
    """The system C compiler, once it has shown it can build a shared library (else skip)."""
    found = shutil.which("cc") or shutil.which("gcc") or shutil.which("clang")
    if found is None:
        pytest.skip("no system C compiler (cc/gcc/clang) to build the fake librknnrt")
    probe = folder / "probe.c"
    probe.write_text("#include <string.h>\nint probe(void) { return (int)strlen(\"ok\"); }\n")
    result = subprocess.run([found, "-shared", "-fPIC", "-o", str(folder / "probe.so"), str(probe)],
                            capture_output=True, text=True)
    if result.returncode != 0:
        pytest.skip(f"the C compiler {found} cannot build a shared library here: {result.stderr.strip()[:200]}")
    return found


@pytest.fixture(scope="module")
def build(tmp_path_factory):
    """``build(name, *defines)`` → path of a fake librknnrt compiled with those -D switches."""
    folder = tmp_path_factory.mktemp("fake_rknnrt")
    cc, built = _compiler(folder), {}

    def make(name: str = "default", *defines: str) -> str:
        if name not in built:
            out = folder / f"librknnrt_{name}.so"
            subprocess.run([cc, "-shared", "-fPIC", "-O1", "-Wall", f"-I{HEADER_DIR}", *defines, "-o",
                            str(out), str(SOURCE), "-lm"], check=True)
            built[name] = str(out)
        return built[name]
    return make


@pytest.fixture
def fake(build, monkeypatch):
    """The default fake, announced through OPENRKNN_LIBRKNNRT, and its ctypes handle for the counters."""
    path = build()
    monkeypatch.setenv(rt.LIBRARY_ENV, path)
    lib = ctypes.CDLL(path)
    for name in ("fake_live_allocations", "fake_counter", "fake_layout"):
        getattr(lib, name).restype = ctypes.c_long
    lib.fake_counter.argtypes = lib.fake_layout.argtypes = [ctypes.c_char_p]
    return lib


def _rockchip_model(tmp_path: Path, tag: bytes = b"") -> str:
    path = tmp_path / "model.rknn"
    path.write_bytes(b"RKNN" + tag + bytes(64))
    return str(path)


def _image(seed: int = 0) -> np.ndarray:
    return np.random.default_rng(seed).integers(0, 256, (1, 4, 4, 3), dtype=np.uint8)


def _expected(x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    y = x.astype(np.float32) * 2 + 1
    q = np.clip(np.round(y / 4) - 128, -128, 127)   # y/4 is never a tie: y is odd
    return y, q


def _started(tmp_path: Path, tag: bytes = b"", **runtime) -> RKNNLite:
    lite = RKNNLite()
    assert lite.load_rknn(_rockchip_model(tmp_path, tag)) == 0
    assert lite.init_runtime(**runtime) == 0
    return lite


def test_struct_sizes_and_offsets_match_the_c_compiler(fake):
    for struct in rt.STRUCTS:
        name = struct.__name__
        assert fake.fake_layout(name.encode()) == ctypes.sizeof(struct), name
        for field, _ in struct._fields_:
            offset = fake.fake_layout(f"{name}.{field}".encode())
            assert offset == getattr(struct, field).offset, f"{name}.{field}"
    assert fake.fake_layout(b"rknn_context") == ctypes.sizeof(rt.rknn_context)


def test_inference_float_outputs_and_release(fake, tmp_path):
    live = fake.fake_live_allocations()
    releases, destroys = fake.fake_counter(b"release"), fake.fake_counter(b"destroy")
    lite = _started(tmp_path)
    for seed in range(3):
        x = _image(seed)
        outputs = lite.inference(inputs=[x])
        y, q = _expected(x)
        assert [o.dtype for o in outputs] == [np.float32, np.float32]
        np.testing.assert_array_equal(outputs[0], y)
        np.testing.assert_array_equal(outputs[1], (q + 128) * 4)
        assert fake.fake_counter(b"input_type") == rt.TENSOR_UINT8
        assert fake.fake_counter(b"input_fmt") == rt.FORMAT_NHWC
    assert fake.fake_counter(b"release") - releases == 3
    lite.release()
    assert fake.fake_counter(b"destroy") - destroys == 1
    assert fake.fake_live_allocations() == live


@pytest.mark.parametrize("layout", ["nhwc", "nchw"])
@pytest.mark.parametrize("dtype", [np.uint8, np.float32, np.float64])
def test_input_layouts_and_types_are_marshalled(fake, tmp_path, layout, dtype):
    lite = _started(tmp_path)
    x = _image(7)
    given = (x if layout == "nhwc" else x.transpose(0, 3, 1, 2)).astype(dtype)
    outputs = lite.inference(inputs=[given], data_format=[layout], get_frame_id=True)
    np.testing.assert_array_equal(outputs[0], _expected(x)[0])
    assert outputs[-1] == 1   # frame id from rknn_output_extend
    assert fake.fake_counter(b"input_fmt") == (rt.FORMAT_NHWC if layout == "nhwc" else rt.FORMAT_NCHW)
    assert fake.fake_counter(b"input_type") == (rt.TENSOR_UINT8 if dtype == np.uint8 else rt.TENSOR_FLOAT32)
    lite.release()


def test_hwc_image_without_batch_axis_and_pass_through(fake, tmp_path):
    lite = _started(tmp_path)
    x = _image(3)
    np.testing.assert_array_equal(lite.inference(inputs=[x[0]])[0], _expected(x)[0])
    np.testing.assert_array_equal(lite.inference(inputs=[x], inputs_pass_through=[1])[0], _expected(x)[0])
    lite.release()


def test_context_queries_and_native_outputs(fake, tmp_path):
    live = fake.fake_live_allocations()
    lib = rt.load_library(rt.find_library())
    with rt.Context(lib, Path(_rockchip_model(tmp_path)).read_bytes()) as ctx:
        (attr,) = ctx.inputs
        assert (attr.name, attr.dims, attr.type, attr.fmt, attr.qnt_type) == ("images", (1, 4, 4, 3), "UINT8",
                                                                              "NHWC", "AFFINE")
        assert (ctx.outputs[1].name, ctx.outputs[1].zp, ctx.outputs[1].scale) == ("out_int8", -128, 4.0)
        assert ctx.custom_string() == "fake model v1"
        assert ctx.sdk_version() == ("2.3.0 (fake@2026-11-23)", "0.9.8")
        x = _image(5)
        ctx.inputs_set([x], [rt.FORMAT_NHWC], [0])
        ctx.run()
        native, frame = ctx.outputs_get(want_float=False)
        assert native[1].dtype == np.int8 and native[1].shape == (1, 4, 4, 3) and frame == 1
        np.testing.assert_array_equal(native[1], _expected(x)[1])
        assert ctx.perf_run_us() == 1234
    assert ctx.closed and fake.fake_live_allocations() == live


def test_forgotten_context_is_destroyed(fake, tmp_path):
    live = fake.fake_live_allocations()
    ctx = rt.Context(rt.load_library(rt.find_library()), Path(_rockchip_model(tmp_path)).read_bytes())
    assert fake.fake_live_allocations() == live + 1
    del ctx
    assert fake.fake_live_allocations() == live


def test_sdk_version_perf_and_memory(fake, tmp_path, capsys):
    lite = _started(tmp_path, perf_debug=True, eval_mem=True)
    assert "API: 2.3.0 (fake@2026-11-23)\n  DRV: 0.9.8" in lite.get_sdk_version()
    perf = lite.eval_perf(is_print=True)
    assert perf["total_time_us"] == 1234
    assert perf["perf_detail"] == "ID  OpType  Time(us)\n1   Conv    42\nTotal Operator Elapsed Time(us): 42\n"
    memory = lite.eval_memory()
    assert memory["weight_memory"] == 3 << 20 and memory["total_memory"] == 5 << 20
    assert memory["other_memory"] == (5 << 20) - (3 << 20) - (1536 << 10)
    out = capsys.readouterr().out
    assert "Total Operator Elapsed Per Frame Time(us): 1234" in out and "Weight Memory: 3.00 MiB" in out
    assert "Flag perf_debug has been set" in out
    lite.release()


def test_eval_memory_needs_eval_mem_and_perf_detail_needs_perf_debug(fake, tmp_path, capsys):
    lite = _started(tmp_path)
    assert lite.eval_memory() is None
    assert "parameter <eval_mem> should be set to True" in capsys.readouterr().out
    assert lite.eval_perf(is_print=False, inputs=[_image()], loop_cnt=3) == {"total_time_us": 1234,
                                                                             "perf_detail": None}
    assert lite.inference(inputs=[_image()], get_frame_id=True)[-1] == 4   # three eval_perf runs came first
    lite.release()


def test_core_mask(fake, tmp_path, monkeypatch, capsys):
    _started(tmp_path, core_mask=RKNNLite.NPU_CORE_0_1_2).release()
    monkeypatch.setattr(rockchip_backend, "board_chip", lambda: "rk3576")
    lite = RKNNLite()
    lite.load_rknn(_rockchip_model(tmp_path))
    assert lite.init_runtime(core_mask=RKNNLite.NPU_CORE_2) == -1
    assert "rk3576 does not have (2 cores)" in capsys.readouterr().out
    monkeypatch.setattr(rockchip_backend, "board_chip", lambda: "rk3566")
    assert lite.init_runtime(core_mask=RKNNLite.NPU_CORE_1) == 0
    assert "core_mask applies only to RK3588/RK3576; ignored on rk3566" in capsys.readouterr().out
    assert lite.init_runtime(core_mask=0x8) == -1
    lite.release()


@pytest.mark.parametrize("compatible, chip", [(b"radxa,rock-5b\0rockchip,rk3588\0", "rk3588"),
                                              (b"rockchip,rk3588s-evb1-lp4x-v10\0rockchip,rk3588s\0", "rk3588s"),
                                              (b"vendor,board\0", None)])
def test_board_chip_from_device_tree(tmp_path, monkeypatch, compatible, chip):
    tree = tmp_path / "compatible"
    tree.write_bytes(compatible)
    monkeypatch.setattr(rockchip_backend, "DEVICE_TREE", str(tree))
    assert rockchip_backend.board_chip() == chip


def test_error_codes_have_documented_names():
    assert rt.describe_code(-13).startswith("-13 RKNN_ERR_TARGET_PLATFORM_UNMATCH (")
    assert "update" in rt.describe_code(-10)
    assert [rt.describe_code(c).split()[1] for c in range(-1, -14, -1)] == [rt.ERRORS[c][0] for c in range(-1, -14, -1)]
    assert "unknown error code" in rt.describe_code(-99)


@pytest.mark.parametrize("tag, call, message", [
    (b"FAILRUN", "inference", "rknn_run failed: -1 RKNN_ERR_FAIL"),
    (b"BADCHIP", "init_runtime", "rknn_init failed: -13 RKNN_ERR_TARGET_PLATFORM_UNMATCH"),
])
def test_failing_calls_are_reported(fake, tmp_path, capsys, tag, call, message):
    live = fake.fake_live_allocations()
    lite = RKNNLite()
    assert lite.load_rknn(_rockchip_model(tmp_path, tag)) == 0
    result = lite.init_runtime()
    if call == "inference":
        assert result == 0
        result = lite.inference(inputs=[_image()])
    assert result in (-1, None)
    assert f"E {call}: {message}" in capsys.readouterr().out
    lite.release()
    assert fake.fake_live_allocations() == live


@pytest.mark.parametrize("given, message", [
    (np.zeros((1, 5, 5, 3), np.uint8), "has shape (1, 5, 5, 3) but the model expects (1, 4, 4, 3) (NHWC)"),
    (np.zeros((1, 4, 4, 3), np.int8), "rknn_inputs_set failed: -8 RKNN_ERR_INPUT_INVALID"),
    (np.array([["a"]]), "has dtype <U1; give a numeric ndarray"),
])
def test_bad_inputs(fake, tmp_path, capsys, given, message):
    lite = _started(tmp_path)
    assert lite.inference(inputs=[given]) is None
    assert message in capsys.readouterr().out
    assert lite.inference(inputs=[_image(), _image()]) is None
    assert "the model has 1 input(s) ['images'] but 2 were given" in capsys.readouterr().out
    lite.release()


def test_missing_library_names_it(tmp_path, monkeypatch, capsys):
    monkeypatch.delenv(rt.LIBRARY_ENV, raising=False)
    monkeypatch.setattr(rt, "STANDARD_PATHS", (str(tmp_path / "nowhere" / "librknnrt.so"),))
    assert RKNNLite().load_rknn(_rockchip_model(tmp_path)) == -1
    out = capsys.readouterr().out
    assert "Rockchip RKNN-Toolkit model" in out and "librknnrt.so, which was not found" in out
    assert "OPENRKNN_LIBRKNNRT" in out
    monkeypatch.setenv(rt.LIBRARY_ENV, str(tmp_path / "absent.so"))
    assert RKNNLite().load_rknn(_rockchip_model(tmp_path)) == -1
    assert "absent.so' does not exist" in capsys.readouterr().out


def test_library_that_is_not_a_shared_object(tmp_path, monkeypatch, capsys):
    bogus = tmp_path / "librknnrt.so"
    bogus.write_text("not a library")
    monkeypatch.setenv(rt.LIBRARY_ENV, str(bogus))
    lite = RKNNLite()
    assert lite.load_rknn(_rockchip_model(tmp_path)) == 0
    assert lite.init_runtime() == -1
    assert "cannot load librknnrt" in capsys.readouterr().out


def test_library_missing_a_symbol(build, tmp_path, monkeypatch, capsys):
    monkeypatch.setenv(rt.LIBRARY_ENV, build("no_core_mask", "-DOMIT_CORE_MASK"))
    lite = RKNNLite()
    assert lite.load_rknn(_rockchip_model(tmp_path)) == 0
    assert lite.init_runtime() == -1
    assert "has no function rknn_set_core_mask: it is not Rockchip's RKNPU2 runtime" in capsys.readouterr().out


def test_api_version_mismatch_is_refused(build, tmp_path, monkeypatch, capsys):
    path = build("old", '-DAPI_VERSION="1.2.0 (old)"')
    monkeypatch.setenv(rt.LIBRARY_ENV, path)
    counters = ctypes.CDLL(path)
    counters.fake_live_allocations.restype = ctypes.c_long
    lite = RKNNLite()
    assert lite.load_rknn(_rockchip_model(tmp_path)) == 0
    assert lite.init_runtime() == -1
    assert "reports API version '1.2.0 (old)'" in capsys.readouterr().out
    assert counters.fake_live_allocations() == 0   # the context was destroyed before refusing


def test_openrknn_model_given_to_the_rknnrt_backend(fake, tmp_path, capsys):
    ours = tmp_path / "ours.rknn"
    ours.write_bytes(encode(Container(header={"format": "openrknn"})))
    forced = RKNNLite(backend="rknnrt")
    assert forced.load_rknn(str(ours)) == -1
    assert "not a Rockchip-compiled .rknn" in capsys.readouterr().out
    assert forced.load_rknn(_rockchip_model(tmp_path)) == 0 and forced.init_runtime() == 0
    forced.release()
    lite = RKNNLite()
    lite.load_rknn(_rockchip_model(tmp_path))
    assert lite.eval_perf() is None
    assert "call init_runtime() before eval_perf()" in capsys.readouterr().out
    assert RKNNLite().eval_memory() is None
    assert "needs a Rockchip-compiled .rknn" in capsys.readouterr().out


@pytest.mark.parametrize("text, version", [("1.5.2 (71720f3fc@2023-08-21T09:29:52)", (1, 5, 2)),
                                           ("2.3.0", (2, 3, 0)), ("v1.6", (1, 6)), ("unknown", None)])
def test_parse_version(text, version):
    assert rt.parse_version(text) == version


def test_cli_run_uses_librknnrt(fake, tmp_path, capsys):
    from PIL import Image

    from openrknn.cli.main import main
    Image.fromarray(_image(2)[0]).save(tmp_path / "x.png")
    assert main(["run", _rockchip_model(tmp_path), "--input", str(tmp_path / "x.png")]) == 0
    out = capsys.readouterr().out
    assert "out_float: shape [1, 4, 4, 3]" in out and "through" in out
