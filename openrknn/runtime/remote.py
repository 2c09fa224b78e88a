"""The PC side of the board connection: ``init_runtime(target=chip, device_id='host:port' | name)``.

A device is either ``host:port`` (token from ``OPENRKNN_TOKEN``) or a name from the devices file
``~/.config/openrknn/devices.yaml`` (``OPENRKNN_DEVICES`` names another)::

    devices:
      - name: rock5b
        address: 192.168.1.42:8788
        token: <the line 'token: …' that `openrknn serve` printed on the board>
        ca: ~/.config/openrknn/rock5b-ca.pem     # optional: connect with TLS, verify with this CA
        server_name: rock5b.local                # optional: name in the board's certificate

:class:`RemoteRuntime` has the simulator's ``run`` interface, so ``RKNN.inference`` is unchanged;
``eval_perf`` / ``eval_memory`` / ``get_sdk_version`` ask the board.
"""
from __future__ import annotations

import os
import socket
import ssl
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Sequence

import numpy as np
import yaml

from openrknn import log
from openrknn.errors import RuntimeStateError
from openrknn.model_file import to_container
from openrknn.model_file.container import encode
from openrknn.runtime import protocol
from openrknn.runtime.protocol import pack_array, unpack_array

CONNECT_TIMEOUT_S = 10.0
REQUEST_TIMEOUT_S = 600.0


class RemoteError(RuntimeStateError):
    """The board could not be reached, or refused a request (the server's reason is in the text)."""


@dataclass(frozen=True)
class Device:
    """A board running ``openrknn serve``."""

    name: str
    host: str
    port: int
    token: str | None
    ca: str | None = None
    server_name: str | None = None

    @property
    def address(self) -> str:
        return f"{self.host}:{self.port}"


def devices_file() -> Path:
    env = os.environ.get("OPENRKNN_DEVICES")
    return Path(env).expanduser() if env else Path.home() / ".config" / "openrknn" / "devices.yaml"


def split_address(text: str) -> tuple[str, int] | None:
    """``'host:port'`` (``'[::1]:8788'`` for IPv6) as a pair; None when ``text`` is not of that form."""
    host, sep, port = text.rpartition(":")
    if not sep or not host or not port.isdigit() or not 0 < int(port) < 65536:
        return None
    return host.strip("[]"), int(port)


def configured_devices() -> list[Device]:
    """The devices of the devices file (empty when it does not exist)."""
    path = devices_file()
    if not path.is_file():
        return []
    try:
        data = yaml.safe_load(path.read_text(encoding="utf-8")) or {}
    except yaml.YAMLError as e:
        raise RemoteError(f"devices file {path} is not valid YAML: {e}") from e
    entries = data.get("devices") if isinstance(data, dict) else None
    if not isinstance(entries, list):
        raise RemoteError(f"devices file {path} needs a 'devices:' list of {{name, address, token}} entries")
    found = []
    for entry in entries:
        address = split_address(str(entry.get("address", ""))) if isinstance(entry, dict) else None
        if address is None or not entry.get("name"):
            raise RemoteError(f"devices file {path}: every entry needs 'name' and 'address: host:port' ({entry!r})")
        ca = entry.get("ca")
        found.append(Device(str(entry["name"]), *address, entry.get("token") or os.environ.get("OPENRKNN_TOKEN"),
                            str(Path(ca).expanduser()) if ca else None, entry.get("server_name")))
    return found


def resolve_device(device_id: str | None) -> Device | None:
    """The board ``device_id`` names; None when it names none (an adb serial, or nothing configured).

    Without ``device_id`` the only configured device is used, as the toolkits pick the only board.
    """
    devices = configured_devices()
    if device_id is None:
        if len(devices) > 1:
            raise RemoteError(f"{len(devices)} devices are configured in {devices_file()} "
                              f"({', '.join(d.name for d in devices)}): pass device_id='<name>'")
        return devices[0] if devices else None
    for device in devices:
        if device_id in (device.name, device.address):
            return device
    address = split_address(device_id)
    if address is None:
        return None
    return Device(device_id, *address, os.environ.get("OPENRKNN_TOKEN"), os.environ.get("OPENRKNN_TLS_CA"))


