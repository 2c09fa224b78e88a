"""A MobileNet-SSD-style Caffe net (depthwise blocks, BN+Scale, PriorBox, DetectionOutput) against numpy."""
from __future__ import annotations

import numpy as np
import pytest

import caffe_ref as ref
from caffe_files import input_layer, layer, run_rknn, write_model

NUM_CLASSES = 4
HEADS = {  # feature map -> PriorBox parameters (as text and as numpy reference arguments)
    "conv2": ("min_size: 8 aspect_ratio: 2 flip: true clip: false variance: 0.1 variance: 0.1 variance: 0.2 "
              "variance: 0.2 offset: 0.5",
              dict(min_sizes=[8], max_sizes=[], aspect_ratios=[2], flip=True, clip=False, variances=[.1, .1, .2, .2])),
    "conv3": ("min_size: 14 max_size: 26 aspect_ratio: 2 aspect_ratio: 3 flip: true clip: true variance: 0.1 "
              "variance: 0.1 variance: 0.2 variance: 0.2 step: 8",
              dict(min_sizes=[14], max_sizes=[26], aspect_ratios=[2, 3], flip=True, clip=True,
                   variances=[.1, .1, .2, .2], step=(8, 8))),
}
PRIORS = {"conv2": 3, "conv3": 6}
NHWC = "permute_param { order: 0 order: 2 order: 3 order: 1 }"


def _block(name: str, bottom: str, out: int, kernel: int, stride: int, group: int = 1) -> str:
    pad = kernel // 2
    text = layer(name, "Convolution", bottom, params=f"convolution_param {{ num_output: {out} bias_term: false "
                 f"kernel_size: {kernel} stride: {stride} pad: {pad} group: {group} }}")
    text += layer(f"{name}/bn", "BatchNorm", name, name, params="batch_norm_param { use_global_stats: true eps: 1e-5 }")
    text += layer(f"{name}/scale", "Scale", name, name, params="scale_param { bias_term: true }")
    return text + layer(f"{name}/relu", "ReLU", name, name)


def _prototxt(detection: str | None) -> str:
    text = 'name: "MobileNet-SSD-mini"\n' + input_layer("data", [1, 3, 32, 32])
    text += _block("conv0", "data", 8, 3, 2) + _block("conv1/dw", "conv0", 8, 3, 1, group=8)
    text += _block("conv1", "conv1/dw", 16, 1, 1) + _block("conv2/dw", "conv1", 16, 3, 2, group=16)
    text += _block("conv2", "conv2/dw", 16, 1, 1) + _block("conv3/dw", "conv2", 16, 3, 2, group=16)
    text += _block("conv3", "conv3/dw", 16, 1, 1)
    for fmap, (prior_text, _) in HEADS.items():
        for kind, width in (("loc", 4), ("conf", NUM_CLASSES)):
            head = f"{fmap}_mbox_{kind}"
            text += layer(head, "Convolution", fmap, params=f"convolution_param {{ num_output: "
                          f"{PRIORS[fmap] * width} kernel_size: 1 }}")
            text += layer(f"{head}_perm", "Permute", head, params=NHWC)
            text += layer(f"{head}_flat", "Flatten", f"{head}_perm", params="flatten_param { axis: 1 }")
        text += layer(f"{fmap}_mbox_priorbox", "PriorBox", [fmap, "data"], params=f"prior_box_param {{ {prior_text} }}")
    for kind, axis in (("loc", 1), ("conf", 1), ("priorbox", 2)):
        parts = [f"{f}_mbox_{kind}_flat" if kind != "priorbox" else f"{f}_mbox_priorbox" for f in HEADS]
        text += layer(f"mbox_{kind}", "Concat", parts, params=f"concat_param {{ axis: {axis} }}")
    text += layer("mbox_conf_reshape", "Reshape", "mbox_conf", params=f"reshape_param {{ shape {{ dim: 0 dim: -1 "
                  f"dim: {NUM_CLASSES} }} }}")
    text += layer("mbox_conf_softmax", "Softmax", "mbox_conf_reshape", params="softmax_param { axis: 2 }")
    text += layer("mbox_conf_flatten", "Flatten", "mbox_conf_softmax", params="flatten_param { axis: 1 }")
    if detection is not None:
        text += layer("detection_out", "DetectionOutput", ["mbox_loc", "mbox_conf_flatten", "mbox_priorbox"],
                      params=f"detection_output_param {{ num_classes: {NUM_CLASSES} share_location: true "
                             f"background_label_id: 0 {detection} }}")
    return text


