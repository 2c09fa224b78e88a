"""Workbench fixtures: a small model with a calibration folder."""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from tests.helpers import make_conv_model


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