class BoardClient:
    """One authenticated connection; requests are serialised (one answer per request)."""

    def __init__(self, device: Device, timeout: float = CONNECT_TIMEOUT_S,
                 max_frame_bytes: int = protocol.DEFAULT_MAX_FRAME_MB * 1024 * 1024) -> None:
        if not device.token:
            raise RemoteError(f"no token for {device.name}: set OPENRKNN_TOKEN or the device's 'token' in "
                              f"{devices_file()} (the board printed it as 'token: …' on first start)")
        self.device = device
        self.max_frame_bytes = max_frame_bytes
        self._lock = threading.Lock()
        try:
            sock = socket.create_connection((device.host, device.port), timeout=timeout)
        except OSError as e:
            raise RemoteError(f"cannot reach {device.name} at {device.address}: {e}. Is `openrknn serve` running "
                              "there (and the port forwarded, for adb)?") from e
        try:
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            if device.ca:
                context = ssl.create_default_context(cafile=device.ca)
                sock = context.wrap_socket(sock, server_hostname=device.server_name or device.host)
            sock.settimeout(REQUEST_TIMEOUT_S)
            self.sock = sock
            self.info = self.request("hello", token=device.token, version=protocol.PROTOCOL_VERSION)
        except Exception:
            sock.close()
            raise

    def request(self, cmd: str, **arguments: Any) -> dict[str, Any]:
        """Send one request; the answer's fields, or :class:`RemoteError` with the server's reason."""
        with self._lock:
            try:
                protocol.write_frame(self.sock, {"cmd": cmd, **arguments}, self.max_frame_bytes)
                answer = protocol.read_frame(self.sock, self.max_frame_bytes)
            except protocol.ProtocolError as e:
                raise RemoteError(f"{self.device.name}: {cmd}: {e}") from e
            except (OSError, ssl.SSLError) as e:
                raise RemoteError(f"{self.device.name}: {cmd}: connection failed: {e}") from e
        if not answer.get("ok"):
            raise RemoteError(f"{self.device.name} refused '{cmd}': {answer.get('error', 'no reason given')}")
        answer.pop("ok")
        return answer

    def close(self) -> None:
        try:
            self.sock.close()
        except OSError:
            pass


class RemoteRuntime:
    """A model loaded on a board; ``run`` matches the simulator's so ``inference`` needs no change."""

    is_remote = True

    def __init__(self, device: Device, model_bytes: bytes, options: dict[str, Any]) -> None:
        self.client = BoardClient(device)
        self.device_name = str(self.client.info.get("device") or device.name)
        self.label = f"{self.device_name} at {device.address}" if device.name in (device.address, self.device_name) \
            else f"{device.name} ({self.device_name} at {device.address})"
        try:
            loaded = self.client.request("load", model=model_bytes, **options)
            self.context, self.options = loaded["context"], loaded.get("options", {})
        except Exception:
            self.client.close()
            raise
        self.last_inputs: list[np.ndarray] | None = None

    def run(self, inputs: Sequence[Any], data_format: Sequence[str] | str | None = None,
            inputs_pass_through: Sequence[int] | None = None) -> list[np.ndarray]:
        """One inference on the board; float32 outputs."""
        arrays = [np.asarray(v) for v in (inputs if isinstance(inputs, (list, tuple)) else [inputs])]
        answer = self.client.request("infer", context=self.context, inputs=[pack_array(a) for a in arrays],
                                     data_format=data_format,
                                     inputs_pass_through=None if inputs_pass_through is None else list(inputs_pass_through))
        self.last_inputs = arrays
        return [unpack_array(o).astype(np.float32, copy=False) for o in answer["outputs"]]

    def time_runs(self, inputs: Sequence[np.ndarray], loop_cnt: int) -> dict[str, Any]:
        return self.client.request("perf", context=self.context, inputs=[pack_array(a) for a in inputs],
                                   loop_cnt=loop_cnt)

    def memory(self) -> dict[str, Any]:
        return self.client.request("memory", context=self.context)

    def sdk_version(self) -> str | None:
        """Print and return the board's version banner (None, with an ``E`` line, when it does not answer)."""
        try:
            text = str(self.client.request("sdk_version", context=self.context)["text"])
        except RemoteError as e:
            log.error(f"get_sdk_version: {e}")
            return None
        print(text)
        return text

    def close(self) -> None:
        try:
            self.client.request("release", context=self.context)
        except RemoteError:
            pass   # the server releases a closed connection's models anyway
        self.client.close()


def probe(device: Device, timeout: float = 2.0) -> dict[str, Any] | None:
    """The board's hello answer, or None when it does not answer (or refuses the token)."""
    try:
        client = BoardClient(device, timeout=timeout)
    except RemoteError:
        return None
    client.close()
    return client.info


def open_runtime(device: Device, model: Any, options: dict[str, Any]) -> RemoteRuntime:
    """Send ``model`` (an RKNNModel) to the board as .rknn bytes and start a runtime there."""
    return RemoteRuntime(device, encode(to_container(model)), options)
