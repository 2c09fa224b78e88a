"""How a model input/output crosses the C API: its ``rknn_tensor_attr`` and the buffer conversions.

The attribute rules follow seed 002 §3.3 / §5.2.3:

* ``INPUT_ATTR``: 4-D image inputs (1, 3 or 4 channels) are NHWC, other 4-D inputs keep the model layout,
  other ranks are UNDEFINED (the same rule the codegen demo uses, ``codegen/io_table.py``); the type is
  what the NPU stores (INT8 with the affine parameters of the normalised input for a quantized model,
  FLOAT16 for a float16 model).
* ``OUTPUT_ATTR``: the model's shape and layout (NCHW for 4-D ONNX outputs), the stored type.
* ``NATIVE_*``: NC1HWC2 for 4-D outputs and for 4-D inputs whose channel count is not 1, 3 or 4;
  C2 holds 16 bytes (16 int8 or 8 float16 values), channels padded with zeros.
"""
from __future__ import annotations

from dataclasses import dataclass, replace
import numpy as np

from openrknn.capi import structs as s
from openrknn.graph.rknn_model import LAYOUT_NCHW, LAYOUT_NHWC, RKNNModel, TensorSpec


class ApiError(Exception):
    """A call the documented runtime refuses: ``code`` is the RKNN_ERR_* value, the text says why."""

    def __init__(self, code: int, message: str) -> None:
        super().__init__(message)
        self.code = code


@dataclass(frozen=True)
class TensorDesc:
    """One tensor as the C API describes it."""

    index: int
    name: str
    dims: tuple[int, ...]        # in ``fmt`` order
    fmt: int
    type: int
    qnt_type: int = s.QNT_NONE
    scale: float = 1.0
    zp: int = 0

    @property
    def n_elems(self) -> int:
        return int(np.prod(self.dims)) if self.dims else 1

    @property
    def elem_size(self) -> int:
        return np.dtype(s.NUMPY_OF_TYPE[self.type]).itemsize

    @property
    def size(self) -> int:
        return self.n_elems * self.elem_size

    def fill(self, attr: s.rknn_tensor_attr) -> None:
        """Write this description into a caller's ``rknn_tensor_attr`` (its ``index`` stays)."""
        attr.n_dims = len(self.dims)
        for i in range(s.MAX_DIMS):
            attr.dims[i] = self.dims[i] if i < len(self.dims) else 0
        s.set_name(attr, "name", self.name)
        attr.n_elems = self.n_elems
        attr.size = self.size
        attr.fmt, attr.type, attr.qnt_type = self.fmt, self.type, self.qnt_type
        attr.fl = 0
        attr.zp, attr.scale = self.zp, self.scale
        attr.w_stride = self.dims[2] if self.fmt in (s.FORMAT_NHWC, s.FORMAT_NC1HWC2) and len(self.dims) >= 4 else 0
        attr.size_with_stride = self.size
        attr.pass_through = 0
        attr.h_stride = 0


