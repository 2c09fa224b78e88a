"""`openrknn check`'s placement next to rknn-toolkit2's own, one small probe model per limit family.

    python bench/npu_limits_vs_rknn.py [--reference-python $OPENRKNN_RKNN_TOOLKIT2] [--chips rk3566 rk3588]

For each probe (a model of one layer outside, or inside, a documented limit) and chip, Rockchip's
toolkit makes a verbose float build in a subprocess (never imported here) and its "Network Layer
Information Table" says where each layer runs (Target column) and how many layers the converter made
of the probe. openrknn's placement (graph/npu_limits.py) is printed beside it: CPU (a CPU operator
takes the layer, or part of it), NPU, or NONE (unsupported), with the consequence of the finding.
The `converter_behaviour` section of chips/data/op_limits/npu_op_limits.yaml was written from this
table; a row marked `<>` is a disagreement.
"""
from __future__ import annotations

import argparse
import os
import re
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

_REFERENCE_BUILD = """
import sys
from rknn.api import RKNN
r = RKNN(verbose=True)
r.config(target_platform=sys.argv[2])
assert r.load_onnx(sys.argv[1]) == 0
print('BUILD RET', r.build(do_quantization=False))
"""
_ROW = re.compile(r"^D RKNN: \[[^\]]+\] \d+\s+(\S+)\s+\S+\s+(CPU|NPU)\s", re.M)


def _const(name, array):
    return numpy_helper.from_array(np.asarray(array), name)


def _probes() -> dict[str, tuple]:
    """name -> (nodes, inputs, outputs, initializers); the probed node is named 'probe'."""
    rng = np.random.default_rng(0)

    def w(shape):
        return _const("w", rng.normal(0, 0.1, shape).astype(np.float32))

    def scales(values):
        return _const("s", np.array(values, np.float32))

    node = helper.make_node
    return {
        "conv 1x40": ([node("Conv", ["x", "w"], ["y"], name="probe")], {"x": [1, 8, 16, 64]}, [w((8, 8, 1, 40))]),
        "conv stride 8": ([node("Conv", ["x", "w"], ["y"], name="probe", strides=[8, 8])], {"x": [1, 8, 64, 64]},
                          [w((8, 8, 3, 3))]),
        "conv pad 16": ([node("Conv", ["x", "w"], ["y"], name="probe", pads=[16] * 4)], {"x": [1, 8, 16, 16]},
                        [w((8, 8, 3, 3))]),
        "conv dilation 32": ([node("Conv", ["x", "w"], ["y"], name="probe", dilations=[32, 32])],
                             {"x": [1, 8, 80, 80]}, [w((8, 8, 3, 3))]),
        "depthwise 9x9": ([node("Conv", ["x", "w"], ["y"], name="probe", group=8)], {"x": [1, 8, 32, 32]},
                          [w((8, 1, 9, 9))]),
        "deconv stride 3": ([node("ConvTranspose", ["x", "w"], ["y"], name="probe", strides=[3, 3])],
                            {"x": [1, 8, 8, 8]}, [w((8, 8, 3, 3))]),
        "maxpool 8x8": ([node("MaxPool", ["x"], ["y"], name="probe", kernel_shape=[8, 8])], {"x": [1, 8, 16, 16]}, []),
        "maxpool ceil_mode": ([node("MaxPool", ["x"], ["y"], name="probe", kernel_shape=[2, 2], strides=[2, 2],
                                    ceil_mode=1)], {"x": [1, 8, 15, 15]}, []),
        "globalmaxpool 20x20": ([node("GlobalMaxPool", ["x"], ["y"], name="probe")], {"x": [1, 8, 20, 20]}, []),
        # a Relu first: rknn-toolkit2 2.5.0 hits a RecursionError on a model that is one axis-1 Softmax
        "softmax axis 1": ([node("Relu", ["x"], ["r"], name="relu"), node("Softmax", ["r"], ["y"], name="probe", axis=1)],
                           {"x": [1, 8, 4, 4]}, []),
        "softmax axis 2": ([node("Softmax", ["x"], ["y"], name="probe", axis=2)], {"x": [1, 8, 4, 4]}, []),
        "sub [b,c,h,1]": ([node("Sub", ["a", "b"], ["y"], name="probe")], {"a": [1, 8, 16, 16], "b": [1, 8, 16, 1]}, []),
        "add [b,1,h,w]": ([node("Add", ["a", "b"], ["y"], name="probe")], {"a": [1, 8, 16, 16], "b": [1, 1, 16, 16]}, []),
        "argmax": ([node("ArgMax", ["x"], ["y"], name="probe", axis=1)], {"x": [1, 8, 4, 4]}, []),
        "pow 4": ([node("Pow", ["x", "e"], ["y"], name="probe")], {"x": [1, 8, 8, 8]}, [_const("e", np.array([4.0], np.float32))]),
        "slice step 2": ([node("Slice", ["x", "b", "e", "a", "p"], ["y"], name="probe")], {"x": [1, 8, 8, 8]},
                         [_const("b", np.array([0])), _const("e", np.array([8])), _const("a", np.array([2])),
                          _const("p", np.array([2]))]),
        "resize linear 2.5": ([node("Resize", ["x", "", "s"], ["y"], name="probe", mode="linear")], {"x": [1, 8, 8, 8]},
                              [scales([1, 1, 2.5, 2.5])]),
        "resize nearest 1.5": ([node("Resize", ["x", "", "s"], ["y"], name="probe", mode="nearest")],
                               {"x": [1, 8, 8, 8]}, [scales([1, 1, 1.5, 1.5])]),
        "resize linear asymmetric": ([node("Resize", ["x", "", "s"], ["y"], name="probe", mode="linear",
                                           coordinate_transformation_mode="asymmetric")], {"x": [1, 8, 8, 8]},
                                     [scales([1, 1, 2, 2])]),
        "transpose 0231": ([node("Transpose", ["x"], ["y"], name="probe", perm=[0, 2, 3, 1])], {"x": [1, 16, 8, 8]}, []),
        "transpose 0231 3x3": ([node("Transpose", ["x"], ["y"], name="probe", perm=[0, 2, 3, 1])],
                               {"x": [1, 16, 3, 3]}, []),
        "transpose 0132": ([node("Transpose", ["x"], ["y"], name="probe", perm=[0, 1, 3, 2])], {"x": [1, 1, 120, 40]}, []),
    }


