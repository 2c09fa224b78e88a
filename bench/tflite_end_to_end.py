"""TFLite export end to end on the shared models (run by hand; prints the table of docs/deployment.md).

For each model: build int8 (``quantized_method='layer'``, calibrated on four shared photos), export,
run the file in LiteRT (XNNPACK) on a fifth photo and compare its outputs with
* the simulator of the export (``init_runtime(simulate='tflite')``): what the file should compute;
* the float model (onnxruntime on the ONNX file, LiteRT on the source TFLite file).
Also: layers, the fraction exported as int8 operators only, the fraction Teflon would take.

    PYTHONPATH=. python bench/tflite_end_to_end.py [--models NAME ...] [--photo text.png]
"""
from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from tests.helpers import cosine, shared_data_root  # noqa: E402

# name → (framework, NCHW input size for the ONNX ones, mean, std)
MODELS = {
    "ch_ppocr_mobile_v2.0_cls_infer": ("onnx", (48, 192), 127.5, 127.5),
    "ch_PP-OCRv3_det_infer": ("onnx", (480, 480), 127.5, 127.5),
    "ch_PP-OCRv4_rec_infer": ("onnx", (48, 160), 127.5, 127.5),
    "face_detection_short_range": ("tflite", None, 127.5, 127.5),   # MediaPipe's input ranges: [-1, 1]
    "hand_landmark_lite": ("tflite", None, 0.0, 255.0),               # [0, 1]
    "iris_landmark": ("tflite", None, 127.5, 127.5),
    "selfie_segmentation": ("tflite", None, 0.0, 255.0),
    "silero_vad_16k_op15": ("audio", None, None, None),   # 512 samples at 16 kHz, LSTM state, sample rate
}
_AUDIO_INPUTS = (["input", "state", "sr"], [[1, 512], [2, 1, 128], []])
CALIBRATION = ["chelsea.png", "coffee.png", "camera.png", "color.png"]
# the photo each model is checked on: text for the OCR models (a detector's map of a photo without
# text is ~0 everywhere, where a cosine measures noise), a person for the others
PHOTO = {"ch_ppocr_mobile_v2.0_cls_infer": "text.png", "ch_PP-OCRv3_det_infer": "text.png",
         "ch_PP-OCRv4_rec_infer": "text.png"}


def photo(name: str, shape, framework: str) -> np.ndarray:
    from PIL import Image
    h, w = (shape[2], shape[3]) if framework == "onnx" else (shape[1], shape[2])
    image = np.asarray(Image.open(shared_data_root() / "images" / name).convert("RGB").resize((w, h)), np.float32)
    return image.transpose(2, 0, 1)[None] if framework == "onnx" else image[None]


def audio(seed: int) -> list[np.ndarray]:
    """A synthetic 32 ms frame (tones and noise; no audio is shared), a zero LSTM state, 16 kHz."""
    rng = np.random.default_rng(seed)
    t = np.arange(512) / 16000
    wave = sum(rng.uniform(0.05, 0.3) * np.sin(2 * np.pi * rng.uniform(100, 3000) * t) for _ in range(3))
    wave = wave + rng.normal(0, 0.02, 512)
    return [wave[None].astype(np.float32), np.zeros((2, 1, 128), np.float32), np.array(16000, np.int64)]


def _measure_audio(name: str, folder: Path) -> dict:
    from openrknn.export.tflite import tflite_bytes
    from openrknn.export.tflite.verify import run_litert
    from rknn.api import RKNN
    from tests.helpers import reference_session
    path = shared_data_root() / "models" / "onnx" / f"{name}.onnx"
    rknn = RKNN()
    rknn.config(target_platform="rk3588", quantized_method="layer")
    if rknn.load_onnx(model=str(path), inputs=_AUDIO_INPUTS[0], input_size_list=_AUDIO_INPUTS[1]) != 0:
        raise RuntimeError("load failed")
    lines = []
    for i in range(4):
        files = []
        for k, value in enumerate(audio(i)):
            np.save(folder / f"a{i}_{k}.npy", value)
            files.append(f"a{i}_{k}.npy")
        lines.append(" ".join(files))
    (folder / "ds.txt").write_text("\n".join(lines) + "\n")
    if rknn.build(do_quantization=True, dataset=str(folder / "ds.txt")) != 0:
        raise RuntimeError("build failed")
    data, rows = tflite_bytes(rknn._model)
    feeds = audio(9)
    litert = run_litert(data, [v.astype(np.float32) for v in feeds])
    rknn.init_runtime(simulate="tflite")
    simulated = rknn.inference(inputs=feeds, data_format=["nchw"] * 3)
    float_out = reference_session(path).run(None, dict(zip(_AUDIO_INPUTS[0], feeds)))
    return _row(name, "512 samples", rows, litert, simulated, float_out)