def c2_of(type_: int) -> int:
    """Channels per NC1HWC2 block: 16 bytes of the element type."""
    return max(1, 16 // np.dtype(s.NUMPY_OF_TYPE[type_]).itemsize)


def _stored_type(model: RKNNModel, tensor: str, dtype: str) -> tuple[int, int, float, int]:
    """(type, qnt_type, scale, zp) of a tensor as the model stores it."""
    params = model.quant_params.get(tensor)
    stored = model.tensor_dtypes.get(tensor)
    if params and params.get("dtype") in ("int8", "uint8", "int16") and stored in (None, params.get("dtype")):
        return (s.TYPE_OF_NUMPY[params["dtype"]], s.QNT_AFFINE_ASYMMETRIC, float(params["scale"][0]),
                int(params["zero_point"][0]))
    if np.dtype(dtype).kind == "f":
        kind = stored if stored in ("float16", "float32") else model.float_dtype
        return (s.TENSOR_FLOAT16 if kind == "float16" else s.TENSOR_FLOAT32), s.QNT_NONE, 1.0, 0
    if np.dtype(dtype).name not in s.TYPE_OF_NUMPY:
        raise ApiError(s.ERR_MODEL_INVALID, f"tensor '{tensor}' has dtype {dtype}, which the C API has no type for")
    return s.TYPE_OF_NUMPY[np.dtype(dtype).name], s.QNT_NONE, 1.0, 0


def _normalized_name(model: RKNNModel, spec: TensorSpec) -> str:
    for pre in model.preprocess:
        if pre.input_name == spec.name and pre.normalized_name:
            return pre.normalized_name
    return spec.name


def input_desc(model: RKNNModel, index: int, shape: list[int] | None = None, native: str | None = None) -> TensorDesc:
    """``INPUT_ATTR`` (``native`` None), ``NATIVE_INPUT_ATTR`` ('native') or ``NATIVE_NHWC_INPUT_ATTR`` ('nhwc')."""
    spec = model.inputs[index]
    shape = [int(d) for d in (shape if shape is not None else spec.shape)]
    type_, qnt, scale, zp = _stored_type(model, _normalized_name(model, spec), spec.dtype)
    desc = TensorDesc(index, spec.name, tuple(shape), s.FORMAT_UNDEFINED, type_, qnt, scale, zp)
    if len(shape) != 4 or spec.layout not in (LAYOUT_NCHW, LAYOUT_NHWC):
        return desc
    nchw = tuple(shape) if spec.layout == LAYOUT_NCHW else (shape[0], shape[3], shape[1], shape[2])
    n, c, h, w = nchw
    if native == "native" and c not in (1, 3, 4):
        c2 = c2_of(type_)
        return replace(desc, dims=(n, -(-c // c2), h, w, c2), fmt=s.FORMAT_NC1HWC2)
    if c in (1, 3, 4) or native is not None or spec.layout == LAYOUT_NHWC:
        return replace(desc, dims=(n, h, w, c), fmt=s.FORMAT_NHWC)
    return replace(desc, dims=nchw, fmt=s.FORMAT_NCHW)


def output_desc(model: RKNNModel, index: int, shape: list[int] | None = None, native: str | None = None) -> TensorDesc:
    """``OUTPUT_ATTR`` (``native`` None), ``NATIVE_OUTPUT_ATTR`` ('native') or ``NATIVE_NHWC_OUTPUT_ATTR`` ('nhwc')."""
    spec = model.outputs[index]
    shape = [int(d) for d in (shape if shape is not None else spec.shape)]
    type_, qnt, scale, zp = _stored_type(model, spec.name, spec.dtype)
    desc = TensorDesc(index, spec.name, tuple(shape), s.FORMAT_UNDEFINED, type_, qnt, scale, zp)
    if len(shape) != 4:
        return desc
    fmt = s.FORMAT_NHWC if spec.layout == LAYOUT_NHWC else s.FORMAT_NCHW
    nchw = tuple(shape) if fmt == s.FORMAT_NCHW else (shape[0], shape[3], shape[1], shape[2])
    n, c, h, w = nchw
    if native == "native":
        c2 = c2_of(type_)
        return replace(desc, dims=(n, -(-c // c2), h, w, c2), fmt=s.FORMAT_NC1HWC2)
    if native == "nhwc":
        return replace(desc, dims=(n, h, w, c), fmt=s.FORMAT_NHWC)
    return replace(desc, dims=tuple(shape), fmt=fmt)


# ---- layout conversions (4-D arrays) -------------------------------------------------------------
def nchw_to_nc1hwc2(array: np.ndarray, c2: int) -> np.ndarray:
    n, c, h, w = array.shape
    c1 = -(-c // c2)
    padded = np.zeros((n, c1 * c2, h, w), array.dtype)
    padded[:, :c] = array
    return np.ascontiguousarray(padded.reshape(n, c1, c2, h, w).transpose(0, 1, 3, 4, 2))


def nc1hwc2_to_nchw(array: np.ndarray, channels: int) -> np.ndarray:
    n, c1, h, w, c2 = array.shape
    return np.ascontiguousarray(array.transpose(0, 1, 4, 2, 3).reshape(n, c1 * c2, h, w)[:, :channels])


def quantize(values: np.ndarray, desc: TensorDesc, type_: int) -> np.ndarray:
    """float32 → the affine integer type of ``desc`` (round half to even, saturate)."""
    info = np.iinfo(s.NUMPY_OF_TYPE[type_])
    q = np.rint(values.astype(np.float32) / np.float32(desc.scale)) + desc.zp
    return np.clip(q, info.min, info.max).astype(s.NUMPY_OF_TYPE[type_])


def dequantize(values: np.ndarray, desc: TensorDesc) -> np.ndarray:
    return ((values.astype(np.float32) - np.float32(desc.zp)) * np.float32(desc.scale)).astype(np.float32)


__all__ = ["ApiError", "TensorDesc", "input_desc", "output_desc", "c2_of", "nchw_to_nc1hwc2", "nc1hwc2_to_nchw",
           "quantize", "dequantize"]
