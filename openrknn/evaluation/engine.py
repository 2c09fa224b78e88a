"""The evaluation engine: shards of images go to workers, records come back to one writer.

* Streaming: the dataset is cut into shards of ``shard_size`` images; at most two shards per
  worker are in flight, so memory stays bounded whatever the dataset size.
* Resumable: each shard's records are committed to the cache when it comes back; a record already
  cached is never recomputed (a second build re-uses the float reference's records and outputs).
* Deterministic: shards are collected in submission order, every worker runs one onnxruntime thread,
  and the metrics are computed afterwards from the cache in dataset order — so ``workers=1``,
  ``workers=N`` and Ray give the same numbers.
"""
from __future__ import annotations

import multiprocessing
import os
import time
from collections import deque
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass
from typing import Any, Callable, Sequence

from tqdm import tqdm

from openrknn import log
from openrknn.errors import ConfigError
from openrknn.evaluation.cache import ResultCache
from openrknn.evaluation.datasets import EvalDataset
from openrknn.evaluation.metrics import Accumulator, ModelMetrics
from openrknn.evaluation.models import EvalModel
from openrknn.evaluation.worker import PostProcess, ShardResult, ShardTask, run_key, run_shard

SHARD_SIZE = 16


@dataclass
class EvalReport:
    """The metrics per model (float reference first) and what the run cost."""

    task: str
    rows: list[ModelMetrics]
    images: int
    computed: int = 0          # (model, image) records computed by this run
    cached: int = 0            # (model, image) records found in the cache
    seconds: float = 0.0
    backend: str = "local"

    def to_dict(self) -> dict[str, Any]:
        return {"task": self.task, "images": self.images, "computed": self.computed, "cached": self.cached,
                "seconds": self.seconds, "backend": self.backend, "models": [r.to_dict() for r in self.rows]}


def evaluate(models: Sequence[EvalModel], dataset: EvalDataset, reference: EvalModel | None = None,
             post: PostProcess | None = None, workers: int | None = None, ray_address: str | None = None,
             cache_path: str | None = None, shard_size: int = SHARD_SIZE, rgb2bgr: bool = False,
             on_shard: Callable[[int], None] | None = None) -> EvalReport:
    """Run ``reference`` and ``models`` over ``dataset`` and measure them.

    Args:
        models: the builds to compare (``EvalModel.from_rknn``).
        dataset: from ``open_dataset``.
        reference: the float model (``EvalModel.float_reference``); without it no cosine/agreement.
        post: the task's post-processing (default: from the dataset's task).
        workers: local worker processes (default: the number of cores; 1 runs in this process).
        ray_address: run on a Ray cluster instead (``auto``, ``ray://host:10001``, ``local``); needs
            ``pip install 'openrknn[ray]'``.
        cache_path: the sqlite result cache (None: in memory, not kept).
        shard_size: images per task.
        rgb2bgr: read images as BGR (``quant_img_RGB2BGR``).
        on_shard: called with the number of images done after each shard is stored.
    """
    post = post or PostProcess(task=dataset.task)
    if post.task == "detection" and post.decoder is None:
        raise ConfigError("detection needs a decoder (yolov5, yolov8, ssd, db) or a post-processing function")
    columns = ([reference] if reference is not None else []) + list(models)
    if not columns:
        raise ConfigError("nothing to evaluate: give at least one model")
    ref_index = 0 if reference is not None else None
    runs = [run_key(m, reference, post) for m in columns]
    cache = ResultCache(cache_path)
    start = time.monotonic()
    backend = _Backend(columns, workers, ray_address)
    report = EvalReport(dataset.task, [], len(dataset.samples), backend=backend.name)
    try:
        _compute(dataset, columns, runs, ref_index, post, rgb2bgr, cache, backend, shard_size, report, on_shard)
    finally:
        backend.close()
    report.seconds = time.monotonic() - start
    report.rows = _measure(dataset, columns, runs, ref_index, post, cache)
    cache.close()
    return report


def _compute(dataset: EvalDataset, columns: list[EvalModel], runs: list[str], ref_index: int | None,
             post: PostProcess, rgb2bgr: bool, cache: ResultCache, backend: "_Backend", shard_size: int,
             report: EvalReport, on_shard: Callable[[int], None] | None) -> None:
    samples = dataset.samples
    pending: deque = deque()
    done = 0
    # always shown (on stderr, as the original's bars), also when the output goes to a file or a pipe
    with tqdm(total=len(samples), desc="I evaluate", unit="img", disable=False, leave=True, mininterval=0.5) as bar:
        def collect() -> None:
            nonlocal done
            future, count = pending.popleft()
            result = future.result()
            cache.store([(runs[i], key, data) for i, key, data in result.records],
                        [(columns[ref_index].digest, key, data) for key, data in result.ref_outputs]
                        if ref_index is not None else [])
            done += count
            bar.update(count)
            if on_shard is not None:
                on_shard(done)

        for start in range(0, len(samples), max(1, shard_size)):
            shard = samples[start:start + shard_size]
            task = _plan(shard, columns, runs, ref_index, post, rgb2bgr, cache, report)
            pending.append((backend.submit(task) if task.todo else _Done(), len(shard)))
            while len(pending) > backend.in_flight:
                collect()
        while pending:
            collect()


