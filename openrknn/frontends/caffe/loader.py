"""``load_caffe``: read a ``.prototxt`` (+ ``.caffemodel``) without Caffe and build an ONNX graph."""
from __future__ import annotations

import os
import re

import numpy as np
from google.protobuf import message as pb_message
from google.protobuf import text_format

from openrknn import log
from openrknn.errors import ModelLoadError, NotSupportedError
from openrknn.frontends import SourceModel
from openrknn.frontends.caffe import layers as _layers  # noqa: F401  (fills CONVERTERS)
from openrknn.frontends.caffe import schema
from openrknn.frontends.caffe.context import CONVERTERS, CaffeContext, CaffeLayer
from openrknn.frontends.onnx_builder import GraphBuilder
from openrknn.frontends import require_file

_INPUT_TYPES = {"Input", "Data", "ImageData", "MemoryData", "DummyData", "HDF5Data", "WindowData", "AnnotatedData"}
_TRAINING_ONLY = {"Accuracy", "SoftmaxWithLoss", "EuclideanLoss", "SigmoidCrossEntropyLoss", "MultiBoxLoss",
                  "HingeLoss", "InfogainLoss", "ContrastiveLoss", "Silence", "DetectionEvaluate"}


def load_caffe(model: str, blobs: str | None = None, input_name: list[str] | None = None,
               proto: str = "caffe") -> SourceModel:
    """Convert a Caffe model to ONNX.

    Args:
        model: the ``.prototxt`` (deploy net, V2 ``layer`` or legacy V1 ``layers`` form).
        blobs: the ``.caffemodel``; None builds the graph with random weights (and says so).
        input_name: order of the graph inputs for multi-input nets (default: prototxt order).
        proto: 'caffe'; 'lstm_caffe' is refused.

    Returns:
        SourceModel with framework 'caffe' and NCHW inputs.

    Example:
        >>> sm = load_caffe("mobilenet_ssd.prototxt", "mobilenet_ssd.caffemodel")  # doctest: +SKIP
    """
    if proto == "lstm_caffe":
        raise NotSupportedError("load_caffe: proto='lstm_caffe': the LSTM layers of the warpctc-caffe proto are not "
                                "supported; use proto='caffe', or export the model to ONNX and use load_onnx")
    if proto != "caffe":
        raise NotSupportedError(f"load_caffe: proto='{proto}' is unknown; use 'caffe'")
    net = _parse_prototxt(model)
    arrays = None
    if blobs is None:
        log.warning(f"load_caffe: no blobs (.caffemodel) given for '{os.path.basename(model)}': "
                    "the model is built with RANDOM weights (fine for structure/performance checks only)")
    else:
        arrays = _read_caffemodel(blobs)
    layers = [layer for layer in _layers_of(net) if _in_test_phase(layer.msg)]
    builder = GraphBuilder(os.path.basename(model))
    ctx = CaffeContext(builder, layers, arrays, os.path.basename(blobs) if blobs else "")
    input_names = _declare_inputs(ctx, net, layers, input_name, model)
    for index, layer in enumerate(layers):
        ctx.position = index
        if index in ctx.skipped or layer.type in _INPUT_TYPES:
            continue
        if layer.type in _TRAINING_ONLY:
            log.warning(f"load_caffe: layer '{layer.name}' ({layer.type}) is only used in training; skipped")
            continue
        _convert(ctx, layer, os.path.basename(model))
    outputs = _graph_outputs(ctx, input_names)
    onnx_model = builder.finish(outputs, net.name or os.path.splitext(os.path.basename(model))[0])
    log.debug(f"load_caffe: {len(layers)} layers -> {len(onnx_model.graph.node)} ONNX nodes, outputs {outputs}")
    return SourceModel(model=onnx_model, framework="caffe", input_layouts={n: "NCHW" for n in input_names})


def _convert(ctx: CaffeContext, layer: CaffeLayer, source: str) -> None:
    """Run the converter of one layer; unexpected failures are reported with the layer's name."""
    converter = CONVERTERS.get(layer.type, layer.name)
    try:
        outputs = converter(ctx, layer)
    except ModelLoadError as e:
        text = str(e)
        if f"'{layer.name}'" in text:
            raise
        raise ModelLoadError(f"{source}: layer '{layer.name}' ({layer.type}): {text}") from e
    except Exception as e:  # numpy / onnx errors from inconsistent parameters
        raise ModelLoadError(f"{source}: layer '{layer.name}' ({layer.type}) cannot be converted: "
                             f"{type(e).__name__}: {e}") from e
    if len(outputs) < len(layer.tops):
        raise ModelLoadError(f"{source}: layer '{layer.name}' ({layer.type}) has {len(layer.tops)} tops, "
                             f"this layer type produces {len(outputs)}")
    for top, tensor in zip(layer.tops, outputs):
        ctx.tensors[top] = tensor


