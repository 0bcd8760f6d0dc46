"""Atomic file writes: temp file in the same folder, fsync, rename. A crash never leaves half a file.

May not touch anything but the target path and its temp sibling.
"""

from __future__ import annotations

import errno
import os
import tempfile
from pathlib import Path

from chipswap.errors import ChipswapError


def _current_umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


def _fsync_dir(directory: Path) -> None:
    try:
        fd = os.open(directory, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


_FIXES = {
    errno.ENOSPC: "free disk space or choose another output path",
    errno.EDQUOT: "free disk space or choose another output path",
    errno.EACCES: "choose a folder you can write to",
    errno.EPERM: "choose a folder you can write to",
    errno.EROFS: "the file system is read-only; choose another output path",
    errno.EISDIR: "that path is a folder; give a file name",
    errno.ENOTDIR: "a part of that path is a file, not a folder; choose another output path",
    errno.EEXIST: "a part of that path is a file, not a folder; choose another output path",
}


def _write_error(target: Path, exc: OSError) -> ChipswapError:
    fix = _FIXES.get(exc.errno or 0, "choose another output path")
    return ChipswapError(f"cannot write {target}: {exc.strerror or exc}; {fix}")


def atomic_write_bytes(path: str | os.PathLike[str], data: bytes) -> Path:
    target = Path(path)
    if target.is_dir():
        raise ChipswapError(f"cannot write {target}: it is a folder; give a file name")
    try:
        target.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(prefix=f".{target.name}.", suffix=".tmp", dir=target.parent)
    except OSError as exc:
        raise _write_error(target, exc) from None
    try:
        # mkstemp creates 0600; give the file the mode a plain open() would (0666 less the umask)
        os.fchmod(fd, 0o666 & ~_current_umask())
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, target)
    except OSError as exc:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise _write_error(target, exc) from None
    _fsync_dir(target.parent)
    return target


def atomic_write_text(path: str | os.PathLike[str], text: str) -> Path:
    return atomic_write_bytes(path, text.encode("utf-8"))