def _save(path: Path, nodes, inputs, inits) -> None:
    values = [helper.make_tensor_value_info(n, TensorProto.FLOAT, s) for n, s in inputs.items()]
    out_type = TensorProto.INT64 if nodes[-1].op_type == "ArgMax" else TensorProto.FLOAT
    graph = helper.make_graph(nodes, "probe", values, [helper.make_tensor_value_info("y", out_type, None)], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    model.ir_version = 8
    model = onnx.shape_inference.infer_shapes(model)   # also types the output (the reference wants its shape)
    onnx.save(model, str(path))


def reference_targets(python: str, model: Path, chip: str, workdir: Path) -> list[tuple[str, str]] | None:
    """(OpType, Target) of every layer rknn-toolkit2 builds, None when its build fails or crashes."""
    script = workdir / "build.py"
    script.write_text(_REFERENCE_BUILD)
    run = subprocess.run([python, "-I", str(script), str(model), chip], cwd=workdir, capture_output=True, text=True,
                         timeout=300)
    if "BUILD RET 0" not in run.stdout:
        return None
    return [(op, target) for op, target in _ROW.findall(run.stdout) if op not in ("InputOperator", "OutputOperator")]


def ours(model_path: Path, chip: str) -> tuple[str, str]:
    from openrknn import chips, log
    from openrknn.api.rknn import RKNN
    from openrknn.graph import npu_limits
    rknn = RKNN()
    log.logger.handlers[0].setLevel(40)   # errors only: the table is the output
    accepted = chips.get_chip(chip).quantized_dtypes
    rknn.config(target_platform=chip, **({} if "w8a8" in accepted else {"quantized_dtype": accepted[0]}))
    rknn.load_onnx(str(model_path))
    if rknn.build(do_quantization=False) != 0:
        return "build failed", ""
    model = rknn._model
    node = next(n for n in model.graph.graph.node if n.name == "probe")
    placed = npu_limits.placement(node, npu_limits.GraphFacts(model.graph, model.tensor_dtypes), chip)
    return ("CPU" if placed.target in ("CPU", "NONE") else "NPU"), ",".join(f.consequence for f in placed.findings) or "-"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--reference-python", default=os.environ.get("OPENRKNN_RKNN_TOOLKIT2"))
    parser.add_argument("--chips", nargs="+", default=["rk3566", "rk3588"])
    args = parser.parse_args()
    agree = total = 0
    with tempfile.TemporaryDirectory() as tmp:
        workdir = Path(tmp)
        print(f"{'probe':26} {'chip':7} {'rknn-toolkit2 layers (Target)':44} {'openrknn':8} consequence")
        for name, (nodes, inputs, inits) in _probes().items():
            path = workdir / (re.sub(r"\W+", "_", name) + ".onnx")
            _save(path, nodes, inputs, inits)
            for chip in args.chips:
                layers = reference_targets(args.reference_python, path, chip, workdir)
                placed, consequence = ours(path, chip)
                if layers is None:
                    print(f"{name:26} {chip:7} {'(reference build failed)':44} {placed:8} {consequence}")
                    continue
                theirs = "CPU" if any(t == "CPU" for _, t in layers) else "NPU"
                total += 1
                agree += theirs == placed
                shown = " ".join(f"{op}:{t}" for op, t in layers)
                print(f"{name:26} {chip:7} {shown[:44]:44} {placed:8} {consequence}{'' if theirs == placed else '  <>'}")
    print(f"placement agrees on {agree} of {total} probe builds")
    return 0


if __name__ == "__main__":
    sys.exit(main())
