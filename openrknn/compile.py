"""``build()``: from a loaded source model and the config to a built :class:`RKNNModel`.

Stages, in order: graph passes (``optimization_level``) → input normalisation embedded →
supported-op check → quantization (or fp16) → the model record.
"""
from __future__ import annotations

import difflib
import time
from typing import Any

import numpy as np
import onnx

from openrknn import __version__, chips, log, quant
from openrknn.analysis.correction_check import correction_judge
from openrknn.config import ModelConfig
from openrknn.errors import BuildError, ConfigError, NotSupportedError
from openrknn.frontends import SourceModel
from openrknn.graph import dynamic_shapes
from openrknn.graph import npu_layers
from openrknn.graph.custom_ops import CUSTOM_DOMAIN, CustomOpRegistry, apply_custom_ops
from openrknn.graph.io_reshape import remove_boundary_reshapes
from openrknn.graph.layer_index import count_layers
from openrknn.graph.passes import optimize
from openrknn.graph.passes.reduce_means import lower_reduce_means
from openrknn.graph.passes.wide_convs import lower_grouped_convs, split_wide_convs
from openrknn.graph.passes.wide_pads import drop_padding_taps, split_wide_pads
from openrknn.graph.preprocess import embed_preprocess
from openrknn.graph.pruning import prune_zero_channels
from openrknn.graph.rknn_model import LAYOUT_NCHW, LAYOUT_UNDEFINED, RKNNModel, TensorSpec
from openrknn.graph.runner import make_session
from openrknn.graph.sparsity import find_sparse_layers
from openrknn.graph.supported_ops import check_supported
from openrknn.graph.yuv import embed_yuv_inputs
from openrknn.model_file.graph_checks import check_empty_inputs
from openrknn.model_file.header_schema import check_input_sizes
from openrknn.profile.limits import check_build
from openrknn.quant.joins import warn_lopsided_joins
from openrknn.quant.settings import DTYPES


def build_model(source: SourceModel, cfg: ModelConfig, do_quantization: bool, dataset: str | None,
                rknn_batch_size: int | None, custom_ops: CustomOpRegistry | None = None,
                overrides: Any = None, cache: Any = None) -> RKNNModel:
    """Build the model as ``RKNN.build`` documents it (``cache``: a ``CalibrationCache`` that
    ``build(auto_hybrid=True)`` then shares with its trials).

    Raises:
        BuildError / ConfigError / QuantizationError: with a message naming the problem.
    """
    started = time.perf_counter()
    if do_quantization and not dataset and not source.quant_params:
        raise ConfigError("build: do_quantization=True needs a dataset (a .txt file listing calibration inputs)")
    batch = _batch(rknn_batch_size)
    chip = chips.get_chip(cfg.platform)
    source_graph = apply_custom_ops(source.model, custom_ops)
    input_names = [v.name for v in source_graph.graph.input
                   if v.name not in {i.name for i in source_graph.graph.initializer}]
    if cfg.dynamic_input:
        source_graph = dynamic_shapes.make_dynamic(source_graph, input_names, cfg.dynamic_input)
    log.info(f"build: optimizing the graph (optimization_level {cfg.optimization_level}) for {chip.name}")
    graph = _optimize(source_graph, cfg.optimization_level)
    graph = _apply_model_options(graph, cfg)
    graph = _lower_for_chip(graph, chip, do_quantization, cfg)
    npu_layers.mark_layers(graph, npu_layers.cpu_nodes(graph.graph, cfg.op_target))   # op_target is the record's
    graph, preprocess = embed_preprocess(graph, _layouts(source), cfg.mean_values, cfg.std_values, cfg.reorder_channel)
    if preprocess:
        npu_layers.mark_layers(graph)   # the mean/std steps just added are the input stage's layer
    layouts = _layouts(source)
    if cfg.inputs_yuv_fmt:
        graph, yuv_inputs = embed_yuv_inputs(graph, cfg.inputs_yuv_fmt, layouts, input_names)
        for name, (_, layout) in yuv_inputs.items():
            layouts[name] = layout
    graph = apply_custom_ops(_infer_shapes(graph), custom_ops)
    _check_supported(graph, custom_ops)
    model = RKNNModel(
        graph=graph,
        inputs=_specs(graph.graph.input, graph, layouts, batch, skip_initializers=True),
        outputs=_specs(graph.graph.output, graph, {}, batch),
        preprocess=preprocess,
        platforms=list(cfg.target_platform),
        float_dtype=cfg.float_dtype,
        custom_string=cfg.custom_string,
        rknn_batch_size=batch,
        metadata={"toolkit_version": __version__, "source_framework": source.framework,
                  "optimization_level": cfg.optimization_level, "op_target": cfg.op_target or {},
                  "toolkit": cfg.toolkit, "memory_plan_strategy": cfg.memory_plan_strategy,
                  "custom_ops": sorted({n.op_type for n in graph.graph.node if n.domain == CUSTOM_DOMAIN})},
        golden=graph,
    )
    check_input_sizes(model.inputs, "build", BuildError)   # before anything allocates an input
    check_empty_inputs(graph, model.inputs, "build", BuildError)
    if cfg.dynamic_input:
        _finish_dynamic(model, input_names, cfg.dynamic_input)
    if cfg.float_dtype == "float32":
        log.warning("build: float_dtype='float32' is the simulator's reference path; the NPU itself has no fp32")
    if not chip.float_on_npu and not do_quantization:
        log.warning(f"build: {chip.name} has no float16 on its NPU; float layers of this model run on the CPU")
    _check_op_target(graph, cfg.op_target)
    _record_build_options(model, cfg)
    log.info(f"build: {count_layers(graph.graph)} layers; "
             + ("quantizing (calibration)" if do_quantization else f"{cfg.float_dtype} weights"))
    model = _quantize_or_float(model, source, cfg, do_quantization, dataset, overrides, custom_ops, cache)
    check_build(model, cfg.platform)
    log.info(f"build: done in {time.perf_counter() - started:.2f} s "
             f"({count_layers(model.graph.graph)} layers, {'quantized ' + str(model.quantized_dtype) if model.is_quantized else model.float_dtype})")
    return model


