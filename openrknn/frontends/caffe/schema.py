"""The subset of ``caffe.proto`` that openrknn reads, declared in Python.

Message classes are generated at import time from a ``FileDescriptorProto`` (no protoc step).
Field numbers are those of BVLC ``caffe.proto`` plus the SSD fork (Permute, Normalize, PriorBox,
DetectionOutput) and the common Upsample extension. Fields not declared here are skipped when a
``.prototxt`` is parsed and kept as unknown fields when a ``.caffemodel`` is parsed.

Spec format: ``message -> (nested enums, fields)``; a field is
``(name, number, type, label, default)`` with ``label`` 'o' (optional) or 'r' (repeated).
"""
from __future__ import annotations

from typing import Any

from google.protobuf import descriptor_pb2

from openrknn.frontends.protobuf_schema import message_classes

_PACKAGE = "caffe"

_SCALARS = {
    "double": descriptor_pb2.FieldDescriptorProto.TYPE_DOUBLE,
    "float": descriptor_pb2.FieldDescriptorProto.TYPE_FLOAT,
    "int64": descriptor_pb2.FieldDescriptorProto.TYPE_INT64,
    "int32": descriptor_pb2.FieldDescriptorProto.TYPE_INT32,
    "uint32": descriptor_pb2.FieldDescriptorProto.TYPE_UINT32,
    "bool": descriptor_pb2.FieldDescriptorProto.TYPE_BOOL,
    "string": descriptor_pb2.FieldDescriptorProto.TYPE_STRING,
}

_PACKED = {("BlobProto", "data"), ("BlobProto", "diff"), ("BlobProto", "double_data"), ("BlobShape", "dim")}

_PHASE = ("Phase", ["TRAIN", "TEST"])

# Layer parameter messages shared by the V2 ``layer`` and the V1 ``layers`` form: name -> (V2 no., V1 no.)
PARAMS = {
    "concat_param": ("ConcatParameter", 104, 9), "convolution_param": ("ConvolutionParameter", 106, 10),
    "dropout_param": ("DropoutParameter", 108, 12), "eltwise_param": ("EltwiseParameter", 110, 24),
    "inner_product_param": ("InnerProductParameter", 117, 17), "lrn_param": ("LRNParameter", 118, 18),
    "memory_data_param": ("MemoryDataParameter", 119, 22), "pooling_param": ("PoolingParameter", 121, 19),
    "power_param": ("PowerParameter", 122, 21), "relu_param": ("ReLUParameter", 123, 30),
    "softmax_param": ("SoftmaxParameter", 125, 39), "slice_param": ("SliceParameter", 126, 31),
    "dummy_data_param": ("DummyDataParameter", 109, 26),
}
# Parameters that exist only in the V2 form: name -> (message, number)
PARAMS_V2 = {
    "prelu_param": ("PReLUParameter", 131), "reshape_param": ("ReshapeParameter", 133),
    "flatten_param": ("FlattenParameter", 135), "batch_norm_param": ("BatchNormParameter", 139),
    "elu_param": ("ELUParameter", 140), "bias_param": ("BiasParameter", 141), "scale_param": ("ScaleParameter", 142),
    "input_param": ("InputParameter", 143), "crop_param": ("CropParameter", 144),
    "upsample_param": ("UpsampleParameter", 149),
    "permute_param": ("PermuteParameter", 202), "prior_box_param": ("PriorBoxParameter", 203),
    "detection_output_param": ("DetectionOutputParameter", 204), "norm_param": ("NormalizeParameter", 206),
}

V1_TYPES = [
    ("NONE", 0), ("ABSVAL", 35), ("ACCURACY", 1), ("ARGMAX", 30), ("BNLL", 2), ("CONCAT", 3),
    ("CONTRASTIVE_LOSS", 37), ("CONVOLUTION", 4), ("DATA", 5), ("DECONVOLUTION", 39), ("DROPOUT", 6),
    ("DUMMY_DATA", 32), ("EUCLIDEAN_LOSS", 7), ("ELTWISE", 25), ("EXP", 38), ("FLATTEN", 8), ("HDF5_DATA", 9),
    ("HDF5_OUTPUT", 10), ("HINGE_LOSS", 28), ("IM2COL", 11), ("IMAGE_DATA", 12), ("INFOGAIN_LOSS", 13),
    ("INNER_PRODUCT", 14), ("LRN", 15), ("MEMORY_DATA", 29), ("MULTINOMIAL_LOGISTIC_LOSS", 16), ("MVN", 34),
    ("POOLING", 17), ("POWER", 26), ("RELU", 18), ("SIGMOID", 19), ("SIGMOID_CROSS_ENTROPY_LOSS", 27),
    ("SILENCE", 36), ("SOFTMAX", 20), ("SOFTMAX_LOSS", 21), ("SPLIT", 22), ("SLICE", 33), ("TANH", 23),
    ("WINDOW_DATA", 24), ("THRESHOLD", 31),
]


