"""export_rknn(toolchain='rknn-toolkit2'): openrknn's quantization handed to Rockchip's compiler.

Most tests drive a stand-in toolkit (a tiny ``rknn.api`` written here, with an ``rknn-toolkit2``
distribution record) that follows the vendor's documented hybrid flow: step 1 writes the config,
step 2 reads the edited one back. The real toolkit runs only where ``OPENRKNN_RKNN_TOOLKIT2`` names
its Python (never imported here).
"""
from __future__ import annotations

import json
import os
import stat
import sys
from pathlib import Path

import numpy as np
import pytest
import yaml

from tests.helpers import cosine, make_conv_model, quantized_build

FAKE_API = '''
import json, os, yaml
class RKNN:
    def __init__(self, verbose=False):
        self.cfg = None
    def config(self, **kw):
        self.kw = kw
        return 0
    def load_onnx(self, model, **kw):
        self.stem = os.path.splitext(os.path.basename(model))[0]
        import onnx
        self.model = onnx.load(model)
        return 0
    def hybrid_quantization_step1(self, dataset=None, rknn_batch_size=None, proposal=False):
        assert os.path.isfile(dataset)
        params = {}
        for node in self.model.graph.node:
            for out in node.output:
                params[out] = {"qtype": "asym", "qmethod": "layer", "dtype": "int8", "min": [-1.0], "max": [1.0],
                               "scale": [2 / 255], "zero_point": [0]}
        params["vendor_only_tensor"] = {"dtype": "int8", "min": [-9.0], "max": [9.0]}
        with open(self.stem + ".quantization.cfg", "w") as f:
            yaml.safe_dump({"custom_quantize_layers": {}, "quantize_parameters": params}, f)
        json.dump(self.kw, open(self.stem + ".model", "w"))
        open(self.stem + ".data", "w").write("data")
        return 0
    def release(self):
        pass
    def hybrid_quantization_step2(self, model_input, data_input, model_quantization_cfg):
        self.kw = json.load(open(model_input))
        self.cfg = yaml.safe_load(open(model_quantization_cfg))
        return 0
    def build(self, do_quantization=False, rknn_batch_size=None):
        self.cfg = {"float": True}
        return 0
    def export_rknn(self, path):
        with open(path, "wb") as f:
            f.write(b"RKNN" + json.dumps({"config": self.kw, "cfg": self.cfg}).encode() + b"\\0"
                    + self.kw.get("custom_string", "").encode())
        return 0
    def init_runtime(self):
        return 0
    def inference(self, inputs, data_format=None):
        import numpy as np
        return [np.full((1, 2), 7.0, np.float32)]
'''


@pytest.fixture
def fake_toolkit(tmp_path: Path) -> str:
    """A 'Python' that runs this interpreter with a stand-in rknn-toolkit2 on its path."""
    root = tmp_path / "fake_site"
    (root / "rknn").mkdir(parents=True)
    (root / "rknn" / "__init__.py").write_text("")
    (root / "rknn" / "api.py").write_text(FAKE_API)
    info = root / "rknn_toolkit2-9.9.9.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: rknn-toolkit2\nVersion: 9.9.9\n")
    site = [p for p in sys.path if p.endswith("site-packages")]
    wrapper = tmp_path / "fake_python"
    # drop -I (it would hide PYTHONPATH); keep the rest of the command line
    wrapper.write_text(f"#!/bin/sh\nshift\nPYTHONPATH={root}:{':'.join(site)} exec {sys.executable} \"$@\"\n")
    wrapper.chmod(wrapper.stat().st_mode | stat.S_IEXEC)
    return str(wrapper)


def _record(data: bytes) -> dict:
    return json.loads(data[4:data.index(b"\0")])


def _built(tmp_path: Path, **config):
    model = make_conv_model(tmp_path / "m.onnx")
    rng = np.random.default_rng(0)
    samples = [rng.uniform(-1, 1, (1, 3, 16, 16)).astype(np.float32) for _ in range(4)]
    return quantized_build(model, samples, **config)


def test_without_toolkit_an_E_line_and_nothing_written(tmp_path, monkeypatch, capsys):
    monkeypatch.delenv("OPENRKNN_RKNN_TOOLKIT2", raising=False)
    rknn = _built(tmp_path)
    out = tmp_path / "vendor.rknn"
    assert rknn.export_rknn(str(out), toolchain="rknn-toolkit2") == -1
    err = capsys.readouterr()
    assert "E export_rknn" in err.out + err.err and "OPENRKNN_RKNN_TOOLKIT2" in err.out + err.err
    assert not out.exists() and not list(tmp_path.glob(".openrknn-*"))


