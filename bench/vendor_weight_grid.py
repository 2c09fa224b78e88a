"""How rknn-toolkit2 2.5.0 rounds int8 Conv weights, read back from its simulator on probe Convs.

    OPENRKNN_RKNN_TOOLKIT2=/path/to/rknn-toolkit2/python python bench/vendor_weight_grid.py

Each probe is an identity 1×1 Conv (every weight on the grid) feeding the probe Conv, built int8 for
rk3588 by the vendor and run on its simulator (in a subprocess with ``-I``; its package is never
imported here). Three probes:

- **Weights** (dense 1×1 and 3×3 of 16–256 input channels, depthwise 3×3 and 5×5): each output
  channel's weight range is pinned to [−0.5, 1] by taps the probe picture never reaches, and the other
  weights are small, so the calibrated output range is small and the output grid is ~20× finer than
  the weight grid. A picture with one 1.0 per input channel (far apart; a corner for depthwise, whose
  pins then fall outside the picture) makes every output value one weight. Each decoded weight is
  compared with four rules: symmetric or asymmetric grid, round-to-nearest or running sums kept
  (``QuantSettings.conv_weight_rounding``). A rule's count is how many weights differ from it by more
  than 0.6 output steps (one weight step is 15–30 output steps; a tie of the output rounding is 0.53).
- **Bias correction**: a 1×1 Conv whose 14 weights sit 0.3 steps above the grid, calibrated on inputs
  0.25 and 1.0. The vendor's output at 1.0, next to the float sum and the sum of the nearest weights.
- **Depthwise equalization**: Conv (channel gains 1, 1, 0.01, 0.01) → ReLU → depthwise 3×3 (gains 1, 1,
  100, 100). Unequalized, the ReLU tensor's weak channels get ~3 int8 levels and their output's cosine
  is low; equalized (openrknn's ``equalize_depthwise``) they keep their precision.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

REPO = Path(__file__).resolve().parents[1]
VENDOR_PYTHON = os.environ.get("OPENRKNN_RKNN_TOOLKIT2", "")

_VENDOR_RUN = """
import json, sys, numpy as np
from rknn.api import RKNN
for job in json.load(open(sys.argv[1])):
    r = RKNN(verbose=False)
    r.config(mean_values=[[0] * job["channels"]], std_values=[[1] * job["channels"]], target_platform="rk3588")
    assert r.load_onnx(model=job["onnx"]) == 0
    open(job["onnx"] + ".txt", "w").write("".join(p + "\\n" for p in job["calibrate"]))
    assert r.build(do_quantization=True, dataset=job["onnx"] + ".txt") == 0
    assert r.init_runtime() == 0
    outputs = [r.inference(inputs=[np.load(p)], data_format="nchw")[0] for p in job["run"]]
    np.save(job["onnx"] + ".out.npy", np.stack(outputs))
    r.release()
