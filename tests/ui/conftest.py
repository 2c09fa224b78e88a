"""Workbench test helpers: a small model with a calibration folder, and a bounded job wait."""
from __future__ import annotations

import time
from pathlib import Path

import numpy as np
import pytest

from tests.conftest import make_conv_model



@pytest.fixture
def small_model(tmp_path: Path) -> tuple[Path, Path]:
    """A 3-channel conv classifier (.onnx) and a folder of three .npy calibration inputs."""
    model = make_conv_model(tmp_path / "small.onnx")
    folder = tmp_path / "calib"
    folder.mkdir()
    rng = np.random.default_rng(3)
    for i in range(3):
        np.save(folder / f"c{i}.npy", rng.uniform(0, 255, (1, 3, 16, 16)).astype(np.float32))
    return model, folder


def wait_job(bench, job_id: int, limit_s: float = 60.0) -> str:
    """The final state of a background job (polls at most ``limit_s`` seconds)."""
    deadline = time.monotonic() + limit_s
    while time.monotonic() < deadline:
        job = bench.runner.jobs[job_id]
        if job.state != "running":
            return job.state
        time.sleep(0.05)
    raise AssertionError(f"job {job_id} still running after {limit_s} s")
