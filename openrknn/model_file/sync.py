"""Segmented ("sync") models: Toolkit1's ``export_rknn_sync_model`` (seed 001 §3.6.14, seed 004 §3.4).

A sync layer after a layer ends a *segment*: the runtime gives the NPU back after each segment, so
several models running at once take turns segment by segment instead of one model holding the NPU
for a whole inference. The layer uids are the ``Layer ID`` column of ``eval_perf`` (with
``perf_debug=True``) on the model's target platform; any other value is refused.

The markers are stored in the header's ``metadata.sync_model`` (the graph section is unchanged)::

    {"uids": [3, 7], "platform": "rk1808",
     "points": [{"uid": 3, "layer": "Conv:conv2", "op_type": "ConvRelu"}, ...],
     "segments": [[0, 3], [4, 7], [8, 12]]}          # inclusive layer-id ranges

The record survives ``load_rknn`` → ``export_rknn`` (it is part of ``RKNNModel.metadata``).
"""
from __future__ import annotations

from typing import Any, Iterable

from openrknn import chips, log
from openrknn.errors import ConfigError, ModelFileError
from openrknn.model_file import from_container
from openrknn.model_file.container import FLAG_ENCRYPTED, encode, read_file, write_atomic
from openrknn.profile import estimate_perf

SYNC_KEY = "sync_model"


def _layer_table(container: Any, source: str) -> tuple[str, list[Any]]:
    """``(platform, eval_perf layers)`` of the model in ``container``."""
    model = from_container(container, source)
    if not model.platforms:
        raise ModelFileError(f"'{source}' records no target platform; rebuild it with config(target_platform=...)")
    chip = chips.get_chip(model.platforms[0])
    return chip.name, estimate_perf(model, chip).layers


def _parse_uids(sync_uids: Any) -> list[int]:
    if isinstance(sync_uids, (int, str)) and not isinstance(sync_uids, bool):
        sync_uids = [sync_uids]
    if not isinstance(sync_uids, Iterable) or isinstance(sync_uids, (bytes, dict)):
        raise ConfigError(f"sync_uids must be a list of layer ids from eval_perf, got {sync_uids!r}")
    uids = []
    for item in sync_uids:
        try:
            if isinstance(item, bool):
                raise ValueError
            uids.append(int(item))
        except (TypeError, ValueError) as e:
            raise ConfigError(f"sync_uids: {item!r} is not a layer id (an integer from eval_perf)") from e
    if not uids:
        raise ConfigError("sync_uids is empty: give the ids of the layers to end a segment after")
    return sorted(set(uids))


def plan_segments(uids: list[int], layers: list[Any], source: str) -> dict[str, Any]:
    """Check ``uids`` against the ``eval_perf`` layer table and describe the segments."""
    by_id = {layer.id: layer for layer in layers}
    last = max(by_id)
    bad = [u for u in uids if u not in by_id]
    if bad:
        raise ConfigError(f"sync_uids {bad} are not layer ids of '{source}': eval_perf lists ids 0..{last}. "
                          "Take the ids from eval_perf with init_runtime(perf_debug=True)")
    if uids[-1] == last:
        raise ConfigError(f"sync_uids: {last} is the last layer of '{source}'; a sync after it makes no new segment")
    points = [{"uid": u, "layer": by_id[u].full_name, "op_type": by_id[u].op_type} for u in uids]
    bounds = [-1] + uids + [last]
    segments = [[bounds[i] + 1, bounds[i + 1]] for i in range(len(bounds) - 1)]
    return {"uids": uids, "points": points, "segments": segments}


def export_sync_model(input_path: str, sync_uids: Any, output_path: str | None = None) -> str:
    """Write a copy of ``input_path`` that records sync layers after ``sync_uids`` (atomic write).

    Args:
        input_path: a plain openrknn ``.rknn`` model.
        sync_uids: layer ids (``eval_perf``'s ``Layer ID``) to end a segment after.
        output_path: destination; None overwrites ``input_path`` (seed 004 §3.6.14).

    Returns:
        The path written.

    Example:
        >>> # export_sync_model("mobilenet.rknn", [3, 9], "mobilenet_sync.rknn")
    """
    uids = _parse_uids(sync_uids)
    container = read_file(input_path)
    if container.flags & FLAG_ENCRYPTED:
        raise ModelFileError(f"'{input_path}' is encrypted: make the sync model from the plain model, then encrypt it")
    platform, layers = _layer_table(container, input_path)
    plan = dict(plan_segments(uids, layers, input_path), platform=platform)
    if chips.get_chip(platform).toolkit != 1:
        log.warning(f"export_rknn_sync_model: segmented models are an RKNN-Toolkit1 runtime feature (RK1808, "
                    f"RK3399Pro, RV1109, RV1126); the markers are recorded for {platform} but its runtime ignores them")
    if container.header.get("metadata", {}).get(SYNC_KEY):
        log.warning(f"export_rknn_sync_model: '{input_path}' was already segmented; its sync layers are replaced")
    container.header["metadata"] = dict(container.header.get("metadata", {}), **{SYNC_KEY: plan})
    target = output_path or input_path
    write_atomic(target, encode(container))
    log.info(f"export_rknn_sync_model: '{target}' has {len(plan['segments'])} segments "
             f"(sync after {', '.join(p['layer'] for p in plan['points'])})")
    return target


def sync_record(metadata: dict[str, Any]) -> dict[str, Any] | None:
    """The segment record of a loaded model (``RKNNModel.metadata``), or None when not segmented."""
    return metadata.get(SYNC_KEY) or None
