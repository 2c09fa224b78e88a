"""Runs inside rknn-toolkit2's own Python (a subprocess; never imported by openrknn).

Reads a job description (JSON), compiles the ONNX model with Rockchip's toolkit through its documented
hybrid-quantization flow (seed 002 §6: step 1 → edit ``{model}.quantization.cfg`` → step 2), handing over
the calibrated ``min``/``max`` and float16 layers that openrknn chose, and writes a result (JSON).
Only the standard library, the vendor's ``rknn.api`` and the YAML library the vendor ships are used.

usage: python -I job.py JOB.json RESULT.json
"""
import json
import os
import sys
import time
import traceback


class _PlainYaml:
    """PyYAML behind ruamel's load/dump names (an environment without ruamel.yaml)."""

    def __init__(self, module):
        self._yaml = module

    def load(self, stream):
        return self._yaml.safe_load(stream)

    def dump(self, data, stream):
        self._yaml.safe_dump(data, stream, sort_keys=False, default_flow_style=False, indent=4)


def _load_yaml():
    try:
        from ruamel.yaml import YAML     # the vendor's own dependency: keeps its layout and anchors
        yaml = YAML()
        yaml.indent(mapping=4, sequence=4, offset=0)
        return yaml
    except ImportError:
        try:
            import yaml as module
        except ImportError:
            return None
        return _PlainYaml(module)


def _edit_config(path, ranges, float16, result):
    """Write openrknn's ranges and float16 layers into the vendor's step-1 config."""
    yaml = _load_yaml()
    if yaml is None:
        raise RuntimeError("rknn-toolkit2's environment has no YAML library (ruamel.yaml is one of its requirements)")
    with open(path, encoding="utf-8") as f:
        cfg = yaml.load(f)
    params = cfg.get("quantize_parameters") or {}
    mapped, unmapped, float_entries = [], [], []
    for name, entry in params.items():
        dtype = str(entry.get("dtype", ""))
        if dtype.startswith("float"):
            float_entries.append(name)
            continue
        if dtype not in ("int8", "uint8", "int16"):
            continue   # int32 constants (biases): derived by the vendor, their scale may not change
        theirs = ranges.get(name)
        if theirs is None:
            unmapped.append(name)
            continue
        entry["min"] = [float(v) for v in theirs["min"]]
        entry["max"] = [float(v) for v in theirs["max"]]
        mapped.append(name)
    layers = cfg.get("custom_quantize_layers")
    if not isinstance(layers, dict):
        layers = {}
    placed, unplaced = [], []
    for name in float16:
        if name in params:
            layers[name] = "float16"
            placed.append(name)
        else:
            unplaced.append(name)
    cfg["custom_quantize_layers"] = layers
    with open(path, "w", encoding="utf-8") as f:
        yaml.dump(cfg, f)
    result.update(mapped=mapped, unmapped=unmapped, vendor_float=float_entries,
                  float16_placed=placed, float16_unplaced=unplaced)


def _run(job, result):
    from rknn.api import RKNN
    import numpy as np

    def check(ret, what):
        if ret != 0:
            raise RuntimeError(f"rknn-toolkit2 {what} returned {ret} (its log above says why)")

    rknn = RKNN(verbose=bool(job.get("verbose")))
    check(rknn.config(**job["config"]), "config")
    check(rknn.load_onnx(model=job["onnx"]), "load_onnx")
    started = time.time()
    if job.get("quantize"):
        check(rknn.hybrid_quantization_step1(dataset=job["dataset"], rknn_batch_size=job.get("rknn_batch_size"),
                                             proposal=False), "hybrid_quantization_step1")
        stem = os.path.splitext(os.path.basename(job["onnx"]))[0]
        files = (f"{stem}.model", f"{stem}.data", f"{stem}.quantization.cfg")
        _edit_config(files[2], job["ranges"], job["float16"], result)
        rknn.release()
        rknn = RKNN(verbose=bool(job.get("verbose")))
        check(rknn.hybrid_quantization_step2(model_input=files[0], data_input=files[1],
                                             model_quantization_cfg=files[2]), "hybrid_quantization_step2")
    else:
        check(rknn.build(do_quantization=False, rknn_batch_size=job.get("rknn_batch_size")), "build")
    result["build_seconds"] = time.time() - started
    check(rknn.export_rknn(job["output"]), "export_rknn")
    if job.get("samples"):
        # the vendor's own simulator on the same build: what its compiler will run on the board
        check(rknn.init_runtime(), "init_runtime")
        result["outputs"] = []
        for k, sample in enumerate(job["samples"]):
            outputs = rknn.inference(inputs=[np.load(p) for p in sample], data_format=job.get("data_format"))
            if outputs is None:
                raise RuntimeError("rknn-toolkit2 inference returned None (its log above says why)")
            paths = []
            for i, out in enumerate(outputs):
                paths.append(os.path.join(os.path.dirname(job["output"]), f"vendor_output_{k}_{i}.npy"))
                np.save(paths[-1], np.asarray(out, dtype=np.float32))
            result["outputs"].append(paths)
    rknn.release()
    try:
        from rknn.api import __version__ as version     # absent in some releases
    except ImportError:
        version = None
    result["toolkit_version"] = version


def main(argv):
    job_path, result_path = argv[1], argv[2]
    with open(job_path, encoding="utf-8") as f:
        job = json.load(f)
    result = {"ok": False}
    try:
        _run(job, result)
        result["ok"] = True
    except Exception as e:   # reported to openrknn as data, whatever the vendor raised
        result["error"] = f"{type(e).__name__}: {e}"
        result["traceback"] = traceback.format_exc()[-4000:]
    with open(result_path, "w", encoding="utf-8") as f:
        json.dump(result, f)
    return 0 if result["ok"] else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv))
