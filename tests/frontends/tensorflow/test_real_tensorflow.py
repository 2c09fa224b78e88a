"""A frozen graph made by TensorFlow itself (test-only dependency) matches TensorFlow's outputs."""
from __future__ import annotations

import numpy as np
import pytest

from rknn.api import RKNN
from tests.helpers import cosine

tf = pytest.importorskip("tensorflow")
pytest.importorskip("tensorflow.python.framework.convert_to_constants")


@pytest.fixture(scope="module")
def frozen(tmp_path_factory):
    from tensorflow.python.framework.convert_to_constants import convert_variables_to_constants_v2

    rng = np.random.default_rng(0)

    def var(*shape, low=None):
        data = rng.uniform(low, low + 1, shape) if low is not None else rng.normal(0, 0.3, shape)
        return tf.Variable(data.astype(np.float32))

    w1, b1, wd, w2, wf = var(3, 3, 3, 8), var(8), var(3, 3, 8, 1), var(1, 1, 8, 16), var(16, 5)
    bn = [var(16, low=0.5), var(16), var(16), var(16, low=0.5)]

    @tf.function(input_signature=[tf.TensorSpec([1, 32, 32, 3], tf.float32, name="x")])
    def net(x):
        y = tf.nn.relu6(tf.nn.bias_add(tf.nn.conv2d(x, w1, 2, "SAME"), b1))
        y = tf.nn.relu(tf.nn.depthwise_conv2d(y, wd, [1, 1, 1, 1], "SAME"))
        y, _, _ = tf.compat.v1.nn.fused_batch_norm(tf.nn.conv2d(y, w2, 1, "VALID"), *bn, is_training=False)
        y = tf.nn.relu(y)
        a = tf.raw_ops.ResizeBilinear(images=tf.nn.max_pool2d(y, 2, 2, "VALID"), size=[16, 16],
                                      half_pixel_centers=True)
        b = tf.raw_ops.ResizeNearestNeighbor(images=tf.nn.avg_pool2d(y, 3, 2, "SAME"), size=[16, 16])
        c = tf.identity(tf.concat([y, a, b], axis=3), name="feat")
        logits = tf.matmul(tf.reduce_mean(c, axis=[1, 2]), tf.tile(wf, [3, 1]))
        return {"prob": tf.nn.softmax(logits, name="prob"), "feat": c}

    graph = convert_variables_to_constants_v2(net.get_concrete_function()).graph.as_graph_def()
    path = tmp_path_factory.mktemp("tf_real") / "frozen.pb"
    path.write_bytes(graph.SerializeToString())
    x = np.random.default_rng(1).uniform(0, 1, (1, 32, 32, 3)).astype(np.float32)
    want = {k: v.numpy() for k, v in net(tf.constant(x)).items()}
    return path, x, want


def test_tensorflow_made_graph_matches_tensorflow(frozen):
    path, x, want = frozen
    rknn = RKNN()
    assert rknn.config(target_platform="rk3588", float_dtype="float32") == 0
    assert rknn.load_tensorflow(tf_pb=str(path), inputs=["x"], outputs=["prob", "feat"],
                                input_size_list=[[1, 32, 32, 3]]) == 0
    assert rknn.build(do_quantization=False) == 0
    assert rknn.init_runtime() == 0
    prob, feat = rknn.inference(inputs=[x])
    for got, ref in ((prob, want["prob"]), (feat, want["feat"])):
        assert got.shape == ref.shape
        assert np.max(np.abs(got - ref)) / np.max(np.abs(ref)) <= 1e-4


def test_keras_mobilenet_v2_frozen_graph(tmp_path):
    """Keras MobileNetV2 (random weights, unfused batch norms, ZeroPadding, residual adds) frozen by TF."""
    keras = pytest.importorskip("keras")
    from tensorflow.python.framework.convert_to_constants import convert_variables_to_constants_v2

    rng = np.random.default_rng(0)
    net = keras.applications.MobileNetV2(weights=None, input_shape=(64, 64, 3), classes=10)
    net.set_weights([rng.uniform(0.5, 1.5, w.shape) if "variance" in v.path
                     else rng.normal(0, 0.1 if w.ndim < 2 else np.sqrt(2.0 / np.prod(w.shape[:-1])), w.shape)
                     for v, w in zip(net.weights, net.get_weights())])
    fn = tf.function(lambda x: net(x, training=False)).get_concrete_function(
        tf.TensorSpec([1, 64, 64, 3], tf.float32, name="input"))
    path = tmp_path / "mobilenet_v2.pb"
    path.write_bytes(convert_variables_to_constants_v2(fn).graph.as_graph_def().SerializeToString())
    x = rng.uniform(-1, 1, (1, 64, 64, 3)).astype(np.float32)
    want = net(x, training=False).numpy()
    for float_dtype in ("float32", "float16"):
        rknn = RKNN()
        assert rknn.config(target_platform="rk3588", float_dtype=float_dtype) == 0
        assert rknn.load_tensorflow(tf_pb=str(path), inputs=["input"], outputs=["Identity"],
                                    input_size_list=[[1, 64, 64, 3]]) == 0
        assert rknn.build(do_quantization=False) == 0 and rknn.init_runtime() == 0
        got = rknn.inference(inputs=[x])[0]
        if float_dtype == "float32":
            assert np.max(np.abs(got - want)) / np.max(np.abs(want)) <= 1e-4
        else:
            assert cosine(got, want) >= 0.999
