"""Form values -> documented API arguments, and API error lines -> the form field they name.

Validation itself stays in the API (``RKNN.config``, the loaders, ``build``): the workbench passes
what the user typed and shows the ``E`` line next to the field the message names.
"""
from __future__ import annotations

import re
from typing import Any, Mapping, Sequence

# (name, label, kind, hint) of the config form; kind: text / choice name / int / float / bool
CONFIG_FIELDS: tuple[tuple[str, str, str, str], ...] = (
    ("target_platform", "target_platform", "platform", "the chip the model is built for"),
    ("mean_values", "mean_values", "lists", "one value per channel, '#' between inputs, e.g. 123.675 116.28 103.53"),
    ("std_values", "std_values", "lists", "same shape as mean_values, e.g. 58.395 57.12 57.375"),
    ("channel_mean_value", "channel_mean_value (Toolkit 1)", "text", "'M0 M1 M2 S' instead of mean/std"),
    ("quantized_dtype", "quantized_dtype", "quant_dtype", "w8a8 (Toolkit 2) or asymmetric_quantized-u8 … (Toolkit 1)"),
    ("quantized_algorithm", "quantized_algorithm", "quant_algorithm", "normal / kl_divergence / mmse"),
    ("quantized_method", "quantized_method", "quant_method", "channel / layer (groupN for w4a16)"),
    ("optimization_level", "optimization_level", "int", "0..3"),
    ("quant_img_RGB2BGR", "quant_img_RGB2BGR", "bool", "swap calibration images to BGR"),
    ("auto_hybrid_cos_thresh", "auto_hybrid_cos_thresh", "float", "hybrid: output cosine auto_hybrid must keep"),
)
BUILD_FIELDS = ("do_quantization", "dataset", "auto_hybrid")


def _lists(text: str) -> list[list[Any]]:
    """'1 2 3 # 4 5 6' -> [[1.0, 2.0, 3.0], [4.0, 5.0, 6.0]]; words that are not numbers are passed on
    so that config() reports them."""
    out = []
    for part in text.split("#"):
        values: list[Any] = []
        for word in part.replace(",", " ").split():
            try:
                values.append(float(word))
            except ValueError:
                values.append(word)
        out.append(values)
    return out


def _number(text: str, kind: type) -> Any:
    try:
        return kind(text)
    except ValueError:
        return text   # config() names the bad value


def config_kwargs(form: Mapping[str, str]) -> dict[str, Any]:
    """The ``RKNN.config`` keyword arguments of a submitted config form (empty fields left out)."""
    kwargs: dict[str, Any] = {}
    for name, _, kind, _ in CONFIG_FIELDS:
        text = str(form.get(name, "")).strip()
        if kind == "bool":
            if text:
                kwargs[name] = True
            continue
        if not text:
            continue
        if kind == "lists":
            kwargs[name] = _lists(text)
        elif kind == "int":
            kwargs[name] = _number(text, int)
        elif kind == "float":
            kwargs[name] = _number(text, float)
        else:
            kwargs[name] = text
    return kwargs


def form_text(kwargs: Mapping[str, Any], name: str) -> str:
    """A config value back as the text of its field."""
    value = kwargs.get(name)
    if value is None or value is False:
        return ""
    if value is True:
        return "on"
    if isinstance(value, list) and value and isinstance(value[0], list):
        return " # ".join(" ".join(f"{v:g}" if isinstance(v, float) else str(v) for v in part) for part in value)
    return str(value)


def field_of(message: str, fields: Sequence[str], default: str) -> str:
    """The form field an error message names first (whole words), else ``default``."""
    found = [(m.start(), name) for name in fields for m in [re.search(rf"(?<![\w]){re.escape(name)}(?![\w])", message)]
             if m]
    return min(found)[1] if found else default
