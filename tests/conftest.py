"""Shared fixtures: small generated models and the location of the shared real-model folder.
Helper functions live in ``tests/helpers.py``."""
from __future__ import annotations

from pathlib import Path

import pytest

from tests.helpers import make_conv_model, shared_data_root


@pytest.fixture
def shared_data() -> Path:
    root = shared_data_root()
    if root is None:
        pytest.skip("real models not found: set OPENRKNN_TEST_DATA or put shared/ beside the checkout")
    return root


@pytest.fixture
def conv_model(tmp_path: Path) -> Path:
    return make_conv_model(tmp_path / "conv.onnx")
