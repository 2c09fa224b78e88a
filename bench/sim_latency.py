"""Build time and simulator latency next to onnxruntime fp32 on the same model, in one run.

    python bench/sim_latency.py [--repeat 30]

Models: the embedded demo model and, when present, the real ONNX models in ../shared/models/onnx.
Prints, per model and precision: build time, simulator latency, onnxruntime fp32 latency on the
original model, their ratio (targets: fp16 ≤ 1.5, int8 ≤ 1.2), and the output agreement (max rel.
diff / cosine) over all outputs concatenated. int8 builds calibrate on 4 photos from ../shared/images
(or random pictures without it).
"""
from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from openrknn.cli.demo_model import build_demo_model, demo_image  # noqa: E402
from rknn.api import RKNN  # noqa: E402


def _paired_median_ms(first, second, repeat: int) -> tuple[float, float]:
    """Median latency of two callables measured alternately, so machine load hits both alike."""
    first(), second()
    a, b = [], []
    for _ in range(repeat):
        for fn, times in ((first, a), (second, b)):
            t0 = time.perf_counter()
            fn()
            times.append(time.perf_counter() - t0)
    return 1000 * float(np.median(a)), 1000 * float(np.median(b))


def _cases(shared: Path | None, tmp: str):
    demo = os.path.join(tmp, "demo.onnx")
    onnx.save(build_demo_model(), demo)
    img = demo_image()
    x = ((img.astype(np.float32) - 127.5) / 127.5).transpose(2, 0, 1)[None].astype(np.float32)
    yield "demo-mobilenet", demo, dict(inputs=None), {"input": x}, [img[None]]
    if shared is None:
        return
    rng = np.random.default_rng(0)
    for name, (h, w) in (("ch_ppocr_mobile_v2.0_cls_infer", (48, 192)), ("ch_PP-OCRv4_rec_infer", (48, 320)),
                         ("ch_PP-OCRv3_det_infer", (480, 480))):
        path = shared / "models" / "onnx" / f"{name}.onnx"
        if path.exists():
            img = rng.integers(0, 256, (1, h, w, 3), dtype=np.uint8)
            x = ((img.astype(np.float32) - 127.5) / 127.5).transpose(0, 3, 1, 2).astype(np.float32)
            yield name, str(path), dict(inputs=["x"], input_size_list=[[1, 3, h, w]]), {"x": x}, [img]
    path = shared / "models" / "onnx" / "silero_vad_16k_op15.onnx"
    if path.exists():
        feeds = [rng.normal(0, 0.3, (1, 512)).astype(np.float32), np.zeros((2, 1, 128), np.float32),
                 np.array(16000, np.int64)]
        names = ["input", "state", "sr"]
        yield ("silero_vad_16k_op15", str(path), dict(inputs=names, input_size_list=[[1, 512], [2, 1, 128], []]),
               dict(zip(names, feeds)), feeds)


def _photo_dataset(shared: Path | None, tmp: str, nhwc_shape: tuple[int, ...]) -> str:
    """A dataset file of 4 pictures of the input's size: shared photos, or random pixels without them."""
    from PIL import Image
    h, w = nhwc_shape[1], nhwc_shape[2]
    photos = sorted((shared / "images").glob("*.png"))[:4] if shared else []
    rng = np.random.default_rng(1)
    lines = []
    for k in range(4):
        picture = (Image.open(photos[k]).convert("RGB") if k < len(photos)
                   else Image.fromarray(rng.integers(0, 256, (h, w, 3), dtype=np.uint8)))
        file = os.path.join(tmp, f"calib_{h}x{w}_{k}.png")
        picture.resize((w, h)).save(file)
        lines.append(file)
    dataset = os.path.join(tmp, f"calib_{h}x{w}.txt")
    Path(dataset).write_text("\n".join(lines) + "\n")
    return dataset


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--repeat", type=int, default=30)
    parser.add_argument("--precision", nargs="+", default=["float32", "float16", "int8"],
                        choices=["float32", "float16", "int8"])
    parser.add_argument("--models", nargs="*", help="only models whose name contains one of these")
    args = parser.parse_args()
    root = Path(os.environ.get("OPENRKNN_TEST_DATA", Path(__file__).resolve().parents[2] / "shared"))
    shared = root if (root / "models").is_dir() else None
    print(f"{'model':<34}{'precision':<10}{'build s':>9}{'sim ms':>9}{'ort ms':>9}{'ratio':>7}{'agreement':>16}")
    with tempfile.TemporaryDirectory() as tmp:
        for name, path, load_kwargs, ort_feeds, sim_inputs in _cases(shared, tmp):
            if args.models and not any(m in name for m in args.models):
                continue
            session = ort.InferenceSession(path, providers=["CPUExecutionProvider"])
            # every output, concatenated: one scalar output (silero's probability) alone says little
            reference = np.concatenate([o.ravel() for o in session.run(None, ort_feeds)]).astype(np.float64)
            image_model = "x" in ort_feeds or "input" in ort_feeds and ort_feeds["input"].ndim == 4
            for precision in args.precision:
                if precision == "int8" and not image_model:
                    continue
                rknn = RKNN()
                cfg = dict(target_platform="rk3588", float_dtype="float16" if precision == "int8" else precision)
                if image_model:
                    cfg.update(mean_values=[[127.5] * 3], std_values=[[127.5] * 3])
                rknn.config(**cfg)
                kwargs = {k: v for k, v in load_kwargs.items() if v is not None}
                rknn.load_onnx(model=path, **kwargs)
                t0 = time.perf_counter()
                if precision == "int8":
                    rknn.build(do_quantization=True, dataset=_photo_dataset(shared, tmp, sim_inputs[0].shape))
                else:
                    rknn.build(do_quantization=False)
                build_s = time.perf_counter() - t0
                rknn.init_runtime()
                out = np.concatenate([o.ravel() for o in rknn.inference(inputs=sim_inputs)]).astype(np.float64)
                sim_ms, ort_ms = _paired_median_ms(lambda: rknn.inference(inputs=sim_inputs),
                                                   lambda: session.run(None, ort_feeds), args.repeat)
                if precision == "float32":
                    agree = f"maxrel {np.abs(out - reference).max() / (np.abs(reference).max() or 1):.1e}"
                else:
                    cos = out @ reference / (np.linalg.norm(out) * np.linalg.norm(reference))
                    agree = f"cos {cos:.6f}"
                print(f"{name:<34}{precision:<10}{build_s:>9.2f}{sim_ms:>9.2f}{ort_ms:>9.2f}{sim_ms / ort_ms:>7.2f}{agree:>16}")
                rknn.release()


if __name__ == "__main__":
    main()