def _finish_dynamic(model: RKNNModel, input_names: list[str], sets: list[list[list[int]]]) -> None:
    """Check every shape set runs; specs and metadata describe the MaxShape set."""
    dynamic_shapes.check_runs(model.graph, input_names, sets, make_session)
    best = dynamic_shapes.max_shape_index(sets)
    for spec, shape in zip(model.inputs, sets[best]):
        spec.shape = [int(d) * (model.rknn_batch_size if i == 0 else 1) for i, d in enumerate(shape)]
    static = dynamic_shapes.fix_shapes(model.graph, dict(zip(input_names, sets[best])))
    model.outputs = _specs(static.graph.output, static, {}, model.rknn_batch_size)
    model.metadata["dynamic_input"] = sets
    model.metadata["dynamic_input_max_index"] = best


def _check_op_target(graph: onnx.ModelProto, op_target: dict[str, str] | None) -> None:
    if not op_target:
        return
    names = [n.name for n in graph.graph.node]
    for name in op_target:
        if name not in names:
            close = difflib.get_close_matches(name, names, n=3)
            raise ConfigError(f"op_target names layer '{name}', which is not in the built model"
                              + (f" (did you mean {close}?)" if close else ""))


def _record_build_options(model: RKNNModel, cfg: ModelConfig) -> None:
    """Options that change how the model is stored or run, not its graph."""
    model.metadata["single_core_mode"] = cfg.single_core_mode
    model.metadata["compress_weight"] = cfg.compress_weight
    model.metadata["remove_weight"] = cfg.remove_weight
    if cfg.sparse_infer:
        sparse = find_sparse_layers(model.graph)
        model.metadata["sparse_layers"] = sorted(sparse)
        if sparse:
            log.info(f"sparse_infer: {len(sparse)} layer(s) have 2:4 sparse weights ({sum(sparse.values()) / 1024:.1f} "
                     f"KiB saved): {sorted(sparse)[:8]}{' ...' if len(sparse) > 8 else ''}")
        else:
            log.warning("sparse_infer: no layer has 2:4 structured-sparse weights; the model runs dense. "
                        "Prune the weights to 2:4 sparsity (two zeros in every four input channels) first")


