"""``--input-size-list`` on the command line: the workbench's form, ``#`` between inputs."""
from __future__ import annotations


def parse_input_size_list(text: str | None) -> list[list[int]] | None:
    """``'1,3,224,224#1,10'`` (commas or spaces inside an input) -> ``[[1, 3, 224, 224], [1, 10]]``;
    None for an empty value.

    Raises:
        ValueError: naming the part that is not a list of positive integers.
    """
    if text is None or not text.strip():
        return None
    sizes = []
    for part in text.split("#"):
        try:
            dims = [int(v) for v in part.replace(",", " ").split()]
        except ValueError:
            dims = []
        if not dims or any(d <= 0 for d in dims):
            raise ValueError(f"--input-size-list: '{part.strip()}' is not a shape of positive integers; "
                             "write e.g. '1,3,224,224' ('#' between inputs)")
        sizes.append(dims)
    return sizes
