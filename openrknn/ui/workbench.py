"""The workbench's state (one model at a time, one local user) and its actions over the RKNN API.

Every step goes through the documented ``RKNN`` methods, so the checks and ``E`` messages are the
API's own; a failing step leaves nothing on disk (uploads of a rejected model are removed).
"""
from __future__ import annotations

import json
import os
import shutil
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from openrknn import chips, frontends, log, profile
from openrknn.api.rknn import RKNN
from openrknn.graph.input_files import read_input
from openrknn.graph.layer_index import layer_of_node, node_of_layer, npu_layer_table
from openrknn.graph.rknn_model import LAYOUT_NCHW
from openrknn.quant.dataset import IMAGE_EXTENSIONS
from openrknn.report import memory_html, perf_html, write_html
from openrknn.ui.forms import CONFIG_FIELDS, field_of
from openrknn.ui.hybrid import rebuild_with_float_layers
from openrknn.ui.jobs import Job, JobRunner, collect_log, errors_in

# framework -> (what the model file is, the second file or None): the Model page's choices and hints
FRONTENDS: dict[str, tuple[str, str | None]] = {**frontends.FRAMEWORKS, "rknn": (".rknn", None)}
BUSY = "a job is running: wait until it ends (Progress page)"


def _sizes(text: str) -> list[list[int]] | None:
    """'1,3,224,224 # 1,10' -> [[1, 3, 224, 224], [1, 10]]."""
    if not text.strip():
        return None
    return [[int(v) for v in part.replace(",", " ").split()] for part in text.split("#")]


def _names(text: str) -> list[str] | None:
    return [n for n in text.replace(",", " ").split()] or None


@dataclass
class ModelChoice:
    framework: str
    model: str
    weights: str | None = None
    input_size_list: str = ""
    inputs: str = ""
    outputs: str = ""
    upload_dir: str | None = None   # uploaded files: removed when the model is rejected or replaced


