"""A missing optional dependency is a plain E line naming the extra, never an 'internal error'."""
from __future__ import annotations

import socket
import sys

import pytest

from openrknn.cli.main import main
from rknn.api import RKNN


def _error_lines(capsys) -> str:
    return "\n".join(ln for ln in capsys.readouterr().out.splitlines() if ln.startswith("E "))


def test_board_connection_without_msgpack_names_the_serve_extra(conv_model, monkeypatch, capsys):
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(1)   # connect succeeds from the backlog; the first frame needs msgpack
    monkeypatch.setenv("OPENRKNN_TOKEN", "t" * 20)
    monkeypatch.setitem(sys.modules, "msgpack", None)
    rknn = RKNN()
    assert rknn.config(target_platform="rk3588") == 0
    assert rknn.load_onnx(model=str(conv_model)) == 0
    assert rknn.build(do_quantization=False) == 0
    try:
        assert rknn.init_runtime(target="rk3588", device_id=f"127.0.0.1:{listener.getsockname()[1]}") == -1
    finally:
        listener.close()
    errors = _error_lines(capsys)
    assert "internal error" not in errors
    assert "E init_runtime: the board connection needs the 'serve' extra" in errors
    assert "pip install 'openrknn[serve]'" in errors


def test_unexpected_missing_module_names_its_extra(conv_model, monkeypatch, capsys):
    """Any ImportError of an optional module reaching the facade or the CLI names the extra."""
    import openrknn.api.rknn as facade   # the facade imports build_model at module level

    def needs_scipy(*args, **kwargs):
        import scipy  # noqa: F401  (blocked below)

    monkeypatch.setitem(sys.modules, "scipy", None)
    monkeypatch.setattr(facade, "build_model", needs_scipy)
    rknn = RKNN()
    rknn.config(target_platform="rk3588")
    rknn.load_onnx(model=str(conv_model))
    assert rknn.build(do_quantization=False) == -1
    errors = _error_lines(capsys)
    assert "internal error" not in errors and "'eval' extra" in errors and "openrknn[eval]" in errors


def test_cli_turns_a_missing_module_into_the_extra(monkeypatch, capsys):
    import openrknn.cli.main as cli

    def needs_ray(args):
        import ray  # noqa: F401  (blocked below)

    monkeypatch.setitem(sys.modules, "ray", None)
    monkeypatch.setattr(cli, "cmd_platforms", needs_ray)
    assert main(["platforms"]) == 1
    assert "E platforms: this step needs the 'ray' extra (ray): pip install 'openrknn[ray]'" in _error_lines(capsys)


def test_serve_without_msgpack_refuses_at_start(tmp_path, monkeypatch, capsys):
    monkeypatch.setitem(sys.modules, "msgpack", None)
    assert main(["serve", "--port", "0", "--token-file", str(tmp_path / "token")]) == 1
    assert "openrknn[serve]" in _error_lines(capsys)


def test_cli_missing_tflite_extra_is_a_plain_line(tmp_path, monkeypatch, capsys):
    model = tmp_path / "m.tflite"
    model.write_bytes(b"TFL3" + bytes(60))
    monkeypatch.setitem(sys.modules, "tflite", None)
    assert main(["convert", str(model), "-o", str(tmp_path / "m.rknn")]) == 1
    errors = _error_lines(capsys)
    assert "internal error" not in errors and "openrknn[tflite]" in errors


def test_rknn_convert_names_the_extra(monkeypatch, tmp_path, capsys):
    import openrknn.cli.rknn_convert as tool

    def needs_torch(*args, **kwargs):
        import torch  # noqa: F401  (blocked below)

    monkeypatch.setitem(sys.modules, "torch", None)
    monkeypatch.setattr(tool, "convert", needs_torch)
    assert tool.main(["-t", "rk3588", "-i", str(tmp_path / "m.yml"), "-o", str(tmp_path)]) == 1
    assert "pip install 'openrknn[torch]'" in _error_lines(capsys)
