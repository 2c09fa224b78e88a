"""Where the int8 error enters a real model: per-layer accuracy analysis and output sensitivity.

For each model, a plain w8a8 ``normal`` build for rk3588 (calibration as in ``quant_quality.py``),
then on held-out samples:

* the model output's cosine with ONLY the weights quantized, ONLY the activations, and both
  (gated fake quantization, :mod:`openrknn.quant.sensitivity`);
* the layers whose quantization alone costs the most at the output (cosine drop), and the share
  of the summed drops the top two carry;
* ``accuracy_analysis``: the lowest ``single`` cosines (each layer alone, golden inputs) and the
  first layers where the ``entire`` cosine (errors accumulated) falls below 0.99 / 0.98.

Usage: ``python bench/error_sources.py [--data ../shared] [--models ch_PP-OCRv3_det_infer,...]``
(a name is looked up in ``models/onnx`` then ``models/tflite``; TFLite models get photos).
"""
from __future__ import annotations

import argparse
import os
import sys
import tempfile
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "bench"))

from openrknn import log  # noqa: E402
from quant_quality import MODELS, _images, _text_sets, _write_dataset, _build, cosine  # noqa: E402

DEFAULT = "ch_PP-OCRv3_det_infer,ch_PP-OCRv4_rec_infer,ch_ppocr_mobile_v2.0_cls_infer"


def _graph_samples(rknn, dataset: str) -> list[list[np.ndarray]]:
    from openrknn.compile import calibration_setup
    return calibration_setup(rknn._model, rknn._cfg(), dataset)[1]


def _tflite_build(path: str, dataset: str):
    """A MediaPipe-style TFLite model (RGB input scaled to [-1, 1]) built w8a8 normal for rk3588."""
    import time
    from rknn.api import RKNN
    rknn = RKNN()
    rknn.config(mean_values=[[127.5] * 3], std_values=[[127.5] * 3], target_platform="rk3588")
    if rknn.load_tflite(model=path) != 0:
        raise RuntimeError(f"load_tflite failed for {path}")
    started = time.perf_counter()
    if rknn.build(do_quantization=True, dataset=dataset) != 0:
        raise RuntimeError(f"build failed for {path}")
    return rknn, time.perf_counter() - started


def report(name: str, path: str, images: list[Path]) -> None:
    from openrknn.analysis.accuracy import analyse
    from openrknn.quant.sensitivity import gate_feeds, gated_graph, layer_points, output_sensitivity
    from openrknn.graph.runner import GraphRunner
    case = MODELS.get(name, dict(size=(0, 0)))   # TFLite models: photos, resized by the dataset loader
    with tempfile.TemporaryDirectory() as tmp:
        half = len(images) // 2
        calibration, evaluation = images[:half], images[half:]
        if case.get("text"):
            calibration, evaluation = _text_sets(Path(tmp), case, images[0].parent)
        dataset = _write_dataset(Path(tmp), case, calibration)
        if path.endswith(".tflite"):
            rknn, seconds = _tflite_build(path, dataset)
        else:
            rknn, seconds = _build(path, case, "normal", dataset)
        eval_dir = Path(tmp) / "eval"
        eval_dir.mkdir()
        held_out = _graph_samples(rknn, _write_dataset(eval_dir, case, evaluation))
    model = rknn._model
    names = [s.name for s in model.inputs]
    graph, gates = gated_graph(model)
    runner = GraphRunner(graph)
    weights = {i.name for i in model.golden.graph.initializer}

    def output_cos(points) -> float:
        on = gate_feeds(gates, points)
        scores = []
        for sample in held_out[:4]:
            feeds = dict(zip(names, sample))
            gold = runner.run({**feeds, **gate_feeds(gates)})[0]
            scores.append(cosine(gold, runner.run({**feeds, **on})[0]))
        return float(np.mean(scores))

    print(f"\n== {name}: normal build {seconds:.1f} s, {len(gates)} quantization points, "
          f"{len(layer_points(model, list(gates)))} layers")
    print(f"output cosine  weights only {output_cos({p for p in gates if p in weights}):.4f}   "
          f"activations only {output_cos({p for p in gates if p not in weights}):.4f}   both {output_cos(set(gates)):.4f}")
    drops = output_sensitivity(model, held_out[:2])
    total = sum(d for _, d in drops) or 1.0
    print(f"largest output drops (top two carry {100 * (drops[0][1] + drops[1][1]) / total:.0f}% of the summed drops):")
    for layer, drop in drops[:6]:
        print(f"    {layer:40s} {drop:.5f}")
    result = analyse(model, dict(zip(names, held_out[0])))
    rows = [r for r in result.rows if r.single_cos is not None]
    print("lowest single cosines:", ", ".join(f"{r.tensor} ({r.op_type}) {r.single_cos:.4f}"
                                              for r in sorted(rows, key=lambda r: r.single_cos)[:5]))
    for limit in (0.99, 0.98):
        first = next((r for r in result.rows if r.entire_cos is not None and r.entire_cos < limit), None)
        where = f"{first.tensor} ({first.op_type}), row {result.rows.index(first)} of {len(result.rows)}" if first else "never"
        print(f"entire cosine first below {limit}: {where}")
    print(f"output entire cosine: {result.rows[-1].entire_cos:.4f}")
    rknn.release()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", default=os.environ.get("OPENRKNN_TEST_DATA", str(REPO.parent / "shared")))
    parser.add_argument("--models", default=DEFAULT)
    args = parser.parse_args(argv)
    log.configure(verbose=False)
    log.logger.setLevel("ERROR")
    data = Path(args.data)
    for name in args.models.split(","):
        onnx_path = data / "models" / "onnx" / f"{name}.onnx"
        path = onnx_path if onnx_path.is_file() else data / "models" / "tflite" / f"{name}.tflite"
        report(name, str(path), _images(data / "images"))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
