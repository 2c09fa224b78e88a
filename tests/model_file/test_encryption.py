"""Encrypted .rknn models: round trip per level, key handling, tamper detection, refusals."""
from __future__ import annotations

import os
import stat
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("cryptography")

from openrknn.errors import ModelFileError, NotSupportedError  # noqa: E402
from openrknn.model_file import from_container  # noqa: E402
from openrknn.model_file.container import FLAG_ENCRYPTED, decode, encode, read_file  # noqa: E402
from openrknn.model_file.encryption import (  # noqa: E402
    KEY_ENV, KEY_FILE_ENV, PAYLOAD_SECTION, decrypt_container, default_output_path, encrypt_model_file,
    read_model_container)
from tests.helpers import exported_conv_model  # noqa: E402

KEY = "correct horse battery staple"


@pytest.fixture(autouse=True)
def _isolated_keys(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Never read or create a key in the real home folder."""
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "config"))
    monkeypatch.delenv(KEY_ENV, raising=False)
    monkeypatch.delenv(KEY_FILE_ENV, raising=False)


@pytest.fixture(scope="module")
def plain_model(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return exported_conv_model(tmp_path_factory.mktemp("enc"), "rk3588")


def _retamper(path: Path, change) -> None:
    """Modify the decoded container and re-encode it (valid outer checksums: only the cipher can tell)."""
    container = read_file(str(path))
    change(container)
    path.write_bytes(encode(container))


@pytest.mark.parametrize("level", [1, 2, 3])
def test_round_trip_each_level(plain_model: Path, tmp_path: Path, level: int):
    out = encrypt_model_file(str(plain_model), str(tmp_path / "m.rknn"), level, key=KEY)
    raw = Path(out).read_bytes()
    outer = decode(raw)
    assert outer.flags & FLAG_ENCRYPTED and outer.header["encryption"]["crypt_level"] == level
    weight = from_container(read_file(str(plain_model)), "plain").graph.graph.initializer[0].raw_data
    assert len(weight) > 16 and weight not in raw                      # weights are not readable
    assert (outer.header["public"] != {}) == (level == 1)              # only level 1 shows the I/O
    inner = decrypt_container(outer, out, key=KEY)
    assert encode(inner) == Path(plain_model).read_bytes()             # bit-exact plain model inside


def test_decrypted_model_runs_like_the_plain_one(plain_model: Path, tmp_path: Path):
    from openrknn.sim.session import Simulator
    out = encrypt_model_file(str(plain_model), str(tmp_path / "m.rknn"), 1, key=KEY)
    x = np.random.default_rng(0).normal(size=(1, 3, 16, 16)).astype(np.float32)
    plain = Simulator(from_container(read_file(str(plain_model)), "p")).run([x], "nchw")[0]
    opened = Simulator(from_container(read_model_container(out, key=KEY), out)).run([x], "nchw")[0]
    np.testing.assert_array_equal(plain, opened)


def test_key_from_env_and_key_file(plain_model: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    monkeypatch.setenv(KEY_ENV, KEY)
    out = encrypt_model_file(str(plain_model), str(tmp_path / "m.rknn"))
    monkeypatch.delenv(KEY_ENV)
    key_file = tmp_path / "k.txt"
    key_file.write_text(KEY + "\n")
    monkeypatch.setenv(KEY_FILE_ENV, str(key_file))
    assert read_model_container(out).header["format"] == "openrknn-model"


def test_key_file_created_when_no_key_is_set(plain_model: Path, tmp_path: Path):
    out = encrypt_model_file(str(plain_model), str(tmp_path / "m.rknn"))
    key_file = tmp_path / "config" / "openrknn" / "model.key"
    assert key_file.is_file() and stat.S_IMODE(key_file.stat().st_mode) == 0o600
    assert len(key_file.read_text().strip()) == 64
    assert read_model_container(out).header["format"] == "openrknn-model"   # found again on load


def test_wrong_key_and_missing_key_are_named(plain_model: Path, tmp_path: Path):
    out = encrypt_model_file(str(plain_model), str(tmp_path / "m.rknn"), key=KEY)
    with pytest.raises(ModelFileError, match="another key"):
        read_model_container(out, key="not the right key")
    with pytest.raises(ModelFileError, match=KEY_ENV):
        read_model_container(out)


def test_modified_ciphertext_fails_authentication(plain_model: Path, tmp_path: Path):
    out = Path(encrypt_model_file(str(plain_model), str(tmp_path / "m.rknn"), key=KEY))

    def flip(container):
        blob = bytearray(container.sections[PAYLOAD_SECTION])
        blob[len(blob) // 2] ^= 0x40
        container.sections[PAYLOAD_SECTION] = bytes(blob)
    _retamper(out, flip)
    with pytest.raises(ModelFileError, match="failed authentication"):
        read_model_container(str(out), key=KEY)


def test_modified_visible_header_fails_authentication(plain_model: Path, tmp_path: Path):
    out = Path(encrypt_model_file(str(plain_model), str(tmp_path / "m.rknn"), 1, key=KEY))
    _retamper(out, lambda c: c.header["public"]["inputs"][0].update(shape=[1, 3, 32, 32]))
    with pytest.raises(ModelFileError, match="failed authentication"):
        read_model_container(str(out), key=KEY)


def test_byte_flip_in_file_is_reported_as_corrupt(plain_model: Path, tmp_path: Path):
    out = Path(encrypt_model_file(str(plain_model), str(tmp_path / "m.rknn"), key=KEY))
    data = bytearray(out.read_bytes())
    data[-100] ^= 1
    out.write_bytes(bytes(data))
    with pytest.raises(ModelFileError, match="corrupt"):
        read_model_container(str(out), key=KEY)


def test_default_output_name_and_invalid_level(plain_model: Path, tmp_path: Path):
    copy = tmp_path / "mobilenet.rknn"
    copy.write_bytes(plain_model.read_bytes())
    out = encrypt_model_file(str(copy), None, crypt_level=7, key=KEY)
    assert out == str(tmp_path / "mobilenet.crypt.rknn") == default_output_path(str(copy))
    assert decode(Path(out).read_bytes()).header["encryption"]["crypt_level"] == 1


def test_refusals(plain_model: Path, tmp_path: Path):
    out = encrypt_model_file(str(plain_model), str(tmp_path / "m.rknn"), key=KEY)
    with pytest.raises(ModelFileError, match="already encrypted"):
        encrypt_model_file(out, str(tmp_path / "twice.rknn"), key=KEY)
    other = tmp_path / "rv1106.rknn"
    other.write_bytes(plain_model.read_bytes())
    _retamper(other, lambda c: c.header.update(target_platforms=["rv1106"]))
    with pytest.raises(NotSupportedError, match="RK3588"):
        encrypt_model_file(str(other), str(tmp_path / "x.rknn"), key=KEY)
    with pytest.raises(ModelFileError, match="at least"):
        encrypt_model_file(str(plain_model), str(tmp_path / "y.rknn"), key="short")
    assert not os.path.exists(tmp_path / "x.rknn") and not os.path.exists(tmp_path / "y.rknn")


def test_load_rknn_opens_encrypted_model(plain_model: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    from openrknn.model_file import load_model
    out = encrypt_model_file(str(plain_model), str(tmp_path / "m.rknn"), key=KEY)
    monkeypatch.setenv(KEY_ENV, KEY)
    model = load_model(out)
    assert [t.name for t in model.inputs] == ["x"]
