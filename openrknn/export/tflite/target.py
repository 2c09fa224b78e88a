"""The model as the exported TFLite file computes it, for the simulator ("simulate as exported").

Two things differ from the NPU the build targets (docs/deployment.md, "Simulating the export"):

* layers the NPU runs in float16 run in LiteRT on the CPU in float32 (no float16 rounding, no
  saturation at 65504);
* a Conv whose output stays inside its NPU layer (before a hard-swish, a residual Add) writes an
  int8 intermediate in TFLite, with the range the export chooses (:mod:`.ranges`).

:func:`as_exported` returns a copy of the model with those intermediates added to its quantization
parameters and the float-layer precision set to float32; ``init_runtime(simulate='tflite')`` and
``accuracy_analysis(simulate='tflite')`` run that copy.
"""
from __future__ import annotations

import copy

from openrknn.graph.rknn_model import RKNNModel

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
    from openrknn.errors import NotSupportedError
    from openrknn.export.tflite.convert import Exporter
    if model.quantized_dtype not in ("w8a8", "asymmetric_quantized-8"):
        raise NotSupportedError("simulate='tflite' needs a model built with do_quantization=True and "
                                "quantized_dtype='w8a8' (what export_tflite writes)")
    from openrknn.export.tflite import require_symmetric_weights
    require_symmetric_weights(model, "simulate='tflite'")
    exporter = Exporter(model)
    exporter.run()
    result = copy.copy(model)
    result.quant_params = {**model.quant_params, **export_params(exporter)}
    result.tensor_dtypes = {**model.tensor_dtypes, **{n: "int8" for n in export_params(exporter)}}
    result.metadata = {**model.metadata, FLOAT_LAYERS_KEY: "float32"}
    return result
