"""How each model input/output crosses the C API, and the C++ table that describes it (``model_io.h``).

The general C API takes 4-D image inputs (1, 3 or 4 channels) as NHWC whatever the source layout;
other 4-D inputs keep the model layout (NCHW or NHWC); other ranks are ``RKNN_TENSOR_UNDEFINED``
and are passed in the model's shape (seed 002 §5.1, §3.3). Outputs are read with ``want_float=1``.
"""
from __future__ import annotations

from openrknn.codegen.escape import c_string, inert_text
from dataclasses import dataclass

from openrknn.errors import NotSupportedError
from openrknn.graph.rknn_model import LAYOUT_NCHW, LAYOUT_NHWC, RKNNModel

RKNN_TYPES = {
    "float32": "RKNN_TENSOR_FLOAT32", "float16": "RKNN_TENSOR_FLOAT16", "int8": "RKNN_TENSOR_INT8",
    "uint8": "RKNN_TENSOR_UINT8", "int16": "RKNN_TENSOR_INT16", "uint16": "RKNN_TENSOR_UINT16",
    "int32": "RKNN_TENSOR_INT32", "uint32": "RKNN_TENSOR_UINT32", "int64": "RKNN_TENSOR_INT64",
    "bool": "RKNN_TENSOR_BOOL",
}
_FORMATS = {"NCHW": "RKNN_TENSOR_NCHW", "NHWC": "RKNN_TENSOR_NHWC", "UNDEFINED": "RKNN_TENSOR_UNDEFINED"}


@dataclass(frozen=True)
class DemoTensor:
    """One model input or output as the generated demo sees it."""

    index: int
    name: str
    model_shape: tuple[int, ...]   # original layout (TensorSpec.shape)
    layout: str                    # model layout: NCHW / NHWC / UNDEFINED
    dtype: str                     # model dtype (numpy name)
    api_dims: tuple[int, ...]      # shape of the buffer given to / read from the C API
    api_format: str                # NCHW / NHWC / UNDEFINED
    feed_dtype: str                # dtype the demo feeds by default (uint8 for raw-pixel image inputs)
    mean: tuple[float, ...] | None = None
    std: tuple[float, ...] | None = None

    @property
    def transposed(self) -> bool:
        """True when the API layout (NHWC) differs from the model layout (NCHW)."""
        return self.api_dims != self.model_shape

    @property
    def n_elems(self) -> int:
        n = 1
        for d in self.api_dims:
            n *= d
        return n


def _rknn_type(dtype: str, what: str) -> str:
    if dtype not in RKNN_TYPES:
        raise NotSupportedError(f"codegen: {what} has dtype {dtype}, which the C API has no tensor type for; "
                                f"supported: {', '.join(RKNN_TYPES)}")
    return RKNN_TYPES[dtype]


def demo_inputs(model: RKNNModel) -> list[DemoTensor]:
    """The model inputs in C API terms."""
    norms = {p.input_name: p for p in model.preprocess}
    tensors = []
    for i, spec in enumerate(model.inputs):
        shape = tuple(int(d) for d in spec.shape)
        dims, fmt = shape, "UNDEFINED"
        if len(shape) == 4 and spec.layout == LAYOUT_NCHW:
            if shape[1] in (1, 3, 4):
                dims, fmt = (shape[0], shape[2], shape[3], shape[1]), "NHWC"
            else:
                fmt = "NCHW"
        elif len(shape) == 4 and spec.layout == LAYOUT_NHWC:
            fmt = "NHWC"
        norm = norms.get(spec.name)
        raw_pixels = norm is not None and fmt == "NHWC" and (norm.mean is not None or norm.std is not None)
        feed = "uint8" if raw_pixels else spec.dtype
        _rknn_type(feed, f"input {i} '{spec.name}'")
        tensors.append(DemoTensor(i, spec.name, shape, spec.layout, spec.dtype, dims, fmt, feed,
                                  tuple(norm.mean) if norm and norm.mean else None,
                                  tuple(norm.std) if norm and norm.std else None))
    return tensors


def demo_outputs(model: RKNNModel) -> list[DemoTensor]:
    """The model outputs in C API terms (always read as float32)."""
    tensors = []
    for i, spec in enumerate(model.outputs):
        shape = tuple(int(d) for d in spec.shape)
        fmt = spec.layout if len(shape) == 4 and spec.layout in (LAYOUT_NCHW, LAYOUT_NHWC) else "UNDEFINED"
        _rknn_type(spec.dtype, f"output {i} '{spec.name}'")
        tensors.append(DemoTensor(i, spec.name, shape, spec.layout, spec.dtype, shape, fmt, "float32"))
    return tensors


def _row(t: DemoTensor, dtype: str) -> str:
    dims = ", ".join(str(d) for d in t.api_dims)
    return (f"    {{{c_string(t.name)}, {len(t.api_dims)}, {{{dims}}}, {RKNN_TYPES[dtype]}, "
            f"{_FORMATS[t.api_format]}}},")


def io_table_values(inputs: list[DemoTensor], outputs: list[DemoTensor]) -> dict[str, str]:
    """Template values for ``src/model_io.h``."""
    return {
        "num_inputs": str(len(inputs)),
        "num_outputs": str(len(outputs)),
        "input_rows": "\n".join(_row(t, t.feed_dtype) for t in inputs),
        "output_rows": "\n".join(_row(t, t.dtype) for t in outputs),
    }


def describe(t: DemoTensor, kind: str) -> str:
    """One README table row."""
    norm = f"mean {list(t.mean)} std {list(t.std)}" if t.mean or t.std else "-"
    return (f"| {kind} {t.index} | `{inert_text(t.name)}` | {list(t.model_shape)} {t.layout} {t.dtype} | "
            f"{list(t.api_dims)} {t.api_format} {t.feed_dtype} | {norm} |")


__all__ = ["DemoTensor", "RKNN_TYPES", "demo_inputs", "demo_outputs", "io_table_values", "describe"]
