"""One notion of "this machine" for a bench URL (issue 32): every spelling of a host reduced to one canonical
form, and the rule that decides whether that host is the machine the bench runs on.

A host is canonicalised the way the resolver and browsers read it: IPv4 in any inet_aton form (decimal,
octal ``0177``, hex ``0x7f``, one to four parts: ``127.1``, ``2130706433``, ``0x7f000001``,
``127.000.000.001``), IPv6 with brackets, a zone id (``%eth0`` or ``%25eth0``) and embedded IPv4
(``::ffff:127.0.0.1``, ``::127.0.0.1``, ``::ffff:0:127.0.0.1``) unwrapped to the IPv4 address, names in lower
case, Unicode compatibility forms folded (fullwidth digits and dots), trailing dots dropped. "This machine"
is then: a loopback or unspecified address (``127.0.0.0/8``, ``0.0.0.0``, ``::1``, ``::``), a loopback
name (``localhost``, ``*.localhost``, ``localhost.localdomain``, ``ip6-localhost``, ``ip6-loopback``), or one
of the machine's own addresses or names, or a name that resolved to any of these.

Pure: text in, text or bool out. chipswap.bench.host lists the machine's own addresses and names and
resolves the URL's host. May not: resolve names, open sockets, read files.
"""

from __future__ import annotations

import ipaddress
import re
import unicodedata
from collections.abc import Iterable

MAX_HOST = 300  # longer than any DNS name (253) or IPv6 literal with a zone: not a host, compared as text
LOOPBACK_NAMES = frozenset({"localhost", "localhost.localdomain", "ip6-localhost", "ip6-loopback"})
LOCAL_NETS = tuple(
    ipaddress.ip_network(n) for n in ("127.0.0.0/8", "0.0.0.0/32", "::1/128", "::/128")
)  # loopback, and the unspecified address (a connection to it reaches this machine)
_DOTS = str.maketrans({"\u3002": ".", "\uff0e": ".", "\uff61": "."})  # ideographic / fullwidth full stops
_PART = {
    10: re.compile(r"[0-9]+"),
    8: re.compile(r"[0-7]*"),
    16: re.compile(r"[0-9a-f]*"),
}


def _ipv4_part(part: str) -> int | None:
    """One inet_aton part: decimal, octal (leading 0) or hex (0x); None if it is not one."""
    if part[:2] == "0x":
        base, digits = 16, part[2:]
    elif len(part) > 1 and part[0] == "0":
        base, digits = 8, part[1:]
    else:
        base, digits = 10, part
    if not _PART[base].fullmatch(digits):
        return None
    digits = digits.lstrip("0")
    if len(digits) > 12:  # past 2**32 in any base: not an address (and no long int is built)
        return None
    return int(digits, base) if digits else 0


def parse_ipv4(text: str) -> ipaddress.IPv4Address | None:
    """The IPv4 address ``text`` spells in any inet_aton / WHATWG form, or None.

    One to four parts separated by dots; each part decimal, octal or hex; the last part fills the remaining
    bytes (``127.1`` is 127.0.0.1, ``2130706433`` too); one trailing dot is allowed."""
    t = text.lower()
    if t.endswith("."):
        t = t[:-1]
    parts = t.split(".")
    if not t or len(parts) > 4 or any(not p for p in parts):
        return None
    nums = [_ipv4_part(p) for p in parts]
    if any(n is None for n in nums):
        return None
    head, last = nums[:-1], nums[-1]
    if any(n > 255 for n in head) or last >= 256 ** (5 - len(parts)):  # type: ignore[operator]
        return None
    value = 0
    for n in head:
        value = value * 256 + n  # type: ignore[operator]
    value = value * 256 ** (5 - len(parts)) + last  # type: ignore[operator]
    return ipaddress.IPv4Address(value)


def _unwrap(addr: ipaddress.IPv6Address) -> ipaddress.IPv4Address | ipaddress.IPv6Address:
    """The IPv4 address inside an IPv4-mapped, -compatible or -translated IPv6 address, else the address."""
    if addr.ipv4_mapped is not None:
        return addr.ipv4_mapped
    n = int(addr)
    if n >> 32 == 0xFFFF0000:  # ::ffff:0:a.b.c.d (IPv4-translated, RFC 2765)
        return ipaddress.IPv4Address(n & 0xFFFFFFFF)
    if n >> 32 == 0 and n > 1:  # ::a.b.c.d (IPv4-compatible, deprecated); :: and ::1 stay IPv6
        return ipaddress.IPv4Address(n)
    return addr


def canonical_host(host: str) -> str:
    """The one spelling of a URL host: an IPv4 dotted quad, a compressed IPv6 address (embedded IPv4
    unwrapped) or a lower-case name without trailing dots. Never raises."""
    h = unicodedata.normalize("NFKC", host[:MAX_HOST]).translate(_DOTS).strip().lower()
    if h.startswith("[") and h.endswith("]"):
        h = h[1:-1]
    if ":" in h and "%" in h:  # an IPv6 zone id: fe80::1%eth0, or %25eth0 as a URL writes it
        h = h.split("%", 1)[0]
    if ":" in h:
        try:
            return str(_unwrap(ipaddress.IPv6Address(h)))
        except ValueError:
            return h
    v4 = parse_ipv4(h)
    if v4 is not None:
        return str(v4)
    return h.rstrip(".")


def is_loopback(host: str) -> bool:
    """The host is this machine whatever machine that is: a loopback or unspecified address in any
    spelling, or a loopback name."""
    c = canonical_host(host)
    if c in LOOPBACK_NAMES or c.endswith(".localhost"):
        return True
    try:
        addr = ipaddress.ip_address(c)
    except ValueError:
        return False
    return any(addr.version == net.version and addr in net for net in LOCAL_NETS)


def is_this_machine(host: str, own: Iterable[str] = (), resolved: Iterable[str] = ()) -> bool:
    """The URL host ``host`` is the machine whose own addresses and names are ``own``; ``resolved``: the
    addresses the host resolved to (or the address the bench connected to), each judged the same way."""
    mine = {canonical_host(x) for x in own if x}
    return any(is_loopback(h) or canonical_host(h) in mine for h in (host, *resolved) if h)
