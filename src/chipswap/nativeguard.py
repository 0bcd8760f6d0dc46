"""No native code from a data file: the checks that keep a user's ``.pt2`` from loading a shared object.

torch's ``.pt2`` loader (``torch.export.load``) dlopens every AOTInductor shared object stored under
``data/aotinductor/`` in the archive, and an ELF constructor runs at dlopen, before any symbol is looked up. A
``.pt2`` the user passes is data (``docs/security.md``), so chipswap:

* scans the archive's member names (and the first bytes of each member) before torch sees the file, and
  refuses one that carries native code unless the caller says it trusts the file (``--trust-native``); a
  member the scan cannot read (marked encrypted, a compression method other than stored/deflated, a damaged
  header) is a refusal too, never the end of the scan (issue 32);
* while torch reads the archive, replaces torch's AOTInductor loader with one that refuses, so a layout the
  scan did not foresee still never reaches dlopen.

AOTInductor packages chipswap compiled itself load only from its own cache, after the entry's sha256 manifest
matched (``chipswap.compile.trust.require_cache_entry``, used by ``chipswap.compile.backends``).

May not touch: the network, any file it is not given; it imports torch only inside ``no_aoti_load``.
"""

from __future__ import annotations

import contextlib
import logging
import zipfile
from collections.abc import Iterator
from pathlib import Path

from chipswap.errors import ChipswapError
from chipswap.textsafe import one_line

NATIVE_SUFFIXES = (".so", ".dylib", ".dll", ".pyd")
NATIVE_MAGIC = (b"\x7fELF", b"MZ", b"\xcf\xfa\xed\xfe", b"\xce\xfa\xed\xfe", b"\xca\xfe\xba\xbe")
MAX_MEMBERS = 100_000  # a .pt2 with more members is not something torch.export.save wrote
# the compression methods torch's own .pt2 reader reads
READABLE_METHODS = {zipfile.ZIP_STORED: "stored", zipfile.ZIP_DEFLATED: "deflated"}
_ENCRYPTED = 0x1  # general purpose flag bit 0
TRUST_HINT = "pass --trust-native only if you trust whoever made the file (its shared objects run as you)"


class NativeCodeRefused(ChipswapError):
    """A data file carries native code and the caller did not trust it."""


def _unreadable(info: zipfile.ZipInfo) -> str | None:
    """Why the scan cannot read a member from its central directory entry (None when it can)."""
    if info.flag_bits & _ENCRYPTED:
        return "marked encrypted"
    if info.compress_type not in READABLE_METHODS:
        return f"compression method {info.compress_type}"
    return None


def scan_archive(path: str | Path) -> tuple[list[str], list[tuple[str, str]]]:
    """(members that are or would be loaded as native code, (member, why) for members the scan cannot read).

    Every member is looked at: one it cannot read is recorded and the scan goes on. A file that is not a
    readable zip at all is left to torch's own error (it cannot hold a loadable package either, and
    ``no_aoti_load`` still guards the load)."""
    found: list[str] = []
    unreadable: list[tuple[str, str]] = []
    try:
        zf = zipfile.ZipFile(path)
    except (zipfile.BadZipFile, OSError, ValueError, NotImplementedError, RuntimeError):
        return found, unreadable
    with zf:
        infos = zf.infolist()
        if len(infos) > MAX_MEMBERS:
            return [f"<{len(infos):,} members>"], unreadable
        for info in infos:
            name = info.filename
            parts = name.lower().split("/")
            native = "aotinductor" in parts or any(p.endswith(NATIVE_SUFFIXES) for p in parts)
            if native:
                found.append(name)
            why = _unreadable(info)
            if why is not None:
                unreadable.append((name, why))
                continue
            if native or info.is_dir() or info.file_size < 4:
                continue
            try:
                with zf.open(info) as fh:
                    head = fh.read(4)
            except Exception as exc:  # noqa: BLE001 - any member the scan cannot read is a refusal
                unreadable.append((name, one_line(str(exc) or type(exc).__name__, 120)))
                continue
            if head.startswith(NATIVE_MAGIC):
                found.append(name)
    return found, unreadable


def native_members(path: str | Path) -> list[str]:
    """Members of a ``.pt2`` archive that are (or would be loaded as) native code; [] for a clean archive."""
    return scan_archive(path)[0]


def refuse_native(path: str | Path, what: str = "exported program") -> None:
    """Raise a one-line NativeCodeRefused when the archive at ``path`` carries native code, or a member the
    scan cannot read (so cannot vouch for)."""
    found, unreadable = scan_archive(path)
    if unreadable:
        name, why = unreadable[0]
        raise NativeCodeRefused(
            f"{what} {one_line(str(path), 120)} has {len(unreadable)} member(s) chipswap cannot read to check"
            f" for native code (e.g. {one_line(name, 80)}: {why}); torch.export.save writes plain members:"
            f" re-save the model with torch.export.save, or {TRUST_HINT}"
        )
    if found:
        raise NativeCodeRefused(
            f"{what} {one_line(str(path), 120)} carries native code ({len(found)} member(s), e.g. "
            f"{one_line(found[0], 80)}); chipswap never loads a shared object from a file you pass: save the "
            f"model with torch.export.save (no AOTInductor package), or {TRUST_HINT}"
        )


@contextlib.contextmanager
def no_aoti_load(what: str = "exported program") -> Iterator[None]:
    """While active, torch's .pt2 reader refuses to load any AOTInductor package (no dlopen), and its
    multi-line "Ran into the following error" warning traceback is kept off the terminal."""
    from torch.export.pt2_archive import _package

    def refuse(*_a: object, **_k: object) -> object:
        raise NativeCodeRefused(
            f"{what} carries an AOTInductor package (native code); chipswap never loads a shared object from "
            f"a file you pass; {TRUST_HINT}"
        )

    saved = _package._load_aoti
    _package._load_aoti = refuse  # type: ignore[assignment]
    try:
        with quiet_torch_export():
            yield
    finally:
        _package._load_aoti = saved  # type: ignore[assignment]


@contextlib.contextmanager
def quiet_torch_export() -> Iterator[None]:
    """torch.export.load logs a warning with a full traceback before its own error; chipswap says one line."""
    loggers = [logging.getLogger(n) for n in ("torch.export", "torch._export", "torch.export.pt2_archive")]
    saved = [lg.level for lg in loggers]
    for lg in loggers:
        lg.setLevel(logging.ERROR)
    try:
        yield
    finally:
        for lg, lvl in zip(loggers, saved, strict=True):
            lg.setLevel(lvl)