def _row(name, size, rows, litert, simulated, float_out) -> dict:
    return {"sim_vs_float": _worst_cosine(simulated, float_out), "model": name, "input": size, "layers": len(rows),
            "int8": sum(r.int8 for r in rows) / len(rows),
            "teflon": sum(r.runs_on.startswith("NPU") for r in rows) / len(rows),
            "vs_sim": _worst_cosine(litert, simulated), "vs_float": _worst_cosine(litert, float_out)}


def measure(name: str, folder: Path, test_photo: str | None = None) -> dict:
    """The table row of one shared model (raises with the reason when it does not build or export)."""
    from openrknn.export.tflite import tflite_bytes
    from openrknn.export.tflite.verify import run_litert
    from rknn.api import RKNN
    framework, size, mean, std = MODELS[name]
    if framework == "audio":
        return _measure_audio(name, folder)
    path = shared_data_root() / "models" / framework / f"{name}.{framework}"
    rknn = RKNN()
    config = {"target_platform": "rk3588", "quantized_method": "layer"}
    if mean is not None:
        config.update(mean_values=[[mean] * 3], std_values=[[std] * 3])
    rknn.config(**config)
    if framework == "onnx":
        shape = (1, 3) + size if size else None
        loaded = rknn.load_onnx(model=str(path), inputs=["x"] if size else None,
                                input_size_list=[list(shape)] if size else None)
    else:
        loaded = rknn.load_tflite(model=str(path))
    if loaded != 0:
        raise RuntimeError("load failed")
    if framework == "tflite":
        shape = tuple(d.dim_value for d in rknn._source.model.graph.input[0].type.tensor_type.shape.dim)
    for i, image in enumerate(CALIBRATION):
        np.save(folder / f"s{i}.npy", photo(image, shape, framework))
    (folder / "ds.txt").write_text("".join(f"s{i}.npy\n" for i in range(len(CALIBRATION))))
    if rknn.build(do_quantization=True, dataset=str(folder / "ds.txt")) != 0:
        raise RuntimeError("build failed")
    data, rows = tflite_bytes(rknn._model)
    x = photo(test_photo or PHOTO.get(name, "astronaut.png"), shape, framework)
    nhwc = x.transpose(0, 2, 3, 1) if framework == "onnx" else x
    litert = run_litert(data, [nhwc])
    rknn.init_runtime(simulate="tflite")
    simulated = rknn.inference(inputs=[nhwc])
    if framework == "onnx":
        from tests.helpers import reference_session
        float_out = reference_session(path).run(None, {"x": ((x - mean) / std).astype(np.float32)})
    else:
        float_out = run_litert(path.read_bytes(), [((x - mean) / std).astype(np.float32)])
    float_out = [f.reshape(s.shape) if f.size == s.size else f for f, s in zip(float_out, simulated)]
    size = "×".join(map(str, shape[2:] if framework == "onnx" else shape[1:3]))
    return _row(name, size, rows, litert, simulated, float_out)


def _worst_cosine(outputs: list[np.ndarray], references: list[np.ndarray]) -> float:
    """The lowest cosine over the outputs (single-value outputs, whose cosine is only a sign, left out)."""
    return min(cosine(a, b) for a, b in zip(outputs, references) if a.size > 1)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--models", nargs="*", default=list(MODELS))
    parser.add_argument("--photo", default=None, help="default: text.png for the OCR models, astronaut.png else")
    args = parser.parse_args()
    print("| model (input) | layers | int8 layers | Teflon layers | LiteRT vs simulator (tflite) | LiteRT vs float | "
          "simulator vs float |")
    print("|---|---|---|---|---|---|---|")
    for name in args.models:
        with tempfile.TemporaryDirectory() as folder:
            try:
                r = measure(name, Path(folder), args.photo)
            except Exception as e:   # the table says why a model has no row
                print(f"| {name} | – | – | – | does not export: {e} | | |")
                continue
        print(f"| {r['model']} ({r['input']}) | {r['layers']} | {r['int8']:.0%} | {r['teflon']:.0%} | "
              f"{r['vs_sim']:.4f} | {r['vs_float']:.4f} | {r['sim_vs_float']:.4f} |")


if __name__ == "__main__":
    main()