def _plan(shard: list, columns: list[EvalModel], runs: list[str], ref_index: int | None, post: PostProcess,
          rgb2bgr: bool, cache: ResultCache, report: EvalReport) -> ShardTask:
    keys = [s.key for s in shard]
    todo: dict[str, list[int]] = {}
    for index, run in enumerate(runs):
        cached = cache.cached_images(run, keys)
        report.cached += len(cached)
        for key in keys:
            if key not in cached:
                todo.setdefault(key, []).append(index)
    report.computed += sum(len(v) for v in todo.values())
    task = ShardTask([s for s in shard if s.key in todo], todo, ref_index, post, rgb2bgr)
    if ref_index is not None:
        for key, indices in todo.items():
            if ref_index not in indices:
                outputs = cache.outputs(columns[ref_index].digest, key)
                if outputs is None:   # records kept but not the outputs (should not happen): run it again
                    indices.insert(0, ref_index)
                    report.computed += 1
                else:
                    task.ref_outputs[key] = outputs
    return task


def _measure(dataset: EvalDataset, columns: list[EvalModel], runs: list[str], ref_index: int | None,
             post: PostProcess, cache: ResultCache) -> list[ModelMetrics]:
    accumulators = [Accumulator(m.name, dataset, post.top_k, ref_index is not None and i != ref_index)
                    for i, m in enumerate(columns)]
    for sample in dataset.samples:
        records = [cache.record(run, sample.key) for run in runs]
        reference_top1 = None
        if ref_index is not None and "top" in records[ref_index] and len(records[ref_index]["top"]):
            reference_top1 = int(records[ref_index]["top"][0])
        for accumulator, record in zip(accumulators, records):
            accumulator.add(sample, record, reference_top1)
    return [a.finish() for a in accumulators]


class _Done:
    """A shard with nothing left to compute."""

    def result(self):
        return ShardResult([], [])


class _Immediate:
    def __init__(self, value) -> None:
        self.value = value

    def result(self):
        return self.value


_POOL_COLUMNS: list[EvalModel] = []


def _pool_init(columns: list[EvalModel]) -> None:
    _POOL_COLUMNS[:] = columns   # shipped once per worker process


def _pool_run(task: ShardTask):
    return run_shard(_POOL_COLUMNS, task)


class _RayFuture:
    def __init__(self, ref) -> None:
        self.ref = ref

    def result(self):
        import ray
        return ray.get(self.ref)


class _Backend:
    """Where shards run: this process, local worker processes, or a Ray cluster."""

    def __init__(self, columns: list[EvalModel], workers: int | None, ray_address: str | None) -> None:
        self.columns = columns
        self._pool: ProcessPoolExecutor | None = None
        self._ray_task = None
        if ray_address is not None:
            self._start_ray(ray_address)
            return
        count = int(workers) if workers else (os.cpu_count() or 1)
        if count < 1:
            raise ConfigError(f"workers must be 1 or more, not {workers}")
        self.name = f"local x{count}"
        self.in_flight = 2 * count
        if count > 1:
            # fork where there is fork: "spawn" re-runs the caller's main module in every worker, which
            # breaks vendor-style scripts without an `if __name__ == "__main__":` guard. The workers
            # only make sessions of their own, never touch the parent's.
            method = "fork" if "fork" in multiprocessing.get_all_start_methods() else "spawn"
            self._pool = ProcessPoolExecutor(count, mp_context=multiprocessing.get_context(method),
                                             initializer=_pool_init, initargs=(columns,))

    def _start_ray(self, address: str) -> None:
        try:
            import ray
        except ImportError as e:
            raise ConfigError("--ray needs Ray: pip install 'openrknn[ray]'") from e
        if not ray.is_initialized():
            ray.init(address=None if address == "local" else address, log_to_driver=False,
                     logging_level="ERROR")
        cpus = int(ray.cluster_resources().get("CPU", 1))
        # the models go to the object store once; each node fetches them once and every task there
        # maps the same copy (the worker processes keep their sessions across tasks)
        self._columns_ref = ray.put(self.columns)
        self._ray_task = ray.remote(num_cpus=1)(run_shard)
        self.name = f"ray x{cpus}"
        self.in_flight = 2 * cpus
        log.info(f"evaluate: Ray cluster with {cpus} CPU(s)")

    def submit(self, task: ShardTask):
        if self._ray_task is not None:
            return _RayFuture(self._ray_task.remote(self._columns_ref, task))
        if self._pool is not None:
            return self._pool.submit(_pool_run, task)
        return _Immediate(run_shard(self.columns, task))

    def close(self) -> None:
        if self._pool is not None:
            self._pool.shutdown(wait=True, cancel_futures=True)
