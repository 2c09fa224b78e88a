"""Helpers shared by the tests: small generated models, a quantized build, reference sessions,
cosine similarity and the location of the shared real-model folder. Import them from here
(``from tests.helpers import ...``); ``tests/conftest.py`` holds only fixtures."""
from __future__ import annotations

import os
import re
import time
from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

REPO = Path(__file__).resolve().parents[1]


def shared_data_root() -> Path | None:
    """``OPENRKNN_TEST_DATA`` or ``../shared`` beside the checkout, if it has models/."""
    env = os.environ.get("OPENRKNN_TEST_DATA")
    for candidate in ([Path(env)] if env else []) + [REPO.parent / "shared"]:
        if (candidate / "models").is_dir():
            return candidate
    return None


def make_conv_model(path: Path, channels: int = 3, size: int = 16, seed: int = 0) -> Path:
    """Conv(3x3) → BatchNorm → Relu → GlobalAveragePool → Flatten → Gemm → Softmax."""
    rng = np.random.default_rng(seed)
    inits = [
        numpy_helper.from_array(rng.normal(0, 0.3, (8, channels, 3, 3)).astype(np.float32), "w"),
        numpy_helper.from_array(rng.normal(0, 0.1, 8).astype(np.float32), "b"),
        numpy_helper.from_array(rng.uniform(0.5, 1.5, 8).astype(np.float32), "bn_s"),
        numpy_helper.from_array(rng.normal(0, 0.1, 8).astype(np.float32), "bn_b"),
        numpy_helper.from_array(rng.normal(0, 0.1, 8).astype(np.float32), "bn_m"),
        numpy_helper.from_array(rng.uniform(0.5, 1.5, 8).astype(np.float32), "bn_v"),
        numpy_helper.from_array(rng.normal(0, 0.3, (5, 8)).astype(np.float32), "fc_w"),
        numpy_helper.from_array(rng.normal(0, 0.1, 5).astype(np.float32), "fc_b"),
    ]
    nodes = [
        helper.make_node("Conv", ["x", "w", "b"], ["c"], name="conv", pads=[1, 1, 1, 1]),
        helper.make_node("BatchNormalization", ["c", "bn_s", "bn_b", "bn_m", "bn_v"], ["bn"], name="bn"),
        helper.make_node("Relu", ["bn"], ["r"], name="relu"),
        helper.make_node("GlobalAveragePool", ["r"], ["p"], name="pool"),
        helper.make_node("Flatten", ["p"], ["f"], name="flatten"),
        helper.make_node("Gemm", ["f", "fc_w", "fc_b"], ["logits"], name="fc", transB=1),
        helper.make_node("Softmax", ["logits"], ["prob"], name="softmax", axis=1),
    ]
    graph = helper.make_graph(nodes, "conv_test", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, channels, size, size])],
                              [helper.make_tensor_value_info("prob", TensorProto.FLOAT, [1, 5])], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    onnx.save(model, path)
    return path


def exported_conv_model(folder: Path, platform: str) -> Path:
    """``make_conv_model`` built as a float model for ``platform`` and exported to ``folder/conv.rknn``."""
    from rknn.api import RKNN
    rknn = RKNN()
    rknn.config(target_platform=platform)
    assert rknn.load_onnx(str(make_conv_model(folder / "conv.onnx"))) == 0
    assert rknn.build(do_quantization=False) == 0
    assert rknn.export_rknn(str(folder / "conv.rknn")) == 0
    return folder / "conv.rknn"


def quantized_build(model_path: Path, samples: list[np.ndarray], **config):
    """An ``RKNN`` built quantized (rk3588 unless ``config`` says otherwise), calibrated on
    ``samples`` — written as ``s0.npy``… and a dataset file beside the model."""
    from rknn.api import RKNN
    folder = Path(model_path).parent
    for i, sample in enumerate(samples):
        np.save(folder / f"s{i}.npy", sample)
    (folder / "ds.txt").write_text("".join(f"s{i}.npy\n" for i in range(len(samples))))
    rknn = RKNN()
    assert rknn.config(**{"target_platform": "rk3588", **config}) == 0
    assert rknn.load_onnx(model=str(model_path)) == 0
    assert rknn.build(do_quantization=True, dataset=str(folder / "ds.txt")) == 0
    return rknn


def reference_session(model):
    """onnxruntime on a test model (a path, serialized bytes or a ModelProto) — through the simulator's
    session maker, so a model stamped by a newer onnx than the installed onnxruntime still runs."""
    from openrknn.graph.runner import make_session
    if isinstance(model, (bytes, bytearray)):
        model = onnx.load_from_string(bytes(model))
    elif not isinstance(model, onnx.ModelProto):
        model = onnx.load(str(model))
    return make_session(model)


