"""Silero VAD int8 on speech: calibrated and judged on noisy espeak-ng speech made on the spot.

The sample rate is fixed as a build constant (``input_initial_val``), as a user deploying at 16 kHz
would. Each 512-sample frame is fed with the 64 samples before it (the model's context), and the
recurrent state is carried frame to frame by each model itself.
"""
from __future__ import annotations

import numpy as np
import pytest

from bench.speech_audio import CONTEXT, FRAME, run_vad, speech_clips, tools_missing, write_vad_dataset
from tests.helpers import cosine, reference_session

MODEL = "silero_vad_16k_op15.onnx"
SR = np.array(16000, np.int64)


@pytest.fixture
def vad_model(shared_data):
    path = shared_data / "models" / "onnx" / MODEL
    if not path.is_file():
        pytest.skip(f"{MODEL} not in the shared models folder")
    if tools_missing():
        pytest.skip(f"{' and '.join(tools_missing())} not installed (apt-get install espeak-ng sox)")
    return path


def test_silero_vad_int8_follows_float_on_noisy_speech(vad_model, tmp_path):
    from rknn.api import RKNN
    session = reference_session(vad_model)

    def float_step(frame, state):
        return session.run(None, {"input": frame, "state": state, "sr": SR})

    calibration = speech_clips(tmp_path / "calib", 4, seed=0)
    held_out = speech_clips(tmp_path / "eval", 3, seed=100)
    pairs = [pair for clip in calibration for pair in run_vad(float_step, clip)[1]]
    dataset = write_vad_dataset(tmp_path, pairs, 24)

    rknn = RKNN()
    assert rknn.config(target_platform="rk3588") == 0
    assert rknn.load_onnx(str(vad_model), inputs=["input", "state", "sr"],
                          input_size_list=[[1, FRAME + CONTEXT], [2, 1, 128], []],
                          input_initial_val=[None, None, SR]) == 0
    assert rknn.build(do_quantization=True, dataset=str(dataset)) == 0
    assert sum(d == "int8" for d in rknn._model.tensor_dtypes.values()) >= 10, "the network was not quantized"
    assert rknn.init_runtime() == 0

    golden = np.concatenate([run_vad(float_step, clip)[0] for clip in held_out])
    simulated = np.concatenate([run_vad(lambda f, s: rknn.inference(inputs=[f, s]), clip)[0] for clip in held_out])
    assert 0.2 < np.mean(golden > 0.5) < 0.9, "the clips should hold speech and pauses"
    assert cosine(golden, simulated) >= 0.99
    assert np.mean((golden > 0.5) == (simulated > 0.5)) >= 0.97   # the same speech/no-speech decision