"""


def _model(path: Path, weight: np.ndarray, height: int, group: int = 1, pre_gain=None, relu: bool = False) -> None:
    channels, out = weight.shape[1] * group, weight.shape[0]
    gain = np.ones(channels) if pre_gain is None else np.asarray(pre_gain)
    eye = (np.eye(channels) * gain[:, None]).astype(np.float32)[:, :, None, None]
    pad = weight.shape[-1] // 2
    nodes = [helper.make_node("Conv", ["x", "eye"], ["x1"], kernel_shape=[1, 1])]
    if relu:
        nodes.append(helper.make_node("Relu", ["x1"], ["x2"]))
    nodes.append(helper.make_node("Conv", [nodes[-1].output[0], "w"], ["y"], kernel_shape=list(weight.shape[2:]),
                                  pads=[pad] * 4, group=group))
    graph = helper.make_graph(nodes, path.stem,
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, channels, height, height])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, out, height, height])],
                              [numpy_helper.from_array(weight.astype(np.float32), "w"),
                               numpy_helper.from_array(eye, "eye")])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    model.ir_version = 8
    onnx.save(model, str(path))


def _save(folder: Path, name: str, array: np.ndarray) -> str:
    np.save(folder / name, array.astype(np.float32))
    return str(folder / name)


def weight_probes(folder: Path, rng: np.random.Generator) -> list[dict]:
    jobs = []
    for cin, k in ((16, 1), (64, 1), (256, 1), (8, 3), (32, 3), (128, 3)):
        weight = rng.uniform(-0.05, 0.05, (8, cin, k, k))
        if k == 1:
            weight[:, -1], weight[:, -2], active = 1.0, -0.5, cin - 2
        else:
            weight[:, -1] = 0
            weight[:, -1, 0, 0], weight[:, -1, -1, -1], active = 1.0, -0.5, cin - 1
        cell, pad = k + 1, k // 2
        grid = int(np.ceil(np.sqrt(active)))
        height = grid * cell + 2
        x = np.zeros((1, cin, height, height))
        taps = []   # (input channel, picture row, column) of each 1.0
        for c in range(active):
            row, col = 1 + (c // grid) * cell + pad, 1 + (c % grid) * cell + pad
            x[0, c, row, col] = 1.0
            taps.append((c, row, col))
        name = f"dense{k}x{k}_{cin}"
        _model(folder / f"{name}.onnx", weight, height)
        picture = _save(folder, f"{name}.npy", x)
        jobs.append(dict(name=name, onnx=str(folder / f"{name}.onnx"), channels=cin, calibrate=[picture],
                         run=[picture], weight=weight.tolist(), taps=taps, depthwise=False))
    for channels, k in ((16, 3), (32, 5), (96, 3)):
        weight = rng.uniform(-0.05, 0.05, (channels, 1, k, k))
        weight[:, 0, 0, -1], weight[:, 0, -1, 0] = 1.0, -0.5      # never reached from the two corners
        height = k + 3
        corners = []
        for row in (0, height - 1):
            x = np.zeros((1, channels, height, height))
            x[:, :, row, row] = 1.0
            corners.append(_save(folder, f"dw{k}x{k}_{channels}_{row}.npy", x))
        name = f"depthwise{k}x{k}_{channels}"
        _model(folder / f"{name}.onnx", weight, height, group=channels)
        jobs.append(dict(name=name, onnx=str(folder / f"{name}.onnx"), channels=channels, calibrate=corners,
                         run=corners, weight=weight.tolist(), taps=[(0, 0), (height - 1, height - 1)], depthwise=True))
    return jobs


def _decoded(job: dict, out: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The probe weights read off the vendor's output, and a mask of the readable ones."""
    weight = np.asarray(job["weight"])
    k = weight.shape[-1]
    pad = k // 2
    got, seen = np.zeros_like(weight), np.zeros(weight.shape, bool)
    for kh in range(k):
        for kw in range(k):
            if job["depthwise"]:
                for picture, (row, col) in enumerate(job["taps"]):
                    y, x = row + pad - kh, col + pad - kw
                    if 0 <= y < out.shape[-2] and 0 <= x < out.shape[-1] and (kh, kw) not in ((0, k - 1), (k - 1, 0)):
                        got[:, 0, kh, kw], seen[:, 0, kh, kw] = out[picture, 0, :, y, x], True
            else:
                for c, row, col in job["taps"]:
                    got[:, c, kh, kw] = out[0, 0, :, row + pad - kh, col + pad - kw]
                    seen[:, c, kh, kw] = True
    return got, seen


def _rules(weight: np.ndarray) -> dict[str, np.ndarray]:
    rows = weight.reshape(weight.shape[0], -1)
    hi, lo = rows.max(axis=1), rows.min(axis=1)
    shape = (-1,) + (1,) * (weight.ndim - 1)
    symmetric = (np.maximum(np.abs(hi), np.abs(lo)) / 127).reshape(shape)
    asymmetric = ((np.maximum(hi, 0) - np.minimum(lo, 0)) / 255).reshape(shape)

    def running(steps):
        flat = np.rint(np.cumsum(steps.reshape(steps.shape[0], -1), axis=1))
        return np.diff(flat, axis=1, prepend=0.0).reshape(steps.shape)
    return {"symmetric nearest": np.rint(weight / symmetric) * symmetric,
            "symmetric running sums": running(weight / symmetric) * symmetric,
            "asymmetric nearest": np.rint(weight / asymmetric) * asymmetric,
            "asymmetric running sums": running(weight / asymmetric) * asymmetric}


def bias_probe(folder: Path) -> dict:
    step = 1.5 / 255
    weight = np.zeros((4, 16, 1, 1))
    weight[:, 0], weight[:, 1] = 1.0, -0.5
    weight[:, 2:] = (np.rint(np.arange(2, 16) * 0.6 + 0.06)[None, :, None, None] + 0.3) * step
    pictures = []
    for value in (0.25, 1.0):
        x = np.zeros((1, 16, 4, 4))
        x[:, 2:] = value
        x[0, 2:, 0, 0] = 0.0
        pictures.append(_save(folder, f"bias_{value}.npy", x))
    _model(folder / "bias.onnx", weight, 4)
    return dict(name="bias", onnx=str(folder / "bias.onnx"), channels=16, calibrate=pictures, run=pictures[1:],
                float=float(weight[0, 2:].sum()), nearest=float((np.rint(weight[0, 2:] / step) * step).sum()))