def _parse_prototxt(path: str) -> schema.NetParameter:
    require_file(path, "prototxt file")
    with open(path, encoding="utf-8", errors="replace") as f:
        text = f.read()
    net = schema.NetParameter()
    name = os.path.basename(path)
    try:
        text_format.Parse(text, net)
    except text_format.ParseError as strict_error:
        if "has no field named" not in str(strict_error):
            raise ModelLoadError(f"{name} is not a valid Caffe prototxt: {_problem(strict_error)}"
                                 f"{_layer_at(text, strict_error)}") from strict_error
        net = schema.NetParameter()
        try:   # fields openrknn does not read (training settings, fork extensions) are skipped
            text_format.Parse(text, net, allow_unknown_field=True)
        except text_format.ParseError as e:
            raise ModelLoadError(f"{name} is not a valid Caffe prototxt: {_problem(e)}{_layer_at(text, e)}") from e
        if net.layer or net.layers:   # a Caffe net: its field names may be quoted
            log.warning(f"load_caffe: {name}: fields unknown to openrknn are ignored, e.g. {strict_error}"
                        f"{_layer_at(text, strict_error)}")
    if not net.layer and not net.layers:
        raise ModelLoadError(f"{os.path.basename(path)} declares no layers; is it a Caffe prototxt?")
    return net


# what protobuf's text parser complains about, in its words; its message also quotes the file's line,
# which is never repeated (the file may be anything the user pointed at, e.g. a secrets file)
_PROBLEMS = re.compile(r"Expected (?:\"[^\w\s\"]{1,2}\"|string|identifier|integer|double|float|value)|"
                       r"Couldn't parse (?:integer|float|double|boolean|enum)|Value out of range|Integer out of range|"
                       r"Unknown enumeration value|has no value named|Invalid value|Non-repeated field|"
                       r"has no field named|Unexpected end")


def _position(error: text_format.ParseError) -> str:
    line = error.GetLine() if hasattr(error, "GetLine") else None
    column = error.GetColumn() if hasattr(error, "GetColumn") else None
    return f"line {line}, column {column}" if line else "an unknown position"


def _problem(error: text_format.ParseError) -> str:
    """``line L, column C: <kind of error>`` without any text of the file."""
    found = _PROBLEMS.search(str(error))
    kind = found.group(0) if found else "syntax error"
    if kind == "has no field named":
        kind = "a field Caffe does not define"
    elif kind == "has no value named":
        kind = "an enum value Caffe does not define"
    return f"{_position(error)}: {kind[0].lower()}{kind[1:]}"


def _layer_at(text: str, error: text_format.ParseError) -> str:
    """`` (in layer 'name')`` for the last layer ``name:`` before the line of a parse error."""
    line = error.GetLine() if hasattr(error, "GetLine") else None
    if not line:
        return ""
    before = "\n".join(text.splitlines()[:line])
    if not re.search(r"^\s*layers?\s*\{", before, re.M):   # not a Caffe net: quote nothing of it
        return ""
    names = re.findall(r"^\s*name\s*:\s*[\"']([^\"']*)[\"']", before, re.M)
    return f" (in layer '{names[-1]}')" if names else ""


def _read_caffemodel(path: str) -> dict[str, list[np.ndarray]]:
    require_file(path, "caffemodel file")
    net = schema.NetParameter()
    with open(path, "rb") as f:
        data = f.read()
    try:
        net.ParseFromString(data)
    except pb_message.DecodeError as e:
        raise ModelLoadError(f"{os.path.basename(path)} is not a valid .caffemodel (truncated or not protobuf): "
                             f"{e}{_broken_layer(data)}") from e
    arrays = {}
    for layer in list(net.layer) + list(net.layers):
        if layer.blobs:
            arrays[layer.name] = [_blob_array(b) for b in layer.blobs]
    if not arrays and not net.layer and not net.layers:
        raise ModelLoadError(f"{os.path.basename(path)} holds no layers; is it a .caffemodel?")
    return arrays


def _varint(data: bytes, pos: int) -> tuple[int, int]:
    value, shift = 0, 0
    while True:
        if pos >= len(data):
            raise IndexError("varint runs past the end")
        byte = data[pos]
        value |= (byte & 0x7F) << shift
        pos, shift = pos + 1, shift + 7
        if not byte & 0x80:
            return value, pos


def _broken_layer(data: bytes) -> str:
    """Name the layer whose record is cut or damaged, walking the top-level protobuf records.

    Only used to make the decode error precise: layers are length-delimited records (field 100,
    or 2 for V1 nets); the first one that runs past the end of the file, or does not parse, is named.
    """
    pos, index = 0, 0
    try:
        while pos < len(data):
            key, pos = _varint(data, pos)
            field, wire = key >> 3, key & 7
            if wire != 2:
                pos = _varint(data, pos)[1] if wire == 0 else pos + {1: 8, 5: 4}.get(wire, len(data))
                continue
            size, pos = _varint(data, pos)
            record, pos = data[pos:pos + size], pos + size
            if field not in (2, 100):
                continue
            msg = schema.LayerParameter() if field == 100 else schema.V1LayerParameter()
            try:
                msg.ParseFromString(record)
                if pos <= len(data):
                    index += 1
                    continue
            except pb_message.DecodeError:
                pass
            name = _partial_name(record, 1 if field == 100 else 4)
            return f" (layer #{index + 1}{f' ' + repr(name) if name else ''} is cut short or damaged)"
    except IndexError:
        pass
    return ""


