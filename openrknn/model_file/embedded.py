"""Deployable forms embedded in a ``.rknn`` file (docs/rknn-format.md, section ``model.tflite``).

The header's ``embedded`` table lists them, each with its own version, so an older openrknn
simply ignores them and a newer one can tell what it reads."""
from __future__ import annotations

from openrknn import log
from openrknn.errors import ModelFileError
from openrknn.graph.rknn_model import RKNNModel
from openrknn.model_file import _open, to_container
from openrknn.model_file.container import MAGIC, encode, read_file, write_atomic

TFLITE_SECTION = "model.tflite"
TFLITE_VERSION = 1


def save_with_tflite(model: RKNNModel, path: str, tflite: bytes, float_io: bool = True) -> int:
    """Write ``model`` with its TFLite export embedded; returns the file size."""
    container = to_container(model)
    container.sections[TFLITE_SECTION] = tflite
    container.header["embedded"] = {"tflite": {"section": TFLITE_SECTION, "version": TFLITE_VERSION,
                                               "float_io": float_io}}
    data = encode(container)
    write_atomic(path, data)
    return len(data)


def read_tflite(path: str) -> bytes | None:
    """The embedded TFLite flatbuffer of an openrknn ``.rknn`` file, None when it has none (or the file
    is another kind of model, e.g. one compiled by Rockchip's toolkit)."""
    with open(path, "rb") as handle:
        if handle.read(len(MAGIC)) != MAGIC:
            return None
    container = _open(read_file(path), path)
    entry = (container.header.get("embedded") or {}).get("tflite")
    if entry is None:
        return None
    if int(entry.get("version", 0)) > TFLITE_VERSION:   # the model itself still loads and runs on onnxruntime
        log.warning(f"'{path}': its embedded TFLite section is version {entry['version']}, newer than this openrknn "
                    f"reads ({TFLITE_VERSION}); it is ignored (upgrade openrknn to use it)")
        return None
    data = container.sections.get(entry.get("section", TFLITE_SECTION))
    if data is None or data[4:8] != b"TFL3":
        raise ModelFileError(f"'{path}': the embedded TFLite section is missing or not a TFLite flatbuffer; "
                             "export the model again")
    return data
