"""Hypothesis strategies for hostile ``.rknn`` files and the check every case must pass.

Shared by ``test_rknn_fuzz.py`` (pytest) and ``bench/fuzz_rknn.py`` (100 000 cases). A case starts
from a real exported file (float, quantized, compressed, encrypted) or from nothing, then is
truncated, bit-flipped (with or without a fixed checksum), has header fields replaced by values of
any JSON type, its section table or compression forged, or its graph bytes damaged.
"""
from __future__ import annotations

import copy
import functools
import hashlib
import json
import os
import struct
import tempfile
import zlib
from pathlib import Path
from typing import Any

from hypothesis import strategies as st

from openrknn.errors import RKNNError

FIXED = struct.Struct("<8sHHI")
FUZZ_KEY = "fuzz-test-passphrase"   # OPENRKNN_MODEL_KEY while fuzzing: encrypted seeds get decrypted


# ---------------------------------------------------------------- seeds
@functools.lru_cache(maxsize=1)
def seed_files() -> tuple[bytes, ...]:
    """Real exports of a small model: float16, quantized int8, compressed, encrypted (level 1)."""
    import numpy as np

    from rknn.api import RKNN
    from tests.helpers import make_conv_model
    os.environ.setdefault("OPENRKNN_MODEL_KEY", FUZZ_KEY)
    seeds = []
    with tempfile.TemporaryDirectory() as folder:
        root = Path(folder)
        onnx_path = make_conv_model(root / "conv.onnx")
        np.save(root / "s.npy", np.random.default_rng(0).random((1, 16, 16, 3), np.float32))
        (root / "ds.txt").write_text("s.npy\n")
        for name, config, quantize in (("f", {}, False), ("q", {}, True), ("c", {"compress_weight": True}, False)):
            rknn = RKNN(verbose=False)
            rknn.config(target_platform="rk3588", mean_values=[[0, 0, 0]], std_values=[[255, 255, 255]], **config)
            assert rknn.load_onnx(str(onnx_path)) == 0
            assert rknn.build(do_quantization=quantize, dataset=str(root / "ds.txt") if quantize else None) == 0
            assert rknn.export_rknn(str(root / f"{name}.rknn")) == 0
            seeds.append((root / f"{name}.rknn").read_bytes())
        try:
            from openrknn.model_file.encryption import encrypt_model_file
            encrypt_model_file(str(root / "f.rknn"), str(root / "e.rknn"), crypt_level=1, key=FUZZ_KEY)
            seeds.append((root / "e.rknn").read_bytes())
        except RKNNError:
            pass   # no 'cryptography': the other seeds still cover the container
    return tuple(seeds)


# ---------------------------------------------------------------- raw container surgery
def split(data: bytes) -> tuple[int, int, dict[str, Any], bytes]:
    """(version, flags, header, sections bytes) of a well-formed file."""
    _, version, flags, length = FIXED.unpack_from(data, 0)
    header = json.loads(data[FIXED.size:FIXED.size + length])
    return version, flags, header, data[FIXED.size + length:-32]


def pack(header: Any, sections: bytes, version: int = 1, flags: int = 0, header_bytes: bytes | None = None,
         header_len: int | None = None) -> bytes:
    """A container with a valid checksum around whatever header and section bytes are given."""
    blob = header_bytes if header_bytes is not None else json.dumps(header).encode("utf-8", "surrogatepass")
    length = len(blob) if header_len is None else header_len
    body = FIXED.pack(b"OPENRKNN", version & 0xFFFF, flags & 0xFFFF, length & 0xFFFFFFFF) + blob + sections
    return body + hashlib.sha256(body).digest()


def resection(header: dict[str, Any], sections: dict[str, bytes]) -> tuple[dict[str, Any], bytes]:
    """Rebuild a consistent section table (so damage inside a section is reached)."""
    table, offset = [], 0
    for name, blob in sections.items():
        table.append({"name": name, "offset": offset, "length": len(blob), "sha256": hashlib.sha256(blob).hexdigest()})
        offset += len(blob)
    return dict(header, sections=table), b"".join(sections.values())