def _apply_model_options(graph: onnx.ModelProto, cfg: ModelConfig) -> onnx.ModelProto:
    """config options that rewrite the graph: model_pruning, remove_reshape."""
    if cfg.model_pruning:
        graph, report = prune_zero_channels(graph)
        if report.removed_channels:   # documented: nothing is printed when nothing could be pruned
            weight_mb = (report.weight_bytes_after - report.weight_bytes_before) / 2**20
            weight_pct = 100 * weight_mb * 2**20 / max(1, report.weight_bytes_before)
            gflops = (report.flops_after - report.flops_before) / 1e9
            flops_pct = 100 * (report.flops_after - report.flops_before) / max(1.0, report.flops_before)
            log.info("model_pruning results:")
            log.info(f"    Weight: {weight_mb:.5f} MB ({weight_pct:.1f}%)")
            log.info(f"    GFLOPs: {gflops:.5f} ({flops_pct:.1f}%)")
    if cfg.remove_reshape:
        graph = remove_boundary_reshapes(graph)
    return graph


def _batch(rknn_batch_size: Any) -> int:
    if rknn_batch_size is None:
        return 1
    if isinstance(rknn_batch_size, bool) or not isinstance(rknn_batch_size, int) or rknn_batch_size < 1:
        raise ConfigError(f"build: rknn_batch_size must be a positive integer, got {rknn_batch_size!r}")
    if rknn_batch_size > 32:
        log.warning(f"build: rknn_batch_size={rknn_batch_size} is large; the guide recommends < 32 (memory)")
    return rknn_batch_size


def _optimize(model: onnx.ModelProto, level: int) -> onnx.ModelProto:
    return optimize(model, level)


def _lower_for_chip(model: onnx.ModelProto, chip: chips.Chip, do_quantization: bool, cfg: ModelConfig) -> onnx.ModelProto:
    """The chip's own lowering (``lowering`` in its data file), as rknn-toolkit2 does on that chip:
    grouped Convs run dense or per group, ReduceMeans and wide AveragePools as Convs
    (``reduce_means``), Convs too deep for one NPU pass split over their input channels, Convs
    padded beyond the NPU's Conv padding reading a Pad layer, widely dilated Convs without the taps
    that read only padding (``wide_pads``)."""
    spec = DTYPES.get(str(cfg.quantized_dtype)) if do_quantization else None
    weight_bytes = 2 if spec is None or spec.weight_dtype.endswith("16") else 1   # float16 weights without quantization
    lower_grouped_convs(model, chip.lowering.get("grouped_conv_dense_max_bytes"), weight_bytes)
    limit, block = chip.lowering.get("conv_split_input_bytes"), chip.lowering.get("conv_split_block")
    if chip.toolkit == 2:   # measured with rknn-toolkit2; Toolkit 1's lowering of a mean is unknown here
        lower_reduce_means(model, limit, weight_bytes, block)   # before the split: a mean's Conv may be too deep
    split_wide_convs(model, limit, weight_bytes, block)
    drop_padding_taps(model, chip.lowering.get("conv_dilation_max"))   # before: the Conv left may need no Pad
    split_wide_pads(model, chip.lowering.get("conv_pad_max"), chip.lowering.get("conv_dilation_max"))
    keep = [p for p in model.metadata_props if p.key != npu_layers.ATTENTION_LOWERING_KEY]
    del model.metadata_props[:]
    model.metadata_props.extend(keep)
    if chip.lowering.get("fused_attention", True) is False:   # read by the layer graph (npu_layers.find_layers)
        model.metadata_props.add(key=npu_layers.ATTENTION_LOWERING_KEY, value="unfused")
    return model


def _infer_shapes(model: onnx.ModelProto) -> onnx.ModelProto:
    try:
        return onnx.shape_inference.infer_shapes(model, strict_mode=True, data_prop=True)
    except Exception as strict_error:
        try:   # control-flow subgraphs can defeat strict inference; keep what can be inferred
            return onnx.shape_inference.infer_shapes(model, strict_mode=False, data_prop=True)
        except Exception:
            raise BuildError(f"shape inference failed after the graph passes: {strict_error}") from strict_error


