"""Silero VAD int8 on noisy speech (espeak-ng + sox, made on the spot), side by side with float.

Calibration: 40 (frame, state) pairs drawn from 6 clips run through the float model; evaluation:
6 other clips (other voices/rates/noise), each model carrying its own recurrent state. Printed per
algorithm: build time, cosine of the speech probability over all frames (stacked), largest
absolute difference and the share of frames with the same speech/no-speech decision (0.5).
The sample rate is a build constant (``input_initial_val``).

Usage: ``python bench/vad_speech.py [--data ../shared] [--algorithms normal,kl_divergence,mmse,auto_hybrid]``
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

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from openrknn import log  # noqa: E402
from rknn.api import RKNN  # noqa: E402
from speech_audio import CONTEXT, FRAME, run_vad, speech_clips, tools_missing, write_vad_dataset  # noqa: E402

SR = np.array(16000, np.int64)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", default=os.environ.get("OPENRKNN_TEST_DATA", str(REPO.parent / "shared")))
    parser.add_argument("--algorithms", default="normal,kl_divergence,mmse,auto_hybrid")
    args = parser.parse_args(argv)
    if tools_missing():
        print(f"E {' and '.join(tools_missing())} not installed: apt-get install espeak-ng sox")
        return 1
    log.configure(verbose=False)
    log.logger.setLevel("ERROR")
    path = str(Path(args.data) / "models" / "onnx" / "silero_vad_16k_op15.onnx")
    session = ort.InferenceSession(path, providers=["CPUExecutionProvider"])

    def float_step(frame, state):
        return session.run(None, {"input": frame, "state": state, "sr": SR})

    print(f"{'algorithm':14s} {'build s':>8s} {'cosine':>8s} {'max abs':>8s} {'same decision':>14s}")
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        pairs = [p for clip in speech_clips(folder / "calib", 6, seed=0) for p in run_vad(float_step, clip)[1]]
        dataset = write_vad_dataset(folder, pairs, 40)
        held_out = speech_clips(folder / "eval", 6, seed=100)
        golden = np.concatenate([run_vad(float_step, clip)[0] for clip in held_out])
        for algorithm in args.algorithms.split(","):
            rknn = RKNN()
            rknn.config(target_platform="rk3588", quantized_algorithm="normal" if algorithm == "auto_hybrid" else algorithm,
                        auto_hybrid_cos_thresh=0.995)
            rknn.load_onnx(path, inputs=["input", "state", "sr"], input_size_list=[[1, FRAME + CONTEXT], [2, 1, 128], []],
                           input_initial_val=[None, None, SR])
            started = time.perf_counter()
            if rknn.build(do_quantization=True, dataset=str(dataset), auto_hybrid=algorithm == "auto_hybrid") != 0:
                raise RuntimeError(f"build failed ({algorithm})")
            seconds = time.perf_counter() - started
            rknn.init_runtime()
            got = np.concatenate([run_vad(lambda f, s: rknn.inference(inputs=[f, s]), clip)[0] for clip in held_out])
            cos = float(golden @ got / (np.linalg.norm(golden) * np.linalg.norm(got)))
            same = float(np.mean((golden > 0.5) == (got > 0.5)))
            print(f"{algorithm:14s} {seconds:8.2f} {cos:8.5f} {np.abs(golden - got).max():8.3f} {same:14.3f}")
            rknn.release()
    print(f"({len(golden)} held-out frames, {100 * np.mean(golden > 0.5):.0f}% speech by the float model)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
