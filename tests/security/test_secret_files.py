"""Pointing a loader at a file that is not a model (a secrets file, say) never echoes its contents:
the workbench shows load errors to whoever drives it, so they name the file and line, not the text."""
from __future__ import annotations

import pytest

from rknn.api import RKNN

SECRET = "hunter2-S3CRET"
SECRET_FILES = [f"password={SECRET}\n", f"password: {SECRET}\n", f"name: {SECRET}\n", f"token {SECRET}\n",
                f"[{SECRET}\n", f"[net]\n{SECRET}\n", f'layer {{ type: {SECRET} }}\n', f"input_dim: {SECRET}\n",
                f"{SECRET}\n[net]\n", f"  # comment\n  {SECRET} = 1\n"]


def output_of(capsys, load) -> str:
    rknn = RKNN()
    capsys.readouterr()
    assert load(rknn) == -1
    rknn.release()
    out = capsys.readouterr()
    return out.out + out.err


@pytest.mark.parametrize("text", SECRET_FILES)
def test_caffe_does_not_quote_a_file_that_is_not_a_prototxt(tmp_path, capsys, text):
    path = tmp_path / "secrets.txt"
    path.write_text(text)
    out = output_of(capsys, lambda rknn: rknn.load_caffe(model=str(path), blobs=None))
    assert SECRET not in out and "secrets.txt" in out, out


@pytest.mark.parametrize("text", SECRET_FILES)
def test_darknet_does_not_quote_a_file_that_is_not_a_cfg(tmp_path, capsys, text):
    path = tmp_path / "secrets.txt"
    path.write_text(text)
    (tmp_path / "w.weights").write_bytes(b"\0" * 64)
    out = output_of(capsys, lambda rknn: rknn.load_darknet(model=str(path), weight=str(tmp_path / "w.weights")))
    assert SECRET not in out and "secrets.txt" in out, out
