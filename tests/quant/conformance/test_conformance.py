"""The quantization conformance corpus: every hazard builds and simulates close to float.

int8 (rk3588 w8a8), int16 (rv1106 w16a16i) and Toolkit 1 uint8 (rk1808) for every case, and
hybrid (int8 with one layer moved to int16 through the step-1/step-2 cfg) where the case names
such a layer.
The vendor oracle (rknn-toolkit2 in another python, ``OPENRKNN_REFERENCE_PYTHON``) is marked slow.
"""
from __future__ import annotations

import numpy as np
import pytest

from tests.quant.conformance import corpus, vendor

pytest.importorskip("onnxruntime")

# dtype → platform; asymmetric_quantized-u8 (Toolkit 1) has asymmetric weights with zero points
PLATFORMS = {"w8a8": "rk3588", "w16a16i": "rv1106", "asymmetric_quantized-u8": "rk1808", "hybrid": "rk3588"}
RUNS = [(name, dtype) for name in corpus.CASES for dtype in ("w8a8", "w16a16i", "asymmetric_quantized-u8")] + \
       [(name, "hybrid") for name, make in corpus.CASES.items() if make().int16_layers]


def _failures(results) -> list[str]:
    return [f"{name}: cos {f['cosine']:.5f}, norm ratio {f['norm_ratio']:.4f}, max|diff| {f['max_diff']:.3g} "
            f"(bound {f['bound']:.3g})" for name, passed, f in results if not passed]


@pytest.mark.parametrize("name,dtype", RUNS)
def test_case_matches_float(tmp_path, name, dtype):
    case = corpus.CASES[name]()
    hybrid = dtype == "hybrid"
    rknn = corpus.build(case, tmp_path, "w8a8" if hybrid else dtype, PLATFORMS[dtype], hybrid=hybrid)
    failures = _failures(corpus.compare(case, corpus.run(rknn, case)))
    assert not failures, f"{name} {dtype}: " + "; ".join(failures)


def test_dead_channels_output_their_bias(tmp_path):
    """Channels whose weights are ≈0 output their bias (it must not be cut at int32)."""
    case = corpus.dead_output_channels()
    rknn = corpus.build(case, tmp_path)
    out = corpus.run(rknn, case)[0][0]
    np.testing.assert_allclose(out[0, 4:].mean(axis=(1, 2)), [-0.85, -0.38, 0.14, 1.51], atol=0.02)


def test_shared_initializers_get_one_copy_per_layer(tmp_path):
    """Each layer reading a shared (or Identity-aliased) constant has its own bias record."""
    case = corpus.identity_aliases()
    model = corpus.build(case, tmp_path)._model
    convs = [n for n in model.graph.graph.node if n.op_type == "Conv"]
    biases = [n.input[2] for n in convs]
    assert len(set(biases)) == len(convs) == 3
    scales = [model.quant_params[b]["scale"][0] for b in biases]
    assert len(set(scales)) == 3, "each reader's bias is in units of its own input scale"
    assert not [n for n in model.graph.graph.node if n.op_type == "Identity"]


def test_bias_overflow_is_reported(tmp_path, capsys):
    case = corpus.huge_bias()
    corpus.build(case, tmp_path)
    text = capsys.readouterr()
    assert "weight scale was raised" in text.out + text.err
    assert "y_node (4 of 4 channels)" in text.out + text.err


@pytest.mark.slow
@pytest.mark.parametrize("name", list(corpus.CASES))
def test_not_worse_than_vendor(tmp_path, name):
    """rknn-toolkit2's simulator as an oracle: openrknn may not be worse by more than 0.0005 cosine."""
    if vendor.reference_python() is None:
        pytest.skip(f"set {vendor.ENV} to the python of an environment with rknn-toolkit2 to run the oracle")
    case = corpus.CASES[name]()
    ours = corpus.compare(case, corpus.run(corpus.build(case, tmp_path / "ours"), case))
    folder = tmp_path / "vendor"
    model, dataset = corpus.write_inputs(case, folder)
    theirs_raw = vendor.run_vendor(folder, model, dataset, case.evaluation, len(case.model.graph.output))
    if any(len(o) != len(case.model.graph.output) for o in theirs_raw):
        pytest.skip("the vendor's model has another number of outputs (it folds constant outputs)")
    theirs = corpus.compare(case, theirs_raw)
    worse = [f"{n}: {a['cosine']:.5f} vs vendor {b['cosine']:.5f}"
             for (n, _, a), (_, _, b) in zip(ours, theirs) if a["cosine"] < b["cosine"] - 0.0005]
    assert not worse, "; ".join(worse)
