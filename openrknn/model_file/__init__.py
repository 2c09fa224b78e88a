"""Save and load built models as openrknn ``.rknn`` files (see ``container`` and docs/rknn-format.md)."""
from __future__ import annotations

import datetime as _dt
import os
import zlib

import numpy as np
import onnx
from onnx import numpy_helper

from openrknn import __version__
from openrknn.errors import ModelFileError
from openrknn.graph.rknn_model import InputPreprocess, RKNNModel, TensorSpec
from openrknn.model_file.container import FLAG_ENCRYPTED, Container, decode, encode, read_file, write_atomic
from openrknn.model_file.encryption import decrypt_container
from openrknn.model_file.graph_checks import (check_empty_inputs, check_io_against_graph, check_tensor_sizes,
                                              refuse_bad_names, refuse_external_data)
from openrknn.model_file.header_schema import (DEFAULT_MAX_GRAPH_BYTES, DEFAULT_MAX_GRAPH_RATIO, MAX_GRAPH_BYTES_ENV,
                                               MAX_GRAPH_RATIO_ENV, check_input_sizes, check_model_header, limit)
from openrknn.model_file.shared_weights import restore_weights, strip_weights

FORMAT_NAME = "openrknn-model"
GRAPH_SECTION = "graph.onnx"


def to_container(model: RKNNModel) -> Container:
    """Describe ``model`` as a container (graph bytes + JSON header)."""
    graph = onnx.ModelProto()
    graph.CopyFrom(model.graph)
    fp16_weights = _store_float_weights_as_fp16(graph) if model.float_dtype == "float16" else []
    removed = strip_weights(graph) if model.metadata.get("remove_weight") else {}
    fp16_weights = [name for name in fp16_weights if name not in removed]
    header = {
        "format": FORMAT_NAME,
        "toolkit": "openrknn",
        "toolkit_version": __version__,
        "created": _created(),
        "target_platforms": list(model.platforms),
        "inputs": [t.to_dict() for t in model.inputs],
        "outputs": [t.to_dict() for t in model.outputs],
        "preprocess": [p.to_dict() for p in model.preprocess],
        "float_dtype": model.float_dtype,
        "quantized_dtype": model.quantized_dtype,
        "tensor_dtypes": model.tensor_dtypes,
        "quant_params": model.quant_params,
        "custom_string": model.custom_string,
        "rknn_batch_size": model.rknn_batch_size,
        "metadata": model.metadata,
        "fp16_initializers": fp16_weights,
        "removed_weights": removed,
    }
    blob = graph.SerializeToString()
    header["graph_size"] = len(blob)   # lets the loader bound decompression
    if model.metadata.get("compress_weight"):
        header["graph_compression"] = "zlib"   # config(compress_weight=True): lossless, smaller file
        blob = zlib.compress(blob, 9)
    return Container(header=header, sections={GRAPH_SECTION: blob})


def _created() -> str | None:
    """Build time from ``SOURCE_DATE_EPOCH`` (reproducible-builds convention), else none: the same
    inputs must give the same .rknn bytes, so the wall clock is never recorded."""
    epoch = os.environ.get("SOURCE_DATE_EPOCH", "").strip()
    if not epoch.isdigit():
        return None
    return _dt.datetime.fromtimestamp(int(epoch), _dt.timezone.utc).isoformat(timespec="seconds")


def from_container(container: Container, source: str, master: RKNNModel | None = None) -> RKNNModel:
    header = container.header
    if header.get("format") != FORMAT_NAME:
        raise ModelFileError(f"'{source}' is an openrknn container but not a model (format={header.get('format')!r})")
    if GRAPH_SECTION not in container.sections:
        raise ModelFileError(f"'{source}' has no graph section")
    check_model_header(header, source)
    graph = _parse_graph(container.sections[GRAPH_SECTION], header, source)
    refuse_external_data(graph, source)
    refuse_bad_names(graph, source)
    check_tensor_sizes(graph, source)
    try:
        _restore_fp32(graph, set(header.get("fp16_initializers", [])))
    except (ValueError, TypeError) as e:   # a tensor whose data contradicts its dims or type
        raise ModelFileError(f"'{source}': a weight in the graph section is damaged ({type(e).__name__}: "
                             f"{str(e)[:120]}); export the model again") from e
    removed = header.get("removed_weights") or {}
    if removed:
        if master is None:
            raise ModelFileError(f"'{source}' was built with remove_weight=True: its weights live in a master model; "
                                 "load it with load_rknn(path, master_model='master.rknn')")
        restore_weights(graph, removed, master.graph, source)
    model = RKNNModel(
        graph=graph,
        inputs=[TensorSpec.from_dict(d) for d in header["inputs"]],
        outputs=[TensorSpec.from_dict(d) for d in header["outputs"]],
        preprocess=[InputPreprocess.from_dict(d) for d in header.get("preprocess", [])],
        platforms=list(header.get("target_platforms", [])),
        float_dtype=header.get("float_dtype", "float16"),
        quantized_dtype=header.get("quantized_dtype"),
        tensor_dtypes=dict(header.get("tensor_dtypes", {})),
        quant_params=dict(header.get("quant_params", {})),
        custom_string=header.get("custom_string"),
        rknn_batch_size=int(header.get("rknn_batch_size", 1)),
        metadata=dict(header.get("metadata", {}), toolkit_version=header.get("toolkit_version"),
                      created=header.get("created")),
    )
    check_io_against_graph(model, source)
    check_input_sizes(model.inputs, f"'{source}'")
    check_empty_inputs(model.graph, model.inputs, f"'{source}'")
    return model


