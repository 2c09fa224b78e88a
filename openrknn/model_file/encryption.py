"""Encrypted ``.rknn`` models: ``export_encrypted_rknn_model`` (seed 002 §5.9) with authenticated encryption.

An encrypted model is an ordinary openrknn container (``docs/rknn-format.md``) whose flag bit 0
(``FLAG_ENCRYPTED``) is set and whose only section, ``payload``, is the complete plain ``.rknn`` file
sealed with **AES-256-GCM** (``cryptography``'s ``AESGCM``). The header keeps the encryption record
(cipher, KDF and its salt, nonce, a key check value) and, at level 1, a readable copy of the model's
I/O description. Everything in the header is bound to the ciphertext as GCM associated data, so any
change to the payload *or* to the visible header fails authentication.

Crypt levels (higher = slower to open, stronger against guessing a weak passphrase)::

    level  key derivation (per file, 16-byte random salt)   left readable in the file
    1      HKDF-SHA256                                       inputs, outputs, target platforms, toolkit version
    2      scrypt N=2**15, r=8, p=1  (32 MiB, ~0.1 s)        nothing but the encryption record
    3      scrypt N=2**17, r=8, p=1  (128 MiB, ~0.3-1 s)     nothing but the encryption record

Key material, first found wins: the ``key`` argument; the environment variable ``OPENRKNN_MODEL_KEY``
(the key itself, a passphrase or hex text); the file named by ``OPENRKNN_MODEL_KEY_FILE``; the
default key file ``$XDG_CONFIG_HOME/openrknn/model.key`` (``~/.config/openrknn/model.key``). When
encrypting and none exists, a random 256-bit key is written to the default key file (mode 0600).
Loading (``RKNN.load_rknn``, ``RKNNLite.load_rknn``, the simulator) finds the key the same way.
"""
from __future__ import annotations

import hmac
import json
import os
import secrets
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from openrknn import log
from openrknn.errors import ModelFileError, NotSupportedError
from openrknn.model_file.header_schema import check_encrypted_header
from openrknn.model_file.container import FLAG_ENCRYPTED, Container, decode, encode, read_file, write_atomic

ENCRYPTED_FORMAT = "openrknn-encrypted-model"
PAYLOAD_SECTION = "payload"
CIPHER = "AES-256-GCM"
KEY_ENV = "OPENRKNN_MODEL_KEY"
KEY_FILE_ENV = "OPENRKNN_MODEL_KEY_FILE"
SUPPORTED_PLATFORMS = ("rk3562", "rk3566", "rk3568", "rk3576", "rk3588")
MIN_KEY_BYTES = 8
_HKDF_INFO = b"openrknn model encryption v1"
_PUBLIC_FIELDS = ("target_platforms", "inputs", "outputs", "toolkit_version")


@dataclass(frozen=True)
class CryptLevel:
    """What one ``crypt_level`` means: the key derivation cost and what stays readable."""

    level: int
    kdf: str                  # 'hkdf-sha256' or 'scrypt'
    scrypt_log2_n: int = 0    # scrypt cost N = 2**scrypt_log2_n (r=8, p=1)
    public_io: bool = False   # keep a readable (authenticated) copy of inputs/outputs/platforms


CRYPT_LEVELS = {
    1: CryptLevel(1, "hkdf-sha256", public_io=True),
    2: CryptLevel(2, "scrypt", scrypt_log2_n=15),
    3: CryptLevel(3, "scrypt", scrypt_log2_n=17),
}


@dataclass(frozen=True)
class ModelKey:
    """Key material and where it came from (named in messages, never the key itself)."""

    material: bytes
    source: str


def _crypto() -> Any:
    try:
        from cryptography.exceptions import InvalidTag
        from cryptography.hazmat.primitives import hashes
        from cryptography.hazmat.primitives.ciphers.aead import AESGCM
        from cryptography.hazmat.primitives.kdf.hkdf import HKDF
        from cryptography.hazmat.primitives.kdf.scrypt import Scrypt
    except ImportError as e:
        raise NotSupportedError("encrypted models need the 'cryptography' package: "
                                "pip install 'openrknn[crypto]'") from e
    return InvalidTag, hashes, AESGCM, HKDF, Scrypt


# ---------------------------------------------------------------- keys
def default_key_path() -> Path:
    """``$XDG_CONFIG_HOME/openrknn/model.key`` (``~/.config/openrknn/model.key``)."""
    base = os.environ.get("XDG_CONFIG_HOME") or os.path.join(os.path.expanduser("~"), ".config")
    return Path(base) / "openrknn" / "model.key"


def _as_key(value: bytes | str, source: str) -> ModelKey:
    material = value.encode("utf-8") if isinstance(value, str) else bytes(value)
    material = material.strip()
    if len(material) < MIN_KEY_BYTES:
        raise ModelFileError(f"the model key from {source} is {len(material)} bytes long; use at least "
                             f"{MIN_KEY_BYTES} (a random key file is best: leave the key unset once to create one)")
    return ModelKey(material, source)