def _layer_fields(v1: bool) -> list[tuple]:
    if v1:
        fields = [("bottom", 2, "string", "r", None), ("top", 3, "string", "r", None), ("name", 4, "string", "o", None),
                  ("include", 32, "NetStateRule", "r", None), ("exclude", 33, "NetStateRule", "r", None),
                  ("type", 5, "V1LayerParameter.LayerType", "o", None), ("blobs", 6, "BlobProto", "r", None)]
        return fields + [(k, v1n, msg, "o", None) for k, (msg, _, v1n) in PARAMS.items()]
    fields = [("name", 1, "string", "o", None), ("type", 2, "string", "o", None), ("bottom", 3, "string", "r", None),
              ("top", 4, "string", "r", None), ("phase", 10, "Phase", "o", None), ("blobs", 7, "BlobProto", "r", None),
              ("include", 8, "NetStateRule", "r", None), ("exclude", 9, "NetStateRule", "r", None)]
    fields += [(k, v2n, msg, "o", None) for k, (msg, v2n, _) in PARAMS.items()]
    return fields + [(k, n, msg, "o", None) for k, (msg, n) in PARAMS_V2.items()]


_MESSAGES: dict[str, tuple[dict[str, list[str]], list[tuple]]] = {
    "BlobShape": ({}, [("dim", 1, "int64", "r", None)]),
    "BlobProto": ({}, [("shape", 7, "BlobShape", "o", None), ("data", 5, "float", "r", None),
                       ("diff", 6, "float", "r", None), ("double_data", 8, "double", "r", None),
                       ("num", 1, "int32", "o", "0"), ("channels", 2, "int32", "o", "0"),
                       ("height", 3, "int32", "o", "0"), ("width", 4, "int32", "o", "0")]),
    "NetStateRule": ({}, [("phase", 1, "Phase", "o", None)]),
    "NetParameter": ({}, [("name", 1, "string", "o", None), ("input", 3, "string", "r", None),
                          ("input_shape", 8, "BlobShape", "r", None), ("input_dim", 4, "int32", "r", None),
                          ("layer", 100, "LayerParameter", "r", None), ("layers", 2, "V1LayerParameter", "r", None)]),
    "LayerParameter": ({}, _layer_fields(v1=False)),
    "V1LayerParameter": ({"LayerType": [n for n, _ in V1_TYPES]}, _layer_fields(v1=True)),
    "FillerParameter": ({}, [("type", 1, "string", "o", "constant"), ("value", 2, "float", "o", "0")]),
    "ConvolutionParameter": ({}, [
        ("num_output", 1, "uint32", "o", None), ("bias_term", 2, "bool", "o", "true"), ("pad", 3, "uint32", "r", None),
        ("kernel_size", 4, "uint32", "r", None), ("stride", 6, "uint32", "r", None),
        ("dilation", 18, "uint32", "r", None),
        ("pad_h", 9, "uint32", "o", "0"), ("pad_w", 10, "uint32", "o", "0"), ("kernel_h", 11, "uint32", "o", None),
        ("kernel_w", 12, "uint32", "o", None), ("stride_h", 13, "uint32", "o", None),
        ("stride_w", 14, "uint32", "o", None),
        ("group", 5, "uint32", "o", "1"), ("axis", 16, "int32", "o", "1")]),
    "PoolingParameter": ({"PoolMethod": ["MAX", "AVE", "STOCHASTIC"], "RoundMode": ["CEIL", "FLOOR"]}, [
        ("pool", 1, "PoolingParameter.PoolMethod", "o", "MAX"), ("pad", 4, "uint32", "o", "0"),
        ("pad_h", 9, "uint32", "o", "0"), ("pad_w", 10, "uint32", "o", "0"), ("kernel_size", 2, "uint32", "o", None),
        ("kernel_h", 5, "uint32", "o", None), ("kernel_w", 6, "uint32", "o", None), ("stride", 3, "uint32", "o", "1"),
        ("stride_h", 7, "uint32", "o", None), ("stride_w", 8, "uint32", "o", None),
        ("global_pooling", 12, "bool", "o", "false"), ("round_mode", 13, "PoolingParameter.RoundMode", "o", "CEIL"),
        # ``ceil_mode: false`` of the toolkit's own proto (troubleshooting 3.2); its number is not published,
        # so it is declared outside the BVLC range (it is read from prototxt text only).
        ("ceil_mode", 1013, "bool", "o", "true")]),
    "InnerProductParameter": ({}, [("num_output", 1, "uint32", "o", None), ("bias_term", 2, "bool", "o", "true"),
                                   ("axis", 5, "int32", "o", "1"), ("transpose", 6, "bool", "o", "false")]),
    "ReLUParameter": ({}, [("negative_slope", 1, "float", "o", "0")]),
    "ELUParameter": ({}, [("alpha", 1, "float", "o", "1")]),
    "PReLUParameter": ({}, [("channel_shared", 2, "bool", "o", "false")]),
    "BatchNormParameter": ({}, [("use_global_stats", 1, "bool", "o", None), ("eps", 3, "float", "o", "1e-05")]),
    "ScaleParameter": ({}, [("axis", 1, "int32", "o", "1"), ("num_axes", 2, "int32", "o", "1"),
                            ("bias_term", 4, "bool", "o", "false")]),
    "BiasParameter": ({}, [("axis", 1, "int32", "o", "1"), ("num_axes", 2, "int32", "o", "1")]),
    "EltwiseParameter": ({"EltwiseOp": ["PROD", "SUM", "MAX"]}, [
        ("operation", 1, "EltwiseParameter.EltwiseOp", "o", "SUM"), ("coeff", 2, "float", "r", None)]),
    "ConcatParameter": ({}, [("axis", 2, "int32", "o", "1"), ("concat_dim", 1, "uint32", "o", None)]),
    "SliceParameter": ({}, [("axis", 3, "int32", "o", "1"), ("slice_point", 2, "uint32", "r", None),
                            ("slice_dim", 1, "uint32", "o", None)]),
    "FlattenParameter": ({}, [("axis", 1, "int32", "o", "1"), ("end_axis", 2, "int32", "o", "-1")]),
    "ReshapeParameter": ({}, [("shape", 1, "BlobShape", "o", None), ("axis", 2, "int32", "o", "0"),
                              ("num_axes", 3, "int32", "o", "-1")]),
    "PermuteParameter": ({}, [("order", 1, "uint32", "r", None)]),
    "SoftmaxParameter": ({}, [("axis", 2, "int32", "o", "1")]),
    "LRNParameter": ({"NormRegion": ["ACROSS_CHANNELS", "WITHIN_CHANNEL"]}, [
        ("local_size", 1, "uint32", "o", "5"), ("alpha", 2, "float", "o", "1"), ("beta", 3, "float", "o", "0.75"),
        ("norm_region", 4, "LRNParameter.NormRegion", "o", "ACROSS_CHANNELS"), ("k", 5, "float", "o", "1")]),
    "DropoutParameter": ({}, [("dropout_ratio", 1, "float", "o", "0.5")]),
    "PowerParameter": ({}, [("power", 1, "float", "o", "1"), ("scale", 2, "float", "o", "1"),
                            ("shift", 3, "float", "o", "0")]),
    "UpsampleParameter": ({}, [("scale", 1, "uint32", "o", "2"), ("scale_h", 2, "uint32", "o", None),
                               ("scale_w", 3, "uint32", "o", None), ("upsample_h", 6, "uint32", "o", None),
                               ("upsample_w", 7, "uint32", "o", None)]),
    "CropParameter": ({}, [("axis", 1, "int32", "o", "2"), ("offset", 2, "uint32", "r", None)]),
    "InputParameter": ({}, [("shape", 1, "BlobShape", "r", None)]),
    "DummyDataParameter": ({}, [("shape", 6, "BlobShape", "r", None)]),
    "MemoryDataParameter": ({}, [("batch_size", 1, "uint32", "o", None), ("channels", 2, "uint32", "o", None),
                                 ("height", 3, "uint32", "o", None), ("width", 4, "uint32", "o", None)]),
    "NormalizeParameter": ({}, [("across_spatial", 1, "bool", "o", "true"),
                                ("scale_filler", 2, "FillerParameter", "o", None),
                                ("channel_shared", 3, "bool", "o", "true"), ("eps", 4, "float", "o", "1e-10")]),
    "PriorBoxParameter": ({"CodeType": ["CORNER", "CENTER_SIZE", "CORNER_SIZE"]}, [
        ("min_size", 1, "float", "r", None), ("max_size", 2, "float", "r", None),
        ("aspect_ratio", 3, "float", "r", None),
        ("flip", 4, "bool", "o", "true"), ("clip", 5, "bool", "o", "false"), ("variance", 6, "float", "r", None),
        ("img_size", 7, "uint32", "o", None), ("img_h", 8, "uint32", "o", None), ("img_w", 9, "uint32", "o", None),
        ("step", 10, "float", "o", None), ("step_h", 11, "float", "o", None), ("step_w", 12, "float", "o", None),
        ("offset", 13, "float", "o", "0.5")]),
    "NonMaximumSuppressionParameter": ({}, [("nms_threshold", 1, "float", "o", "0.3"), ("top_k", 2, "int32", "o", None),
                                            ("eta", 3, "float", "o", "1")]),
    "DetectionOutputParameter": ({}, [
        ("num_classes", 1, "uint32", "o", None), ("share_location", 2, "bool", "o", "true"),
        ("background_label_id", 3, "int32", "o", "0"), ("nms_param", 4, "NonMaximumSuppressionParameter", "o", None),
        ("code_type", 6, "PriorBoxParameter.CodeType", "o", "CORNER"), ("keep_top_k", 7, "int32", "o", "-1"),
        ("variance_encoded_in_target", 8, "bool", "o", "false"), ("confidence_threshold", 9, "float", "o", None)]),
}
# enum value numbers that do not start at 0
_ENUM_NUMBERS = {"LayerType": dict(V1_TYPES), "CodeType": {"CORNER": 1, "CENTER_SIZE": 2, "CORNER_SIZE": 3}}


