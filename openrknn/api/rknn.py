"""The ``RKNN`` facade: RKNN-Toolkit / RKNN-Toolkit2's Python API over openrknn's stages.

Every method keeps the documented name, arguments and return values (0 / -1); errors from the
stages become one ``E <api>: <message>`` log line. The facade only keeps state and delegates.
"""
from __future__ import annotations

import functools
import os
from typing import Any, Sequence

import numpy as np
import onnx

from openrknn import chips, log, pipeline, profile
from openrknn.analysis import DEFAULT_SNAPSHOT_DIR, run_accuracy_analysis
from openrknn.api import devices
from openrknn.api.common import RuntimeInfo, api_call, sdk_version_text
from openrknn.codegen import generate_demo
from openrknn.config import NO_EFFECT_REASONS, ModelConfig, parse_config
from openrknn.errors import ConfigError, NotSupportedError, RuntimeStateError
from openrknn.evaluation import evaluate_built
from openrknn.evaluation.cache import default_cache_path
from openrknn.export import rockchip
from openrknn.export.tflite import export_tflite, tflite_bytes
from openrknn.export.tflite.target import as_exported
from openrknn.frontends import SourceModel
from openrknn.frontends.caffe import load_caffe
from openrknn.frontends.darknet import load_darknet
from openrknn.frontends.mxnet import load_mxnet
from openrknn.frontends.onnx_file import load_onnx
from openrknn.frontends.pytorch import load_pytorch
from openrknn.frontends.tensorflow import load_tensorflow
from openrknn.frontends.tflite import load_tflite
from openrknn.graph.custom_ops import CustomOpRegistry
from openrknn.graph.passes import optimize
from openrknn.graph.rknn_model import RKNNModel
from openrknn.model_file import load_model, save_model
from openrknn.model_file.container import write_atomic
from openrknn.model_file.embedded import save_with_tflite
from openrknn.model_file.encryption import encrypt_model_file
from openrknn.model_file.sync import export_sync_model
from openrknn.profile import limits
from openrknn.report import memory_html, perf_html, write_html
from openrknn.runtime import remote, remote_report
from openrknn.sim.session import Simulator


_RETURNS_NONE_ON_FAILURE = {"inference", "eval_perf", "eval_memory", "evaluate", "auto_hybrid_report"}