def test_openrknn_own_rknn_package_is_not_taken_for_the_vendor(tmp_path, capsys):
    rknn = _built(tmp_path)
    # this interpreter imports openrknn's compatibility 'rknn' package, which is not rknn-toolkit2
    assert rknn.export_rknn(str(tmp_path / "v.rknn"), toolchain="rknn-toolkit2", toolchain_python=sys.executable) == -1
    err = capsys.readouterr()
    assert "not rknn-toolkit2's" in err.out + err.err
    assert not (tmp_path / "v.rknn").exists()


def test_unknown_toolchain_is_refused(tmp_path, capsys):
    rknn = _built(tmp_path)
    assert rknn.export_rknn(str(tmp_path / "v.rknn"), toolchain="tensorrt") == -1
    assert "toolchain 'tensorrt' is not known" in "".join(capsys.readouterr())


def test_ranges_and_float16_layers_are_handed_over(tmp_path, fake_toolkit):
    from openrknn.export import rockchip
    rknn = _built(tmp_path, quantized_algorithm="mmse")
    out = tmp_path / "vendor.rknn"
    assert rknn.export_rknn(str(out), toolchain="rknn-toolkit2", toolchain_python=fake_toolkit) == 0
    data = out.read_bytes()
    assert data[:4] == b"RKNN"
    written = _record(data)
    params = written["cfg"]["quantize_parameters"]
    ours = rockchip.tensor_ranges(rknn._model)
    handed = [name for name in params if name in ours]
    assert handed, "no tensor range was handed over"
    model = rknn._model
    for name in handed:
        entry = model.quant_params[name] if name in model.quant_params else None
        if entry is None:
            continue
        scale, zp = entry["scale"][0], np.asarray(entry["zero_point"]).ravel()[0]
        lo, hi = params[name]["min"][0], params[name]["max"][0]
        # the vendor's own rule (scale = (max - min) / 255) gives back openrknn's scale and zero point
        assert abs((hi - lo) / 255 - scale) <= 1e-6 * scale
        assert round(-128 - lo / scale) == zp
    assert params["vendor_only_tensor"]["min"] == [-9.0]    # no openrknn counterpart: the vendor's value
    assert written["config"]["quantized_algorithm"] == "normal"
    assert written["config"]["target_platform"] == "rk3588"
    origin = rockchip.read_provenance(data)
    assert origin["algorithm"] == "mmse" and origin["toolchain"] == "rknn-toolkit2 9.9.9"


def test_info_shows_the_origin(tmp_path, fake_toolkit, capsys):
    from openrknn.cli.main import main
    rknn = _built(tmp_path)
    out = tmp_path / "vendor.rknn"
    assert rknn.export_rknn(str(out), toolchain="rknn-toolkit2", toolchain_python=fake_toolkit) == 0
    capsys.readouterr()
    assert main(["info", str(out)]) == 0
    text = capsys.readouterr().out
    assert "Rockchip RKNN-Toolkit model" in text and "toolchain=rknn-toolkit2 9.9.9" in text


def test_float16_layers_become_custom_quantize_layers(tmp_path, fake_toolkit):
    from openrknn.export import rockchip
    rknn = _built(tmp_path)
    model = rknn._model
    stored = [o for n in model.graph.graph.node for o in n.output if model.tensor_dtypes.get(o) in ("int8", "uint8")]
    model.tensor_dtypes[stored[-1]] = "float16"     # as hybrid step 2 leaves a layer it moved
    assert stored[-1] in rockchip.float16_tensors(model)
    out = tmp_path / "vendor.rknn"
    assert rknn.export_rknn(str(out), toolchain="rknn-toolkit2", toolchain_python=fake_toolkit) == 0
    written = _record(out.read_bytes())
    layers = written["cfg"]["custom_quantize_layers"]
    assert layers.get(stored[-1]) == "float16"
    assert set(layers) == set(rockchip.float16_tensors(model)) & set(written["cfg"]["quantize_parameters"])


