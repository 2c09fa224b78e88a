"""Each openrknn layer fed the vendor simulator's own input integers: where the two arithmetics part.

rknn-toolkit2's simulator (``init_runtime()`` + ``inference``) runs one onnxruntime session per op of
its graph, in float32 on dequantized inputs, and quantizes each stored tensor between sessions. This
script hands openrknn's build over exactly as ``export_rknn(toolchain='rknn-toolkit2')`` does, runs
the vendor's simulator on one held-out picture in its own interpreter with ``InferenceSession``
wrapped to record every session's model and feeds (a subprocess; nothing of the vendor is imported
here), then, for every tensor openrknn stores whose vendor value lies on openrknn's grid, runs
openrknn's own lowered layer on the vendor's input integers and counts the integers that differ.

Printed: one line per layer with at least one differing value (``--all``: every layer).

Usage: ``python bench/vendor_sessions.py [--model det|cls] [--algorithm normal] [--toolchain-python PY]
[--weight-qtype asymmetric_quantized] [--keep DIR] [--all]``
"""
from __future__ import annotations

import argparse
import glob
import os
import pickle
import sys
import tempfile
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
from onnx import helper, shape_inference

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "bench"))

from vendor_layers import add_build_arguments, prepare_build, run_vendor_job  # noqa: E402

from openrknn.analysis.accuracy import _lowered  # noqa: E402
from openrknn.export import rockchip  # noqa: E402

# the vendor side: the product's job script, then its simulator with every session recorded
_VENDOR_SESSIONS = """
import json, os, pickle, sys
import numpy as np, onnxruntime as ort
from PIL import Image
recording = {'on': False, 'count': 0}
_init, _run = ort.InferenceSession.__init__, ort.InferenceSession.run
def init(self, model, *a, **k):
    _init(self, model, *a, **k)
    if recording['on'] and isinstance(model, bytes):
        self._recorded = recording['count']; recording['count'] += 1
        open(f'sessions/{self._recorded}.onnx', 'wb').write(model)
def run(self, names, feed, *a, **k):
    out = _run(self, names, feed, *a, **k)
    if getattr(self, '_recorded', None) is not None:
        pickle.dump({n: np.asarray(v) for n, v in feed.items()}, open(f'sessions/{self._recorded}.feed', 'wb'))
    return out
ort.InferenceSession.__init__, ort.InferenceSession.run = init, run
os.makedirs('sessions', exist_ok=True)
sys.path.insert(0, os.getcwd())
import rk_job
from rknn.api import RKNN
job = json.load(open(sys.argv[1]))
r = RKNN(verbose=False)
assert r.config(**job['config']) == 0
assert r.load_onnx(model=job['onnx']) == 0
assert r.hybrid_quantization_step1(dataset=job['dataset'], proposal=False) == 0
stem = os.path.splitext(os.path.basename(job['onnx']))[0]
rk_job._edit_config(stem + '.quantization.cfg', job['ranges'], job['float16'], {}, job['float16_internal'])
r.release()
r = RKNN(verbose=False)
assert r.hybrid_quantization_step2(model_input=stem + '.model', data_input=stem + '.data',
                                   model_quantization_cfg=stem + '.quantization.cfg') == 0
recording['on'] = True
assert r.init_runtime() == 0
r.inference(inputs=[np.array(Image.open(job['image']).convert('RGB'))[None]])
"""


def vendor_feeds(python: str, model, source, config, dataset: str, image: str, work: str) -> dict[str, np.ndarray]:
    """Every tensor the vendor's simulator fed one of its per-op sessions, by name (dequantized values)."""
    run_vendor_job(python, model, source, config, dataset, work, "sessions.py", _VENDOR_SESSIONS, [], image=image)
    feeds: dict[str, np.ndarray] = {}
    for path in sorted(glob.glob(os.path.join(work, "sessions", "*.feed")), key=lambda p: int(Path(p).stem)):
        for name, value in pickle.loads(Path(path).read_bytes()).items():
            feeds.setdefault(name, value)
    return feeds