def cosine(a: np.ndarray, b: np.ndarray) -> float:
    a, b = np.asarray(a, np.float64).ravel(), np.asarray(b, np.float64).ravel()
    return float(a @ b / (np.linalg.norm(a) * np.linalg.norm(b) + 1e-30))


def three_convs(path: Path, outlier: float | None = None, overflow: bool = False, seed: int = 0) -> Path:
    """x → conv1+relu → conv2+relu → conv3 (1x1) → y.

    conv1's channel 7 is dead (zero weights, bias -1, then Relu): always 0. With ``outlier``, conv2's
    weights that read that dead channel are set to ``outlier``: the float output does not change, but
    each output channel's weight range becomes huge, so int8 weights of conv2 round to zero: conv2 is
    the layer that is hard to quantize. With ``overflow``, conv2's weights are scaled so its output
    exceeds the fp16 range (65504).
    """
    rng = np.random.default_rng(seed)
    w1 = rng.normal(0, 0.4, (8, 3, 3, 3)).astype(np.float32)
    b1 = rng.normal(0.1, 0.05, 8).astype(np.float32)
    w1[7], b1[7] = 0.0, -1.0
    w2 = rng.normal(0, 0.3, (8, 8, 3, 3)).astype(np.float32)
    if outlier is not None:
        w2[:, 7, :, :] = outlier
    if overflow:
        w2 *= 3e4
    w3 = rng.normal(0, 0.3, (4, 8, 1, 1)).astype(np.float32)
    inits = [numpy_helper.from_array(a, n) for a, n in ((w1, "w1"), (b1, "b1"), (w2, "w2"),
                                                       (np.zeros(8, np.float32), "b2"), (w3, "w3"))]
    nodes = [helper.make_node("Conv", ["x", "w1", "b1"], ["c1"], name="conv1", pads=[1, 1, 1, 1]),
             helper.make_node("Relu", ["c1"], ["r1"], name="relu1"),
             helper.make_node("Conv", ["r1", "w2", "b2"], ["c2"], name="conv2", pads=[1, 1, 1, 1]),
             helper.make_node("Relu", ["c2"], ["r2"], name="relu2"),
             helper.make_node("Conv", ["r2", "w3"], ["y"], name="conv3")]
    graph = helper.make_graph(nodes, "three_convs", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 16, 16])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 4, 16, 16])], inits)
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)]), path)
    return path


def mixed_layers_model(path: Path, seed: int = 0) -> Path:
    """Conv+Relu, depthwise Conv + hard-swish (x·HardSigmoid), 1x1 Conv + residual Add, MaxPool,
    Concat, AveragePool, Sigmoid, GlobalAveragePool, Flatten, Gemm."""
    rng = np.random.default_rng(seed)
    inits = []

    def init(name, shape, std=0.3):
        inits.append(numpy_helper.from_array(rng.normal(0, std, shape).astype(np.float32), name))
        return name
    nodes = [
        helper.make_node("Conv", ["x", init("w1", (8, 3, 3, 3)), init("b1", 8, 0.1)], ["c1"], pads=[1, 1, 1, 1],
                         strides=[2, 2]),
        helper.make_node("Relu", ["c1"], ["r1"]),
        helper.make_node("Conv", ["r1", init("w2", (8, 1, 3, 3)), init("b2", 8, 0.1)], ["c2"], pads=[1, 1, 1, 1],
                         group=8),
        helper.make_node("HardSigmoid", ["c2"], ["hs"], alpha=1 / 6, beta=0.5),
        helper.make_node("Mul", ["c2", "hs"], ["h2"]),
        helper.make_node("Conv", ["h2", init("w3", (8, 8, 1, 1))], ["c3"]),
        helper.make_node("Add", ["c3", "r1"], ["a3"]),
        helper.make_node("MaxPool", ["a3"], ["p"], kernel_shape=[2, 2], strides=[2, 2]),
        helper.make_node("AveragePool", ["a3"], ["ap"], kernel_shape=[2, 2], strides=[2, 2]),
        helper.make_node("Sigmoid", ["ap"], ["sg"]),
        helper.make_node("Concat", ["p", "sg"], ["cc"], axis=1),
        helper.make_node("GlobalAveragePool", ["cc"], ["g"]),
        helper.make_node("Flatten", ["g"], ["f"]),
        helper.make_node("Gemm", ["f", init("fw", (5, 16)), init("fb", 5, 0.1)], ["y"], transB=1),
    ]
    graph = helper.make_graph(nodes, "m", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 16, 16])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 5])], inits)
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)]), path)
    return path


