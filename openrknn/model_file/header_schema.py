"""Validate a ``.rknn`` header before anything reads it (the file may come from anyone).

A checksum only proves the file is the one that was written, not that a friendly tool wrote it, so
every header field is checked for its type and range here and a bad one is named in the message
(``header field 'inputs[0].shape[2]' ...``). Unknown extra fields are ignored (newer writers may add
some); missing optional fields take their defaults. The limits below bound what opening a file
may cost; each names how to raise it.
"""
from __future__ import annotations

import math
import os
import re
from typing import Any

from openrknn.errors import ModelFileError

LAYOUTS = ("NCHW", "NHWC", "UNDEFINED")
FLOAT_DTYPES = ("float16", "float32")
COMPRESSIONS = (None, "zlib")
TENSOR_DTYPES = ("float16", "float32", "float64", "int4", "int8", "uint8", "int16", "uint16", "int32", "uint32",
                 "int64", "uint64", "bool", "bfloat16")
MAX_RANK = 8
_SHA256 = re.compile(r"[0-9a-f]{64}\Z")

# environment variables that raise the resource limits (the messages name them)
MAX_INPUT_ELEMENTS_ENV = "OPENRKNN_MAX_INPUT_ELEMENTS"
MAX_GRAPH_BYTES_ENV = "OPENRKNN_MAX_GRAPH_BYTES"
MAX_GRAPH_RATIO_ENV = "OPENRKNN_MAX_GRAPH_RATIO"
DEFAULT_MAX_INPUT_ELEMENTS = 1 << 30   # 4 GiB as float32: far above any NPU input, below a MemoryError
DEFAULT_MAX_GRAPH_BYTES = 2 << 30      # protobuf cannot parse a larger message anyway
# zlib shrinks real graphs ~1.1-1.2x (measured on real ONNX/TFLite models); only runs of one byte reach its
# ~1000x maximum, so a graph declared more than 100x its compressed size is a bomb, refused before inflating
DEFAULT_MAX_GRAPH_RATIO = 100


def limit(env: str, default: int) -> int:
    """A resource limit: ``default`` unless the environment variable ``env`` gives a positive integer."""
    text = os.environ.get(env, "")
    return int(text) if text.isdigit() and int(text) > 0 else default


class _Checker:
    """Type checks that name the field and the file."""

    def __init__(self, source: str) -> None:
        self.source = source

    def fail(self, where: str, expected: str, value: Any) -> None:
        shown = repr(value)
        shown = shown if len(shown) <= 60 else shown[:57] + "..."
        raise ModelFileError(f"'{self.source}': header field '{where}' must be {expected}, got {shown}; the file is "
                             "damaged or was not written by openrknn — export it again")

    def obj(self, value: Any, where: str) -> dict[str, Any]:
        if not isinstance(value, dict):
            self.fail(where, "an object", value)
        return value

    def array(self, value: Any, where: str) -> list[Any]:
        if not isinstance(value, list):
            self.fail(where, "a list", value)
        return value

    def text(self, value: Any, where: str, optional: bool = False) -> None:
        if not (isinstance(value, str) or (optional and value is None)):
            self.fail(where, "a string" + (" or null" if optional else ""), value)

    def integer(self, value: Any, where: str, low: int | None = None, optional: bool = False) -> None:
        if optional and value is None:
            return
        if isinstance(value, bool) or not isinstance(value, int) or (low is not None and value < low):
            self.fail(where, "an integer" + (f" >= {low}" if low is not None else ""), value)

    def number(self, value: Any, where: str) -> None:
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
            self.fail(where, "a finite number", value)

    def one_of(self, value: Any, where: str, allowed: tuple[Any, ...]) -> None:
        if value not in allowed:
            self.fail(where, "one of " + ", ".join(repr(a) for a in allowed), value)

    def texts(self, value: Any, where: str) -> None:
        for i, item in enumerate(self.array(value, where)):
            self.text(item, f"{where}[{i}]")

    def numbers(self, value: Any, where: str, optional: bool = True) -> None:
        if optional and value is None:
            return
        for i, item in enumerate(self.array(value, where)):
            self.number(item, f"{where}[{i}]")


def check_container_header(header: Any, body_size: int, source: str) -> None:
    """The container part: the header is an object and its section table fits the file."""
    check = _Checker(source)
    check.obj(header, "header")
    names = set()
    for i, entry in enumerate(check.array(header.get("sections", []), "sections")):
        where = f"sections[{i}]"
        check.obj(entry, where)
        check.text(entry.get("name"), f"{where}.name")
        check.integer(entry.get("offset"), f"{where}.offset", low=0)
        check.integer(entry.get("length"), f"{where}.length", low=0)
        if not isinstance(entry.get("sha256"), str) or not _SHA256.match(entry["sha256"]):
            check.fail(f"{where}.sha256", "64 lower-case hex digits", entry.get("sha256"))
        if entry["name"] in names:
            check.fail(f"{where}.name", "unique", entry["name"])
        names.add(entry["name"])
        if entry["offset"] + entry["length"] > body_size:
            raise ModelFileError(f"'{source}': section '{entry['name']}' ({entry['length']} bytes at offset "
                                 f"{entry['offset']}) lies beyond the end of the file; the file is truncated")


