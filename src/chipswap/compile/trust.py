"""Compiled artifacts are native code (AOTInductor shared objects) or TorchScript (Neuron): they load only
from a ready entry of chipswap's own cache whose manifest carries a valid tag (chipswap.compile.signing) and
whose files match it now (issues 19, 32), and then from a private copy: whoever can write the cache folder
cannot swap a file between the check and the load.

May not: load anything itself, or write outside the private temporary folder it makes (removed on exit).
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import shutil
import stat
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING

from chipswap.nativeguard import NativeCodeRefused
from chipswap.textsafe import one_line

if TYPE_CHECKING:  # pragma: no cover
    from chipswap.compile.cache import Entry


def require_cache_entry(artifact_dir: str | Path) -> Entry:
    """The ready, signed, verified entry that ``artifact_dir`` is: it must be ``<root>/entries/<key>`` of a
    chipswap cache, its tag valid and its files matching their sha256 manifest now."""
    from chipswap.compile.cache import ArtifactCache, is_key

    d = Path(artifact_dir)
    if not (is_key(d.name) and d.parent.name == "entries" and not d.is_symlink()):
        raise NativeCodeRefused(
            f"compiled package {one_line(str(d), 120)} is not an entry of a chipswap cache; chipswap loads "
            "compiled packages (native code) only from its own cache, by content hash: use chipswap compile"
        )
    cache = ArtifactCache(d.parent.parent)
    entry = cache.get(d.name)  # an unsigned entry is refused here (UnsignedEntry, one line)
    if entry is None or entry.state != "ready" or Path(entry.path).resolve() != d.resolve():
        raise NativeCodeRefused(
            f"compiled package {one_line(str(d), 120)} does not match its cache manifest (missing, failed "
            "or corrupt); rerun chipswap compile"
        )
    return entry


def _copy_hashed(src: Path, dst: Path) -> str:
    """Copy one regular file (never through a symlink) into a new file; the sha256 of the bytes copied."""
    h = hashlib.sha256()
    fd = os.open(src, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            return ""
        with open(dst, "xb") as out:
            while chunk := os.read(fd, 1 << 20):
                h.update(chunk)
                out.write(chunk)
    finally:
        os.close(fd)
    return h.hexdigest()


@contextlib.contextmanager
def verified_copy(artifact_dir: str | Path) -> Iterator[Path]:
    """A private (0700) copy of a verified cache entry whose every byte matched the signed manifest as it was
    copied; load from it, not from the cache folder. Removed on exit."""
    entry = require_cache_entry(artifact_dir)
    tmp = Path(tempfile.mkdtemp(prefix="chipswap-load-"))
    try:
        for rel, info in entry.files.items():
            dst = tmp / rel
            dst.parent.mkdir(parents=True, exist_ok=True)
            try:
                same = _copy_hashed(entry.path / rel, dst) == info["sha256"]
            except OSError:
                same = False
            if not same:
                raise NativeCodeRefused(
                    f"compiled package {one_line(str(artifact_dir), 120)}: {one_line(rel, 80)} changed while"
                    " it was being loaded (something else writes this cache folder); run chipswap cache"
                    " verify and recompile"
                )
        yield tmp
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