def test_cli_convert_with_toolchain(tmp_path, fake_toolkit):
    from openrknn.cli.main import main
    model = make_conv_model(tmp_path / "m.onnx")
    rng = np.random.default_rng(0)
    for i in range(3):
        np.save(tmp_path / f"s{i}.npy", rng.uniform(-1, 1, (1, 3, 16, 16)).astype(np.float32))
    (tmp_path / "ds.txt").write_text("s0.npy\ns1.npy\ns2.npy\n")
    out = tmp_path / "cli.rknn"
    assert main(["convert", str(model), "-t", "rk3566", "--dataset", str(tmp_path / "ds.txt"), "-o", str(out),
                 "--toolchain", "rknn-toolkit2", "--toolchain-python", fake_toolkit]) == 0
    written = _record(out.read_bytes())
    assert written["config"]["target_platform"] == "rk3566"


def test_toolkit1_platform_is_refused(tmp_path, fake_toolkit, capsys):
    rknn = _built(tmp_path, target_platform="rk1808")
    assert rknn.export_rknn(str(tmp_path / "v.rknn"), toolchain="rknn-toolkit2", toolchain_python=fake_toolkit) == -1
    assert "RKNN-Toolkit 1" in "".join(capsys.readouterr())


@pytest.mark.integration
def test_real_vendor_simulator_agrees_with_openrknn(tmp_path, shared_data):
    """The vendor's simulator on the exported build against openrknn's simulator on its own build."""
    python = os.environ.get("OPENRKNN_RKNN_TOOLKIT2")
    if not python:
        pytest.skip("rknn-toolkit2 not available: set OPENRKNN_RKNN_TOOLKIT2 to its Python to run this check")
    from PIL import Image
    from openrknn.export import rockchip
    from rknn.api import RKNN
    photos = sorted((shared_data / "images").glob("*.png"))
    images = [np.asarray(Image.open(p).convert("RGB").resize((192, 48)), np.uint8) for p in photos[:12]]
    for i, img in enumerate(images[:8]):
        Image.fromarray(img).save(tmp_path / f"c{i}.png")
    (tmp_path / "ds.txt").write_text("".join(f"{tmp_path}/c{i}.png\n" for i in range(8)))
    rknn = RKNN()
    rknn.config(mean_values=[[123.675, 116.28, 103.53]], std_values=[[58.395, 57.12, 57.375]], target_platform="rk3588",
                weight_qtype="asymmetric_quantized")   # the vendor's own weight grid
    assert rknn.load_onnx(model=str(shared_data / "models/onnx/ch_ppocr_mobile_v2.0_cls_infer.onnx"),
                          inputs=["x"], input_size_list=[[1, 3, 48, 192]]) == 0
    assert rknn.build(do_quantization=True, dataset=str(tmp_path / "ds.txt")) == 0
    rknn.init_runtime()
    held = images[8:]
    ours = np.concatenate([rknn.inference(inputs=[img[None]])[0].ravel() for img in held])
    built = rockchip.compile_with_vendor(rknn._model, rknn._source.model, rknn._cfg(), str(tmp_path / "ds.txt"),
                                         str(tmp_path / "v.rknn"), python, check_samples=[[img[None]] for img in held])
    theirs = np.concatenate([s[0].ravel() for s in built.vendor_outputs])
    assert len(built.mapped) >= 80
    print(f"vendor simulator vs openrknn simulator: cosine {cosine(ours, theirs):.5f}")
    assert cosine(ours, theirs) >= 0.9999   # measured 1.00000 (equal integer for integer through the backbone)


VENDOR_CFG = """custom_quantize_layers: {}
quantize_parameters:
    x:
        qtype: asym
        dtype: float32
        min:
        -   -2.1179039478302
        max:
        -   2.640000104904175
    "conv:1":
        qtype: asym
        qmethod: layer
        dtype: int8
        min:
        -   -3.0
        max:
        -   20.58575439453125
        scale:
        -   6.092265583740632e-11
        zero_point:
        -   -96
    bias_rs:
        dtype: int32
        min:
        -   -0.13083040714263916
        max:
        -   0.13083040714263916
"""


