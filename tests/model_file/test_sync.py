"""Segmented (sync) models: markers recorded in the header, ids checked against eval_perf."""
from __future__ import annotations

from pathlib import Path

import pytest

from openrknn.errors import ConfigError, ModelFileError
from openrknn.model_file import load_model, save_model
from openrknn.model_file.container import FLAG_ENCRYPTED, encode, read_file
from openrknn.model_file.sync import export_sync_model, sync_record
from tests.helpers import exported_conv_model


@pytest.fixture(scope="module")
def rk1808_model(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return exported_conv_model(tmp_path_factory.mktemp("sync"), "rk1808")


def test_markers_recorded_and_graph_unchanged(rk1808_model: Path, tmp_path: Path):
    out = export_sync_model(str(rk1808_model), [3, 1], str(tmp_path / "sync.rknn"))
    record = sync_record(load_model(out).metadata)
    assert record["uids"] == [1, 3] and record["platform"] == "rk1808"
    assert [p["layer"] for p in record["points"]] == ["Conv:conv", "Gemm:fc"]
    assert record["segments"] == [[0, 1], [2, 3], [4, 4]]
    assert read_file(out).sections == read_file(str(rk1808_model)).sections
    assert sync_record(load_model(str(rk1808_model)).metadata) is None


def test_record_survives_reexport(rk1808_model: Path, tmp_path: Path):
    out = export_sync_model(str(rk1808_model), [2], str(tmp_path / "sync.rknn"))
    again = tmp_path / "again.rknn"
    save_model(load_model(out), str(again))
    assert sync_record(load_model(str(again)).metadata)["uids"] == [2]


def test_default_output_overwrites_input(rk1808_model: Path, tmp_path: Path):
    copy = tmp_path / "m.rknn"
    copy.write_bytes(rk1808_model.read_bytes())
    assert export_sync_model(str(copy), 1) == str(copy)
    assert sync_record(load_model(str(copy)).metadata)["uids"] == [1]


@pytest.mark.parametrize("uids, message", [([9], "eval_perf lists ids 0..4"), ([4], "last layer"),
                                           ([], "empty"), (["conv"], "not a layer id"), ([True], "not a layer id")])
def test_invalid_uids_are_refused(rk1808_model: Path, tmp_path: Path, uids, message):
    with pytest.raises(ConfigError, match=message):
        export_sync_model(str(rk1808_model), uids, str(tmp_path / "x.rknn"))
    assert not (tmp_path / "x.rknn").exists()


def test_encrypted_input_is_refused(rk1808_model: Path, tmp_path: Path):
    container = read_file(str(rk1808_model))
    container.flags |= FLAG_ENCRYPTED
    bad = tmp_path / "enc.rknn"
    bad.write_bytes(encode(container))
    with pytest.raises(ModelFileError, match="encrypted"):
        export_sync_model(str(bad), [1], str(tmp_path / "x.rknn"))
