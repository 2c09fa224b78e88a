"""``list_support_target_platform``: platform tables printed in the toolkit's layout."""
from __future__ import annotations

from typing import Any

from openrknn import chips
from openrknn.model_file import load_model

_RULE = "*" * 50


def describe_platforms(rknn_model: str | None) -> tuple[str, dict[str, Any]]:
    """Text to print and the returned dict, for one model file or for the whole toolkit."""
    if rknn_model:
        model = load_model(rknn_model)
        filled = list(model.platforms)
        runnable: list[str] = []
        for name in filled:
            for other in chips.get_chip(name).compatible:
                if other.upper() not in runnable:
                    runnable.append(other.upper())
        text = "\n".join([_RULE, f"Target platforms filled in RKNN model:         {filled}",
                          f"Target platforms supported by this RKNN model: {runnable}", _RULE])
        return text, {"filled_target_platform": filled, "support_target_platform": runnable}
    by_npu: dict[str, list[str]] = {}
    for chip in chips.all_chips().values():
        by_npu.setdefault(f"{chip.npu} (Toolkit {chip.toolkit})", []).append(chip.display_name)
    lines = [_RULE, "Supported target platforms by NPU category:"]
    lines += [f"{npu:<28} {names}" for npu, names in sorted(by_npu.items())]
    lines.append(_RULE)
    return "\n".join(lines), by_npu
