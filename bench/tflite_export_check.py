"""TFLite export vs the int8 simulator on the shared models (run by hand; prints a table).

Calibrated on four shared photos, checked on a fifth. Per layer (each layer run alone by LiteRT on the simulator's int8 inputs): how many layers agree
bit for bit / within 1 / 2 / more steps, for LiteRT's XNNPACK and builtin kernels; end to end:
cosine and largest difference of LiteRT's outputs against the simulator's and the layers Teflon would take.

    PYTHONPATH=. python bench/tflite_export_check.py [--size 64] [--method layer] [--as-exported]
"""
from __future__ import annotations

import argparse
import sys
import tempfile
from collections import Counter
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from tests.helpers import cosine, shared_data_root  # noqa: E402

MODELS = {"ch_ppocr_mobile_v2.0_cls_infer": ("onnx", (48, 192)), "ch_PP-OCRv3_det_infer": ("onnx", None),
          "ch_PP-OCRv4_rec_infer": ("onnx", (48, 160)),
          "face_detection_short_range": ("tflite", None), "iris_landmark": ("tflite", None),
          "selfie_segmentation": ("tflite", None), "hand_landmark_lite": ("tflite", None)}


def photo(name: str, shape, framework: str) -> np.ndarray:
    """A shared photo resized to the model input (NCHW for ONNX models, NHWC for TFLite ones)."""
    from PIL import Image
    h, w = (shape[2], shape[3]) if framework == "onnx" else (shape[1], shape[2])
    image = np.asarray(Image.open(shared_data_root() / "images" / name).convert("RGB").resize((w, h)), np.float32)
    return image.transpose(2, 0, 1)[None] if framework == "onnx" else image[None]


PHOTOS = ["astronaut.png", "chelsea.png", "coffee.png", "camera.png", "color.png"]


def build(path: Path, framework: str, shape, method: str, folder: Path):
    from rknn.api import RKNN
    rknn = RKNN()
    if framework == "onnx":
        rknn.config(target_platform="rk3588", quantized_method=method, mean_values=[[127.5] * 3],
                    std_values=[[127.5] * 3])
        rknn.load_onnx(model=str(path), inputs=["x"], input_size_list=[list(shape)])
    else:
        rknn.config(target_platform="rk3588", quantized_method=method)
        if rknn.load_tflite(model=str(path)) != 0:
            return None, shape
        shape = tuple(d.dim_value for d in rknn._source.model.graph.input[0].type.tensor_type.shape.dim)
    for i, name in enumerate(PHOTOS[:4]):
        np.save(folder / f"s{i}.npy", photo(name, shape, framework))
    (folder / "ds.txt").write_text("".join(f"s{i}.npy\n" for i in range(4)))
    if rknn.build(do_quantization=True, dataset=str(folder / "ds.txt")) != 0:
        return None, shape
    return rknn, shape


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--size", type=int, default=64, help="det input side")
    parser.add_argument("--method", default="layer")
    parser.add_argument("--as-exported", action="store_true",
                        help="compare with the simulator of the export (init_runtime(simulate='tflite'))")
    args = parser.parse_args()
    from openrknn.export.tflite.target import as_exported
    from openrknn.export.tflite import tflite_bytes
    from openrknn.export.tflite.verify import compare_layers, run_litert
    root = shared_data_root()
    if root is None:
        sys.exit("shared models not found (OPENRKNN_TEST_DATA)")
    print(f"{'model':<32} {'layers':>6} {'teflon':>6}  {'xnnpack 0/1/2/>2':<24} {'builtin 0/1/2/>2':<24} {'cos e2e':>8} {'max|Δ| e2e':>10} {'max|sim|':>9}")
    for name, (framework, size) in MODELS.items():
        path = root / "models" / framework / f"{name}.{framework}"
        if not path.exists():
            continue
        size = size or (args.size, args.size)
        with tempfile.TemporaryDirectory() as tmp:
            rknn, shape = build(path, framework, (1, 3) + tuple(size), args.method, Path(tmp))
            if rknn is None:
                print(f"{name:<32} build failed")
                continue
            try:
                data, rows = tflite_bytes(rknn._model)
            except Exception as e:   # an op without export: say which
                print(f"{name:<32} not exported: {e}")
                continue
            x = photo(PHOTOS[4], shape, framework)
            feeds = {rknn._model.graph.graph.input[0].name: x}
            counts = []
            reference = as_exported(rknn._model) if args.as_exported else rknn._model
            for kernels in ("xnnpack", "builtin"):
                steps = [k.max_steps for k in compare_layers(reference, feeds, kernels)]
                c = Counter(min(k, 3) for k in steps)
                counts.append("/".join(str(c.get(i, 0)) for i in range(4)) + f" (max {max(steps)})")
            rknn.init_runtime(simulate="tflite" if args.as_exported else "npu")
            layout = "nchw" if framework == "onnx" else "nhwc"
            expected = rknn.inference(inputs=[x], data_format=layout)
            lite_input = x.transpose(0, 2, 3, 1) if framework == "onnx" else x
            got = run_litert(data, [np.ascontiguousarray(lite_input)])
            finite = [(g[np.isfinite(e)], e[np.isfinite(e)]) for g, e in zip(got, expected)]   # fp16 outputs can overflow
            cos = min(cosine(g, e) for g, e in finite)
            delta = max(float(np.abs(g - e).max(initial=0)) for g, e in finite)
            scale = max(float(np.abs(e).max(initial=0)) for _, e in finite)
            teflon = sum(r.runs_on.startswith("NPU") for r in rows)
            print(f"{name:<32} {len(rows):>6} {teflon:>6}  {counts[0]:<24} {counts[1]:<24} {cos:>8.5f} {delta:>10.4g} {scale:>9.4g}")


if __name__ == "__main__":
    main()
