"""The model as the exported TFLite file computes it, for the simulator ("simulate as exported").

Two things differ from the NPU the build targets (docs/deployment.md, "Simulating the export"):

* layers the NPU runs in float16 run in LiteRT on the CPU in float32 (no float16 rounding, no
  saturation at 65504);
* a Conv whose output stays inside its NPU layer (before a hard-swish, a residual Add) writes an
  int8 intermediate in TFLite, with the range the export chooses (:mod:`.ranges`);
* a GlobalAveragePool over more than 7×7 is one MEAN, not the NPU's cascade of stored stages.

:func:`as_exported` returns a copy of the model with those intermediates added to its quantization
parameters and the float-layer precision set to float32; ``init_runtime(simulate='tflite')`` and
``accuracy_analysis(simulate='tflite')`` run that copy.
"""
from __future__ import annotations

import copy

import numpy as np

from openrknn.errors import NotSupportedError
from openrknn.graph import npu_layers
from openrknn.export.tflite.convert import Exporter
from openrknn.graph.rknn_model import RKNNModel
from openrknn.quant.settings import resolve_alias

# RKNNModel.metadata key read by the simulator's lowering: the precision float layers run in.
FLOAT_LAYERS_KEY = "float_layers_dtype"


def export_params(exporter) -> dict[str, dict]:
    """The int8 activation parameters the export uses that the model does not store (int8
    intermediates). The one place the export's parameters are read back, so a change of how the
    model keys its parameters touches only this function and ``Exporter.__init__``."""
    return {name: params.to_dict() for name, params in exporter.params.items()
            if name not in exporter.model.quant_params}


def as_exported(model: RKNNModel) -> RKNNModel:
    """A copy of ``model`` whose simulation is what the exported TFLite file computes.

    Raises:
        NotSupportedError / UnsupportedOpError: the model cannot be exported (as ``export_tflite``).
    """
    if resolve_alias(model.quantized_dtype or "") != "w8a8":
        raise NotSupportedError("simulate='tflite' needs a model built with do_quantization=True and "
                                "quantized_dtype='w8a8' (what export_tflite writes)")
    require_symmetric_weights(model, "simulate='tflite'")
    exporter = Exporter(model)
    exporter.run()
    result = without_pool_stages(model)
    result.quant_params = {**result.quant_params, **export_params(exporter)}
    result.tensor_dtypes = {**model.tensor_dtypes, **{n: "int8" for n in export_params(exporter)}}
    result.metadata = {**model.metadata, FLOAT_LAYERS_KEY: "float32"}
    return result

def without_pool_stages(model: RKNNModel) -> RKNNModel:
    """A copy of ``model`` without the stored stages of its cascaded global pools: TFLite's MEAN is one
    step (``npu_layers.global_average_pool_stages`` is the NPU's lowering), so its simulation runs the
    pool whole."""
    result = copy.copy(model)
    result.quant_params = {name: params for name, params in model.quant_params.items()
                           if not npu_layers.is_pool_stage(name)}
    return result


def require_symmetric_weights(model: RKNNModel, api: str) -> None:
    """TFLite's int8 Conv/FullyConnected kernels take weights with zero point 0.

    Raises:
        NotSupportedError: the build stores asymmetric weights (``config(weight_qtype='asymmetric_quantized')``).
    """
    weights = {n.input[1] for n in model.graph.graph.node
               if n.op_type in ("Conv", "ConvTranspose", "Gemm", "MatMul") and len(n.input) > 1} \
        & {init.name for init in model.graph.graph.initializer}   # constant weights, not a MatMul of two tensors
    asymmetric = sorted(name for name, record in model.quant_params.items()
                        if name in weights and record.get("dtype") == "int8"
                        and any(int(z) != 0 for z in np.asarray(record.get("zero_point", [0])).ravel()))
    if asymmetric:
        raise NotSupportedError(f"{api} needs symmetric int8 weights (TFLite's kernels take weight zero point 0), "
                                f"and this build stores {len(asymmetric)} weight tensor(s) asymmetric (e.g. "
                                f"'{asymmetric[0]}'): build again without config(weight_qtype='asymmetric_quantized')")