def sections_of(header: dict[str, Any], raw: bytes) -> dict[str, bytes]:
    return {e["name"]: raw[e["offset"]:e["offset"] + e["length"]] for e in header["sections"]}


# ---------------------------------------------------------------- strategies
json_values = st.recursive(
    st.none() | st.booleans() | st.integers(-2**63, 2**64) | st.floats(allow_nan=False) | st.text(max_size=20),
    lambda inner: st.lists(inner, max_size=5) | st.dictionaries(st.text(max_size=8), inner, max_size=5),
    max_leaves=20)
# some values that are the wrong type or range for nearly every field
odd_values = st.sampled_from([None, True, -1, 0, 2**40, 1.5, "", "x", [], {}, [None], [[1]], {"a": 1}, [-5, 0, 2**31],
                              ["1", "2"], "zlib", "lzma", [1, 3, 16, 16], [1, 3, 0, 16], [2**20] * 4]
                             ).map(copy.deepcopy)   # a fresh object each time: no shared (circular) values


def _paths(value: Any, prefix: tuple = ()) -> list[tuple]:
    """Every path (keys / indices) inside a JSON value, the root excluded."""
    out = []
    items = value.items() if isinstance(value, dict) else enumerate(value) if isinstance(value, list) else []
    for key, child in items:
        out.append(prefix + (key,))
        if len(out) < 400:
            out += _paths(child, prefix + (key,))
    return out


def _set(value: Any, path: tuple, new: Any, delete: bool) -> None:
    for key in path[:-1]:
        value = value[key]
    if delete and isinstance(value, dict):
        del value[path[-1]]
    else:
        value[path[-1]] = new


@st.composite
def truncated(draw, seed: bytes) -> bytes:
    return seed[:draw(st.integers(0, len(seed) - 1))]


@st.composite
def bit_flipped(draw, seed: bytes) -> bytes:
    data = bytearray(seed)
    for _ in range(draw(st.integers(1, 8))):
        data[draw(st.integers(0, len(data) - 1))] ^= 1 << draw(st.integers(0, 7))
    if draw(st.booleans()):   # fix the checksum: the damage then reaches the parser
        data[-32:] = hashlib.sha256(bytes(data[:-32])).digest()
    return bytes(data)


@st.composite
def header_field_changed(draw, seed: bytes) -> bytes:
    version, flags, header, raw = split(seed)
    header = copy.deepcopy(header)
    paths = [p for p in _paths(header) if p[0] != "sections"] or [("x",)]
    for _ in range(draw(st.integers(1, 3))):
        path = draw(st.sampled_from(paths))
        try:
            _set(header, path, draw(odd_values | json_values), delete=draw(st.integers(0, 5)) == 0)
        except (KeyError, IndexError, TypeError):
            continue
    return pack(header, raw, version, flags)


@st.composite
def section_table_forged(draw, seed: bytes) -> bytes:
    version, flags, header, raw = split(seed)
    header = copy.deepcopy(header)
    entry = draw(st.sampled_from(header["sections"]))
    field = draw(st.sampled_from(["offset", "length", "sha256", "name"]))
    entry[field] = draw(st.integers(-2**33, 2**33) | odd_values | st.text(max_size=70))
    if draw(st.booleans()):
        header["sections"].append(dict(entry))
    return pack(header, raw, version, flags)


@st.composite
def compression_forged(draw, seed: bytes) -> bytes:
    version, flags, header, raw = split(seed)
    sections = sections_of(header, raw)
    if "graph.onnx" not in sections:
        return seed
    payload = draw(st.sampled_from(["bomb", "random", "recompressed", "truncated"]))
    graph = sections["graph.onnx"]
    if header.get("graph_compression") == "zlib":
        graph = zlib.decompress(graph)
    if payload == "bomb":
        blob = zlib.compress(b"\0" * draw(st.integers(1, 16 << 20)), 1)   # inflates ~1000x
    elif payload == "random":
        blob = draw(st.binary(max_size=256))
    else:
        blob = zlib.compress(graph, 6)
        if payload == "truncated":
            blob = blob[:draw(st.integers(0, len(blob)))]
    sections["graph.onnx"] = blob
    header = dict(header, graph_compression=draw(st.sampled_from(["zlib", "zlib", None, "gzip", 1])))
    choice = draw(st.integers(0, 3))
    if choice == 0:
        header.pop("graph_size", None)
    elif choice == 1:
        header["graph_size"] = draw(st.integers(-10, 2**62) | odd_values)
    header, raw = resection(header, sections)
    return pack(header, raw, version, flags)