def _read_key_file(path: Path, source: str) -> ModelKey:
    try:
        return _as_key(path.read_bytes(), f"{source} '{path}'")
    except OSError as e:
        raise ModelFileError(f"cannot read the model key file '{path}' ({source}): {e}") from e


def resolve_key(key: bytes | str | None = None) -> ModelKey | None:
    """Find the model key: ``key``, ``$OPENRKNN_MODEL_KEY``, ``$OPENRKNN_MODEL_KEY_FILE``, default file.

    Args:
        key: explicit key material (bytes, or a passphrase / hex text).

    Returns:
        The key, or None when none is set.
    """
    if key is not None:
        return _as_key(key, "the key argument")
    if os.environ.get(KEY_ENV):
        return _as_key(os.environ[KEY_ENV], f"${KEY_ENV}")
    if os.environ.get(KEY_FILE_ENV):
        return _read_key_file(Path(os.environ[KEY_FILE_ENV]), f"${KEY_FILE_ENV}")
    path = default_key_path()
    if path.is_file():
        return _read_key_file(path, "the default key file")
    return None


def create_key_file(path: str | os.PathLike[str]) -> ModelKey:
    """Write a new random 256-bit key (64 hex characters) to ``path``, readable by its owner only.

    Example:
        >>> import tempfile, os
        >>> key = create_key_file(os.path.join(tempfile.mkdtemp(), "model.key"))
        >>> len(key.material)
        64
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    text = secrets.token_hex(32)
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    except FileExistsError as e:
        raise ModelFileError(f"the key file '{path}' already exists; it is not overwritten") from e
    with os.fdopen(fd, "w") as handle:
        handle.write(text + "\n")
    log.warning(f"created a new random model key in '{path}': keep it; loading the encrypted model needs it "
                f"(copy it to the board, or set {KEY_FILE_ENV} / {KEY_ENV})")
    return ModelKey(text.encode("ascii"), f"the default key file '{path}'")


# ---------------------------------------------------------------- cipher
def _derive(material: bytes, salt: bytes, record: dict[str, Any], source: str) -> tuple[bytes, bytes]:
    """``(AES key, key check)`` = first 32 / last 8 bytes of the KDF output."""
    _, hashes, _, HKDF, Scrypt = _crypto()
    kdf = record.get("kdf")
    if kdf == "hkdf-sha256":
        out = HKDF(algorithm=hashes.SHA256(), length=40, salt=salt, info=_HKDF_INFO).derive(material)
    elif kdf == "scrypt":
        log2_n = int(record.get("log2_n", 0))
        # no more than the strongest level writes (128 MiB): a forged cost must not take the memory of the machine
        most = max(level.scrypt_log2_n for level in CRYPT_LEVELS.values())
        if not 10 <= log2_n <= most:
            raise ModelFileError(f"'{source}': scrypt cost 2**{log2_n} is outside the accepted range "
                                 f"2**10..2**{most}")
        out = Scrypt(salt=salt, length=40, n=2 ** log2_n, r=8, p=1).derive(material)
    else:
        raise ModelFileError(f"'{source}': unknown key derivation '{kdf}'; upgrade openrknn")
    return out[:32], out[32:]


def _aad(record: dict[str, Any], public: dict[str, Any]) -> bytes:
    return json.dumps({"encryption": record, "public": public}, sort_keys=True, separators=(",", ":")).encode()


def seal(plain: bytes, inner_header: dict[str, Any], crypt_level: int, key: ModelKey) -> bytes:
    """Encrypt plain ``.rknn`` bytes into encrypted ``.rknn`` bytes (``inner_header``: the plain header)."""
    _, _, AESGCM, _, _ = _crypto()
    level = CRYPT_LEVELS[crypt_level]
    salt, nonce = os.urandom(16), os.urandom(12)
    record: dict[str, Any] = {"cipher": CIPHER, "crypt_level": level.level, "kdf": level.kdf, "salt": salt.hex(),
                              "nonce": nonce.hex()}
    if level.kdf == "scrypt":
        record["log2_n"] = level.scrypt_log2_n
    aes_key, check = _derive(key.material, salt, record, "<new model>")
    record["key_check"] = check.hex()
    public = {k: inner_header[k] for k in _PUBLIC_FIELDS if k in inner_header} if level.public_io else {}
    sealed = AESGCM(aes_key).encrypt(nonce, plain, _aad(record, public))
    header = {"format": ENCRYPTED_FORMAT, "encryption": record, "public": public}
    return encode(Container(header=header, sections={PAYLOAD_SECTION: sealed}, flags=FLAG_ENCRYPTED))


def is_encrypted(container: Container) -> bool:
    return bool(container.flags & FLAG_ENCRYPTED) or container.header.get("format") == ENCRYPTED_FORMAT


def decrypt_container(container: Container, source: str, key: bytes | str | None = None) -> Container:
    """Open an encrypted container and return the plain model container inside it.

    Args:
        container: the decoded file (``container.read_file``); its flag bit 0 is set.
        source: file name for messages.
        key: explicit key; else found as :func:`resolve_key` says.

    Raises:
        ModelFileError: no key, the wrong key, or the file was modified after encryption.
    """
    InvalidTag, _, AESGCM, _, _ = _crypto()
    header = container.header
    record = header.get("encryption") or {}
    if header.get("format") != ENCRYPTED_FORMAT or PAYLOAD_SECTION not in container.sections:
        raise ModelFileError(f"'{source}' has the 'encrypted' flag but no encrypted payload; export it again")
    check_encrypted_header(header, source)
    if record.get("cipher") != CIPHER:
        raise ModelFileError(f"'{source}' uses cipher {record.get('cipher')!r}; this openrknn knows {CIPHER}")
    found = resolve_key(key)
    if found is None:
        raise ModelFileError(f"'{source}' is an encrypted model (crypt_level {record.get('crypt_level')}) and no key "
                             f"is set: set {KEY_ENV} or {KEY_FILE_ENV}, or put the key file at '{default_key_path()}'")
    try:
        salt, nonce, check = (bytes.fromhex(record[k]) for k in ("salt", "nonce", "key_check"))
    except (KeyError, ValueError, TypeError) as e:
        raise ModelFileError(f"'{source}': the encryption record is damaged ({e}); export it again") from e
    aes_key, expected = _derive(found.material, salt, record, source)
    if not hmac.compare_digest(expected, check):
        raise ModelFileError(f"'{source}' was encrypted with another key than the one from {found.source}; "
                             f"set {KEY_ENV} or {KEY_FILE_ENV} to the key used by export_encrypted_rknn_model")
    try:
        aad = _aad(record, header.get("public", {}))
        plain = AESGCM(aes_key).decrypt(nonce, container.sections[PAYLOAD_SECTION], aad)
    except InvalidTag as e:
        raise ModelFileError(f"'{source}' failed authentication: the encrypted model or its header was modified "
                             "after export_encrypted_rknn_model (tampered or damaged); use the original file") from e
    inner = decode(plain, source)
    if is_encrypted(inner):
        raise ModelFileError(f"'{source}' is encrypted twice; encrypt the plain model once")
    return inner


# ---------------------------------------------------------------- files
def default_output_path(input_path: str) -> str:
    """``{original_model_name}.crypt.rknn`` beside the input (seed 002 §5.9)."""
    root, ext = os.path.splitext(input_path)
    return root + ".crypt" + (ext or ".rknn")


def normalize_crypt_level(crypt_level: Any) -> int:
    """The toolkit resets an invalid level to 1 with a warning."""
    if isinstance(crypt_level, bool) or crypt_level not in CRYPT_LEVELS:
        log.warning(f"export_encrypted_rknn_model: crypt_level {crypt_level!r} is not 1, 2 or 3; using 1")
        return 1
    return int(crypt_level)


def _check_platforms(header: dict[str, Any], source: str) -> None:
    unsupported = [p for p in header.get("target_platforms", []) if p.lower() not in SUPPORTED_PLATFORMS]
    if unsupported:
        raise NotSupportedError(f"'{source}' targets {unsupported}: model encryption is supported on "
                                f"{', '.join(p.upper() for p in SUPPORTED_PLATFORMS)} only (seed 002 §5.9)")


def encrypt_model_file(input_path: str, output_path: str | None = None, crypt_level: int = 1,
                       key: bytes | str | None = None) -> str:
    """Encrypt an openrknn ``.rknn`` file (atomic write); returns the output path.

    Args:
        input_path: a plain openrknn model (``export_rknn`` output).
        output_path: destination; None gives ``{name}.crypt.rknn`` beside the input.
        crypt_level: 1, 2 or 3 (see the module docstring); others become 1 with a warning.
        key: explicit key material; else :func:`resolve_key` (creating a key file if none is set).

    Example:
        >>> # encrypt_model_file("mobilenet.rknn", crypt_level=2)  ->  'mobilenet.crypt.rknn'
    """
    level = normalize_crypt_level(crypt_level)
    if output_path is None:
        output_path = default_output_path(input_path)
        log.warning(f"export_encrypted_rknn_model: output_model is not set; saving to '{output_path}'")
    container = read_file(input_path)
    if is_encrypted(container):
        raise ModelFileError(f"'{input_path}' is already encrypted; encrypt the plain model exported by export_rknn")
    if container.header.get("format") != "openrknn-model":
        raise ModelFileError(f"'{input_path}' is not an openrknn model (format={container.header.get('format')!r})")
    _check_platforms(container.header, input_path)
    with open(input_path, "rb") as handle:
        plain = handle.read()
    found = resolve_key(key) or create_key_file(default_key_path())
    write_atomic(output_path, seal(plain, container.header, level, found))
    log.info(f"export_encrypted_rknn_model: '{output_path}' ({CIPHER}, crypt_level {level}, key from {found.source})")
    return output_path


def read_model_container(path: str, key: bytes | str | None = None) -> Container:
    """Read ``path`` and decrypt it when it is encrypted (the plain container otherwise)."""
    container = read_file(path)
    return decrypt_container(container, path, key) if is_encrypted(container) else container
