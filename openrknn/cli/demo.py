"""``openrknn demo``: the embedded default job, end to end with no download.

Builds the MobileNet-style ONNX model, converts it for the target (fp16, as the NPU runs float
models), exports the .rknn, reloads it, runs a generated picture and prints the top-5, then checks
the simulator against onnxruntime fp32 on the original model.
"""
from __future__ import annotations

import os
import tempfile
import time

import numpy as np
import onnx

from openrknn import log
from openrknn.api.rknn import RKNN
from openrknn.cli.common import print_top5
from openrknn.cli.demo_model import DEMO_INPUT, build_demo_model, demo_image
from openrknn.graph.runner import make_session

MEAN = [123.675, 116.28, 103.53]
STD = [58.395, 57.12, 57.375]


def run_demo(target_platform: str = "rk3588", output_dir: str | None = None, verbose: bool = False) -> int:
    folder = output_dir or tempfile.mkdtemp(prefix="openrknn-demo-")
    os.makedirs(folder, exist_ok=True)
    onnx_path = os.path.join(folder, "mobilenet_demo.onnx")
    rknn_path = os.path.join(folder, "mobilenet_demo.rknn")
    onnx.save(build_demo_model(), onnx_path)
    log.info(f"demo: built {onnx_path}")
    img = demo_image()

    rknn = RKNN(verbose=verbose)
    started = time.perf_counter()
    steps = [("config", lambda: rknn.config(mean_values=[MEAN], std_values=[STD], target_platform=target_platform)),
             ("load_onnx", lambda: rknn.load_onnx(model=onnx_path)),
             ("build", lambda: rknn.build(do_quantization=False)),
             ("export_rknn", lambda: rknn.export_rknn(rknn_path))]
    for name, step in steps:
        print(f"--> {name}")
        if step() != 0:
            log.error(f"demo: {name} failed")
            return 1
    build_time = time.perf_counter() - started
    rknn.release()

    print("--> load_rknn + init_runtime + inference")
    reloaded = RKNN(verbose=verbose)
    if reloaded.load_rknn(rknn_path) != 0 or reloaded.init_runtime() != 0:
        return 1
    outputs = reloaded.inference(inputs=[img])
    if outputs is None:
        return 1
    print_top5(outputs[0])
    reference = _onnxruntime_reference(onnx_path, img)
    cosine = float(np.dot(outputs[0].ravel(), reference.ravel()) /
                   (np.linalg.norm(outputs[0]) * np.linalg.norm(reference)))
    print(f"build {build_time:.2f} s; model {os.path.getsize(rknn_path) / 1024:.0f} KiB at {rknn_path}")
    print(f"simulator (fp16) vs onnxruntime fp32 on the original model: cosine {cosine:.6f}, "
          f"top-1 {'agrees' if outputs[0].argmax() == reference.argmax() else 'DIFFERS'}")
    reloaded.release()
    return 0 if cosine > 0.999 else 1


def _onnxruntime_reference(onnx_path: str, img: np.ndarray) -> np.ndarray:
    x = ((img.astype(np.float32) - MEAN) / STD).transpose(2, 0, 1)[None].astype(np.float32)
    session = make_session(onnx.load(onnx_path))
    return session.run(None, {DEMO_INPUT: x})[0]