def _weights(rng: np.random.Generator) -> dict[str, list[np.ndarray]]:
    shapes = {"conv0": (8, 3, 3, 3), "conv1/dw": (8, 1, 3, 3), "conv1": (16, 8, 1, 1), "conv2/dw": (16, 1, 3, 3),
              "conv2": (16, 16, 1, 1), "conv3/dw": (16, 1, 3, 3), "conv3": (16, 16, 1, 1)}
    weights: dict[str, list[np.ndarray]] = {}
    for name, shape in shapes.items():
        c = shape[0]
        weights[name] = [rng.normal(0, .4, shape).astype(np.float32)]
        weights[f"{name}/bn"] = [rng.normal(0, .1, c).astype(np.float32), rng.uniform(.5, 2, c).astype(np.float32),
                                 np.array([1.0], np.float32)]
        weights[f"{name}/scale"] = [rng.uniform(.5, 1.5, c).astype(np.float32),
                                    rng.normal(.1, .1, c).astype(np.float32)]
    for fmap in HEADS:
        for kind, width, std in (("loc", 4, .05), ("conf", NUM_CLASSES, .3)):
            out = PRIORS[fmap] * width
            weights[f"{fmap}_mbox_{kind}"] = [rng.normal(0, std, (out, 16, 1, 1)).astype(np.float32),
                                              rng.normal(0, std, out).astype(np.float32)]
    return weights


