"""Vendor example scripts: the habits they rely on work unchanged."""
from __future__ import annotations

import subprocess
import sys

from rknn.api import RKNN


def test_import_loads_urllib_request():
    """Scripts do ``import urllib`` and call ``urllib.request.urlretrieve`` after importing RKNN."""
    code = "import urllib\nfrom rknn.api import RKNN\nprint(callable(urllib.request.urlretrieve))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.stdout.strip() == "True", out.stderr


def test_missing_model_file_names_the_file_and_the_fix(tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    rknn = RKNN()
    assert rknn.load_onnx(model="mobilenet_v2.onnx") == -1
    assert rknn.load_tflite(model="mobilenet_v1.tflite") == -1
    assert rknn.load_rknn("mobilenet_v1.rknn") == -1
    lines = [line for line in capsys.readouterr().out.splitlines() if line.startswith("E")]
    assert len(lines) == 3
    for line, name in zip(lines, ("mobilenet_v2.onnx", "mobilenet_v1.tflite", "mobilenet_v1.rknn")):
        assert f"'{name}' does not exist" in line and str(tmp_path / name) in line
    assert "download" in lines[0] and "download" in lines[1] and "export" in lines[2]


VENDOR_MISSING_MODEL = """from rknn.api import RKNN
rknn = RKNN()
rknn.config(target_platform='rk3588')
ret = rknn.load_onnx(model='./missing.onnx')
if ret != 0:
    print('Load model failed!')
    exit(ret)
"""


def test_exit_status_of_a_vendor_script_whose_model_is_missing(tmp_path):
    """The example's own ``exit(ret)`` with the documented -1 gives status 255 and one E line.

    rknn-toolkit2 2.5.0 exits 1 instead because its load_onnx raises ValueError (a traceback) for a
    missing file rather than returning -1; openrknn keeps the documented return (docs/command-line.md).
    """
    import os
    from pathlib import Path
    (tmp_path / "script.py").write_text(VENDOR_MISSING_MODEL)
    repo = str(Path(__file__).resolve().parents[2])
    env = {**os.environ, "PYTHONPATH": repo}
    ours = subprocess.run([sys.executable, "script.py"], cwd=tmp_path, env=env, capture_output=True, text=True,
                          timeout=120)
    assert ours.returncode == 255 and "Traceback" not in ours.stderr
    assert [ln for ln in ours.stdout.splitlines() if ln.startswith("E ")][0].startswith("E load_onnx: model file")
    reference = Path(os.environ.get("OPENRKNN_RKNN_TOOLKIT2", "/nonexistent"))   # rknn-toolkit2's Python
    if reference.is_file():   # the oracle, run outside the project so its own rknn package is imported
        vendor = subprocess.run([str(reference), "-I", "script.py"], cwd=tmp_path, capture_output=True, text=True,
                                timeout=300)
        assert vendor.returncode == 1 and "ValueError" in vendor.stderr


def test_vendor_compiler_options_warn_and_the_script_runs(conv_model, capsys):
    """rknn-toolkit2's advice for a crashing attention fusion is config(disable_rules=[...])."""
    import numpy as np
    from rknn.api import RKNN
    rknn = RKNN()
    assert rknn.config(target_platform="rk3588", disable_rules=["fuse_exmatmul_add"], sram_prefer=True) == 0
    warnings = [ln for ln in capsys.readouterr().out.splitlines() if ln.startswith("W config:")]
    assert any("disable_rules" in ln and "has no effect here" in ln for ln in warnings)
    assert any("sram_prefer" in ln for ln in warnings)
    assert rknn.load_onnx(model=str(conv_model)) == 0
    assert rknn.build(do_quantization=False) == 0
    assert rknn.init_runtime() == 0
    outputs = rknn.inference(inputs=[np.zeros((16, 16, 3), np.uint8)])
    assert outputs is not None and np.isfinite(outputs[0]).all()
    rknn.release()


def test_vendor_memory_plan_names_are_accepted(capsys):
    """rknn-toolkit2's config() defaults to memory_plan_strategy='BestFit'; a script that spells it out runs."""
    from openrknn.config import parse_config
    from rknn.api import RKNN
    assert parse_config(memory_plan_strategy="GreedyBySize").memory_plan_strategy == "greedy_by_size"
    assert RKNN().config(target_platform="rk3588", memory_plan_strategy="BestFit") == 0
    line = next(ln for ln in capsys.readouterr().out.splitlines() if ln.startswith("W config: memory_plan_strategy"))
    assert "'BestFit'" in line and "greedy_by_size" in line
    assert RKNN().config(memory_plan_strategy="BestFits") == -1   # still validated
