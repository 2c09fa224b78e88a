"""The README and the command-line page speak to users and stay true to the commands."""
from __future__ import annotations

import re
from pathlib import Path

import pytest

from openrknn.cli.main import build_parser

REPO = Path(__file__).resolve().parents[2]
README = (REPO / "README.md").read_text(encoding="utf-8")
COMMAND_LINE = (REPO / "docs" / "command-line.md").read_text(encoding="utf-8")


def test_readme_keeps_its_two_setup_commands_and_says_how_to_install():
    assert "pip install -e . && openrknn demo" in README
    assert "pip install -e '.[test]' && python -m pytest" in README
    assert "not on the Python package index" in README and "pip wheel . -w dist/" in README
    setup = README.split("## Set-up", 1)[1].split("## Quick start", 1)[0]
    assert "| `tflite` |" in setup and "| `ui` |" in setup


@pytest.mark.parametrize("page", ["README.md", "docs/command-line.md", "docs/ui.md", "docs/onnx-edit.md"])
def test_user_pages_use_user_wording(page):
    text = (REPO / page).read_text(encoding="utf-8")
    assert not re.search(r"seed \d{3}|CI machines", text), page


def _options(command: str) -> list[str]:
    sub = next(a for a in build_parser()._actions if a.dest == "command")
    return [o for action in sub.choices[command]._actions for o in action.option_strings
            if o.startswith("--") and o not in ("--help", "--verbose")]


@pytest.mark.parametrize("command, documented", [
    ("convert", {"--input-size-list", "--dataset", "--mean", "--std", "--format", "--target-platform"}),
    ("run", {"--input", "--resize", "--input-size-list"}),
    ("info", {"--params"}),
])
def test_command_line_page_documents_the_options(command, documented):
    assert documented <= set(_options(command))
    for option in documented:
        assert re.search(rf"(?<![\w-]){re.escape(option)}(?![\w-])", COMMAND_LINE), option


def test_command_line_page_documents_the_yml_format():
    for key in ("models:", "platform:", "model_file_path:", "subgraphs:", "input_size_list:", "quantize:", "dataset:",
                "configs:", "mean_values:", "quantized_algorithm:", "python -m rknn.api.rknn_convert"):
        assert key in COMMAND_LINE, key
