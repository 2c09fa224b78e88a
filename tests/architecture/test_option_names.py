"""The quantization option names (``quantized_dtype`` / ``quantized_method`` / ``quantized_algorithm``)
and the dtype table are defined once, in ``openrknn/quant/settings.py``.

Read with ``ast``: a tuple, list, set or dict-key literal naming two or more options of one family
anywhere else in the package is a second definition (the old ``profile/layers.py`` dtype table, where
w8a16 meant int16 activations while quant/settings says float16, was one)."""
from __future__ import annotations

import ast
from pathlib import Path

from openrknn.quant import settings
from openrknn.quant.hybrid_config import LAYER_DTYPES
from openrknn.profile.layers import default_dtypes

PACKAGE = Path(__file__).resolve().parents[2] / "openrknn"
DEFINITION = PACKAGE / "quant" / "settings.py"
FAMILIES = {
    "quantized_dtype": set(settings.TOOLKIT2_QUANT_DTYPES + settings.TOOLKIT1_QUANT_DTYPES)
    | set(settings.QUANT_DTYPE_ALIASES),
    "quantized_method": set(settings.QUANT_METHODS),
    "quantized_algorithm": set(settings.QUANT_ALGORITHMS),
}


def option_tables(source: str) -> list[tuple[int, str, list[str]]]:
    """(line, family, names) of every collection literal that names ≥ 2 options of one family."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, (ast.Tuple, ast.List, ast.Set)):
            elements = node.elts
        elif isinstance(node, ast.Dict):
            elements = [k for k in node.keys if k is not None]
        else:
            continue
        strings = {e.value for e in elements if isinstance(e, ast.Constant) and isinstance(e.value, str)}
        for family, names in FAMILIES.items():
            if len(strings & names) >= 2:
                found.append((node.lineno, family, sorted(strings & names)))
    return found


def test_option_names_are_defined_only_in_quant_settings():
    found = [f"{path.relative_to(PACKAGE.parent)}:{line} {family} {names}"
             for path in sorted(PACKAGE.rglob("*.py")) if path != DEFINITION
             for line, family, names in option_tables(path.read_text())]
    assert not found, "option names listed outside quant/settings.py (read them from there):\n" + "\n".join(found)


def test_the_check_sees_a_second_table():
    assert option_tables('T = {"w8a8": 1, "w8a16": 2}') == [(1, "quantized_dtype", ["w8a16", "w8a8"])]
    assert option_tables('choices = ("layer", "channel")')[0][1] == "quantized_method"
    assert option_tables('default = "w8a8"') == []


def test_readers_agree_with_the_one_table():
    """w8a16 and w4a16 keep float16 activations (the API reference's table); the profile and the
    hybrid cfg read that, not a table of their own."""
    assert settings.activation_dtype("w8a16") == "float16"
    assert default_dtypes("w8a16") == ("float16", "int8")
    assert default_dtypes("w16a16i") == ("int16", "int16")
    assert default_dtypes("asymmetric_quantized-8") == ("int8", "int8")
    assert LAYER_DTYPES["dynamic_fixed_point-16"] == "int16"
    assert LAYER_DTYPES["asymmetric_quantized-u8"] == "int8"
