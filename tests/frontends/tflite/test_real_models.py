"""The real TFLite models in shared/models/tflite: load, build fp16/fp32, run, match the interpreter."""
from __future__ import annotations

import flatbuffers
import numpy as np
import pytest

pytest.importorskip("tflite")
litert = pytest.importorskip("ai_edge_litert.interpreter")

from tests.helpers import cosine  # noqa: E402
from rknn.api import RKNN  # noqa: E402
from rknn.api.custom_op import get_node_attr  # noqa: E402

pytestmark = pytest.mark.integration
MODELS = ["face_detection_short_range", "hand_landmark_lite", "iris_landmark", "selfie_segmentation"]
CUSTOM = "Convolution2DTransposeBias"


class Convolution2DTransposeBias:
    """MediaPipe's transposed convolution + bias, in NumPy (options: int32 padding, stride_w, stride_h)."""

    op_type = CUSTOM

    @staticmethod
    def _options(node):
        padding, stride_w, stride_h = np.array(get_node_attr(node, "custom_options"), np.uint8).view(np.int32)
        return padding, stride_h, stride_w

    def shape_infer(self, node, in_shapes, in_dtypes):
        padding, sh, sw = self._options(node)
        (n, h, w, _), (cout, kh, kw, _) = in_shapes[0], in_shapes[1]
        if padding == 1:   # kTfLitePaddingSame
            return [[n, h * sh, w * sw, cout]], [in_dtypes[0]]
        return [[n, (h - 1) * sh + kh, (w - 1) * sw + kw, cout]], [in_dtypes[0]]

    def compute(self, node, inputs):
        x, w, b = (np.asarray(v, np.float32) for v in inputs)
        padding, sh, sw = self._options(node)
        n, h, wd, _ = x.shape
        cout, kh, kw, _ = w.shape
        full = np.zeros([n, (h - 1) * sh + kh, (wd - 1) * sw + kw, cout], np.float32)
        for i in range(kh):
            for j in range(kw):
                taps = np.einsum("nhwc,oc->nhwo", x, w[:, i, j])
                full[:, i:i + (h - 1) * sh + 1:sh, j:j + (wd - 1) * sw + 1:sw] += taps
        (out_shape,), _ = self.shape_infer(node, [x.shape, w.shape], [x.dtype])
        top, left = (full.shape[1] - out_shape[1]) // 2, (full.shape[2] - out_shape[2]) // 2
        return [full[:, top:top + out_shape[1], left:left + out_shape[2]] + b]


def builtin_copy(path, out_path):
    """The model with the custom op replaced by the equivalent builtin TRANSPOSE_CONV (interpreter oracle)."""
    schema = __import__("ai_edge_litert.schema_py_generated", fromlist=["ModelT"])
    model = schema.ModelT.InitFromPackedBuf(path.read_bytes(), 0)
    graph = model.subgraphs[0]
    code = schema.OperatorCodeT()
    code.builtinCode = code.deprecatedBuiltinCode = schema.BuiltinOperator.TRANSPOSE_CONV
    code.version = 3
    model.operatorCodes.append(code)
    for op in graph.operators:
        if model.operatorCodes[op.opcodeIndex].customCode == CUSTOM.encode():
            padding, stride_w, stride_h = np.frombuffer(bytes(op.customOptions), np.int32)
            shape = schema.BufferT()
            shape.data = list(np.array(graph.tensors[op.outputs[0]].shape, np.int32).view(np.uint8))
            model.buffers.append(shape)
            tensor = schema.TensorT()
            tensor.name, tensor.shape, tensor.type, tensor.buffer = "out_shape", [4], 2, len(model.buffers) - 1
            graph.tensors.append(tensor)
            opts = schema.TransposeConvOptionsT()
            opts.padding, opts.strideW, opts.strideH = (0 if padding == 1 else 1), int(stride_w), int(stride_h)
            x, w, b = op.inputs
            op.opcodeIndex, op.inputs = len(model.operatorCodes) - 1, [len(graph.tensors) - 1, w, x, b]
            op.builtinOptionsType = schema.BuiltinOptions.TransposeConvOptions
            op.builtinOptions, op.customOptions = opts, None
    builder = flatbuffers.Builder(1024)
    builder.Finish(model.Pack(builder), file_identifier=b"TFL3")
    out_path.write_bytes(builder.Output())
    return out_path


def interpreter_outputs(path, x):
    interp = litert.Interpreter(model_path=str(path))
    interp.allocate_tensors()
    interp.set_tensor(interp.get_input_details()[0]["index"], x)
    interp.invoke()
    return [interp.get_tensor(d["index"]) for d in interp.get_output_details()], interp.get_input_details()[0]


