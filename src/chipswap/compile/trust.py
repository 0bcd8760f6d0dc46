"""Compiled artifacts are native code (AOTInductor shared objects) or TorchScript (Neuron): they load only
from a ready entry of chipswap's own cache whose files match their sha256 manifest now (issue 19).

May not: load anything itself, or touch files outside the cache it is pointed at.
"""

from __future__ import annotations

from pathlib import Path

from chipswap.nativeguard import NativeCodeRefused
from chipswap.textsafe import one_line


def require_cache_entry(artifact_dir: str | Path) -> None:
    """An AOTInductor package loads only from a ready entry of a chipswap cache whose files match its sha256
    manifest: ``artifact_dir`` must be ``<root>/entries/<key>`` and verify now."""
    from chipswap.compile.cache import ArtifactCache, is_key

    d = Path(artifact_dir)
    if not (is_key(d.name) and d.parent.name == "entries" and not d.is_symlink()):
        raise NativeCodeRefused(
            f"compiled package {one_line(str(d), 120)} is not an entry of a chipswap cache; chipswap loads "
            "compiled packages (native code) only from its own cache, by content hash: use chipswap compile"
        )
    cache = ArtifactCache(d.parent.parent)
    entry = cache.get(d.name)
    if entry is None or entry.state != "ready" or Path(entry.path).resolve() != d.resolve():
        raise NativeCodeRefused(
            f"compiled package {one_line(str(d), 120)} does not match its cache manifest (missing, failed "
            "or corrupt); rerun chipswap compile"
        )
