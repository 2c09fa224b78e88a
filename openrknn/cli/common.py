"""Argument parsing the ``openrknn`` subcommands share."""
from __future__ import annotations

import argparse

from openrknn.errors import ConfigError

INPUT_SIZE_LIST_HELP = ("full input shape(s) for a model with dynamic dimensions, e.g. '1,3,640,640' "
                        "('#' between inputs: '1,3,224,224#1,10')")


def parse_input_size_list(text: str | None) -> list[list[int]] | None:
    """``'1,3,640,640#1,10'`` → ``[[1, 3, 640, 640], [1, 10]]`` (the workbench's format); None for no text.

    Commas or spaces separate the dims of one input, ``#`` separates inputs. Raises ``ConfigError``
    naming the bad part.
    """
    if text is None or not text.strip():
        return None
    shapes = []
    for part in text.split("#"):
        dims = part.replace(",", " ").split()
        try:
            shape = [int(d) for d in dims]
        except ValueError:
            raise ConfigError(f"--input-size-list: '{part.strip()}' is not a list of integers "
                              "(e.g. '1,3,640,640', '#' between inputs)") from None
        if not shape or min(shape) < 1:
            raise ConfigError(f"--input-size-list: '{part.strip()}' needs positive sizes (e.g. '1,3,640,640')")
        shapes.append(shape)
    return shapes


def add_input_size_list_argument(parser: argparse.ArgumentParser) -> None:
    """The ``--input-size-list`` option (``convert``, ``eval``, ``run``)."""
    parser.add_argument("--input-size-list", dest="input_size_list", default=None, help=INPUT_SIZE_LIST_HELP)
