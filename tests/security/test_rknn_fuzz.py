"""Fuzzing the .rknn loader and `openrknn info` (Hypothesis): hostile files never crash, every rejection
is one clear line naming the file. ~300 cases by default; 10 000 with ``-m slow``; 100 000 in
bench/fuzz_rknn.py."""
from __future__ import annotations

import subprocess
import sys

import pytest
from hypothesis import HealthCheck, given, settings

from tests.security.rknn_fuzz_cases import FUZZ_KEY, cases, check_case, seed_files

_FAST = settings(max_examples=300, deadline=None, derandomize=True, database=None,
                 suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
_SLOW = settings(max_examples=10_000, deadline=None, database=None,
                 suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])


@pytest.fixture(autouse=True)
def _key(monkeypatch):
    monkeypatch.setenv("OPENRKNN_MODEL_KEY", FUZZ_KEY)


def test_seeds_load():
    assert all(check_case(seed) == "ok" for seed in seed_files())


@_FAST
@given(data=cases())
def test_hostile_files_fail_cleanly(data):
    check_case(data)


@pytest.mark.slow
@_SLOW
@given(data=cases())
def test_hostile_files_fail_cleanly_10k(data):
    check_case(data)


def test_info_command_on_a_hostile_file(tmp_path):
    """`openrknn info` prints one E line and exits 1 (no traceback) for a forged file."""
    from tests.security.rknn_fuzz_cases import pack, split
    version, flags, header, raw = split(seed_files()[0])
    header["inputs"][0]["shape"] = {"evil": True}
    (tmp_path / "bad.rknn").write_bytes(pack(header, raw, version, flags))
    run = subprocess.run([sys.executable, "-m", "openrknn.cli.main", "info", str(tmp_path / "bad.rknn")],
                         capture_output=True, text=True, timeout=120)
    assert run.returncode == 1 and "Traceback" not in run.stderr
    assert "header field 'inputs[0].shape'" in run.stdout + run.stderr


def test_metadata_the_stages_read_is_checked():
    """op_target / npu_limit_cpu_layers are read back by the layer record and eval_perf: a forged value is
    refused at load naming the field (found by the fuzz case above: ``"op_target": true``)."""
    from openrknn.errors import ModelFileError
    from openrknn.model_file import load_model_bytes
    from tests.security.rknn_fuzz_cases import pack, split
    for key, value in (("op_target", True), ("op_target", {"c": 3}), ("npu_limit_cpu_layers", 5)):
        version, flags, header, raw = split(seed_files()[0])
        header.setdefault("metadata", {})[key] = value
        with pytest.raises(ModelFileError, match=f"metadata.{key}"):
            load_model_bytes(pack(header, raw, version, flags), "forged.rknn")
