"""``load_darknet``: read a ``.cfg`` + ``.weights`` pair without Darknet and build an ONNX graph."""
from __future__ import annotations

import os

import onnx

from openrknn import log
from openrknn.errors import ModelLoadError, UnsupportedOpError
from openrknn.frontends import SourceModel
from openrknn.frontends.darknet import layers as _layers  # noqa: F401  (fills CONVERTERS)
from openrknn.frontends.darknet.cfg import Section, parse_cfg
from openrknn.frontends.darknet.context import ALIASES, CONVERTERS, DarknetContext, Tensor
from openrknn.frontends.onnx_builder import GraphBuilder
from openrknn.frontends.darknet.weights import WeightReader

INPUT_NAME = "data"


def load_darknet(model: str, weight: str) -> SourceModel:
    """Convert a Darknet model to ONNX.

    Layers are converted in cfg order; ``[yolo]``/``[region]`` layers expose their input (the raw
    head, before decoding) as graph outputs, otherwise the last layer is the output.

    Args:
        model: the ``.cfg`` file.
        weight: the ``.weights`` file (header versions with 32- and 64-bit ``seen`` counters).

    Returns:
        SourceModel with framework 'darknet' and one NCHW input ``data`` of [1, channels, height, width].

    Raises:
        ModelLoadError: malformed cfg (file, line), truncated weights (layer, byte counts).
        UnsupportedOpError: an unknown section (name and line).

    Example:
        >>> sm = load_darknet("yolov3-tiny.cfg", "yolov3-tiny.weights")  # doctest: +SKIP
    """
    sections = parse_cfg(model)
    net, layer_sections = sections[0], sections[1:]
    if net.kind not in ("net", "network"):
        raise ModelLoadError(f"{net.file} line {net.line}: the first section must be [net], got [{net.kind}]")
    network_input = _input_tensor(net)
    reader = WeightReader(weight)
    log.debug(f"load_darknet: {reader.file} version {reader.major}.{reader.minor}.{reader.revision}, "
              f"seen {reader.seen}")
    graph = GraphBuilder(os.path.basename(model))
    graph.add_input(INPUT_NAME, network_input.shape)
    ctx = DarknetContext(graph, reader, network_input)
    for index, section in enumerate(layer_sections):
        section.index = index
        ctx.layers.append(_convert(ctx, section))
    if not ctx.layers:
        raise ModelLoadError(f"{net.file} has no layers after [net]")
    if reader.unused:
        log.warning(f"load_darknet: {reader.file} has {reader.unused} bytes more than {net.file} needs "
                    f"({reader.needed}); they are ignored")
    outputs = _unique(ctx.outputs or [ctx.layers[-1]])
    onnx_model = graph.finish([t.name for t in outputs], os.path.splitext(os.path.basename(model))[0],
                              producer="openrknn-darknet")
    return SourceModel(model=onnx_model, framework="darknet", input_layouts={INPUT_NAME: "NCHW"})


def _input_tensor(net: Section) -> Tensor:
    height, width, channels = (net.get_int(k, 0) for k in ("height", "width", "channels"))
    if min(height, width, channels) < 1:
        raise ModelLoadError(f"{net.file} line {net.line}: [net] needs positive width, height and channels "
                             f"(got width={width}, height={height}, channels={channels})")
    return Tensor(INPUT_NAME, channels, height, width)


def _convert(ctx: DarknetContext, section: Section) -> Tensor:
    kind = ALIASES.get(section.kind, section.kind)
    converter = CONVERTERS.get(kind)
    if converter is None:
        known = ", ".join(sorted(CONVERTERS))
        raise UnsupportedOpError(f"[{section.kind}]", f"layer {section.index}", "Darknet",
                                 f"section at {section.file} line {section.line}; supported sections: {known}")
    try:
        return converter(ctx, section)
    except (onnx.checker.ValidationError, ValueError, TypeError) as e:
        raise ModelLoadError(f"{section.where}: cannot convert: {e}") from e


def _unique(tensors: list[Tensor]) -> list[Tensor]:
    seen: dict[str, Tensor] = {}
    for t in tensors:
        seen.setdefault(t.name, t)
    return list(seen.values())