def test_vendor_config_edit_changes_only_ranges_and_layers(tmp_path):
    """The vendor refuses a scale that changed in its last digit: every line but min/max stays as written."""
    import importlib.util
    from openrknn.export import rockchip
    spec = importlib.util.spec_from_file_location("vendor_job", rockchip._JOB_SCRIPT)
    job = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(job)
    path = tmp_path / "m.quantization.cfg"
    path.write_text(VENDOR_CFG)
    result = {}
    job._edit_config(str(path), {"conv:1": {"min": [-1.5], "max": [6.0]}, "bias_rs": {"min": [-1.0], "max": [1.0]}},
                     ["conv:1", "missing"], result)
    text = path.read_text()
    assert "        -   6.092265583740632e-11\n" in text          # byte for byte
    assert "        min:\n        -   -1.5\n        max:\n        -   6.0\n        scale:" in text
    assert "-   -0.13083040714263916" in text                    # int32 constants untouched
    cfg = yaml.safe_load(text)
    assert cfg["custom_quantize_layers"] == {"conv:1": "float16"}
    assert cfg["quantize_parameters"]["x"]["min"] == [-2.1179039478302]
    assert result["mapped"] == ["conv:1"] and result["float16_unplaced"] == ["missing"]
    assert text.replace("-   -1.5", "-   -3.0").replace("-   6.0\n", "-   20.58575439453125\n").replace(
        'custom_quantize_layers:\n    "conv:1": float16\n', "custom_quantize_layers: {}\n") == VENDOR_CFG


def _conv_relu_depthwise(path: Path) -> Path:
    """x → Conv(3→8) → Relu → depthwise Conv → y: a pair depthwise equalization rescales."""
    import onnx
    from onnx import TensorProto, helper, numpy_helper
    rng = np.random.default_rng(5)
    w1 = rng.normal(0, 0.3, (8, 3, 3, 3)).astype(np.float32) * rng.uniform(0.02, 1, (8, 1, 1, 1)).astype(np.float32)
    inits = [numpy_helper.from_array(w1, "w1"), numpy_helper.from_array(rng.normal(0, 0.1, 8).astype(np.float32), "b1"),
             numpy_helper.from_array(rng.normal(0, 0.3, (8, 1, 3, 3)).astype(np.float32), "w2"),
             numpy_helper.from_array(rng.normal(0, 0.1, 8).astype(np.float32), "b2")]
    nodes = [helper.make_node("Conv", ["x", "w1", "b1"], ["c1"], name="conv1", pads=[1, 1, 1, 1]),
             helper.make_node("Relu", ["c1"], ["r1"], name="relu1"),
             helper.make_node("Conv", ["r1", "w2", "b2"], ["y"], name="dw", pads=[1, 1, 1, 1], group=8)]
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 16, 16])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 8, 16, 16])], inits)
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)]), path)
    return path


def test_handover_graph_is_the_graph_the_ranges_describe(tmp_path):
    """Rockchip's compiler gets the float graph openrknn calibrated (equalized channels, corrected
    biases), without the input stage: compiling the source gave it ranges of differently scaled tensors."""
    from onnx import numpy_helper
    from openrknn.export import rockchip
    from tests.helpers import reference_session
    rng = np.random.default_rng(0)
    samples = [rng.uniform(0, 255, (1, 3, 16, 16)).astype(np.float32) for _ in range(6)]
    rknn = quantized_build(_conv_relu_depthwise(tmp_path / "m.onnx"), samples, mean_values=[[120, 110, 100]],
                           weight_qtype="asymmetric_quantized",
                           std_values=[[60, 58, 57]])
    model = rknn._model
    graph = rockchip.handover_graph(model, rknn._source.model)
    assert [i.name for i in graph.graph.input] == ["x"] and len(graph.graph.node) == 3   # no mean/std nodes
    # the channels between the Conv and the depthwise Conv are the equalized ones, not the source's
    source_w1 = numpy_helper.to_array(next(i for i in rknn._source.model.graph.initializer if i.name == "w1"))
    inits = {i.name: numpy_helper.to_array(i) for i in graph.graph.initializer}
    conv1 = next(n for n in graph.graph.node if n.output[0] == "c1")
    assert not np.allclose(inits[conv1.input[1]], source_w1)
    # each bias is the one the build computes with: the dequantized int32 bias
    built = {n.output[0]: n for n in model.graph.graph.node}
    stored = {i.name: numpy_helper.to_array(i) for i in model.graph.graph.initializer}
    for node in graph.graph.node:
        if node.op_type == "Conv":
            name = built[node.output[0]].input[2]
            expected = stored[name] * np.asarray(model.quant_params[name]["scale"])
            np.testing.assert_allclose(inits[node.input[2]], expected, rtol=1e-6)
    # and it computes the source's function on the normalised input
    x = samples[0]
    normalised = (x - np.reshape([120, 110, 100], (1, 3, 1, 1))) / np.reshape([60, 58, 57], (1, 3, 1, 1))
    ours = reference_session(graph).run(None, {"x": normalised.astype(np.float32)})[0]
    source = reference_session(rknn._source.model).run(None, {"x": normalised.astype(np.float32)})[0]
    assert cosine(ours, source) > 0.999
