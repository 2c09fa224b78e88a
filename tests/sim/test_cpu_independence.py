"""The same quantized .rknn gives the same bits on an AVX2-only CPU as on this one.

``qemu-x86_64 -cpu Haswell`` (Debian's qemu-user) runs Python on an emulated CPU with AVX2 and no
AVX-512/VNNI, so onnxruntime takes the kernels such CPUs get; the outputs must be bit-identical to a
native run whatever CPU this machine has.
"""
from __future__ import annotations

import os
import platform
import shutil
import subprocess
import sys

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from rknnlite.api import RKNNLite
from tests.helpers import quantized_build

QEMU = shutil.which("qemu-x86_64")

_RUN = """
import sys, numpy as np
from rknnlite.api import RKNNLite
lite = RKNNLite()
assert lite.load_rknn(sys.argv[1]) == 0 and lite.init_runtime() == 0
np.save(sys.argv[3], lite.inference(inputs=[np.load(sys.argv[2])], data_format="nchw")[0])
"""


def _four_layer_model(path):
    """Conv layers 3 → 64 → 512 → 64 → 16 with Relu, the third with hard-swish: full-range int8
    weights, the integer kernels, and an exact float32 epilogue whose sums (512 input channels)
    pass 2^24, so ConvInteger computes them."""
    rng = np.random.default_rng(0)
    nodes, inits, prev, channels = [], [], "x", 3
    inits += [numpy_helper.from_array(np.array(v, np.float32), n) for n, v in (("three", 3), ("zero", 0), ("six", 6))]
    for i, out in enumerate((64, 512, 64, 16)):
        inits += [numpy_helper.from_array(rng.normal(0, 1 / np.sqrt(channels * 9), (out, channels, 3, 3)).astype(np.float32), f"w{i}"),
                  numpy_helper.from_array(rng.normal(0, 0.1, out).astype(np.float32), f"b{i}")]
        nodes.append(helper.make_node("Conv", [prev, f"w{i}", f"b{i}"], [f"c{i}"], name=f"conv{i}", pads=[1, 1, 1, 1]))
        if i != 2:
            nodes.append(helper.make_node("Relu", [f"c{i}"], [f"r{i}"], name=f"relu{i}"))
        else:
            nodes += [helper.make_node("Add", [f"c{i}", "three"], ["a"]), helper.make_node("Clip", ["a", "zero", "six"], ["k"]),
                      helper.make_node("Mul", [f"c{i}", "k"], ["m"]), helper.make_node("Div", ["m", "six"], [f"r{i}"])]
        prev, channels = f"r{i}", out
    nodes.append(helper.make_node("GlobalAveragePool", [prev], ["y"], name="pool"))
    graph = helper.make_graph(nodes, "four", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 32, 32])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 16, 1, 1])], inits)
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)]), path)


@pytest.mark.skipif(platform.machine() not in ("x86_64", "AMD64"), reason="the emulated AVX2 CPU is an x86-64 one")
@pytest.mark.skipif(QEMU is None, reason="qemu-x86_64 not installed (Debian package qemu-user)")
def test_rknn_gives_the_same_bits_on_an_avx2_only_cpu(tmp_path):
    _four_layer_model(tmp_path / "m.onnx")
    rng = np.random.default_rng(1)
    rknn = quantized_build(tmp_path / "m.onnx", [rng.uniform(-1, 1, (1, 3, 32, 32)).astype(np.float32) for _ in range(4)])
    assert rknn.export_rknn(str(tmp_path / "m.rknn")) == 0
    x = rng.uniform(-1.5, 1.5, (1, 3, 32, 32)).astype(np.float32)
    np.save(tmp_path / "x.npy", x)

    lite = RKNNLite()
    assert lite.load_rknn(str(tmp_path / "m.rknn")) == 0 and lite.init_runtime() == 0
    native = lite.inference(inputs=[x], data_format="nchw")[0]

    env = dict(os.environ, PYTHONPATH=os.pathsep.join(sys.path))
    done = subprocess.run([QEMU, "-cpu", "Haswell", sys.executable, "-c", _RUN, str(tmp_path / "m.rknn"),
                           str(tmp_path / "x.npy"), str(tmp_path / "emulated.npy")],
                          capture_output=True, text=True, timeout=600, env=env)
    assert done.returncode == 0, done.stderr[-2000:]
    emulated = np.load(tmp_path / "emulated.npy")
    assert np.unique(native).size > 8      # a real spread of values, not a saturated output
    np.testing.assert_array_equal(emulated, native)


@pytest.mark.skipif(platform.machine() not in ("x86_64", "AMD64"), reason="the emulated AVX2 CPU is an x86-64 one")
@pytest.mark.skipif(QEMU is None, reason="qemu-x86_64 not installed (Debian package qemu-user)")
def test_u8s8_probe_finds_the_saturating_avx2_kernel():
    """On an AVX2 CPU without VNNI onnxruntime's u8 × s8 QLinearConv adds pairs in 16 bits: the
    probe must say so there, so the lowering keeps the 7-bit weight halves on such CPUs."""
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(sys.path))
    code = "from openrknn.sim.integer_arithmetic import full_range_u8s8_is_exact as f; print(f())"
    done = subprocess.run([QEMU, "-cpu", "Haswell", sys.executable, "-c", code],
                          capture_output=True, text=True, timeout=600, env=env)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.strip() == "False"