def _add_enum(container: Any, name: str, values: list[str]) -> None:
    enum = container.enum_type.add(name=name)
    numbers = _ENUM_NUMBERS.get(name, {})
    for i, value in enumerate(values):
        enum.value.add(name=value, number=numbers.get(value, i))


def _file_descriptor() -> descriptor_pb2.FileDescriptorProto:
    fdp = descriptor_pb2.FileDescriptorProto(name="openrknn_caffe_subset.proto", package=_PACKAGE, syntax="proto2")
    _add_enum(fdp, *_PHASE)
    for msg_name, (enums, fields) in _MESSAGES.items():
        msg = fdp.message_type.add(name=msg_name)
        for enum_name, values in enums.items():
            _add_enum(msg, enum_name, values)
        for name, number, ftype, label, default in fields:
            field = msg.field.add(name=name, number=number)
            field.label = (descriptor_pb2.FieldDescriptorProto.LABEL_REPEATED if label == "r"
                           else descriptor_pb2.FieldDescriptorProto.LABEL_OPTIONAL)
            if ftype in _SCALARS:
                field.type = _SCALARS[ftype]
            else:
                is_enum = ftype == "Phase" or ftype.split(".")[-1] in {e for m in _MESSAGES.values() for e in m[0]}
                field.type = (descriptor_pb2.FieldDescriptorProto.TYPE_ENUM if is_enum
                              else descriptor_pb2.FieldDescriptorProto.TYPE_MESSAGE)
                field.type_name = f".{_PACKAGE}.{ftype}"
            if default is not None:
                field.default_value = default
            if (msg_name, name) in _PACKED:
                field.options.packed = True
    return fdp