def uniform_samples(shape, count=4, seed=1):
    """``count`` arrays of ``shape``, uniform in 0–255 (pixel-like calibration inputs)."""
    rng = np.random.default_rng(seed)
    return [rng.uniform(0, 255, shape).astype(np.float32) for _ in range(count)]


def wait_job(bench, job_id: int, limit_s: float = 60.0) -> str:
    """The final state of a background job (polls at most ``limit_s`` seconds)."""
    deadline = time.monotonic() + limit_s
    while time.monotonic() < deadline:
        job = bench.runner.jobs[job_id]
        if job.state != "running":
            return job.state
        time.sleep(0.05)
    raise AssertionError(f"job {job_id} still running after {limit_s} s")


def rewrite_rknn(path: Path, header=None, graph=None, raw_section: bytes | None = None) -> Path:
    """Re-export ``path`` after changing its header / graph; the checksums are recomputed (a forger can)."""
    from openrknn.model_file import GRAPH_SECTION
    from openrknn.model_file.container import decode, encode
    container = decode(path.read_bytes())
    if header:
        header(container.header)
    if graph or raw_section is not None:
        model = onnx.load_from_string(container.sections[GRAPH_SECTION])
        if graph:
            graph(model)
        container.sections[GRAPH_SECTION] = raw_section if raw_section is not None else model.SerializeToString()
        container.header.pop("graph_size", None)
        container.header.pop("graph_compression", None)
    out = path.with_name("forged.rknn")
    out.write_bytes(encode(container))
    return out


def lite_outputs(model: Path, inputs: list[np.ndarray], **kwargs) -> list[np.ndarray]:
    """``RKNNLite`` outputs of a ``.rknn`` file (load, init, one inference, release)."""
    from rknnlite.api import RKNNLite
    lite = RKNNLite()
    assert lite.load_rknn(str(model)) == 0
    assert lite.init_runtime() == 0
    outputs = lite.inference(inputs=inputs, **kwargs)
    lite.release()
    return outputs


# ------------------------------------------------------------------ workbench (extra 'ui')
def logged_in(app, base_url: str = "http://127.0.0.1:8000"):
    """A client that opened the start URL (session cookie) and sends the page's CSRF token with its posts."""
    from starlette.testclient import TestClient
    c = TestClient(app, base_url=base_url)
    assert c.get(f"/?token={app.state.secret}").status_code == 200
    c.headers["X-CSRF-Token"] = re.search(r"csrf_token=([0-9a-f]+)", c.get("/").text).group(1)
    return c


def upload_model(client, path: Path, name: str | None = None):
    """Post ``path`` to the workbench's model page as an ONNX upload."""
    with open(path, "rb") as handle:
        return client.post("/model", data={"framework": "onnx"},
                           files={"model_file": (name or path.name, handle.read())}, follow_redirects=False)


def start(client, url: str, **kwargs) -> int:
    """Post a workbench form that starts a job; wait for the job to finish and return its id."""
    response = client.post(url, follow_redirects=False, **kwargs)
    assert response.status_code == 303, response.text
    job_id = int(response.headers["location"].rsplit("/", 1)[1])
    assert wait_job(client.bench, job_id) == "done", client.bench.runner.jobs[job_id].lines
    return job_id


def three_limit_surprises(path, dynamic=False):
    """A Conv with a 1×40 kernel, a Resize by 2.5 and an NCHW→NHWC Transpose: one finding per NPU limit family."""
    rng = np.random.default_rng(0)
    w = numpy_helper.from_array(rng.normal(0, 0.05, (8, 8, 1, 40)).astype(np.float32), "w")
    scales = numpy_helper.from_array(np.array([1, 1, 2.5, 2.5], np.float32), "scales")
    nodes = [helper.make_node("Conv", ["x", "w"], ["c"], name="long_conv"),
             helper.make_node("Resize", ["c", "", "scales"], ["r"], name="resize_by_2_5", mode="linear"),
             helper.make_node("Transpose", ["r"], ["y"], name="to_nhwc", perm=[0, 2, 3, 1])]
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, ["n", 8, "h", "w"] if dynamic else [1, 8, 16, 64])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, ["n", "h2", "w2", 8] if dynamic else [1, 40, 62, 8])
    graph = helper.make_graph(nodes, "surprises", [x], [y], [w, scales])
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)]), str(path))
    return path
