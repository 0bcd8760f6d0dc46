"""Put a rendered trial kit on disk as one unit: all files or none, an existing folder only with --force.

Shell: the kit is written into a fresh sibling folder, fsynced, then renamed into place (with --force the old
folder is first renamed aside and removed only after the new one is in place). A run killed at any point
leaves either the old folder or the new one, plus at most a hidden `.NAME.trial-*` folder. May not render.
"""

from __future__ import annotations

import os
import secrets
import shutil
from pathlib import Path

from chipswap.errors import ChipswapError

TMP_PREFIX = ".trial-"


def check_out(out: Path, force: bool) -> None:
    """Refuse, before any work: a file where the folder goes, or an existing folder without --force."""
    if out.exists() or out.is_symlink():
        if not out.is_dir() or out.is_symlink():
            raise ChipswapError(f"--out {out} is a file or a link; pass a folder path for the trial kit")
        if not force:
            raise ChipswapError(
                f"--out {out} already exists; pass --force to replace it or choose another --out folder"
            )
    parent = out.parent if str(out.parent) else Path(".")
    if not parent.is_dir():
        raise ChipswapError(f"--out {out}: the folder {parent} does not exist; create it first")
    if not os.access(parent, os.W_OK):
        raise ChipswapError(f"--out {out}: {parent} is not writable; choose another --out folder")


def _fsync(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def write_kit(out: Path, files: dict[str, tuple[str, bool]], *, force: bool) -> Path:
    check_out(out, force)
    parent = out.parent if str(out.parent) else Path(".")
    token = secrets.token_hex(4)
    tmp = parent / f".{out.name}{TMP_PREFIX}{os.getpid()}-{token}"
    try:
        tmp.mkdir()
        for rel, (text, executable) in sorted(files.items()):
            dest = tmp / rel
            dest.parent.mkdir(parents=True, exist_ok=True)
            with open(dest, "w", encoding="utf-8", newline="\n") as fh:
                fh.write(text)
                fh.flush()
                os.fsync(fh.fileno())
            os.chmod(dest, 0o755 if executable else 0o644)
        for d in sorted({(tmp / rel).parent for rel in files}, key=lambda p: -len(p.parts)):
            _fsync(d)
        old = None
        if out.exists():
            old = parent / f".{out.name}{TMP_PREFIX}old-{token}"
            os.rename(out, old)
        os.rename(tmp, out)
        _fsync(parent)
        if old is not None:
            shutil.rmtree(old, ignore_errors=True)
    except OSError as exc:
        shutil.rmtree(tmp, ignore_errors=True)
        raise ChipswapError(f"could not write the trial kit to {out}: {exc.strerror or exc}") from None
    return out