def _check_supported(model: onnx.ModelProto, custom_ops: CustomOpRegistry | None) -> None:
    check_supported(model, custom_ops)


def _layouts(source: SourceModel) -> dict[str, str]:
    layouts = {}
    for value in source.model.graph.input:
        rank = len(value.type.tensor_type.shape.dim)
        layouts[value.name] = source.input_layouts.get(value.name, LAYOUT_NCHW if rank == 4 else LAYOUT_UNDEFINED)
    return layouts


def _specs(values, model: onnx.ModelProto, layouts: dict[str, str], batch: int,
           skip_initializers: bool = False) -> list[TensorSpec]:
    inits = {i.name for i in model.graph.initializer} if skip_initializers else set()
    specs = []
    for value in values:
        if value.name in inits:
            continue
        ttype = value.type.tensor_type
        shape = [d.dim_value if d.HasField("dim_value") else 1 for d in ttype.shape.dim]
        if batch > 1 and shape:
            shape[0] *= batch
        dtype = np.dtype(onnx.helper.tensor_dtype_to_np_dtype(ttype.elem_type)).name if ttype.elem_type else "float32"
        layout = layouts.get(value.name, LAYOUT_NCHW if len(shape) == 4 and skip_initializers else LAYOUT_UNDEFINED)
        specs.append(TensorSpec(name=value.name, shape=shape, dtype=dtype, layout=layout))
    return specs


def _quantize_or_float(model: RKNNModel, source: SourceModel, cfg: ModelConfig, do_quantization: bool,
                       dataset: str | None, overrides: Any = None,
                       custom_ops: CustomOpRegistry | None = None, cache: Any = None) -> RKNNModel:
    try:
        quant.is_prequantized   # noqa: B018  (the quantization stage may be absent in a partial install)
    except (ImportError, AttributeError) as e:
        if do_quantization or source.quant_params:
            raise NotSupportedError("build: quantization is not available in this installation") from e
        model.tensor_dtypes = _float_dtypes(model)
        return model
    prequantized = bool(source.quant_params) or quant.is_prequantized(model.graph)
    if prequantized:
        log.info("build: the source model is already quantized; its quantization parameters are kept")
        return quant.import_quantized(model)
    if not do_quantization:
        model.tensor_dtypes = _float_dtypes(model)
        return model
    settings, samples = calibration_setup(model, cfg, dataset)
    quantized = quant.quantize_model(model, samples, settings, overrides, custom_ops, cache,
                                     correction_judge(model, custom_ops))
    warn_lopsided_joins(quantized, samples, custom_ops)
    return quantized


def calibration_setup(model: RKNNModel, cfg: ModelConfig, dataset: str | None) -> tuple[Any, list[list[np.ndarray]]]:
    """The validated quantization settings of ``cfg`` and the calibration samples of ``dataset``."""
    if not dataset:
        raise ConfigError("build: do_quantization=True needs a dataset (a .txt file listing calibration inputs)")
    settings = quant.QuantSettings(dtype=cfg.quantized_dtype, method=cfg.quantized_method,
                                   algorithm=cfg.quantized_algorithm, batch_size=cfg.batch_size, epochs=cfg.epochs,
                                   weight_qtype=cfg.weight_qtype)
    settings.validate(chips.get_chip(cfg.platform))
    samples = quant.dataset.load_dataset(dataset, _unbatched(model.inputs, model.rknn_batch_size),
                                         rgb2bgr=cfg.quant_img_RGB2BGR)
    return settings, samples


def _unbatched(specs: list[TensorSpec], batch: int) -> list[TensorSpec]:
    if batch == 1:
        return specs
    return [TensorSpec(s.name, [s.shape[0] // batch] + s.shape[1:], s.dtype, s.layout) for s in specs]


def _float_dtypes(model: RKNNModel) -> dict[str, str]:
    out = {}
    kind = model.float_dtype
    for value in list(model.graph.graph.value_info) + list(model.graph.graph.output):
        if value.type.tensor_type.elem_type == onnx.TensorProto.FLOAT:
            out[value.name] = kind
    return out


def refuse_later(feature: str, reason: str) -> None:
    """Raise the standard 'documented but not available' error."""
    raise NotSupportedError(f"{feature} is not supported yet: {reason}")