def equalization_probe(folder: Path, rng: np.random.Generator) -> dict:
    x = rng.uniform(0, 1, (4, 1, 4, 12, 12))
    pictures = [_save(folder, f"eq_{i}.npy", p) for i, p in enumerate(x)]
    weight = rng.uniform(0.2, 1.0, (4, 1, 3, 3)) * np.array([1, 1, 100, 100])[:, None, None, None]
    _model(folder / "equalize.onnx", weight, 12, group=4, pre_gain=[1, 1, 0.01, 0.01], relu=True)
    return dict(name="equalize", onnx=str(folder / "equalize.onnx"), channels=4, calibrate=pictures[:3],
                run=pictures[3:], x=x[3].tolist(), weight=weight.tolist())


def _cosine(a: np.ndarray, b: np.ndarray) -> float:
    a, b = a.ravel().astype(np.float64), b.ravel().astype(np.float64)
    return float(a @ b / (np.linalg.norm(a) * np.linalg.norm(b)))


def _openrknn(job: dict, folder: Path, equalize: bool) -> np.ndarray:
    """openrknn's int8 output of a probe (calibrated like the vendor's), depthwise equalization on or off."""
    import dataclasses
    sys.path.insert(0, str(REPO))
    import openrknn.compile as compile_stage
    from rknn.api import RKNN
    setup = compile_stage.calibration_setup

    def chosen(*args, **kwargs):
        settings, samples = setup(*args, **kwargs)
        return dataclasses.replace(settings, equalize_depthwise=equalize), samples
    dataset = folder / "openrknn_dataset.txt"
    nhwc = []
    for i, path in enumerate(job["calibrate"]):
        nhwc.append(folder / f"openrknn_{i}.npy")
        np.save(nhwc[-1], np.load(path).transpose(0, 2, 3, 1))
    dataset.write_text("".join(f"{p}\n" for p in nhwc))
    compile_stage.calibration_setup = chosen
    rknn = RKNN(verbose=False)
    try:
        rknn.config(target_platform="rk3588")
        assert rknn.load_onnx(model=job["onnx"]) == 0 and rknn.build(do_quantization=True, dataset=str(dataset)) == 0
        assert rknn.init_runtime() == 0
        return np.asarray(rknn.inference(inputs=[np.asarray(job["x"], np.float32)], data_format="nchw")[0])[0]
    finally:
        rknn.release()
        compile_stage.calibration_setup = setup


def main() -> None:
    if not VENDOR_PYTHON:
        raise SystemExit("set OPENRKNN_RKNN_TOOLKIT2 to rknn-toolkit2's Python")
    rng = np.random.default_rng(0)
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        jobs = weight_probes(folder, rng) + [bias_probe(folder), equalization_probe(folder, rng)]
        (folder / "jobs.json").write_text(json.dumps(jobs))
        (folder / "run.py").write_text(_VENDOR_RUN)
        done = subprocess.run([VENDOR_PYTHON, "-I", str(folder / "run.py"), str(folder / "jobs.json")],
                              cwd=folder, capture_output=True, text=True, timeout=1800)
        if done.returncode != 0:
            raise SystemExit(f"rknn-toolkit2 failed:\n{done.stderr[-2000:]}")
        print("| probe | weights read | " + " | ".join(_rules(np.ones((1, 1, 1, 1)))) + " |")
        print("|---|---|---|---|---|---|")
        for job in jobs[:-2]:
            out = np.load(job["onnx"] + ".out.npy")
            step = (max(out.max(), 0) - min(out.min(), 0)) / 255
            got, seen = _decoded(job, out)
            counts = [int((np.abs(got - rule)[seen] > 0.6 * step).sum()) for rule in _rules(np.asarray(job["weight"])).values()]
            print(f"| {job['name']} | {int(seen.sum())} | " + " | ".join(str(c) for c in counts) + " |")
        bias = jobs[-2]
        vendor = float(np.load(bias["onnx"] + ".out.npy")[0, 0, 0, 1, 1])
        print(f"\nbias correction probe at x = 1: vendor {vendor:.5f}, float {bias['float']:.5f}, "
              f"nearest weights without correction {bias['nearest']:.5f}")
        eq = jobs[-1]
        out = np.load(eq["onnx"] + ".out.npy")[0, 0]
        import onnxruntime as ort
        session = ort.InferenceSession(eq["onnx"], providers=["CPUExecutionProvider"])
        want = session.run(None, {"x": np.asarray(eq["x"], np.float32)})[0][0]
        print("equalization probe, cosine per channel (gains 1, 1, 0.01, 0.01):")
        print("  rknn-toolkit2: " + ", ".join(f"{_cosine(out[c], want[c]):.4f}" for c in range(4)))
        for equalize in (True, False):
            got = _openrknn(eq, folder, equalize)
            print(f"  openrknn, equalize_depthwise={equalize}: "
                  + ", ".join(f"{_cosine(got[c], want[c]):.4f}" for c in range(4)))


if __name__ == "__main__":
    main()
