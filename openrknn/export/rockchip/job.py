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


def _yaml_loader():
    """A safe YAML reader from the vendor's environment (ruamel.yaml is one of its requirements)."""
    try:
        from ruamel.yaml import YAML
        return YAML(typ="safe").load
    except ImportError:
        import yaml
        return yaml.safe_load


def _edit_config(path, ranges, float16, result, float16_internal=()):
    """Write openrknn's ranges and float16 layers into the vendor's step-1 config.

    The file is edited as text, line by line: only the ``min``/``max`` values of the tensors handed over
    and the ``custom_quantize_layers`` block change. Every other line stays byte for byte what the vendor
    wrote — it refuses a config whose ``scale`` differs from its own in the last digit, which a YAML
    round trip can do.
    """
    load = _yaml_loader()
    with open(path, encoding="utf-8") as f:
        text = f.read()
    cfg = load(text)
    params = cfg.get("quantize_parameters") or {}
    mapped, unmapped, float_entries, edits = [], [], [], {}
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
        edits[name] = {"min": [float(v) for v in theirs["min"]], "max": [float(v) for v in theirs["max"]]}
        mapped.append(name)
    placed = [name for name in list(float16) + list(float16_internal) if name in params]
    result.update(mapped=mapped, unmapped=unmapped, vendor_float=float_entries, float16_placed=placed,
                  float16_unplaced=[name for name in float16 if name not in params])
    layers = dict(cfg.get("custom_quantize_layers") or {})
    layers.update({name: "float16" for name in placed})
    with open(path, "w", encoding="utf-8") as f:
        f.write("".join(_edited_lines(text.splitlines(keepends=True), load, edits, layers)))


def _edited_lines(lines, load, edits, layers):
    """The config's lines with ``edits`` (tensor → min/max) and ``layers`` written in (any indentation)."""
    section, tensor, key, out = None, None, None, []
    tensor_indent = key_indent = None
    for line in lines:
        indent = len(line) - len(line.lstrip(" "))
        stripped = line.strip()
        if not stripped or stripped.startswith("#"):
            out.append(line)
            continue
        if indent == 0 and not stripped.startswith(("%", "---", "-")):
            section, tensor, key = stripped.split(":", 1)[0], None, None
            if section == "custom_quantize_layers":
                out.append("custom_quantize_layers:" + (" {}\n" if not layers else "\n"))
                out.extend(f"    {json.dumps(name)}: {dtype}\n" for name, dtype in layers.items())
                continue
        elif section == "custom_quantize_layers":
            continue   # the old entries, rewritten above
        elif section == "quantize_parameters" and stripped.endswith(":") and indent == (tensor_indent or indent):
            tensor_indent, tensor, key = indent, next(iter(load(stripped + " 0") or {None: 0})), None
        elif section == "quantize_parameters" and tensor_indent is not None and indent > tensor_indent \
                and not stripped.startswith("-") and indent == (key_indent or indent):
            key_indent, key = indent, stripped.split(":", 1)[0]
            if tensor in edits and key in ("min", "max") and stripped.endswith(":"):
                out.append(line)
                out.extend(f"{' ' * indent}-   {value!r}\n" for value in edits[tensor][key])
                continue
        elif tensor in edits and key in ("min", "max") and stripped.startswith("-"):
            continue   # the vendor's value, replaced above
        out.append(line)
    return out


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
        _edit_config(files[2], job["ranges"], job["float16"], result, job.get("float16_internal", ()))
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