_CLASSES = message_classes(_file_descriptor(), _MESSAGES)
NetParameter = _CLASSES["NetParameter"]
BlobProto = _CLASSES["BlobProto"]
BlobShape = _CLASSES["BlobShape"]
LayerParameter = _CLASSES["LayerParameter"]
V1LayerParameter = _CLASSES["V1LayerParameter"]

V1_TYPE_NAMES = {
    "ABSVAL": "AbsVal", "ACCURACY": "Accuracy", "ARGMAX": "ArgMax", "BNLL": "BNLL", "CONCAT": "Concat",
    "CONVOLUTION": "Convolution", "DATA": "Data", "DECONVOLUTION": "Deconvolution", "DROPOUT": "Dropout",
    "DUMMY_DATA": "DummyData", "ELTWISE": "Eltwise", "EXP": "Exp", "FLATTEN": "Flatten", "HDF5_DATA": "HDF5Data",
    "IMAGE_DATA": "ImageData", "INNER_PRODUCT": "InnerProduct", "LRN": "LRN", "MEMORY_DATA": "MemoryData",
    "MVN": "MVN", "POOLING": "Pooling", "POWER": "Power", "RELU": "ReLU", "SIGMOID": "Sigmoid", "SILENCE": "Silence",
    "SOFTMAX": "Softmax", "SOFTMAX_LOSS": "SoftmaxWithLoss", "SPLIT": "Split", "SLICE": "Slice", "TANH": "TanH",
    "THRESHOLD": "Threshold", "WINDOW_DATA": "WindowData", "EUCLIDEAN_LOSS": "EuclideanLoss",
}
