"""AdaRound on the text detector: ``normal`` vs ``adaround`` side by side with float, in one run.

PP-OCRv3 det at 480×480 on text pictures (``text_images.py``: text drawn on the shared photos),
rk3588 w8a8 channel; calibration and evaluation pictures are disjoint (different seeds). Prints
build seconds and the cosine (mean / min) of the probability map against onnxruntime fp32 on the
original model.

Usage: ``python bench/adaround_det.py [--data ../shared] [--calibration 10] [--evaluation 4]``
"""
from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import onnxruntime as ort
from PIL import Image

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "bench"))

from openrknn import log  # noqa: E402
from quant_quality import cosine  # noqa: E402
from rknn.api import RKNN  # noqa: E402
from text_images import text_pictures  # noqa: E402

SIZE = (480, 480)
MEAN, STD = [123.675, 116.28, 103.53], [58.395, 57.12, 57.375]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", default=os.environ.get("OPENRKNN_TEST_DATA", str(REPO.parent / "shared")))
    parser.add_argument("--calibration", type=int, default=10)
    parser.add_argument("--evaluation", type=int, default=4)
    parser.add_argument("--algorithms", default="normal,adaround")
    args = parser.parse_args(argv)
    log.configure(verbose=False)
    log.logger.setLevel("ERROR")
    data = Path(args.data)
    model = str(data / "models" / "onnx" / "ch_PP-OCRv3_det_infer.onnx")
    session = ort.InferenceSession(model, providers=["CPUExecutionProvider"])
    evaluation = text_pictures(data / "images", args.evaluation, SIZE, seed=1)
    references = [session.run(None, {session.get_inputs()[0].name: ((p.astype(np.float32) - MEAN) / STD)
                                     .astype(np.float32).transpose(2, 0, 1)[None]})[0] for p in evaluation]
    print(f"{'algorithm':10s} {'build s':>8s} {'cos mean':>9s} {'cos min':>9s}")
    with tempfile.TemporaryDirectory() as tmp:
        lines = []
        for i, picture in enumerate(text_pictures(data / "images", args.calibration, SIZE, seed=0)):
            Image.fromarray(picture).save(Path(tmp) / f"cal{i}.png")
            lines.append(f"cal{i}.png")
        dataset = Path(tmp) / "dataset.txt"
        dataset.write_text("\n".join(lines) + "\n")
        for algorithm in args.algorithms.split(","):
            rknn = RKNN()
            rknn.config(mean_values=[MEAN], std_values=[STD], target_platform="rk3588", quantized_algorithm=algorithm)
            if rknn.load_onnx(model=model, inputs=[session.get_inputs()[0].name], input_size_list=[[1, 3, *SIZE]]):
                raise RuntimeError("load_onnx failed")
            started = time.perf_counter()
            if rknn.build(do_quantization=True, dataset=str(dataset)) != 0:
                raise RuntimeError(f"build failed ({algorithm})")
            seconds = time.perf_counter() - started
            rknn.init_runtime()
            cosines = [cosine(rknn.inference(inputs=[p[None]])[0], ref) for p, ref in zip(evaluation, references)]
            print(f"{algorithm:10s} {seconds:8.1f} {np.mean(cosines):9.5f} {np.min(cosines):9.5f}", flush=True)
            rknn.release()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
