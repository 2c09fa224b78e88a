"""Boards reachable over adb (``list_devices``); absent adb simply means no boards."""
from __future__ import annotations

import shutil
import subprocess

from openrknn.runtime import remote


def adb_devices() -> list[str]:
    """Serial numbers from ``adb devices`` (empty when adb is missing or fails)."""
    adb = shutil.which("adb")
    if adb is None:
        return []
    try:
        result = subprocess.run([adb, "devices"], capture_output=True, text=True, timeout=10, check=False)
    except (OSError, subprocess.SubprocessError):
        return []
    serials = []
    for line in result.stdout.splitlines()[1:]:
        parts = line.split()
        if len(parts) >= 2 and parts[1] == "device":
            serials.append(parts[0])
    return serials


def list_devices() -> tuple[list[str], list[str]]:
    """Print and return ``(adb_devices, ntb_devices)`` in the toolkit's format, then the boards of the
    devices file that answer (``openrknn serve``; see docs/deployment.md)."""
    adb = adb_devices()
    print("*" * 25)
    if adb:
        print("all device(s) with adb mode:")
        print(",".join(adb))
        print("to reach one over adb, run `openrknn serve` on it, then: adb -s <serial> forward tcp:8788 tcp:8788 "
              "and use device_id='127.0.0.1:8788'")
    else:
        print("None devices connected.")
    print("*" * 25)
    _print_network_devices()
    return adb, []


def _print_network_devices() -> None:
    try:
        configured = remote.configured_devices()
    except remote.RemoteError as e:
        print(f"devices file: {e}")
        return
    if not configured:
        return
    answering = [(d, info) for d in configured if (info := remote.probe(d)) is not None]
    print(f"all device(s) with openrknn serve ({remote.devices_file()}):")
    for device, info in answering:
        print(f"{device.name}  {device.address}  ({info.get('device')}, openrknn {info.get('server_version')})")
    if not answering:
        print("None of the configured devices answers.")
    print("*" * 25)


def find_device(device_id: str | None) -> str | None:
    serials = adb_devices()
    if device_id is None:
        return serials[0] if len(serials) == 1 else None
    return device_id if device_id in serials else None
