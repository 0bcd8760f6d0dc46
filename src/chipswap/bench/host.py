"""The machine `chipswap bench` runs on, when the server runs there too: CPU, NVIDIA GPUs, Neuron devices,
and the EC2 instance type when the firmware names it.

Read-only and bounded: /proc/cpuinfo, /proc/driver/nvidia/gpus/*/information, /dev/neuron*, the DMI
product name (EC2 Nitro instances put their instance type there), and ``nvidia-smi`` only when the NVIDIA
proc files are absent (5 s timeout). May not: reach the network (no instance metadata service) or write.
"""

from __future__ import annotations

import ipaddress
import os
import re
import shutil
import socket
import subprocess
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

_READ_CAP = 256 * 1024


def _read(path: Path) -> str:
    try:
        with path.open("rb") as fh:
            return fh.read(_READ_CAP).decode("utf-8", "replace")
    except OSError:
        return ""


def is_beside(url: str) -> bool:
    """The server is on this machine: a loopback address, "localhost" or this host's own name."""
    host = (urlsplit(url).hostname or "").lower()
    if host in ("localhost", socket.gethostname().lower()):
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def _cpu_model() -> str | None:
    for line in _read(Path("/proc/cpuinfo")).splitlines():
        if line.lower().startswith(("model name", "cpu model", "hardware")) and ":" in line:
            return line.split(":", 1)[1].strip()[:120] or None
    return None


def _gpus() -> list[str]:
    names = []
    root = Path("/proc/driver/nvidia/gpus")
    if root.is_dir():
        for info in sorted(root.glob("*/information"))[:64]:
            m = re.search(r"^Model:\s*(.+)$", _read(info), re.M)
            if m:
                names.append(m.group(1).strip()[:120])
    if names or shutil.which("nvidia-smi") is None:
        return names
    try:
        out = subprocess.run(
            ["nvidia-smi", "--query-gpu=name", "--format=csv,noheader"],
            capture_output=True,
            text=True,
            timeout=5,
            check=False,
        )
    except (OSError, subprocess.SubprocessError):
        return names
    return [ln.strip()[:120] for ln in out.stdout.splitlines()[:64] if ln.strip()]


def _neuron_devices() -> int:
    return sum(1 for p in Path("/dev").glob("neuron*") if re.fullmatch(r"neuron\d+", p.name))


def _ec2_type() -> str | None:
    dmi = Path("/sys/devices/virtual/dmi/id")
    if "amazon" not in _read(dmi / "sys_vendor").lower():
        return None
    name = _read(dmi / "product_name").strip()
    return name if re.fullmatch(r"[a-z0-9-]+\.[a-z0-9-]+", name) else None


def detect_host() -> dict[str, Any]:
    """What this machine has (the identity.host block, without the declared instance)."""
    return {
        "cpu_model": _cpu_model(),
        "cpus": os.cpu_count(),
        "gpus": _gpus(),
        "neuron_devices": _neuron_devices(),
        "ec2_instance_type": _ec2_type(),
    }
