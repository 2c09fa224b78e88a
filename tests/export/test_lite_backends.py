"""RKNNLite picks the fastest backend present: Teflon (a fake external delegate built with cc),
LiteRT on the CPU, onnxruntime; ``backend=`` forces one; the embedded TFLite section round-trips."""
from __future__ import annotations

import ctypes
import shutil
import subprocess
from pathlib import Path

import numpy as np
import pytest

from tests.helpers import mixed_layers_model, quantized_build, uniform_samples

pytest.importorskip("ai_edge_litert", reason="LiteRT (ai-edge-litert, the 'test' extra) runs the embedded TFLite")

# The TfLite external-delegate plugin entry points; Prepare claims no node, so LiteRT runs
# everything on its CPU kernels, and counts its calls so the test sees the delegate was applied.
FAKE_DELEGATE = r"""
#include <stdint.h>
#include <stdlib.h>
typedef struct TfLiteDelegate {
  void* data_;
  int (*Prepare)(void* context, struct TfLiteDelegate* delegate);
  void* CopyFromBufferHandle; void* CopyToBufferHandle; void* FreeBufferHandle;
  int64_t flags;
  void* opaque_delegate_builder;
} TfLiteDelegate;
int fake_prepare_calls = 0;
static int prepare(void* context, TfLiteDelegate* delegate) { (void)context; (void)delegate; fake_prepare_calls++; return 0; }
TfLiteDelegate* tflite_plugin_create_delegate(char** keys, char** values, size_t count, void (*report)(const char*)) {
  (void)keys; (void)values; (void)count; (void)report;
  TfLiteDelegate* d = calloc(1, sizeof(TfLiteDelegate));
  d->Prepare = prepare;
  return d;
}
void tflite_plugin_destroy_delegate(TfLiteDelegate* d) { free(d); }
"""


@pytest.fixture(scope="module")
def fake_teflon(tmp_path_factory) -> Path:
    compiler = shutil.which("cc") or shutil.which("gcc")
    if compiler is None:
        pytest.skip("no C compiler (cc) to build the fake Teflon delegate")
    folder = tmp_path_factory.mktemp("teflon")
    (folder / "fake.c").write_text(FAKE_DELEGATE)
    subprocess.run([compiler, "-shared", "-fPIC", "-O1", "-o", str(folder / "libteflon.so"), str(folder / "fake.c")],
                   check=True)
    return folder / "libteflon.so"


@pytest.fixture(scope="module")
def rknn_files(tmp_path_factory):
    folder = tmp_path_factory.mktemp("lite")
    rknn = quantized_build(mixed_layers_model(folder / "m.onnx"), uniform_samples((1, 3, 16, 16)), quantized_method="layer",
                           mean_values=[[127.5] * 3], std_values=[[127.5] * 3])
    assert rknn.export_rknn(str(folder / "with.rknn"), embed_tflite=True) == 0
    assert rknn.export_rknn(str(folder / "plain.rknn")) == 0
    return folder / "with.rknn", folder / "plain.rknn"


def _run(path, capsys, **kwargs):
    from rknnlite.api import RKNNLite
    lite = RKNNLite(**kwargs)
    assert lite.load_rknn(str(path)) == 0
    status = lite.init_runtime()
    text = capsys.readouterr().out
    if status != 0:
        return None, text
    x = uniform_samples((1, 16, 16, 3), 1, seed=3)[0]
    return lite.inference(inputs=[x]), text


def test_teflon_first_then_litert_then_onnxruntime(rknn_files, fake_teflon, monkeypatch, capsys):
    with_tflite, plain = rknn_files
    monkeypatch.setenv("OPENRKNN_TEFLON", str(fake_teflon))
    library = ctypes.CDLL(str(fake_teflon))
    before = ctypes.c_int.in_dll(library, "fake_prepare_calls").value
    teflon, text = _run(with_tflite, capsys)
    assert "backend teflon" in text
    assert ctypes.c_int.in_dll(library, "fake_prepare_calls").value > before   # LiteRT applied the delegate
    simulated, _ = _run(with_tflite, capsys, backend="onnxruntime")
    np.testing.assert_allclose(teflon[0], simulated[0], atol=0.05 * np.abs(simulated[0]).max())

    monkeypatch.setenv("OPENRKNN_TEFLON", str(fake_teflon.parent / "missing.so"))
    litert, text = _run(with_tflite, capsys)
    assert "backend litert" in text and "does not exist" in text
    np.testing.assert_array_equal(litert[0], teflon[0])   # the fake delegate left every op to LiteRT's CPU

    _, text = _run(plain, capsys)
    assert "backend onnxruntime" in text and "embed_tflite=True" in text


def test_forced_backend_that_cannot_run_is_a_clear_error(rknn_files, monkeypatch, capsys):
    with_tflite, plain = rknn_files
    monkeypatch.setenv("OPENRKNN_TEFLON", "/nonexistent/libteflon.so")
    outputs, text = _run(with_tflite, capsys, backend="teflon")
    assert outputs is None and "E init_runtime: backend 'teflon' cannot run" in text and "OPENRKNN_TEFLON" in text
    outputs, text = _run(plain, capsys, backend="litert")
    assert outputs is None and "embed_tflite=True" in text
    outputs, text = _run(plain, capsys, backend="tpu")
    assert outputs is None and "unknown" in text


def test_embedded_section_is_versioned_and_old_files_load(rknn_files, tmp_path):
    from openrknn.model_file import load_model
    from openrknn.model_file.container import read_file
    from openrknn.model_file.embedded import read_tflite
    with_tflite, plain = rknn_files
    header = read_file(str(with_tflite)).header
    assert header["embedded"]["tflite"]["version"] == 1
    assert read_tflite(str(with_tflite))[4:8] == b"TFL3" and read_tflite(str(plain)) is None
    assert load_model(str(with_tflite)).quant_params == load_model(str(plain)).quant_params


def test_newer_embedded_section_is_ignored_by_name(rknn_files, tmp_path, capsys):
    from openrknn.model_file.container import encode, read_file
    from openrknn.model_file.embedded import read_tflite
    container = read_file(str(rknn_files[0]))
    container.header["embedded"]["tflite"]["version"] = 2
    newer = tmp_path / "newer.rknn"
    newer.write_bytes(encode(container))
    assert read_tflite(str(newer)) is None
    assert "embedded TFLite section is version 2" in capsys.readouterr().out
    not_ours = tmp_path / "rockchip.rknn"
    not_ours.write_bytes(b"RKNN" + bytes(64))
    assert read_tflite(str(not_ours)) is None