def _partial_name(record: bytes, name_field: int) -> str:
    """The layer name field of a possibly truncated layer record ('' if not found)."""
    pos = 0
    try:
        while pos < len(record):
            key, pos = _varint(record, pos)
            if key & 7 != 2:
                pos = _varint(record, pos)[1] if key & 7 == 0 else pos + {1: 8, 5: 4}.get(key & 7, len(record))
                continue
            size, pos = _varint(record, pos)
            if key >> 3 == name_field and pos + size <= len(record):
                return record[pos:pos + size].decode("utf-8", "replace")
            pos += size
    except IndexError:
        pass
    return ""


def _blob_array(blob: schema.BlobProto) -> np.ndarray:
    data = np.asarray(blob.data, dtype=np.float32) if len(blob.data) else np.asarray(blob.double_data, np.float32)
    if blob.HasField("shape"):
        shape = list(blob.shape.dim)
    else:
        shape = [d for d in (blob.num, blob.channels, blob.height, blob.width)]
    if int(np.prod(shape)) == data.size:
        return data.reshape(shape)
    return data


def _layers_of(net: schema.NetParameter) -> list[CaffeLayer]:
    if net.layer:
        return [CaffeLayer(l.name, l.type, list(l.bottom), list(l.top), l) for l in net.layer]
    enum = schema.V1LayerParameter.DESCRIPTOR.enum_types_by_name["LayerType"]
    out = []
    for l in net.layers:
        v1_name = enum.values_by_number[l.type].name
        out.append(CaffeLayer(l.name, schema.V1_TYPE_NAMES.get(v1_name, v1_name), list(l.bottom), list(l.top), l))
    return out


def _in_test_phase(msg: object) -> bool:
    """Caffe's NetStateRule check for the TEST phase (phase only; levels and stages are ignored)."""
    test = 1
    if msg.include:
        return any(not r.HasField("phase") or r.phase == test for r in msg.include)
    return not any(r.HasField("phase") and r.phase == test for r in msg.exclude)


def _input_shapes(net: schema.NetParameter, layers: list[CaffeLayer], model: str) -> dict[str, list[int]]:
    shapes: dict[str, list[int]] = {}
    for i, name in enumerate(net.input):
        if i < len(net.input_shape):
            shapes[name] = list(net.input_shape[i].dim)
        elif len(net.input_dim) >= 4 * (i + 1):
            shapes[name] = list(net.input_dim[4 * i:4 * i + 4])
        else:
            raise ModelLoadError(f"{os.path.basename(model)}: input '{name}' has no input_shape/input_dim")
    for layer in layers:
        if layer.type not in _INPUT_TYPES:
            continue
        for k, top in enumerate(layer.tops):
            shape = _data_layer_shape(layer, k)
            if shape is None:
                if k > 0:  # label tops of data layers are not inputs of a deploy net
                    continue
                raise ModelLoadError(f"{os.path.basename(model)}: input layer '{layer.name}' ({layer.type}) has no "
                                     "shape; use an Input layer with input_param { shape { dim: ... } }")
            shapes[top] = shape
    return shapes


def _data_layer_shape(layer: CaffeLayer, k: int) -> list[int] | None:
    msg = layer.msg
    for field in ("input_param", "dummy_data_param"):
        if field in msg.DESCRIPTOR.fields_by_name and msg.HasField(field):
            shapes = getattr(msg, field).shape
            if shapes:
                return list(shapes[min(k, len(shapes) - 1)].dim)
    if k == 0 and msg.HasField("memory_data_param"):
        p = msg.memory_data_param
        return [p.batch_size or 1, p.channels, p.height, p.width]
    return None


def _declare_inputs(ctx: CaffeContext, net: schema.NetParameter, layers: list[CaffeLayer],
                    input_name: list[str] | None, model: str) -> list[str]:
    shapes = _input_shapes(net, layers, model)
    if not shapes:
        raise ModelLoadError(f"{os.path.basename(model)}: no input found (input:/input_shape, Input or Data layer)")
    order = list(shapes)
    if input_name:
        unknown = [n for n in input_name if n not in shapes]
        if unknown:
            raise ModelLoadError(f"load_caffe: input_name {unknown} not among the model inputs {order}")
        order = list(input_name) + [n for n in order if n not in input_name]
    for name in order:
        ctx.tensors[name] = ctx.b.add_input(name, shapes[name])
    return order


def _graph_outputs(ctx: CaffeContext, input_names: list[str]) -> list[str]:
    consumed = {i for node in ctx.b.nodes for i in node.input}
    outputs: list[str] = []
    for tensor in dict.fromkeys(ctx.tensors.values()):
        if tensor not in consumed and tensor not in input_names and tensor not in outputs:
            outputs.append(tensor)
    if not outputs:
        raise ModelLoadError("load_caffe: the net has no output (every blob is consumed)")
    return outputs
