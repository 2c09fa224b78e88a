"""The model-specific pre/post-processing stubs of the demo (``src/process.cc``).

Each input gets a ``preprocess_input_<i>`` that takes the demo's ``.npy`` file (or builds a test
pattern) in the layout and dtype the C API expects, with comments stating the model's real shape,
layout and embedded normalisation; each output gets a ``postprocess_output_<i>``: top-5 for a
classifier-like ``[N, classes]`` output, value statistics otherwise.
"""
from __future__ import annotations

from openrknn.codegen.escape import inert_text
from openrknn.codegen.io_table import DemoTensor

_C_TYPES = {"float32": "float", "float16": "uint16_t", "int8": "int8_t", "uint8": "uint8_t", "int16": "int16_t",
            "uint16": "uint16_t", "int32": "int32_t", "uint32": "uint32_t", "int64": "int64_t", "bool": "uint8_t"}


def _input_comment(t: DemoTensor) -> str:
    lines = [f"// Input {t.index} '{inert_text(t.name)}': model shape {list(t.model_shape)} {t.layout} {t.dtype}."]
    if t.transposed:
        lines.append(f"// The C API takes it as {t.api_format} {list(t.api_dims)}; the runtime converts the layout.")
    else:
        lines.append(f"// The C API takes it as {t.api_format} {list(t.api_dims)}.")
    if t.mean or t.std:
        lines.append(f"// Normalisation is inside the model (mean {list(t.mean or [])}, std {list(t.std or [])}):")
        lines.append("// feed raw pixel values (0..255), do not normalise here.")
    lines.append("// TODO: replace the test pattern with your own source (camera frame, decoded image, sensor data).")
    return "\n".join(lines)


def _input_function(t: DemoTensor) -> str:
    c_type = _C_TYPES[t.feed_dtype]
    pattern = "(i % 251)" if t.feed_dtype == "uint8" else "(i % 251) / 251.0f" if t.feed_dtype == "float32" else "0"
    return f"""{_input_comment(t)}
static int preprocess_input_{t.index}(const npy::Array* file, InputBuffer& out) {{
    const TensorSpec& spec = kInputs[{t.index}];
    if (file != nullptr) {{
        if (file->n_elems() != {t.n_elems}u) {{
            std::fprintf(stderr, "input {t.index} '%s': the .npy file has %zu values, the model needs {t.n_elems}\\n",
                         spec.name, file->n_elems());
            return -1;
        }}
        out.type = file->rknn_type();
        out.bytes = file->data;
        return 0;
    }}
    out.type = spec.type;
    out.bytes.resize({t.n_elems}u * sizeof({c_type}));
    {c_type}* values = reinterpret_cast<{c_type}*>(out.bytes.data());
    for (size_t i = 0; i < {t.n_elems}u; ++i) {{
        values[i] = static_cast<{c_type}>({pattern});
    }}
    return 0;
}}
"""


def _is_classifier(t: DemoTensor) -> bool:
    return len(t.model_shape) == 2 and t.model_shape[1] > 1


def _output_function(t: DemoTensor) -> str:
    head = (f"// Output {t.index} '{inert_text(t.name)}': shape {list(t.model_shape)} {t.layout}, read as float32 "
            f"(want_float = 1).")
    if _is_classifier(t):
        classes = t.model_shape[1]
        body = f"""    // Looks like class scores: print the top 5 of each batch item. TODO: map indices to labels.
    for (size_t b = 0; b < n_elems / {classes}u; ++b) {{
        std::vector<std::pair<float, int>> order;
        for (int c = 0; c < {classes}; ++c) order.emplace_back(data[b * {classes}u + c], c);
        size_t top = order.size() < 5 ? order.size() : 5;
        std::partial_sort(order.begin(), order.begin() + top, order.end(), std::greater<std::pair<float, int>>());
        std::printf("  '%s' item %zu top-%zu:", kOutputs[{t.index}].name, b, top);
        for (size_t k = 0; k < top; ++k) std::printf(" [%d] %.5f", order[k].second, order[k].first);
        std::printf("\\n");
    }}"""
    else:
        body = f"""    // TODO: decode this output (boxes, masks, features...) for your application.
    float lo = n_elems ? data[0] : 0.0f, hi = lo;
    double sum = 0.0;
    for (size_t i = 0; i < n_elems; ++i) {{
        lo = std::min(lo, data[i]);
        hi = std::max(hi, data[i]);
        sum += data[i];
    }}
    std::printf("  '%s' {list(t.model_shape)}: min %.5f max %.5f mean %.5f\\n", kOutputs[{t.index}].name, lo, hi,
                n_elems ? sum / n_elems : 0.0);"""
    return f"""{head}
static void postprocess_output_{t.index}(const float* data, size_t n_elems) {{
{body}
}}
"""


def process_values(inputs: list[DemoTensor], outputs: list[DemoTensor]) -> dict[str, str]:
    """Template values for ``src/process.cc``."""
    in_cases = "\n".join(f"        case {t.index}: return preprocess_input_{t.index}(file, out);" for t in inputs)
    out_cases = "\n".join(f"        case {t.index}: postprocess_output_{t.index}(data, n_elems); return;"
                          for t in outputs)
    return {
        "input_functions": "\n".join(_input_function(t) for t in inputs),
        "output_functions": "\n".join(_output_function(t) for t in outputs),
        "input_cases": in_cases,
        "output_cases": out_cases,
    }
