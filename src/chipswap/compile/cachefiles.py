"""Small file operations of the artifact cache (and the report set, which shares its crash-safety rules):
hashing, fsync, a write that tests can fail, bounded reads that never follow a symlink or block on a FIFO,
best-effort removal, and the one-line error for a cache folder that cannot be written. No knowledge of
entries or keys lives here; chipswap.compile.cache builds on these.
"""

from __future__ import annotations

import errno
import hashlib
import os
import shutil
import stat
from pathlib import Path

from chipswap.errors import ChipswapError


def sha256_file(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as fh:
        for chunk in iter(lambda: fh.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def fsync_path(path: Path, directory: bool = False) -> None:
    fd = os.open(path, os.O_RDONLY | (os.O_DIRECTORY if directory else 0))
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def write_file(path: Path, data: bytes) -> None:
    """Write + fsync one file (tests inject ENOSPC here to simulate a full disk during publish)."""
    with open(path, "wb") as fh:
        fh.write(data)
        fh.flush()
        os.fsync(fh.fileno())


def read_small(path: Path, limit: int) -> str:
    """At most ``limit`` bytes of a small regular file, without following a symlink or blocking on a FIFO."""
    fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise OSError(errno.EINVAL, "not a regular file")
        data = os.read(fd, limit + 1)
    finally:
        os.close(fd)
    if len(data) > limit:
        raise OSError(errno.EFBIG, "file too large")
    return data.decode("utf-8", errors="replace")


def remove(p: Path) -> None:
    """Remove a file, a symlink (never its target) or a folder tree; errors ignored (best-effort cleanup)."""
    try:
        if p.is_symlink() or not p.is_dir():
            p.unlink(missing_ok=True)
        else:
            shutil.rmtree(p, ignore_errors=True)
    except OSError:
        pass


def disk_error(path: Path, exc: OSError) -> ChipswapError:
    what = exc.strerror or str(exc)
    if exc.errno in (errno.ENOSPC, errno.EDQUOT):
        fix = "free disk space or pass --cache-dir on a bigger disk"
    else:
        fix = "pass --cache-dir (or set CHIPSWAP_CACHE_DIR) to a writable folder"
    return ChipswapError(f"cannot write the compile cache at {path}: {what}; {fix}")