def check_model_header(header: dict[str, Any], source: str) -> None:
    """Every field ``from_container`` reads, with its type and range."""
    check = _Checker(source)
    for key in ("inputs", "outputs"):
        for i, spec in enumerate(check.array(header.get(key), key)):
            _check_tensor_spec(check, spec, f"{key}[{i}]")
    for i, pre in enumerate(check.array(header.get("preprocess", []), "preprocess")):
        where = f"preprocess[{i}]"
        check.obj(pre, where)
        check.text(pre.get("input_name"), f"{where}.input_name")
        check.text(pre.get("normalized_name", ""), f"{where}.normalized_name")
        check.numbers(pre.get("mean"), f"{where}.mean")
        check.numbers(pre.get("std"), f"{where}.std")
        if pre.get("reorder") is not None:
            for j, v in enumerate(check.array(pre["reorder"], f"{where}.reorder")):
                check.integer(v, f"{where}.reorder[{j}]", low=0)
        unknown = set(pre) - {"input_name", "normalized_name", "mean", "std", "reorder"}
        if unknown:
            check.fail(where, "an object with input_name, mean, std, reorder, normalized_name", sorted(unknown))
    check.texts(header.get("target_platforms", []), "target_platforms")
    check.one_of(header.get("float_dtype", "float16"), "float_dtype", FLOAT_DTYPES)
    check.text(header.get("quantized_dtype"), "quantized_dtype", optional=True)
    for name, dtype in check.obj(header.get("tensor_dtypes", {}), "tensor_dtypes").items():
        check.text(dtype, f"tensor_dtypes[{name!r}]")
    for name, params in check.obj(header.get("quant_params", {}), "quant_params").items():
        _check_quant_params(check, params, f"quant_params[{name!r}]")
    check.text(header.get("custom_string"), "custom_string", optional=True)
    check.integer(header.get("rknn_batch_size", 1), "rknn_batch_size", low=1)
    metadata = check.obj(header.get("metadata", {}), "metadata")
    # metadata the layer record and the estimates read back (op_target, the NPU-limit CPU layers)
    for name, target in check.obj(metadata.get("op_target") or {}, "metadata.op_target").items():
        check.text(target, f"metadata.op_target[{name!r}]")
    check.texts(metadata.get("npu_limit_cpu_layers") or [], "metadata.npu_limit_cpu_layers")
    check.texts(header.get("fp16_initializers", []), "fp16_initializers")
    check.obj(header.get("removed_weights") or {}, "removed_weights")
    check.one_of(header.get("graph_compression"), "graph_compression", COMPRESSIONS)
    check.integer(header.get("graph_size"), "graph_size", low=0, optional=True)
    for key in ("toolkit_version", "created"):
        check.text(header.get(key), key, optional=True)


def check_encrypted_header(header: dict[str, Any], source: str) -> None:
    """The encryption record and public part of an encrypted model's outer header."""
    check = _Checker(source)
    record = check.obj(header.get("encryption"), "encryption")
    check.text(record.get("cipher"), "encryption.cipher")
    check.text(record.get("kdf"), "encryption.kdf")
    check.integer(record.get("crypt_level"), "encryption.crypt_level", low=1)
    check.integer(record.get("log2_n"), "encryption.log2_n", low=0, optional=True)
    for key, size in (("salt", 16), ("nonce", 12), ("key_check", 8)):
        value = record.get(key)
        if not isinstance(value, str) or not re.fullmatch(f"[0-9a-f]{{{2 * size}}}", value):
            check.fail(f"encryption.{key}", f"{2 * size} lower-case hex digits", value)
    check.obj(header.get("public", {}), "public")


def _check_tensor_spec(check: _Checker, spec: Any, where: str) -> None:
    check.obj(spec, where)
    check.text(spec.get("name"), f"{where}.name")
    shape = check.array(spec.get("shape"), f"{where}.shape")
    if len(shape) > MAX_RANK:
        check.fail(f"{where}.shape", f"at most {MAX_RANK} dimensions", shape)
    for j, dim in enumerate(shape):
        check.integer(dim, f"{where}.shape[{j}]", low=-1)   # -1: a dynamic dimension
    check.one_of(spec.get("dtype"), f"{where}.dtype", TENSOR_DTYPES)
    check.one_of(spec.get("layout"), f"{where}.layout", LAYOUTS)


def _check_quant_params(check: _Checker, params: Any, where: str) -> None:
    check.obj(params, where)
    for key in ("scale", "min", "max"):
        check.numbers(params.get(key), f"{where}.{key}")
    if params.get("zero_point") is not None:
        for j, v in enumerate(check.array(params["zero_point"], f"{where}.zero_point")):
            check.integer(v, f"{where}.zero_point[{j}]")
    check.integer(params.get("axis"), f"{where}.axis", optional=True)
    for key in ("dtype", "qmethod", "qtype"):
        check.text(params.get(key), f"{where}.{key}", optional=True)


def check_input_sizes(specs: list[Any], source: str, error: type[Exception] = ModelFileError) -> None:
    """Refuse model inputs with more elements than the limit (a gigantic declared input would only
    fail later, with a MemoryError); zero-size dimensions are ``graph_checks.check_empty_inputs``'s."""
    most = limit(MAX_INPUT_ELEMENTS_ENV, DEFAULT_MAX_INPUT_ELEMENTS)
    for spec in specs:
        shape = list(spec.shape)
        elements = math.prod(max(d, 1) for d in shape)
        if elements > most:
            raise error(f"{source}: model input '{spec.name}' of shape {shape} has {elements:,} elements, more "
                        f"than the limit of {most:,}; give a smaller input size, or raise the limit with the "
                        f"environment variable {MAX_INPUT_ELEMENTS_ENV}=<elements>")