def rknn_outputs(path, x, float_dtype, register=False):
    rknn = RKNN()
    assert rknn.config(target_platform="rk3588", float_dtype=float_dtype) == 0
    if register:
        assert rknn.reg_custom_op(Convolution2DTransposeBias) == 0
    assert rknn.load_tflite(str(path)) == 0
    assert rknn.build(do_quantization=False) == 0
    assert rknn.init_runtime() == 0
    outs = rknn.inference(inputs=[x])
    rknn.release()
    return outs


def relative(out, ref):
    return float(np.abs(np.asarray(out, np.float64) - ref).max() / (np.abs(ref).max() + 1e-12))


@pytest.mark.parametrize("name", MODELS)
def test_real_model_matches_interpreter(shared_data, tmp_path, name):
    path = shared_data / "models" / "tflite" / f"{name}.tflite"
    oracle = builtin_copy(path, tmp_path / "builtin.tflite") if name == "selfie_segmentation" else path
    x = np.random.default_rng(0).uniform(-1, 1, litert.Interpreter(model_path=str(oracle)).get_input_details()[0]
                                         ["shape"]).astype(np.float32)
    refs, _ = interpreter_outputs(oracle, x)
    register = name == "selfie_segmentation"
    exact = rknn_outputs(path, x, "float32", register)
    half = rknn_outputs(path, x, "float16", register)
    for ref, out32, out16 in zip(refs, exact, half):
        assert out32.shape == ref.shape
        assert relative(out32, ref) <= 1e-4
        assert cosine(out16, ref) > 0.999   # fp16 layers: close, not exact


def test_custom_op_refused_without_registration(shared_data, tmp_path, capsys):
    """An unknown custom op (MediaPipe's, renamed: the frontend knows Convolution2DTransposeBias itself)."""
    unknown = CUSTOM[:-1] + "Z"
    data = (shared_data / "models" / "tflite" / "selfie_segmentation.tflite").read_bytes()
    assert data.count(CUSTOM.encode()) >= 1
    (tmp_path / "renamed.tflite").write_bytes(data.replace(CUSTOM.encode(), unknown.encode()))
    rknn = RKNN()
    assert rknn.load_tflite(str(tmp_path / "renamed.tflite")) == -1
    log = capsys.readouterr().out
    assert f"'{unknown}'" in log and "reg_custom_op" in log and "E " in log


def test_mediapipe_transpose_conv_bias_loads_without_registration(shared_data, tmp_path):
    """Convolution2DTransposeBias (raw TfLiteTransposeConvParams options) loads as a ConvTranspose with
    bias and gives LiteRT's values (on the builtin TRANSPOSE_CONV copy of the model)."""
    path = shared_data / "models" / "tflite" / "selfie_segmentation.tflite"
    oracle = builtin_copy(path, tmp_path / "builtin.tflite")
    x = np.random.default_rng(0).uniform(-1, 1, litert.Interpreter(model_path=str(oracle)).get_input_details()[0]
                                         ["shape"]).astype(np.float32)
    refs, _ = interpreter_outputs(oracle, x)
    for ref, out in zip(refs, rknn_outputs(path, x, "float32", register=False)):
        assert out.shape == ref.shape and relative(out, ref) <= 1e-4


@pytest.mark.parametrize("name", MODELS)
def test_real_model_int8_build_runs_close_to_float(shared_data, tmp_path, name):
    """w8a8 with a few photos as calibration (the custom op stays float, run by its class)."""
    photos = sorted(p for p in (shared_data / "images").iterdir() if p.suffix.lower() in (".png", ".jpg"))
    evaluation = shared_data / "images" / "astronaut.png"     # a person, a face, a hand: every model has work
    (tmp_path / "dataset.txt").write_text("\n".join([str(p) for p in photos if p != evaluation][:4]) + "\n")
    path = str(shared_data / "models" / "tflite" / f"{name}.tflite")
    outputs = {}
    for quantize in (False, True):
        rknn = RKNN()
        assert rknn.config(target_platform="rk3588", mean_values=[[127.5] * 3], std_values=[[127.5] * 3]) == 0
        if name == "selfie_segmentation":
            assert rknn.reg_custom_op(Convolution2DTransposeBias) == 0
        assert rknn.load_tflite(path) == 0
        assert rknn.build(do_quantization=quantize, dataset=str(tmp_path / "dataset.txt")) == 0
        assert rknn.init_runtime() == 0
        h, w = rknn._model.inputs[0].shape[1:3]
        image = np.asarray(__import__("PIL.Image", fromlist=["Image"]).open(evaluation).convert("RGB").resize((w, h)))
        outputs[quantize] = rknn.inference(inputs=[image[None]])
        rknn.release()
    assert [o.shape for o in outputs[True]] == [o.shape for o in outputs[False]]
    print(name, [round(cosine(q, f), 5) for q, f in zip(outputs[True], outputs[False])])
    assert cosine(outputs[True][0], outputs[False][0]) > 0.98