@dataclass
class Workbench:
    """Everything the pages show; actions return ``{field: message}`` errors (empty = success)."""

    work_dir: str
    runner: JobRunner = field(default_factory=JobRunner)
    rknn: Any = None
    choice: ModelChoice | None = None
    config: dict[str, Any] = field(default_factory=dict)
    build_options: dict[str, Any] = field(default_factory=dict)
    errors: dict[str, dict[str, str]] = field(default_factory=dict)   # page -> field -> message
    analysis_dir: str | None = None
    perf_reports: list[Any] = field(default_factory=list)
    memory_report: Any = None
    inference: list[dict[str, Any]] = field(default_factory=list)
    export_path: str | None = None
    built: bool = False

    def folder(self, name: str) -> str:
        path = os.path.join(self.work_dir, name)
        os.makedirs(path, exist_ok=True)
        return path

    @property
    def model(self) -> Any:
        """The built model the facade holds (read only, for the graph and the estimates)."""
        return getattr(self.rknn, "_model", None) if self.built else None

    # ------------------------------------------------------------------ model + config
    def _load(self, choice: ModelChoice, config: dict[str, Any]) -> tuple[Any, dict[str, str]]:
        """A new ``RKNN`` with ``config`` applied and the model loaded; errors by field."""
        rknn = RKNN(verbose=False)
        lines: list[str] = []
        with collect_log(lines):
            if choice.framework != "rknn" and rknn.config(**config) != 0:
                names = [name for name, *_ in CONFIG_FIELDS]
                return None, {field_of(e, names, "target_platform"): e for e in errors_in(lines)}
            try:
                sizes = _sizes(choice.input_size_list)
            except ValueError:
                return None, {"input_size_list": f"input_size_list '{choice.input_size_list}' must be integers like "
                                                  "1,3,224,224 ('#' between inputs)"}
            status = self._call_loader(rknn, choice, sizes)
        if status != 0:
            messages = errors_in(lines) or [f"loading the {choice.framework} model failed"]
            return None, {field_of(m, ("input_size_list", "inputs", "outputs", "weights"), "model"): m
                          for m in messages}
        return rknn, {}

    @staticmethod
    def _call_loader(rknn: Any, c: ModelChoice, sizes: list[list[int]] | None) -> int:
        if c.framework == "rknn":
            return rknn.load_rknn(path=c.model)
        return frontends.load(rknn, c.framework, c.model, c.weights, inputs=_names(c.inputs),
                              outputs=_names(c.outputs), input_size_list=sizes)

    def pick_model(self, choice: ModelChoice) -> dict[str, str]:
        """Load the chosen model with the current config; a rejected upload is deleted."""
        if choice.framework not in FRONTENDS:
            return self._fail("model", {"framework": f"unknown framework '{choice.framework}'"}, choice)
        if not choice.model:
            return self._fail("model", {"model": "choose a model file (upload) or type its path"}, choice)
        with self.runner.exclusive() as free:
            if not free:
                return self._fail("model", {"_form": BUSY}, choice)
            rknn, errors = self._load(choice, self.config if choice.framework != "rknn" else {})
            if errors:
                return self._fail("model", errors, choice)
            if self.choice and self.choice.upload_dir and self.choice.upload_dir != choice.upload_dir:
                shutil.rmtree(self.choice.upload_dir, ignore_errors=True)
            self.rknn, self.choice, self.built = rknn, choice, choice.framework == "rknn"
            self.analysis_dir, self.perf_reports, self.memory_report, self.inference = None, [], None, []
            self.errors.clear()   # every page's errors were about the previous model
            return {}

    def _fail(self, page: str, errors: dict[str, str], choice: ModelChoice | None = None) -> dict[str, str]:
        if choice is not None and choice.upload_dir:
            shutil.rmtree(choice.upload_dir, ignore_errors=True)
        self.errors[page] = errors
        return errors

    def apply_config(self, config: dict[str, Any]) -> dict[str, str]:
        """``config()`` then reload the model (the documented order: config before load)."""
        if self.choice is None:
            return self._fail("config", {"target_platform": "pick a model first (Model page)"})
        with self.runner.exclusive() as free:
            if not free:
                return self._fail("config", {"_form": BUSY})
            rknn, errors = self._load(self.choice, config)
            if errors:
                return self._fail("config", errors)
            self.rknn, self.config, self.built = rknn, config, self.choice.framework == "rknn"
            self.errors.pop("config", None)
            return {}

    # ------------------------------------------------------------------ dataset
    def dataset_listing(self, path: str) -> tuple[str | None, str | None]:
        """A dataset .txt as given, or a listing written for a folder of images/.npy files.

        Returns ``(dataset path, error)``; nothing is written for an empty folder.
        """
        path = path.strip()
        if not path:
            return None, None
        if not os.path.isdir(path):
            return path, None   # a dataset .txt: build() checks it
        files = sorted(f for f in os.listdir(path) if f.lower().endswith(IMAGE_EXTENSIONS + (".npy",)))
        if not files:
            return None, (f"dataset folder '{path}' has no calibration file ({' '.join(IMAGE_EXTENSIONS)} .npy); "
                          "put a few representative inputs there")
        listing = os.path.join(self.folder("datasets"), f"dataset_{len(os.listdir(self.folder('datasets')))}.txt")
        with open(listing, "w", encoding="utf-8") as handle:
            handle.writelines(os.path.join(os.path.abspath(path), f) + "\n" for f in files)
        return listing, None

    # ------------------------------------------------------------------ background work
    def start_build(self, config: dict[str, Any], do_quantization: bool, dataset: str,
                    auto_hybrid: bool) -> Job | dict[str, str]:
        """Check config and dataset now (errors next to the fields), then build in the background."""
        errors = self.apply_config(config)
        if errors:
            return errors
        listing, problem = self.dataset_listing(dataset) if do_quantization else (None, None)
        if problem:
            return self._fail("config", {"dataset": problem})
        self.build_options = {"do_quantization": do_quantization, "dataset": dataset, "auto_hybrid": auto_hybrid,
                              "listing": listing}

        def work(job: Job) -> bool:
            status = self.rknn.build(do_quantization=do_quantization, dataset=listing, auto_hybrid=auto_hybrid)
            if status != 0:
                names = [name for name, *_ in CONFIG_FIELDS] + ["dataset"]
                self.errors["config"] = {field_of(e, names, "dataset"): e for e in errors_in(job.lines)}
                return False
            self.built, self.analysis_dir, self.perf_reports, self.inference = True, None, [], []
            return True

        job = self.runner.start("build", work, "/graph", "/config")
        return self._fail("config", {"_form": BUSY}) if job is None else job

    def _start(self, title: str, work: Any, page: str) -> Job | dict[str, str]:
        """Start ``work`` in the background; it goes on to the page of its results (or back, failing)."""
        job = self.runner.start(title, work, f"/{page}", f"/{page}")
        return self._fail(page, {"_form": BUSY}) if job is None else job

    def start_analysis(self, image: str | None) -> Job | dict[str, str]:
        """``accuracy_analysis`` on ``image`` (default: the first calibration sample)."""
        if self.model is None:
            return self._fail("accuracy", {"image": "build the model first"})
        inputs: Any = image or self.build_options.get("listing")
        if not inputs:
            return self._fail("accuracy", {"image": "upload an input (the model was built without a dataset)"})
        out = os.path.join(self.work_dir, "analysis")

        def work(job: Job) -> bool:
            shutil.rmtree(out, ignore_errors=True)
            if self.rknn.accuracy_analysis(inputs=[inputs] if image else inputs, output_dir=out) != 0:
                self.errors["accuracy"] = {"image": " ".join(errors_in(job.lines))}
                return False
            self.analysis_dir = out
            self.errors.pop("accuracy", None)
            return True

        return self._start("accuracy_analysis", work, "accuracy")

    def analysis_rows(self) -> list[dict[str, Any]]:
        if not self.analysis_dir:
            return []
        with open(os.path.join(self.analysis_dir, "error_analysis.json"), encoding="utf-8") as handle:
            return json.load(handle)

    def layer_values(self, tensor: str) -> dict[str, np.ndarray]:
        """The float (golden) and quantized (simulator) values of one analysed tensor."""
        if not self.analysis_dir:
            return {}
        files = {}
        with open(os.path.join(self.analysis_dir, "map_name_to_file.txt"), encoding="utf-8") as handle:
            for line in handle:
                name, _, file_name = line.rstrip("\n").rpartition(" ")
                files[name] = file_name
        out = {}
        stem = os.path.splitext(files.get(tensor, "\0"))[0]   # map names the vendor's .txt; read the npy copy
        for label, sub in (("float (golden)", "golden"), ("simulator", "simulator")):
            path = os.path.join(self.analysis_dir, sub, "npy", f"{stem}.npy")
            if tensor in files and os.path.isfile(path):
                out[label] = np.load(path).ravel()
        return out

    def start_perf(self, chip_names: list[str]) -> Job | dict[str, str]:
        """eval_perf on each chosen chip (side by side) and eval_memory on the model's platform."""
        model = self.model
        if model is None:
            return self._fail("perf", {"chips": "build the model first"})
        names = chip_names or [model.platforms[0]]

        def work(job: Job) -> bool:
            reports = []
            for name in names:
                try:
                    reports.append(profile.estimate_perf(model, chips.get_chip(name)))
                except Exception as e:  # noqa: BLE001 - one chip failing leaves the others
                    log.warning(f"eval_perf on {name}: {e}")
            self.perf_reports = reports
            self.memory_report = profile.estimate_memory(model, chips.get_chip(model.platforms[0]))
            reports_dir = self.folder("reports")
            write_html(os.path.join(reports_dir, "eval_perf.html"), perf_html(reports))
            write_html(os.path.join(reports_dir, "eval_memory.html"), memory_html(self.memory_report))
            log.info(f"eval_perf: {', '.join(f'{r.chip} {r.total_time_us} us' for r in reports)}")
            return bool(reports)

        return self._start("eval_perf / eval_memory", work, "perf")

    def hybrid_candidates(self) -> list[tuple[str, str, str]]:
        """``(layer name, op type, stored tensor)`` of the NPU layers that can stay in float16 — named as
        the Accuracy page and the hybrid cfg name them (``graph/layer_index``)."""
        model = self.model
        if model is None or model.golden is None:
            return []
        return [(name, op, name) for name, op in npu_layer_table(model.graph.graph)]

    def float_layers(self) -> list[str]:
        """The layers in float16 now, by layer name (the build records node names)."""
        model = self.model
        if model is None:
            return []
        names = layer_of_node(model.graph.graph)
        return list(dict.fromkeys(names.get(n, n) for n in model.metadata.get("quantization", {}).get("float_layers", [])))

    def start_hybrid(self, layers: list[str]) -> Job | dict[str, str]:
        """Rebuild quantized with ``layers`` kept in float16 (the hybrid quantization mechanism)."""
        if self.model is None or not self.build_options.get("listing"):
            return self._fail("hybrid", {"layers": "build the model quantized (with a dataset) first"})

        nodes = node_of_layer(self.model.graph.graph)
        chosen = [nodes.get(layer, layer) for layer in layers]   # hybrid settings take node names

        def work(job: Job) -> bool:
            if rebuild_with_float_layers(self.rknn, self.build_options["listing"], chosen) != 0:
                self.errors["hybrid"] = {"layers": " ".join(errors_in(job.lines))}
                return False
            self.analysis_dir, self.perf_reports, self.inference = None, [], []
            self.errors.pop("hybrid", None)
            return True

        return self._start("hybrid rebuild", work, "hybrid")

    def start_inference(self, image: str) -> Job | dict[str, str]:
        """Run the simulator on one input file; the page shows each output and a top-5."""
        model = self.model
        if model is None:
            return self._fail("inference", {"image": "build the model first"})

        def work(job: Job) -> bool:
            try:
                data = read_input(image, model.inputs[0], resize=True, caller="inference")
            except Exception as e:  # noqa: BLE001 - any unreadable input is shown next to the field
                log.error(f"inference: cannot read '{os.path.basename(image)}': {e}")
                self.errors["inference"] = {"image": " ".join(errors_in(job.lines))}
                return False
            if self.rknn.init_runtime() != 0:
                return False
            spec = model.inputs[0]
            # an .npy in the graph's own NCHW layout is passed as such (images come NHWC, the documented default)
            nchw = spec.layout == LAYOUT_NCHW and data.ndim == 4 and tuple(data.shape) == tuple(spec.shape)
            outputs = self.rknn.inference(inputs=[data], data_format="nchw" if nchw else None)
            if outputs is None:
                self.errors["inference"] = {"image": " ".join(errors_in(job.lines))}
                return False
            self.inference = [summarize(spec.name, out) for spec, out in zip(model.outputs, outputs)]
            self.errors.pop("inference", None)
            return True

        return self._start("inference", work, "inference")

    def export(self) -> dict[str, str]:
        """``export_rknn`` into the work folder; the page then offers the download."""
        if self.model is None:
            return self._fail("export", {"_form": "build the model first"})
        name = os.path.splitext(os.path.basename(self.choice.model if self.choice else "model"))[0] or "model"
        path = os.path.join(self.folder("exports"), f"{name}.rknn")
        lines: list[str] = []
        with self.runner.exclusive() as free, collect_log(lines):
            if not free:
                return self._fail("export", {"_form": BUSY})
            if self.rknn.export_rknn(path) != 0:
                return self._fail("export", {"_form": " ".join(errors_in(lines))})
        self.export_path = path
        self.errors.pop("export", None)
        return {}


def summarize(name: str, output: np.ndarray) -> dict[str, Any]:
    """Shape, range and (for a score vector) the five best classes of one output."""
    flat = np.asarray(output, np.float32).ravel()
    top = [(int(i), float(flat[i])) for i in np.argsort(flat)[::-1][:5]] if output.ndim <= 2 and flat.size >= 5 else []
    return {"name": name, "shape": list(output.shape), "min": float(flat.min()), "max": float(flat.max()),
            "mean": float(flat.mean()), "top5": top}