def layer_differences(lowered: onnx.ModelProto, params: dict, vendor: dict[str, np.ndarray]):
    """(tensor, values, differing, largest step, input tensors) for each stored tensor: openrknn's
    layer run on the vendor's input integers against the vendor's own integers."""
    lowered = shape_inference.infer_shapes(lowered)
    types = {v.name: v.type.tensor_type.elem_type for v in list(lowered.graph.value_info) + list(lowered.graph.output)}
    producer = {o: n for n in lowered.graph.node for o in n.output}
    initializers = {i.name: i for i in lowered.graph.initializer}

    def integers(tensor: str, values: np.ndarray) -> np.ndarray:
        p = params[tensor]
        q = np.rint(values.astype(np.float64) / p["scale"][0]) + p["zero_point"][0]
        held_unsigned = types.get(tensor + "__q") == onnx.TensorProto.UINT8 and p["dtype"] == "int8"
        return q + 128 if held_unsigned else q

    def on_grid(tensor: str) -> bool:   # the vendor stored it (not a float value inside its layer)
        p = params[tensor]
        if len(p.get("scale") or []) != 1:
            return False
        steps = np.unique(vendor[tensor]).astype(np.float64) / p["scale"][0]
        return bool(np.abs(steps - np.rint(steps)).max() < 1e-3)

    stored = [t[:-3] for t in producer if t.endswith("__q") and t[:-3] in params and t[:-3] in vendor]
    stored = [t for t in stored if on_grid(t)]
    grid = set(stored)
    options = ort.SessionOptions()
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    for tensor in stored:
        wanted, nodes, inputs, seen = [tensor + "__q"], [], set(), set()
        while wanted:
            name = wanted.pop()
            if name in seen or name in initializers or not name:
                continue
            seen.add(name)
            if name != tensor + "__q" and name.endswith("__q") and name[:-3] in grid:
                inputs.add(name)
                continue
            if name not in producer:   # reaches the graph input: the first layer
                inputs = set()
                break
            nodes.append(producer[name])
            wanted += list(producer[name].input)
        if not inputs:
            continue
        ordered = [n for n in lowered.graph.node if any(n is m for m in nodes)]
        used = {i for n in ordered for i in n.input}
        graph = helper.make_graph(ordered, "layer", [helper.make_tensor_value_info(i, types[i], None) for i in sorted(inputs)],
                                  [helper.make_tensor_value_info(tensor + "__q", types[tensor + "__q"], None)],
                                  [initializers[i] for i in used if i in initializers])
        layer = helper.make_model(graph, opset_imports=lowered.opset_import)
        layer.ir_version = lowered.ir_version
        feeds = {i: integers(i[:-3], vendor[i[:-3]]).astype(np.uint8 if types[i] == onnx.TensorProto.UINT8 else np.int8)
                 for i in inputs}
        ours = ort.InferenceSession(layer.SerializeToString(), options, providers=["CPUExecutionProvider"]).run(None, feeds)[0]
        theirs = integers(tensor, vendor[tensor]).reshape(ours.shape)
        gap = np.abs(ours.astype(np.int64) - theirs.astype(np.int64))
        yield tensor, gap.size, int((gap > 0).sum()), int(gap.max()), sorted(i[:-3] for i in inputs)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    add_build_arguments(parser, model="det")
    parser.add_argument("--all", action="store_true", help="print every layer, not only those that differ")
    args = parser.parse_args(argv)
    python, _ = rockchip.find_toolchain(args.toolchain_python)
    work = args.keep or tempfile.mkdtemp(prefix="vendor-sessions-")
    rknn, dataset, image = prepare_build(Path(args.data), args.model, args.algorithm, args.weight_qtype, work)
    model = rknn._model
    vendor = vendor_feeds(python, model, rknn._source.model, rknn._cfg(), dataset, image, work)
    total = differing = layers = 0
    for tensor, values, differ, steps, inputs in layer_differences(_lowered(model), model.quant_params, vendor):
        layers, total, differing = layers + 1, total + values, differing + differ
        if differ or args.all:
            print(f"{tensor:40s} {differ:7d} of {values:8d} differ ({100 * differ / values:.4f} %), "
                  f"up to {steps} step(s)  from {', '.join(inputs)}")
    print(f"{layers} layers fed the vendor's inputs: {differing} of {total} values differ; work folder: {work}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