def _numpy_heads(x: np.ndarray, w: dict[str, list[np.ndarray]]) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    def block(y, name, stride, group=1):
        k = w[name][0].shape[2]
        y = ref.conv2d(y, w[name][0], None, stride=(stride,) * 2, pad=(k // 2,) * 2, group=group)
        mean, var, factor = w[f"{name}/bn"]
        y = ref.batch_norm(y, mean, var, float(factor[0]), 1e-5, *w[f"{name}/scale"])
        return np.maximum(y, 0)

    c0 = block(x, "conv0", 2)
    c1 = block(block(c0, "conv1/dw", 1, 8), "conv1", 1)
    maps = {"conv2": block(block(c1, "conv2/dw", 2, 16), "conv2", 1)}
    maps["conv3"] = block(block(maps["conv2"], "conv3/dw", 2, 16), "conv3", 1)
    locs, confs, priors = [], [], []
    for fmap, (_, args) in HEADS.items():
        y = maps[fmap]
        locs.append(ref.conv2d(y, *w[f"{fmap}_mbox_loc"]).transpose(0, 2, 3, 1).reshape(1, -1))
        confs.append(ref.conv2d(y, *w[f"{fmap}_mbox_conf"]).transpose(0, 2, 3, 1).reshape(1, -1))
        priors.append(ref.prior_box(y.shape[2:], (32, 32), **args))
    conf = ref.softmax(np.concatenate(confs, 1).reshape(1, -1, NUM_CLASSES), 2).reshape(1, -1)
    return np.concatenate(locs, 1), conf, np.concatenate(priors, 2)




@pytest.fixture(scope="module")
def ssd_case():
    rng = np.random.default_rng(3)
    x = rng.normal(0, 1, (1, 3, 32, 32)).astype(np.float32)
    weights = _weights(rng)
    return x, weights, _numpy_heads(x, weights)


def test_ssd_heads_and_priors_without_detection_output(tmp_path, ssd_case):
    x, weights, (loc, conf, prior) = ssd_case
    proto, model = write_model(tmp_path, _prototxt(None), weights)
    out_loc, out_prior, out_conf = run_rknn(proto, model, [x])   # unconsumed blobs, in prototxt order
    assert prior.shape == (1, 2, (64 * 3 + 16 * 6) * 4)
    np.testing.assert_allclose(out_loc, loc, rtol=1e-4, atol=1e-4 * np.abs(loc).max())
    np.testing.assert_allclose(out_conf, conf, rtol=1e-4, atol=1e-6)
    np.testing.assert_allclose(out_prior, prior, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("detection,kwargs", [
    ("nms_param { nms_threshold: 0.45 top_k: 40 } code_type: CENTER_SIZE keep_top_k: 12 confidence_threshold: 0.3",
     dict(nms_threshold=.45, top_k=40, keep_top_k=12, confidence_threshold=.3)),
    ("nms_param { nms_threshold: 0.3 } code_type: CENTER_SIZE confidence_threshold: 0.4",
     dict(nms_threshold=.3, confidence_threshold=.4)),
    ("nms_param { nms_threshold: 0.5 top_k: 20 } code_type: CORNER keep_top_k: 5",
     dict(nms_threshold=.5, top_k=20, keep_top_k=5, code_type="CORNER")),
    ("nms_param { nms_threshold: 0.45 } code_type: CENTER_SIZE confidence_threshold: 0.99",
     dict(nms_threshold=.45, confidence_threshold=.99)),
    ("nms_param { nms_threshold: 0.45 } code_type: CENTER_SIZE keep_top_k: 5 confidence_threshold: 0.99",
     dict(nms_threshold=.45, keep_top_k=5, confidence_threshold=.99)),
])
def test_ssd_detection_output(tmp_path, ssd_case, detection, kwargs, monkeypatch):
    x, weights, (loc, conf, prior) = ssd_case
    proto, model = write_model(tmp_path, _prototxt(detection), weights)
    (out,) = run_rknn(proto, model, [x])
    expected = ref.detection_output(loc, conf, prior, NUM_CLASSES, **kwargs)
    assert out.shape == expected.shape, (out.shape, expected.shape)
    np.testing.assert_allclose(out, expected, rtol=1e-4, atol=1e-5)
    if kwargs.get("confidence_threshold") == .99:
        assert out.tolist() == [[[[0, -1, -1, -1, -1, -1, -1]]]]
    else:
        assert out.shape[2] > 1 and set(out[0, 0, :, 1]) <= {1, 2, 3}


def _mobilenet_ssd_deploy() -> str:
    """The layer structure of the public MobileNet-SSD deploy net (300x300, 21 classes, 1917 priors)."""
    text = 'name: "MobileNet-SSD"\n' + input_layer("data", [1, 3, 300, 300]) + _block("conv0", "data", 32, 3, 2)
    plan = [(64, 1), (128, 2), (128, 1), (256, 2), (256, 1), (512, 2)] + [(512, 1)] * 5 + [(1024, 2), (1024, 1)]
    bottom, channels = "conv0", 32
    for i, (out, stride) in enumerate(plan, start=1):
        text += _block(f"conv{i}/dw", bottom, channels, 3, stride, group=channels)
        text += _block(f"conv{i}", f"conv{i}/dw", out, 1, 1)
        bottom, channels = f"conv{i}", out
    for i, (mid, out) in zip(range(14, 18), [(256, 512), (128, 256), (128, 256), (64, 128)]):
        text += _block(f"conv{i}_1", bottom, mid, 1, 1) + _block(f"conv{i}_2", f"conv{i}_1", out, 3, 2)
        bottom = f"conv{i}_2"
    heads = [("conv11", 3, "min_size: 60 aspect_ratio: 2")] + [
        (f, 6, f"min_size: {lo} max_size: {hi} aspect_ratio: 2 aspect_ratio: 3")
        for f, lo, hi in [("conv13", 105, 150), ("conv14_2", 150, 195), ("conv15_2", 195, 240),
                          ("conv16_2", 240, 285), ("conv17_2", 285, 300)]]
    for fmap, priors, sizes in heads:
        for kind, width in (("loc", 4), ("conf", 21)):
            head = f"{fmap}_mbox_{kind}"
            text += layer(head, "Convolution", fmap, params=f"convolution_param {{ num_output: {priors * width} "
                          "kernel_size: 1 }")
            text += layer(f"{head}_perm", "Permute", head, params=NHWC)
            text += layer(f"{head}_flat", "Flatten", f"{head}_perm", params="flatten_param { axis: 1 }")
        text += layer(f"{fmap}_mbox_priorbox", "PriorBox", [fmap, "data"], params=f"prior_box_param {{ {sizes} "
                      "flip: true clip: false variance: 0.1 variance: 0.1 variance: 0.2 variance: 0.2 offset: 0.5 }")
    for kind, axis in (("loc", 1), ("conf", 1), ("priorbox", 2)):
        parts = [f"{f}_mbox_{kind}_flat" if kind != "priorbox" else f"{f}_mbox_priorbox" for f, _, _ in heads]
        text += layer(f"mbox_{kind}", "Concat", parts, params=f"concat_param {{ axis: {axis} }}")
    text += layer("mbox_conf_reshape", "Reshape", "mbox_conf",
                  params="reshape_param { shape { dim: 0 dim: -1 dim: 21 } }")
    text += layer("mbox_conf_softmax", "Softmax", "mbox_conf_reshape", params="softmax_param { axis: 2 }")
    text += layer("mbox_conf_flatten", "Flatten", "mbox_conf_softmax", params="flatten_param { axis: 1 }")
    return text + layer("detection_out", "DetectionOutput", ["mbox_loc", "mbox_conf_flatten", "mbox_priorbox"],
                        params="detection_output_param { num_classes: 21 share_location: true background_label_id: 0 "
                               "nms_param { nms_threshold: 0.45 top_k: 100 } code_type: CENTER_SIZE keep_top_k: 100 "
                               "confidence_threshold: 0.25 }")


def test_mobilenet_ssd_deploy_structure_with_random_weights(tmp_path, monkeypatch, capsys):
    """The full-size structure converts and runs (no .caffemodel: random weights, as the toolkit allows)."""
    from openrknn.frontends.caffe import load_caffe

    proto, _ = write_model(tmp_path, _mobilenet_ssd_deploy(), None)
    source = load_caffe(proto)
    priors = next(n for n in source.model.graph.node if n.name == "mbox_priorbox")
    assert priors.op_type == "Concat" and "RANDOM weights" in capsys.readouterr().out
    shapes = {v.name: [d.dim_value for d in v.type.tensor_type.shape.dim] for v in source.model.graph.value_info}
    assert shapes["mbox_priorbox"] == [1, 2, 1917 * 4] and shapes["mbox_conf_flatten"] == [1, 1917 * 21]
    x = np.random.default_rng(0).uniform(-1, 1, (1, 3, 300, 300)).astype(np.float32)
    (out,) = run_rknn(proto, None, [x])
    assert out.ndim == 4 and out.shape[:2] == (1, 1) and out.shape[3] == 7 and 1 <= out.shape[2] <= 100
    labels = out[0, 0, :, 1]
    assert np.all((labels == -1) | ((labels >= 1) & (labels <= 20)))


@pytest.mark.parametrize("code_type,share,encoded,background", [
    ("CORNER_SIZE", False, False, 0), ("CENTER_SIZE", False, True, 2), ("CORNER", True, True, -1)])
def test_detection_output_from_inputs(tmp_path, monkeypatch, code_type, share, encoded, background):
    """DetectionOutput alone, fed with runtime loc/conf/prior tensors (nothing folds to a constant)."""
    rng = np.random.default_rng(11)
    priors, classes = 60, 3
    loc_classes = 1 if share else classes
    centers, sizes = rng.uniform(.2, .8, (priors, 2)), rng.uniform(.05, .4, (priors, 2))
    boxes = np.concatenate([centers - sizes / 2, centers + sizes / 2], 1)
    prior = np.stack([boxes.reshape(-1), np.tile([.1, .1, .2, .2], priors)])[None].astype(np.float32)
    loc = rng.normal(0, .5, (1, priors * loc_classes * 4)).astype(np.float32)
    conf = ref.softmax(rng.normal(0, 1.5, (1, priors, classes)), 2).reshape(1, -1).astype(np.float32)
    text = (input_layer("loc", list(loc.shape)) + input_layer("conf", list(conf.shape))
            + input_layer("prior", list(prior.shape))
            + layer("det", "DetectionOutput", ["loc", "conf", "prior"],
                    params=f"detection_output_param {{ num_classes: {classes} share_location: {str(share).lower()} "
                           f"background_label_id: {background} nms_param {{ nms_threshold: 0.4 top_k: 25 }} "
                           f"code_type: {code_type} variance_encoded_in_target: {str(encoded).lower()} keep_top_k: 15 "
                           "confidence_threshold: 0.2 }"))
    proto, _ = write_model(tmp_path, text, None)
    (out,) = run_rknn(proto, None, [loc, conf, prior])
    expected = ref.detection_output(loc, conf, prior, classes, background=background, nms_threshold=.4, top_k=25,
                                    keep_top_k=15, confidence_threshold=.2, code_type=code_type, share_location=share,
                                    variance_encoded_in_target=encoded)
    assert out.shape == expected.shape and out.shape[2] > 3
    np.testing.assert_allclose(out, expected, rtol=1e-4, atol=1e-5)
