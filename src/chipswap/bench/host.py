"""The machine `chipswap bench` runs on, when the server runs there too: CPU, NVIDIA GPUs, Neuron devices,
and the EC2 instance type when the firmware names it.

Whether the server is on this machine (``is_beside``) follows one rule, chipswap.bench.hostaddr: the URL's
host in every spelling, what it resolves to and the address the bench connected to, against loopback and
this machine's own addresses (interfaces) and names.

Read-only and bounded: /proc/cpuinfo, /proc/driver/nvidia/gpus/*/information, /dev/neuron*, the DMI
product name (EC2 Nitro instances put their instance type there), and ``nvidia-smi`` only when the NVIDIA
proc files are absent (5 s timeout); the interface addresses (ioctl, /proc/net/if_inet6) and the system
resolver for the URL's own host name (the bench connects to it anyway; RESOLVE_TIMEOUT_S). May not: reach
the network otherwise (no instance metadata service) or write.
"""

from __future__ import annotations

import ipaddress
import os
import re
import shutil
import socket
import subprocess
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from chipswap.bench.hostaddr import canonical_host, is_loopback, is_this_machine

_READ_CAP = 256 * 1024


def _read(path: Path) -> str:
    try:
        with path.open("rb") as fh:
            return fh.read(_READ_CAP).decode("utf-8", "replace")
    except OSError:
        return ""


RESOLVE_TIMEOUT_S = 2.0  # the system resolver, for the URL's host name and this machine's own name
MAX_INTERFACES = 256
SIOCGIFADDR = 0x8915  # Linux: an interface's IPv4 address


def _bounded(fn: Callable[[], Any], timeout: float, default: Any) -> Any:
    """fn() in a daemon thread, or ``default`` when it takes longer than ``timeout`` (a slow resolver)."""
    out: list[Any] = []
    t = threading.Thread(target=lambda: out.append(fn()), daemon=True)
    t.start()
    t.join(timeout)
    return out[0] if out else default


def resolve(host: str, timeout: float = RESOLVE_TIMEOUT_S) -> tuple[str, ...]:
    """The addresses the system resolver gives for ``host`` (empty: none, an error or too slow)."""

    def lookup() -> tuple[str, ...]:
        try:
            infos = socket.getaddrinfo(host, None, proto=socket.IPPROTO_TCP)
        except (OSError, UnicodeError, ValueError):
            return ()
        return tuple(dict.fromkeys(str(i[4][0]) for i in infos[:64]))

    return _bounded(lookup, timeout, ())


def _ipv4_interfaces() -> list[str]:
    try:
        import fcntl
        import struct

        names = [n for _, n in socket.if_nameindex()][:MAX_INTERFACES]
    except (ImportError, OSError, AttributeError):
        return []
    out = []
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        for name in names:
            try:
                raw = fcntl.ioctl(s.fileno(), SIOCGIFADDR, struct.pack("256s", name.encode()[:15]))
            except OSError:
                continue  # an interface without an IPv4 address
            out.append(socket.inet_ntoa(raw[20:24]))
    return out


def _ipv6_interfaces() -> list[str]:
    out = []
    for line in _read(Path("/proc/net/if_inet6")).splitlines()[:MAX_INTERFACES]:
        word = line.split()[0] if line.split() else ""
        if re.fullmatch(r"[0-9a-f]{32}", word):
            out.append(str(ipaddress.IPv6Address(int(word, 16))))
    return out


def own_hosts() -> frozenset[str]:
    """This machine's own addresses (every interface) and names (the host name, its first label, and what
    the resolver gives for it)."""
    name = socket.gethostname()
    names = {name, name.split(".")[0]} if name else set()
    addrs = set(_ipv4_interfaces()) | set(_ipv6_interfaces())
    if name:
        addrs |= set(resolve(name))
    return frozenset(x for x in names | addrs if x)


def url_host(url: str) -> str:
    """The host the bench's HTTP client connects to (its own URL parser, so no other reading of the URL
    can disagree), or "" when the URL has none."""
    import httpx

    try:
        return httpx.URL(url).host or ""
    except (httpx.InvalidURL, TypeError, ValueError):
        try:
            return (urlsplit(url).hostname or "") if "://" in url else ""
        except ValueError:  # a bracketed host that is not an IPv6 address
            return ""


def is_beside(url: str, peer: str | None = None) -> bool:
    """The server is on this machine: the URL's host in any spelling, what it resolves to, or ``peer`` (the
    address the bench connected to) is a loopback address or one of this machine's own (hostaddr)."""
    host = url_host(url)
    seen = [peer] if peer else []
    if is_loopback(host):
        return True
    own = own_hosts()
    if is_this_machine(host, own, seen):
        return True
    canon = canonical_host(host)
    try:
        ipaddress.ip_address(canon)
    except ValueError:  # a name: what it resolves to decides
        return is_this_machine(host, own, resolve(canon)) if canon else False
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