def _parse_graph(blob: bytes, header: dict, source: str) -> onnx.ModelProto:
    """The ONNX graph; a compressed one is inflated no further than its declared size and the limits."""
    most = limit(MAX_GRAPH_BYTES_ENV, DEFAULT_MAX_GRAPH_BYTES)
    declared = header.get("graph_size")
    if declared is not None and declared > most:
        raise ModelFileError(f"'{source}': the graph declares {declared:,} bytes, more than the limit of {most:,}; "
                             f"raise it with the environment variable {MAX_GRAPH_BYTES_ENV}=<bytes> if you trust the file")
    if header.get("graph_compression") == "zlib":
        blob = inflate_bounded(blob, declared, most, source)
    if declared is not None and len(blob) != declared:
        raise ModelFileError(f"'{source}': the graph is {len(blob):,} bytes but the header declares {declared:,}")
    graph = onnx.ModelProto()
    try:
        graph.ParseFromString(blob)
    except Exception as e:   # protobuf raises its own DecodeError and, on some inputs, others
        raise ModelFileError(f"'{source}': the graph section is not a valid ONNX graph ({type(e).__name__})") from e
    return graph


INFLATE_CHUNK = 1 << 20   # output produced per zlib call: the limit is checked between calls


def inflate_bounded(blob: bytes, declared: int | None, most: int, source: str) -> bytearray:
    """Inflate a zlib graph section with a running limit: the declared size, ``most`` bytes, and
    ``OPENRKNN_MAX_GRAPH_RATIO`` times the compressed size (a bomb is refused before any inflating)."""
    ratio = limit(MAX_GRAPH_RATIO_ENV, DEFAULT_MAX_GRAPH_RATIO)
    by_ratio = max(len(blob) * ratio, INFLATE_CHUNK)
    if declared is not None and declared > by_ratio:
        raise ModelFileError(f"'{source}': the graph declares {declared:,} bytes from {len(blob):,} compressed bytes "
                             f"(more than {ratio}x, the limit for a compressed graph); the file is hostile or damaged "
                             f"— raise the limit with the environment variable {MAX_GRAPH_RATIO_ENV}=<ratio> if you "
                             "trust it")
    cap = min(most if declared is None else declared, by_ratio)
    inflater = zlib.decompressobj()
    out = bytearray()
    pending = blob
    try:
        while not inflater.eof:
            piece = inflater.decompress(pending, min(INFLATE_CHUNK, cap + 1 - len(out)))
            out += piece
            if len(out) > cap:
                raise ModelFileError(f"'{source}': the compressed graph inflates beyond its declared size "
                                     f"({cap:,} bytes); the file is damaged or hostile")
            pending = inflater.unconsumed_tail
            if not piece and not pending:
                break
    except zlib.error as e:
        raise ModelFileError(f"'{source}': the compressed graph section is damaged ({e})") from e
    if not inflater.eof:
        raise ModelFileError(f"'{source}': the compressed graph section is truncated")
    return out


def save_model(model: RKNNModel, path: str) -> int:
    """Write ``model`` to ``path`` atomically; returns the file size in bytes."""
    data = encode(to_container(model))
    write_atomic(path, data)
    return len(data)


def load_model(path: str, master_path: str | None = None) -> RKNNModel:
    """Read and verify an openrknn ``.rknn`` file (a weight-sharing slave needs its master's path)."""
    master = load_model(master_path) if master_path else None
    return from_container(_open(read_file(path), path), path, master)


def load_model_bytes(data: bytes, source: str = "<bytes>") -> RKNNModel:
    return from_container(_open(decode(data, source), source), source)


def _open(container: Container, source: str) -> Container:
    """Decrypt an encrypted model (flag bit 0) with the key from the environment / key file."""
    if container.flags & FLAG_ENCRYPTED:
        return decrypt_container(container, source)
    return container


def _store_float_weights_as_fp16(graph: onnx.ModelProto) -> list[str]:
    """fp16 models keep weights as fp16 on the NPU: store them so (half the size, lossless for fp16)."""
    names = []
    for i, init in enumerate(graph.graph.initializer):
        if init.data_type == onnx.TensorProto.FLOAT and _num_elements(init) > 16:
            array = numpy_helper.to_array(init).astype(np.float16)
            graph.graph.initializer[i].CopyFrom(numpy_helper.from_array(array, init.name))
            names.append(init.name)
    return names


def _restore_fp32(graph: onnx.ModelProto, names: set[str]) -> None:
    for i, init in enumerate(graph.graph.initializer):
        if init.name in names:
            array = numpy_helper.to_array(init).astype(np.float32)
            graph.graph.initializer[i].CopyFrom(numpy_helper.from_array(array, init.name))


def _num_elements(init: onnx.TensorProto) -> int:
    n = 1
    for d in init.dims:
        n *= d
    return n
