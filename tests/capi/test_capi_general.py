"""openrknn's librknnrt: C programs written for Rockchip's SDK run openrknn .rknn files and give RKNNLite's outputs."""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from tests.capi.capi_tools import build_library, compile_program, export, run_program
from tests.helpers import lite_outputs, make_conv_model, quantized_build, three_convs

UINT8, INT8, FLOAT16, FLOAT32 = 3, 2, 1, 0
NCHW, NHWC, NC1HWC2 = 0, 1, 2


@pytest.fixture(scope="module")
def lib(tmp_path_factory: pytest.TempPathFactory) -> Path:
    prefix = tmp_path_factory.mktemp("capi") / "prefix"
    build_library(prefix)
    return prefix


@pytest.fixture(scope="module")
def models(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """A float16 classifier (mean/std, custom string) and an int8 conv net with a 4-D int8 output."""
    from rknn.api import RKNN
    folder = tmp_path_factory.mktemp("capi_models")
    rknn = RKNN()
    rknn.config(target_platform="rk3588", mean_values=[[127.5] * 3], std_values=[[127.5] * 3],
                custom_string="capi test")
    assert rknn.load_onnx(str(make_conv_model(folder / "conv.onnx"))) == 0
    assert rknn.build(do_quantization=False) == 0
    float_model = export(rknn, folder / "float.rknn")
    rng = np.random.default_rng(0)
    samples = [rng.uniform(0, 255, (1, 16, 16, 3)).astype(np.float32) for _ in range(4)]
    quantized = quantized_build(three_convs(folder / "three.onnx"), samples, mean_values=[[0, 0, 0]],
                                std_values=[[255, 255, 255]])
    int8_model = export(quantized, folder / "int8.rknn")
    return {"float": float_model, "int8": int8_model}


@pytest.fixture(scope="module")
def general(lib: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    return compile_program(lib, "general_api.c", tmp_path_factory.mktemp("bin") / "general_api")


def image(seed: int) -> np.ndarray:
    return np.random.default_rng(seed).integers(0, 256, (1, 16, 16, 3), dtype=np.uint8)


def _run_general(general: Path, model: Path, data: np.ndarray, type_: int, fmt: int, pass_through: int,
                 want_float: int, folder: Path, *extra: str) -> tuple[str, list[bytes]]:
    data.tofile(folder / "in.bin")
    result = run_program(general, model, folder / "in.bin", type_, fmt, pass_through, want_float, folder / "out_",
                         *extra)
    assert result.returncode == 0, result.stdout + result.stderr
    outputs = sorted(folder.glob("out_*.bin"))
    return result.stdout, [p.read_bytes() for p in outputs]


@pytest.mark.parametrize("kind", ["float", "int8"])
def test_general_api_equals_rknnlite(kind, models, general, tmp_path):
    x = image(1)
    stdout, outputs = _run_general(general, models[kind], x, UINT8, NHWC, 0, 1, tmp_path)
    expected = lite_outputs(models[kind], [x])
    assert len(outputs) == len(expected)
    for got, want in zip(outputs, expected):
        np.testing.assert_array_equal(np.frombuffer(got, np.float32).reshape(want.shape), want)
    assert "n_input=1 n_output=1" in stdout
    assert "input index=0 name=x n_dims=4 dims=[1,16,16,3]" in stdout and "fmt=1" in stdout
    assert "sdk api=2.3.0 (openrknn" in stdout


def test_attributes_report_stored_types(models, general, tmp_path):
    stdout, _ = _run_general(general, models["float"], image(2), UINT8, NHWC, 0, 1, tmp_path)
    assert "custom_string=capi test" in stdout
    assert "output index=0 name=prob n_dims=2 dims=[1,5] n_elems=5 size=10 fmt=3 type=1" in stdout   # fp16
    stdout, _ = _run_general(general, models["int8"], image(2), UINT8, NHWC, 0, 1, tmp_path)
    line = next(l for l in stdout.splitlines() if l.startswith("input "))
    assert "type=2 qnt_type=2" in line                                  # int8, affine
    assert "  NHWC INT8 AFFINE" in stdout                               # the header's name helpers
    out = next(l for l in stdout.splitlines() if l.startswith("output "))
    dtype, _, _ = stored_output(models["int8"], "y")
    assert "dims=[1,4,16,16]" in out and f"fmt=0 type={TYPE_OF[dtype]}" in out   # NCHW, the stored type


def test_model_path_with_size_zero(models, general, tmp_path):
    x = image(3)
    _, outputs = _run_general(general, models["int8"], x, UINT8, NHWC, 0, 1, tmp_path, "path")
    np.testing.assert_array_equal(np.frombuffer(outputs[0], np.float32), lite_outputs(models["int8"], [x])[0].ravel())


@pytest.mark.parametrize("type_,dtype", [(FLOAT32, np.float32), (FLOAT16, np.float16), (INT8, np.int8)])
def test_nchw_input_and_other_types(type_, dtype, models, general, tmp_path):
    x = (np.random.default_rng(4).uniform(0, 120, (1, 3, 16, 16))).astype(dtype)   # NCHW
    _, outputs = _run_general(general, models["int8"], x, type_, NCHW, 0, 1, tmp_path)
    expected = lite_outputs(models["int8"], [x], data_format="nchw")[0]
    np.testing.assert_array_equal(np.frombuffer(outputs[0], np.float32).reshape(expected.shape), expected)


def stored_output(model: Path, name: str) -> tuple[str, float, int]:
    """(dtype, scale, zero point) the model stores output ``name`` in."""
    from openrknn.model_file import load_model
    loaded = load_model(str(model))
    params = loaded.quant_params.get(name)
    if params and params["dtype"] == loaded.tensor_dtypes.get(name, params["dtype"]):
        return params["dtype"], float(params["scale"][0]), int(params["zero_point"][0])
    return loaded.tensor_dtypes.get(name, "float32"), 1.0, 0


def as_stored(values: np.ndarray, stored: tuple[str, float, int]) -> np.ndarray:
    dtype, scale, zp = stored
    if dtype.startswith("float"):
        return values.astype(dtype)
    return np.clip(np.rint(values / np.float32(scale)) + zp, -128, 127).astype(dtype)


TYPE_OF = {"float32": 0, "float16": 1, "int8": 2}


@pytest.mark.parametrize("kind", ["float", "int8"])
def test_want_float_0_gives_the_stored_type(kind, models, general, tmp_path):
    x = image(5)
    _, outputs = _run_general(general, models[kind], x, UINT8, NHWC, 0, 0, tmp_path)
    name = "prob" if kind == "float" else "y"
    expected = as_stored(lite_outputs(models[kind], [x])[0], stored_output(models[kind], name))
    assert outputs[0] == expected.tobytes()


def test_pass_through_takes_quantized_native_input(models, general, tmp_path):
    from openrknn.model_file import load_model
    model = load_model(str(models["int8"]))
    normalized = model.preprocess[0].normalized_name
    scale, zp = model.quant_params[normalized]["scale"][0], model.quant_params[normalized]["zero_point"][0]
    q = np.random.default_rng(6).integers(-128, 128, (1, 16, 16, 3), dtype=np.int8)
    _, outputs = _run_general(general, models["int8"], q, INT8, NHWC, 1, 1, tmp_path)
    real = (q.astype(np.float32) - np.float32(zp)) * np.float32(scale)
    expected = lite_outputs(models["int8"], [real], inputs_pass_through=[1])[0]
    np.testing.assert_array_equal(np.frombuffer(outputs[0], np.float32).reshape(expected.shape), expected)


def test_bad_input_size_is_refused_with_the_documented_code(models, general, tmp_path):
    np.zeros(100, np.uint8).tofile(tmp_path / "in.bin")
    result = run_program(general, models["float"], tmp_path / "in.bin", UINT8, NHWC, 0, 1, tmp_path / "o")
    assert result.returncode == 3
    assert "rknn_input_set fail! ret=-8" in result.stdout
    assert "E rknn_inputs_set: input 0: 100 bytes given, 768 needed" in result.stderr


def test_a_rockchip_file_is_refused(general, tmp_path):
    (tmp_path / "rk.rknn").write_bytes(b"RKNN" + bytes(60))
    np.zeros(4, np.uint8).tofile(tmp_path / "in.bin")
    result = run_program(general, tmp_path / "rk.rknn", tmp_path / "in.bin", UINT8, NHWC, 0, 1, tmp_path / "o")
    assert "rknn_init fail! ret=-6" in result.stdout
    assert "compiled by Rockchip's toolkit" in result.stderr


@pytest.mark.parametrize("mode", ["native", "float", "nhwc", "fd"])
def test_zero_copy_reads_and_writes_the_callers_memory(mode, lib, models, tmp_path):
    from openrknn.capi.tensors import nchw_to_nc1hwc2
    program = compile_program(lib, "zero_copy.c", tmp_path / "zero_copy")
    first, second = image(7), image(8)
    first.tofile(tmp_path / "a.bin")
    second.tofile(tmp_path / "b.bin")
    result = run_program(program, models["int8"], tmp_path / "a.bin", tmp_path / "b.bin", tmp_path / "z", mode)
    assert result.returncode == 0, result.stdout + result.stderr
    stored = stored_output(models["int8"], "y")
    c2 = 16 // np.dtype(stored[0]).itemsize
    for frame, x in ((1, first), (2, second)):
        expected = lite_outputs(models["int8"], [x])[0]                    # [1, 4, 16, 16] float32
        got = (tmp_path / f"z{frame}_0.bin").read_bytes()
        if mode == "float":
            np.testing.assert_array_equal(np.frombuffer(got, np.float32).reshape(expected.shape), expected)
            continue
        q = as_stored(expected, stored)
        want = nchw_to_nc1hwc2(q, c2) if mode in ("native", "fd") else q.transpose(0, 2, 3, 1)
        assert got == np.ascontiguousarray(want).tobytes()
    assert "native input fmt=1 type=2" in result.stdout
    if mode == "fd":
        assert "fd memory: runtime mapping differs from this program's" in result.stdout


def test_rknnlite_pass_through_on_a_quantized_model_with_mean_std(models):
    """The quantized lowering renames the normalised input; pass-through feeds it (failed before: 'not found in
    value_infos'). Fed the quantized normalised image, it gives exactly the normal path's outputs."""
    from openrknn.model_file import load_model
    model = load_model(str(models["int8"]))
    params = model.quant_params[model.preprocess[0].normalized_name]
    x = image(9)
    normalized = x.astype(np.float32) / np.float32(255)
    q = np.clip(np.rint(normalized / np.float32(params["scale"][0])) + params["zero_point"][0], -128, 127)
    real = (q.astype(np.float32) - np.float32(params["zero_point"][0])) * np.float32(params["scale"][0])
    via_pass_through = lite_outputs(models["int8"], [real], inputs_pass_through=[1])[0]
    np.testing.assert_array_equal(via_pass_through, lite_outputs(models["int8"], [x])[0])


def test_the_library_joins_a_running_python_process(lib, models):
    """Loaded with ctypes into this interpreter (no second interpreter), driven through the ctypes structures
    of runtime/librknnrt.py, the binding written for Rockchip's library: the same ABI from both sides."""
    import ctypes

    from openrknn.capi import structs as s
    library = ctypes.CDLL(str(lib / "lib" / "librknnrt.so"))
    data = models["int8"].read_bytes()
    ctx = s.rknn_context(0)
    assert library.rknn_init(ctypes.byref(ctx), data, len(data), 0, None) == 0
    attr = s.rknn_tensor_attr(index=0)
    assert library.rknn_query(ctx, s.QUERY_INPUT_ATTR, ctypes.byref(attr), ctypes.sizeof(attr)) == 0
    assert attr.name == b"x" and attr.fmt == NHWC and list(attr.dims[:4]) == [1, 16, 16, 3]
    x = image(11)
    feed = s.rknn_input(index=0, buf=x.ctypes.data, size=x.nbytes, pass_through=0, type=UINT8, fmt=NHWC)
    assert library.rknn_inputs_set(ctx, 1, ctypes.byref(feed)) == 0
    assert library.rknn_run(ctx, None) == 0
    out = s.rknn_output(want_float=1, index=0)
    assert library.rknn_outputs_get(ctx, 1, ctypes.byref(out), None) == 0
    got = np.frombuffer(ctypes.string_at(out.buf, out.size), np.float32).copy()
    assert library.rknn_outputs_release(ctx, 1, ctypes.byref(out)) == 0
    assert library.rknn_destroy(ctx) == 0
    assert library.rknn_destroy(ctx) == -7          # RKNN_ERR_CTX_INVALID
    np.testing.assert_array_equal(got, lite_outputs(models["int8"], [x])[0].reshape(-1))


def test_an_embedded_tflite_runs_on_litert_as_in_rknnlite(general, tmp_path, monkeypatch):
    """The backend is RKNNLite's choice: LiteRT for a .rknn with its TFLite export; the simulator when forced."""
    pytest.importorskip("ai_edge_litert", reason="LiteRT is not installed (pip install 'openrknn[litert]')")
    rng = np.random.default_rng(0)
    samples = [rng.uniform(0, 255, (1, 16, 16, 3)).astype(np.float32) for _ in range(4)]
    rknn = quantized_build(three_convs(tmp_path / "t.onnx"), samples, quantized_method="layer",
                           mean_values=[[127.5] * 3], std_values=[[127.5] * 3])
    model = tmp_path / "lite.rknn"
    assert rknn.export_rknn(str(model), embed_tflite=True) == 0
    monkeypatch.delenv("OPENRKNN_TEFLON", raising=False)
    x = image(12)
    stdout, outputs = _run_general(general, model, x, UINT8, NHWC, 0, 1, tmp_path)
    assert "(LiteRTRuntime)" in stdout
    expected = lite_outputs(model, [x])[0]
    np.testing.assert_array_equal(np.frombuffer(outputs[0], np.float32).reshape(expected.shape), expected)
    monkeypatch.setenv("OPENRKNN_CAPI_BACKEND", "onnxruntime")
    stdout, outputs = _run_general(general, model, x, UINT8, NHWC, 0, 1, tmp_path)
    assert "(Simulator)" in stdout
    from rknnlite.api import RKNNLite
    lite = RKNNLite(backend="onnxruntime")
    assert lite.load_rknn(str(model)) == 0 and lite.init_runtime() == 0
    expected = lite.inference(inputs=[x])[0]
    np.testing.assert_array_equal(np.frombuffer(outputs[0], np.float32).reshape(expected.shape), expected)


def test_memory_perf_and_error_codes_in_process(lib, models, capfd):
    import ctypes

    from openrknn.capi import structs as s
    library = ctypes.CDLL(str(lib / "lib" / "librknnrt.so"))
    library.rknn_create_mem.restype = ctypes.c_void_p
    library.rknn_create_mem.argtypes = [ctypes.c_uint64, ctypes.c_uint32]
    data = models["float"].read_bytes()
    plain, perf = s.rknn_context(0), s.rknn_context(0)
    assert library.rknn_init(ctypes.byref(plain), data, len(data), 0, None) == 0
    assert library.rknn_init(ctypes.byref(perf), data, len(data), s.FLAG_COLLECT_PERF_MASK, None) == 0
    detail = s.rknn_perf_detail()
    assert library.rknn_query(plain, s.QUERY_PERF_DETAIL, ctypes.byref(detail), ctypes.sizeof(detail)) == -5
    assert "RKNN_FLAG_COLLECT_PERF_MASK" in capfd.readouterr().err
    assert library.rknn_query(perf, s.QUERY_PERF_DETAIL, ctypes.byref(detail), ctypes.sizeof(detail)) == 0
    assert b"last run" in ctypes.string_at(detail.perf_data, detail.data_len)
    sizes = s.rknn_mem_size()
    assert library.rknn_query(plain, s.QUERY_MEM_SIZE, ctypes.byref(sizes), ctypes.sizeof(sizes)) == 0
    assert sizes.total_weight_size > 0 and sizes.total_sram_size == 0
    small = library.rknn_create_mem(plain, 4)
    big = library.rknn_create_mem(plain, sizes.total_weight_size + sizes.total_internal_size)
    assert small and big
    assert library.rknn_set_weight_mem(plain, ctypes.c_void_p(small)) == -5
    assert library.rknn_set_weight_mem(plain, ctypes.c_void_p(big)) == 0
    assert library.rknn_set_internal_mem(plain, ctypes.c_void_p(big)) == 0
    assert library.rknn_mem_sync(plain, ctypes.c_void_p(big), 4) == -5
    assert library.rknn_mem_sync(plain, ctypes.c_void_p(big), 3) == 0
    assert library.rknn_create_mem(12345, 16) is None                       # not a context
    assert library.rknn_query(12345, s.QUERY_IN_OUT_NUM, ctypes.byref(sizes), 8) == -7
    assert library.rknn_query(plain, 99, ctypes.byref(sizes), ctypes.sizeof(sizes)) == -5
    assert library.rknn_outputs_get(perf, 1, ctypes.byref(s.rknn_output()), None) == -9   # nothing run yet
    for mem in (small, big):
        assert library.rknn_destroy_mem(plain, ctypes.c_void_p(mem)) == 0
    assert library.rknn_destroy(plain) == 0 and library.rknn_destroy(perf) == 0
    outside = s.rknn_context(0)                                          # RKNN_FLAG_MEM_ALLOC_OUTSIDE
    assert library.rknn_init(ctypes.byref(outside), data, len(data), s.FLAG_MEM_ALLOC_OUTSIDE, None) == 0
    x = image(13)
    feed = s.rknn_input(index=0, buf=x.ctypes.data, size=x.nbytes, pass_through=0, type=UINT8, fmt=NHWC)
    assert library.rknn_inputs_set(outside, 1, ctypes.byref(feed)) == 0
    assert library.rknn_run(outside, None) == -5
    assert "rknn_set_weight_mem and rknn_set_internal_mem" in capfd.readouterr().err
    weights = library.rknn_create_mem(outside, sizes.total_weight_size)
    internal = library.rknn_create_mem(outside, sizes.total_internal_size)
    assert library.rknn_set_weight_mem(outside, ctypes.c_void_p(weights)) == 0
    assert library.rknn_set_internal_mem(outside, ctypes.c_void_p(internal)) == 0
    assert library.rknn_run(outside, None) == 0
    assert library.rknn_destroy(outside) == 0


def test_nc1hwc2_native_input_with_pass_through(lib, tmp_path):
    """An 8-channel input is NC1HWC2 natively (C2 = 8 float16 values); pass_through=1 data in that layout runs."""
    import ctypes

    import onnx
    from onnx import TensorProto, helper, numpy_helper

    from openrknn.capi import structs as s
    from openrknn.capi.tensors import nchw_to_nc1hwc2
    from rknn.api import RKNN
    w = numpy_helper.from_array(np.random.default_rng(0).normal(0, 0.3, (4, 8, 1, 1)).astype(np.float32), "w")
    graph = helper.make_graph([helper.make_node("Conv", ["x", "w"], ["y"], name="conv")], "g",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 8, 4, 4])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 4, 4, 4])], [w])
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)]), tmp_path / "m.onnx")
    rknn = RKNN()
    assert rknn.config(target_platform="rk3588") == 0
    assert rknn.load_onnx(str(tmp_path / "m.onnx")) == 0 and rknn.build(do_quantization=False) == 0
    assert rknn.export_rknn(str(tmp_path / "m.rknn")) == 0
    library = ctypes.CDLL(str(lib / "lib" / "librknnrt.so"))
    ctx = s.rknn_context(0)
    assert library.rknn_init(ctypes.byref(ctx), str(tmp_path / "m.rknn").encode(), 0, 0, None) == 0
    attr = s.rknn_tensor_attr(index=0)
    assert library.rknn_query(ctx, s.QUERY_NATIVE_INPUT_ATTR, ctypes.byref(attr), ctypes.sizeof(attr)) == 0
    assert (attr.fmt, attr.type, list(attr.dims[:attr.n_dims])) == (NC1HWC2, FLOAT16, [1, 1, 4, 4, 8])
    plain = s.rknn_tensor_attr(index=0)
    assert library.rknn_query(ctx, s.QUERY_INPUT_ATTR, ctypes.byref(plain), ctypes.sizeof(plain)) == 0
    assert plain.fmt == NCHW and list(plain.dims[:4]) == [1, 8, 4, 4]      # not an image: the model layout
    x = np.random.default_rng(1).normal(size=(1, 8, 4, 4)).astype(np.float16)
    native = nchw_to_nc1hwc2(x, 8)
    feed = s.rknn_input(index=0, buf=native.ctypes.data, size=native.nbytes, pass_through=1, type=FLOAT16,
                        fmt=NC1HWC2)
    assert library.rknn_inputs_set(ctx, 1, ctypes.byref(feed)) == 0 and library.rknn_run(ctx, None) == 0
    out = s.rknn_output(want_float=1, index=0)
    assert library.rknn_outputs_get(ctx, 1, ctypes.byref(out), None) == 0
    got = np.frombuffer(ctypes.string_at(out.buf, out.size), np.float32).copy()
    library.rknn_outputs_release(ctx, 1, ctypes.byref(out))
    expected = lite_outputs(tmp_path / "m.rknn", [x.astype(np.float32)], data_format="nchw", inputs_pass_through=[1])
    np.testing.assert_array_equal(got, expected[0].reshape(-1))
    # the native attribute with pass_through=0: the data is NHWC, converted inside (§5.2.3 c)
    nhwc = np.ascontiguousarray(x.transpose(0, 2, 3, 1))
    feed = s.rknn_input(index=0, buf=nhwc.ctypes.data, size=nhwc.nbytes, pass_through=0, type=FLOAT16, fmt=NC1HWC2)
    assert library.rknn_inputs_set(ctx, 1, ctypes.byref(feed)) == 0 and library.rknn_run(ctx, None) == 0
    out = s.rknn_output(want_float=1, index=0)
    assert library.rknn_outputs_get(ctx, 1, ctypes.byref(out), None) == 0
    got = np.frombuffer(ctypes.string_at(out.buf, out.size), np.float32).copy()
    library.rknn_outputs_release(ctx, 1, ctypes.byref(out))
    library.rknn_destroy(ctx)
    np.testing.assert_array_equal(got, lite_outputs(tmp_path / "m.rknn", [nhwc])[0].reshape(-1))