@st.composite
def graph_damaged(draw, seed: bytes) -> bytes:
    version, flags, header, raw = split(seed)
    sections = sections_of(header, raw)
    name = draw(st.sampled_from(sorted(sections)))
    blob = bytearray(sections[name])
    if header.get("graph_compression") == "zlib" and name == "graph.onnx":
        blob = bytearray(zlib.decompress(bytes(blob)))
        header = dict(header, graph_compression=None)
        header.pop("graph_size", None)
    for _ in range(draw(st.integers(1, 6))):
        if blob:
            blob[draw(st.integers(0, len(blob) - 1))] = draw(st.integers(0, 255))
    if draw(st.booleans()) and blob:
        del blob[draw(st.integers(0, len(blob) - 1)):]
    sections[name] = bytes(blob)
    header, raw = resection(header, sections)
    return pack(header, raw, version, flags)


@st.composite
def fixed_fields_forged(draw, seed: bytes) -> bytes:
    version, flags, header, raw = split(seed)
    blob = json.dumps(header).encode()
    return pack(None, raw, draw(st.integers(0, 0xFFFF)), draw(st.integers(0, 0xFFFF)), header_bytes=blob,
                header_len=draw(st.sampled_from([len(blob)]) | st.integers(0, 2**32 - 1)))


@st.composite
def generated(draw) -> bytes:
    """A container built from nothing: any header JSON (or bytes) and any sections."""
    sections = draw(st.dictionaries(st.sampled_from(["graph.onnx", "payload", "x"]), st.binary(max_size=64), max_size=3))
    header = draw(st.fixed_dictionaries(
        {"format": st.sampled_from(["openrknn-model", "openrknn-encrypted-model", "x"])},
        optional={k: odd_values | json_values for k in ("inputs", "outputs", "preprocess", "quant_params",
                                                      "encryption", "public", "graph_compression", "graph_size",
                                                      "rknn_batch_size", "tensor_dtypes", "metadata")}))
    header, raw = resection(header, sections)
    if draw(st.integers(0, 9)) == 0:
        return pack(None, raw, header_bytes=draw(st.binary(max_size=64)))
    return pack(header, raw, flags=draw(st.sampled_from([0, 1])))


MUTATIONS = (truncated, bit_flipped, header_field_changed, section_table_forged, compression_forged, graph_damaged,
             fixed_fields_forged)


def cases() -> st.SearchStrategy[bytes]:
    """Every kind of hostile file, mutated from each seed or generated."""
    seeds = seed_files()
    mutated = st.sampled_from(seeds).flatmap(lambda seed: st.one_of(*(m(seed) for m in MUTATIONS)))
    return st.one_of(mutated, mutated, mutated, generated(), st.binary(max_size=128))


# ---------------------------------------------------------------- the property
def check_case(data: bytes, source: str = "fuzz.rknn") -> str:
    """Load ``data`` as the API and ``openrknn info`` do: it opens, or fails with a clear message.

    Returns 'ok' or the message. Any exception other than openrknn's own error classes propagates
    (a crash); so does a message that is empty, multi-line or does not name the file.
    """
    from openrknn.cli.info import format_model
    from openrknn.model_file import load_model_bytes
    try:
        model = load_model_bytes(data, source)
    except RKNNError as e:
        message = str(e)
        assert message and "\n" not in message and len(message) < 600, repr(message)
        assert source in message or "key" in message, message
        return message
    format_model(model, len(data), source)   # what `openrknn info` prints must not fail either
    return "ok"