class RKNN(RuntimeInfo):
    """RKNN-Toolkit compatible model converter, quantizer and simulator.

    Example:
        >>> rknn = RKNN(verbose=False)
        >>> rknn.config(mean_values=[[127.5]*3], std_values=[[127.5]*3], target_platform='rk3588')
        0
        >>> # rknn.load_onnx('model.onnx'); rknn.build(do_quantization=False); rknn.export_rknn('m.rknn')
    """

    def __init__(self, verbose: bool | str = False, verbose_file: str | None = None) -> None:
        if isinstance(verbose, str):
            verbose = verbose.lower() == "debug" or verbose.lower() == "true"
        elif not isinstance(verbose, bool):
            log.error("'verbose' must be True or False!")
            verbose = False
        log.configure(verbose, verbose_file)
        self.verbose = verbose
        self._config: ModelConfig | None = None
        self._config_kwargs: dict[str, Any] = {}
        self._source: SourceModel | None = None
        self._model: RKNNModel | None = None
        self._runtime: Any = None
        self._runtime_options: dict[str, Any] = {}
        self._custom_ops = CustomOpRegistry()
        self._loaded_from_rknn = False
        self._model_name = "model"
        self._export_path: str | None = None   # the .rknn codegen ships (last export_rknn / load_rknn)
        self._build_args: dict[str, Any] = {}  # dataset / rknn_batch_size of the last build (vendor back end)
        self.limit_findings: list[Any] = []      # the last check_limits() findings (graph.npu_limits.Finding)

    # ---------------------------------------------------------------- helpers
    def _failure(self, name: str) -> Any:
        return None if name in _RETURNS_NONE_ON_FAILURE else -1

    def _cfg(self) -> ModelConfig:
        if self._config is None:
            self._config = parse_config()
        return self._config

    def _set_source(self, source: SourceModel, path: Any = None) -> int:
        self._source = source
        self._model_name = os.path.splitext(os.path.basename(str(path)))[0] if path else "model"
        self._model = None
        self._export_path = None
        self._runtime = None
        self._loaded_from_rknn = False
        log.info(f"Loading : {source.framework} model with {len(source.model.graph.node)} nodes done")
        return 0

    def _require_model(self, api: str) -> RKNNModel:
        if self._model is None:
            raise RuntimeStateError(f"no RKNN model: call build() or load_rknn() before {api}()")
        return self._model

    def _close_runtime(self) -> None:
        close = getattr(self._runtime, "close", None)   # a board connection (openrknn/runtime/remote.py)
        if close is not None:
            close()
        self._runtime = None

    # ---------------------------------------------------------------- config
    @api_call
    def config(self, **kwargs: Any) -> int:
        """Set model parameters (both toolkit generations' names are accepted; see ModelConfig)."""
        self._config = parse_config(**kwargs)
        self._config_kwargs = dict(kwargs)
        cfg = self._config
        log.debug(f"config: target_platform={cfg.target_platform} mean_values={cfg.mean_values} "
                  f"std_values={cfg.std_values} quantized_dtype={cfg.quantized_dtype}")
        for name, value in cfg.no_effect_options.items():
            log.warning(f"config: {name}={value!r} has no effect here: {NO_EFFECT_REASONS[name]}")
        if cfg.dynamic_input:
            log.warning(f"config: The 'dynamic_input' function has been enabled, the MaxShape is "
                        f"dynamic_input[0] = {cfg.dynamic_input[0]}!")
        return 0

    # ---------------------------------------------------------------- loaders
    @api_call
    def load_onnx(self, model: str, inputs: Sequence[str] | None = None,
                  input_size_list: Sequence[Sequence[int]] | None = None,
                  input_initial_val: Sequence[Any] | None = None, outputs: Sequence[str] | None = None) -> int:
        """Load an ONNX model (documented arguments: inputs/outputs cut the graph)."""
        return self._set_source(load_onnx(model, inputs, input_size_list, input_initial_val, outputs,
                                          custom_ops=self._custom_ops,
                                          allow_dynamic=bool(self._cfg().dynamic_input)), model)

    @api_call
    def load_tflite(self, model: str, input_is_nchw: bool = False) -> int:
        """Load a TensorFlow Lite flatbuffer."""
        return self._set_source(load_tflite(model, input_is_nchw=input_is_nchw, custom_ops=self._custom_ops), model)

    @api_call
    def load_pytorch(self, model: str, input_size_list: Sequence[Sequence[int]]) -> int:
        """Load a TorchScript ``.pt`` file."""
        return self._set_source(load_pytorch(model, [list(s) for s in input_size_list], custom_ops=self._custom_ops),
                                model)

    @api_call
    def load_tensorflow(self, tf_pb: str, inputs: Sequence[str], input_size_list: Sequence[Sequence[int]],
                        outputs: Sequence[str], input_is_nchw: bool = False, predef_file: str | None = None,
                        mean_values: Any = None, std_values: Any = None) -> int:
        """Load a frozen TensorFlow GraphDef cut at the given node names."""
        return self._set_source(load_tensorflow(tf_pb, list(inputs), [list(s) for s in input_size_list],
                                                list(outputs), input_is_nchw=input_is_nchw, predef_file=predef_file,
                                                mean_values=mean_values, std_values=std_values), tf_pb)

    @api_call
    def load_caffe(self, model: str, blobs: str | None = None, input_name: Sequence[str] | None = None,
                   proto: str = "caffe") -> int:
        """Load a Caffe ``.prototxt`` (+ ``.caffemodel``)."""
        return self._set_source(load_caffe(model, blobs, list(input_name) if input_name else None, proto=proto), model)

    @api_call
    def load_darknet(self, model: str, weight: str) -> int:
        """Load a Darknet ``.cfg`` + ``.weights`` pair."""
        return self._set_source(load_darknet(model, weight), model)

    @api_call
    def load_mxnet(self, symbol: str, params: str, input_size_list: Sequence[Sequence[int]]) -> int:
        """Load an MXNet symbol ``.json`` + ``.params`` pair (Toolkit 1.3)."""
        return self._set_source(load_mxnet(symbol, params, [list(s) for s in input_size_list]), symbol)

    @api_call
    def load_rknn(self, path: str, load_model_in_npu: bool = False, master_model: str | None = None) -> int:
        """Load an openrknn ``.rknn`` file (``master_model``: the weight owner of a remove_weight model)."""
        if load_model_in_npu:
            raise NotSupportedError("load_model_in_npu needs an RK3399Pro/RK1808 board with Rockchip's driver")
        self._model = load_model(path, master_model)
        self._export_path = path
        self._source = None
        self._runtime = None
        self._loaded_from_rknn = True
        log.info(f"load_rknn: {path} ({self._model.float_dtype if not self._model.is_quantized else self._model.quantized_dtype}, "
                 f"platforms {self._model.platforms})")
        return 0

    # ---------------------------------------------------------------- build / export
    @api_call
    def build(self, do_quantization: bool = True, dataset: str | None = None, rknn_batch_size: int | None = None,
              pre_compile: bool = False, auto_hybrid: bool = False) -> int:
        """Build the RKNN model (float16, or quantized with the calibration ``dataset``)."""
        if self._source is None:
            raise RuntimeStateError("no model loaded: call load_onnx()/load_xxx() before build()")
        self._model = pipeline.build(self._source, self._cfg(), do_quantization, dataset, rknn_batch_size,
                                     self._custom_ops, pre_compile, auto_hybrid)
        self._build_args = {"dataset": os.path.abspath(dataset) if dataset else None, "rknn_batch_size": rknn_batch_size}
        self._export_path = None
        self._runtime = None
        return 0

    @api_call
    def export_rknn(self, export_path: str, cpp_gen_cfg: Any = None, embed_tflite: bool = False,
                    toolchain: str | None = None, toolchain_python: str | None = None, **kwargs: Any) -> int:
        """Save the built model as an openrknn ``.rknn`` file (atomic write); ``embed_tflite=True`` also
        stores its TFLite export, which RKNNLite runs with Teflon or LiteRT (docs/deployment.md).

        ``toolchain='rknn-toolkit2'`` writes a Rockchip-format file instead, compiled by Rockchip's toolkit
        (its Python from ``toolchain_python`` or ``$OPENRKNN_RKNN_TOOLKIT2``, run as a subprocess) with
        openrknn's calibrated ranges and float16 layers, for boards running Rockchip's ``librknnrt``.
        """
        model = self._require_model("export_rknn")
        if toolchain is not None:
            return self._export_with_toolchain(model, export_path, toolchain, toolchain_python)
        save = save_model
        if embed_tflite:
            save = functools.partial(save_with_tflite, tflite=tflite_bytes(model)[0])
        if cpp_gen_cfg is not None:
            log.warning("'cpp_gen_cfg' param of 'export_rknn' has been deprecated. Please call 'codegen' to "
                        "generate a cpp demo.")
        if kwargs:
            log.warning(f"export_rknn: ignoring unknown argument(s) {sorted(kwargs)}")
        size = save(model, export_path)
        self._export_path = export_path
        log.info(f"export_rknn: {export_path} ({size / 1024:.1f} KiB)")
        return 0

    def _export_with_toolchain(self, model: RKNNModel, export_path: str, toolchain: str,
                               toolchain_python: str | None) -> int:
        if toolchain != rockchip.TOOLCHAIN:
            raise ConfigError(f"export_rknn: toolchain '{toolchain}' is not known; the one back end is "
                              f"'{rockchip.TOOLCHAIN}' (leave toolchain unset for openrknn's own .rknn)")
        if self._source is None:
            raise RuntimeStateError("export_rknn(toolchain=...) compiles the source model again: load and build "
                                    "it in this session (a model from load_rknn has no source)")
        rockchip.compile_with_vendor(model, self._source.model, self._cfg(), self._build_args.get("dataset"),
                                     export_path, toolchain_python, self._build_args.get("rknn_batch_size"),
                                     has_custom_ops=bool(self._custom_ops.names()))
        self._export_path = None   # codegen ships openrknn files only
        return 0

    @api_call
    def export_tflite(self, export_path: str, float_io: bool = True, report_path: str | None = None) -> int:
        """Save the built int8 model as a fully-int8 ``.tflite`` (LiteRT, Mesa Teflon); prints which layers
        Teflon's Rockchip backend would take (docs/deployment.md)."""
        export_tflite(self._require_model("export_tflite"), export_path, float_io, report_path)
        return 0

    # ---------------------------------------------------------------- runtime
    @api_call
    def init_runtime(self, target: str | None = None, device_id: str | None = None, perf_debug: bool = False,
                     eval_mem: bool = False, async_mode: bool = False, core_mask: int = RuntimeInfo.NPU_CORE_AUTO,
                     fallback_prior_device: str = "cpu", simulate: str = "npu") -> int:
        """Start the runtime. ``target=None`` is the simulator; a platform name without a connected
        board also runs the simulator of that platform (with a warning).

        ``simulate`` (openrknn): ``'npu'`` (default) simulates the NPU the model is built for;
        ``'tflite'`` simulates the file ``export_tflite`` writes, as LiteRT runs it (float layers in
        float32 on the CPU, int8 intermediates; docs/deployment.md)."""
        model = self._require_model("init_runtime")
        board = None
        if target is not None:
            chip = chips.get_chip(target)
            if not any(chip.name in chips.get_chip(p).compatible for p in model.platforms):
                raise RuntimeStateError(f"the model is built for {model.platforms}; it cannot run on {chip.name}")
            board = remote.resolve_device(device_id)   # a board running `openrknn serve` (docs/deployment.md)
            if board is None and devices.find_device(device_id) is None:
                log.warning(f"init_runtime: no {chip.name} board connected (adb); using the {chip.name} simulator "
                            "instead: inference runs on the PC, eval_perf/eval_memory give estimates")
        if core_mask not in self.VALID_CORE_MASKS:
            raise RuntimeStateError(f"core_mask {core_mask:#x} is not one of the RKNN.NPU_CORE_* values")
        if model.metadata.get("single_core_mode") and core_mask not in (0x0, 0x1, 0x2, 0x4):
            log.warning("init_runtime: the model was built with single_core_mode=True; it runs on one core")
            core_mask = self.NPU_CORE_AUTO
        if async_mode and board is None:
            log.warning("init_runtime: async_mode has no effect on the simulator (results are never delayed)")
        if fallback_prior_device not in ("cpu", "gpu"):
            raise RuntimeStateError("fallback_prior_device must be 'cpu' or 'gpu'")
        if perf_debug:
            log.warning("Flag perf_debug has been set, it will affect the performance of inference!")
        if eval_mem:
            log.warning("Flag eval_mem has been set, it will affect the performance of inference!")
        self._close_runtime()
        self._runtime_options = {"target": target, "perf_debug": perf_debug, "eval_mem": eval_mem,
                                 "core_mask": core_mask}
        if board is not None:
            self._runtime = remote.open_runtime(board, model, {**self._runtime_options, "async_mode": async_mode})
            log.info(f"init_runtime: running on {self._runtime.label}")
            return 0
        self._runtime = Simulator(_simulated(model, simulate, "init_runtime"), self._custom_ops)
        log.info(f"init_runtime: simulator ready ({'quantized ' + str(model.quantized_dtype) if model.is_quantized else model.float_dtype})")
        return 0

    @api_call
    def inference(self, inputs: Sequence[Any], data_type: str | None = None,
                  data_format: Sequence[str] | str | None = None, inputs_pass_through: Sequence[int] | None = None,
                  get_frame_id: bool = False) -> list[np.ndarray] | None:
        """Run the model; returns a list of float32 arrays (None on failure)."""
        return self._run_inference(inputs, data_type, data_format, inputs_pass_through, get_frame_id)

    @api_call
    def eval_perf(self, is_print: bool = True, fix_freq: bool = True, inputs: Any = None,
                  loop_cnt: int | None = None, report_path: str | None = None) -> dict[str, Any] | None:
        """Estimate per-layer and total time on the target platform (cost model).

        ``report_path`` (openrknn): also write the result as a self-contained HTML page there."""
        model = self._require_model("eval_perf")
        if self._runtime is None:
            raise RuntimeStateError("call init_runtime() before eval_perf()")
        chip = chips.get_chip(self._runtime_options.get("target") or model.platforms[0])
        if getattr(self._runtime, "is_remote", False):
            return remote_report.eval_perf(self._runtime, model, chip, self._runtime_options.get("core_mask", 0),
                                           is_print, inputs, loop_cnt, bool(self._runtime_options.get("perf_debug")))
        report = profile.estimate_perf(model, chip, core_mask=self._runtime_options.get("core_mask", 0))
        perf_debug = bool(self._runtime_options.get("perf_debug"))
        if is_print:
            print(profile.format_perf(report, perf_debug=perf_debug))
        if report_path:
            log.info(f"eval_perf: report saved to {write_html(report_path, perf_html([report]))}")
        return report.to_dict(perf_debug=perf_debug)

    @api_call
    def check_limits(self, target_platform: str | None = None, is_print: bool = True,
                     data_type: str | None = None) -> int:
        """(openrknn) Check every layer of the built model against the chip's documented NPU limits
        (Rockchip's operator list): layers that fall back to the CPU, cannot run on the chip, or break
        a hardware limit. ``data_type`` ('int8', 'int16', 'float16') judges every layer in that type
        instead of the build's. The findings are then in ``self.limit_findings`` (docs/npu-limits.md)."""
        report = limits.check_model(self._require_model("check_limits"), target_platform, data_type)
        self.limit_findings = list(report.findings)
        if is_print:
            print(limits.format_report(report))
        return 0

    @api_call
    def eval_memory(self, is_print: bool = True, report_path: str | None = None) -> dict[str, Any] | None:
        """Estimate NPU memory use: weights, internal tensors after buffer reuse, other.

        ``report_path`` (openrknn): also write the result as a self-contained HTML page there."""
        model = self._require_model("eval_memory")
        if self._runtime is None or not self._runtime_options.get("eval_mem"):
            raise RuntimeStateError("When init runtime, parameter <eval_mem> should be set to True, or we can not "
                                    "eval memory!")
        if getattr(self._runtime, "is_remote", False):
            return remote_report.eval_memory(self._runtime, is_print)
        chip = chips.get_chip(self._runtime_options.get("target") or model.platforms[0])
        report = profile.estimate_memory(model, chip)
        if is_print:
            print(profile.format_memory(report))
        if report_path:
            log.info(f"eval_memory: report saved to {write_html(report_path, memory_html(report))}")
        return report.to_dict()

    @api_call
    def accuracy_analysis(self, inputs: Any, output_dir: str | None = "./snapshot", target: str | None = None,
                          device_id: str | None = None, calc_qnt_error: bool = True, simulate: str = "npu") -> int:
        """Per-layer accuracy of the built model against the float model.

        ``simulate`` (openrknn): ``'tflite'`` analyses the model as exported to TFLite (see
        ``init_runtime``)."""
        if self._loaded_from_rknn:
            raise RuntimeStateError("accuracy_analysis needs the original model: after load_rknn the float model "
                                    "is not available. Load the source model and build it instead")
        model = self._require_model("accuracy_analysis")
        board = remote.resolve_device(device_id) if target is not None else None
        if target is not None and board is None:
            log.warning(f"accuracy_analysis: no board connection; target '{target}' is compared on the simulator only")
        result = run_accuracy_analysis(_simulated(model, simulate, "accuracy_analysis"), inputs, output_dir,
                                       self._cfg(), self._custom_ops)
        if board is not None:
            runtime = remote.open_runtime(board, model, {"target": target})
            try:
                remote_report.accuracy_on_board(runtime, model, result, result.golden, output_dir or DEFAULT_SNAPSHOT_DIR)
            finally:
                runtime.close()
        return 0

    @api_call
    def evaluate(self, dataset: str, labels: str | None = None, task: str | None = None, decoder: Any = None,
                 top_k: int = 5, workers: int | None = None, ray_address: str | None = None,
                 cache: str | bool | None = True, images_dir: str | None = None, per_class: bool = False,
                 is_print: bool = True) -> dict[str, Any] | None:
        """Run the float model and the built model over a dataset and report the task metric side by
        side (docs/evaluation.md); the report as a dict, None on failure.

        ``cache``: True = ~/.cache/openrknn/eval.sqlite, a path, or None/False for none.
        """
        model = self._require_model("evaluate")
        name = model.quantized_dtype if model.is_quantized else model.float_dtype
        report = evaluate_built([(str(name), model)], dataset, labels, images_dir, task, decoder, top_k,
                                workers=workers, ray_address=ray_address,
                                cache=default_cache_path() if cache is True else cache or None,
                                rgb2bgr=getattr(self._cfg(), "quant_img_RGB2BGR", False), per_class=per_class,
                                is_print=is_print)
        return report.to_dict()

    # ---------------------------------------------------------------- info
    def get_sdk_version(self) -> str:
        """The version string in the documented banner format."""
        if getattr(self._runtime, "is_remote", False):
            return self._runtime.sdk_version()   # the board's banner (None and an E line if it does not answer)
        text = sdk_version_text()
        print(text)
        return text

    # ---------------------------------------------------------------- custom ops / later features
    @api_call
    def reg_custom_op(self, custom_op: Any) -> int:
        """Register a Python custom op class (call between config() and load_xxx())."""
        self._custom_ops.register(custom_op)
        log.info(f"reg_custom_op: '{custom_op.op_type}' registered")
        return 0

    @api_call
    def register_op(self, op_path: str) -> int:
        raise NotSupportedError("register_op (Toolkit 1 .rknnop plugins) is not supported: those plugins are compiled "
                                "for Rockchip's closed runtime. Write the op as a Python class and use reg_custom_op()")

    @api_call
    def auto_hybrid_report(self, dataset: str | None = None, target_platforms: Sequence[str] | None = None,
                           max_points: int = 10, is_print: bool = True, report_path: str | None = None,
                           step1_dir: str | None = None) -> list[dict[str, Any]] | None:
        """Build with ``auto_hybrid`` and measure the accuracy / speed trade-off (openrknn).

        Quantizes with ``dataset``, runs the auto_hybrid search for ``target_platform`` (the built
        model is its choice, as after ``build(auto_hybrid=True)``), then measures builds along the
        search order: 0, 1, 2, 4, … moves and the choice. Returns one dict per build —
        ``{'moves', 'float16', 'int16', 'cosine', 'meets', 'fps': {platform: FPS}, 'chosen', 'last_move'}``
        — prints the table, and with ``report_path`` writes an HTML page with the plot.
        ``target_platforms``: chips to estimate FPS on (default: rk3566 and rk3588, and the target).
        ``max_points=0``: only the choice, no curve. ``step1_dir``: also write the hybrid step-1 files
        there ({name}.model/.data/.quantization.cfg) with the chosen layers in ``custom_quantize_layers``,
        so ``hybrid_quantization_step2`` rebuilds the same model."""
        if self._source is None:
            raise RuntimeStateError("no model loaded: call load_onnx()/load_xxx() before auto_hybrid_report()")
        model, points = pipeline.auto_hybrid_report(self._source, self._cfg(), dataset, self._custom_ops,
                                                    self._model_name, target_platforms, max_points, is_print,
                                                    report_path, step1_dir)
        self._model, self._export_path, self._runtime = model, None, None
        return points

    @api_call
    def hybrid_quantization_step1(self, dataset: str | None = None, rknn_batch_size: int | None = None,
                                  proposal: bool = False, proposal_dataset_size: int = 1,
                                  custom_hybrid: Any = None) -> int:
        """Write {model_name}.model / .data / .quantization.cfg in the current folder (seed 002 §6.3)."""
        if self._source is None:
            raise RuntimeStateError("no model loaded: call load_onnx()/load_xxx() before hybrid_quantization_step1()")
        pipeline.hybrid_step1(self._source, self._cfg(), dataset, rknn_batch_size, self._custom_ops,
                              self._model_name, proposal, proposal_dataset_size, custom_hybrid)
        return 0

    @api_call
    def hybrid_quantization_step2(self, model_input: str, data_input: str, model_quantization_cfg: str) -> int:
        """Build the model from the step-1 files and the edited config."""
        model = pipeline.hybrid_step2(model_input, data_input, model_quantization_cfg, self._custom_ops)
        self._model, self._source, self._runtime = model, None, None
        self._loaded_from_rknn, self._export_path = False, None
        return 0

    @api_call
    def export_encrypted_rknn_model(self, input_model: str, output_model: str | None = None,
                                    crypt_level: int = 1) -> int:
        """Encrypt an exported .rknn with AES-256-GCM (levels and key handling: docs/model-tools.md)."""
        if input_model is None:
            raise RuntimeStateError("input_model is None: give the .rknn file written by export_rknn()")
        encrypt_model_file(input_model, output_model, crypt_level)
        return 0

    @api_call
    def export_rknn_sync_model(self, input_model: str, sync_uids: Any = None, output_model: str | None = None) -> int:
        """Toolkit1: write a segmented model with sync layers after ``sync_uids`` (eval_perf layer ids)."""
        export_sync_model(input_model, sync_uids, output_model)
        return 0

    @api_call
    def codegen(self, output_path: str, inputs: Sequence[str] | None = None, overwrite: bool = False) -> int:
        """Generate a C/C++ deployment demo (CMake project) for the exported model."""
        model = self._require_model("codegen")
        if self._export_path is None:
            raise RuntimeStateError("call export_rknn() (or load_rknn()) before codegen(): the demo ships the .rknn file")
        generate_demo(model, output_path, inputs, overwrite, model_path=self._export_path,
                      custom_ops=self._custom_ops)
        return 0

    @api_call
    def optimize_onnx(self, model: str, optimized_path: str | None = None, passes_enable: Any = None,
                      inputs_for_dump: Any = None) -> int:
        """Run the graph passes on an ONNX file and save the result."""
        source = load_onnx(model)
        optimized = optimize(source.model, self._cfg().optimization_level)
        path = optimized_path or os.path.splitext(model)[0] + ".optimized.onnx"
        write_atomic(path, optimized.SerializeToString())
        onnx.checker.check_model(path)
        log.info(f"optimize_onnx: {path}")
        return 0

    def release(self) -> None:
        """Free the model and the runtime."""
        self._close_runtime()
        self._model = None
        self._source = None


def _simulated(model, simulate: str, api: str):
    """The model the simulator runs: as built for the NPU, or as exported to TFLite."""
    if simulate == "npu":
        return model
    if simulate != "tflite":
        raise RuntimeStateError(f"simulate must be 'npu' or 'tflite', not {simulate!r}")
    log.info(f"{api}: simulating the model as exported to TFLite (CPU float layers in float32, int8 intermediates)")
    return as_exported(model)
