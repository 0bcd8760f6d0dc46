"""Content-addressed artifact cache with entry states, one compile per key across processes, and atomic
publish.

Layout under the cache root (default: the user's cache dir, ``--cache-dir`` or ``CHIPSWAP_CACHE_DIR``)::

    entries/<key>/entry.json    state (ready | failed), key parts, checksum manifest of every file
    entries/<key>/...           the artifact files (or compile.log for a failed entry)
    locks/<key>.lock            fcntl.flock lock held while one process compiles <key>; holder pid/host inside
    tmp/<key>.<pid>.<rand>/     staging folder; renamed into entries/ only when complete
    trash/                      entries being deleted (rename first, then remove)

The key hashes the graph/architecture digest, the weights digest, input names/shapes/dtypes, backend and its
version, compiler flags and the chipswap version -- never a path, so a moved project or a copied cache still
hits.

States: *locked* (a process holds the key's lock and no ready entry exists), *ready*, *failed* (the compile
raised; its log is kept and the key is not retried unless ``retry_failed``). Crash safety: an entry appears in
``entries/`` only by ``rename`` of a complete, fsynced staging folder; a process killed at any point leaves at
most a staging folder (removed by the next holder of the lock) and never a half entry. flock locks die with
their process, so a killed compiler never leaves a stale lock. Every load re-checks the manifest (size +
sha256); a corrupt entry is discarded and rebuilt.
"""

from __future__ import annotations

import errno
import fcntl
import hashlib
import json
import os
import secrets
import shutil
import socket
import time
import traceback
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from chipswap import __version__
from chipswap.errors import ChipswapError

if TYPE_CHECKING:  # pragma: no cover
    import torch

SCHEMA = "chipswap.cache/1"
ENTRY_FILE = "entry.json"
LOG_FILE = "compile.log"
ENV_VAR = "CHIPSWAP_CACHE_DIR"
KEY_LEN = 32
_DISK_ERRNOS = {errno.ENOSPC, errno.EDQUOT, errno.EROFS, errno.EACCES, errno.EPERM, errno.EIO}


def default_cache_dir() -> Path:
    env = os.environ.get(ENV_VAR)
    if env:
        return Path(env).expanduser()
    import platformdirs

    return Path(platformdirs.user_cache_dir("chipswap")) / "artifacts"


# ------------------------------------------------------------------------------------------------- keys
def _canon(obj: Any) -> bytes:
    return json.dumps(obj, sort_keys=True, separators=(",", ":"), default=str).encode()


@dataclass(frozen=True)
class KeyParts:
    """Everything that changes a compiled artifact. ``key`` is the sha256 of their canonical JSON."""

    graph: str
    weights: str
    inputs: tuple[tuple[str, tuple[int, ...], str], ...]
    backend: str
    backend_version: str
    flags: tuple[tuple[str, str], ...] = ()
    chipswap: str = __version__
    kind: str = "artifact"

    def to_json(self) -> dict[str, Any]:
        return {
            "kind": self.kind,
            "graph": self.graph,
            "weights": self.weights,
            "inputs": [[n, list(s), d] for n, s, d in self.inputs],
            "backend": self.backend,
            "backend_version": self.backend_version,
            "flags": dict(self.flags),
            "chipswap": self.chipswap,
        }

    @property
    def key(self) -> str:
        return hashlib.sha256(_canon(self.to_json())).hexdigest()[:KEY_LEN]

    @staticmethod
    def make(
        *,
        graph: str,
        weights: str,
        inputs: Mapping[str, Any] | Sequence[tuple[str, Sequence[int], str]],
        backend: str,
        backend_version: str,
        flags: Mapping[str, str] | None = None,
        kind: str = "artifact",
    ) -> KeyParts:
        if isinstance(inputs, Mapping):
            specs = tuple(
                (str(n), tuple(int(x) for x in t.shape), str(t.dtype).removeprefix("torch."))
                for n, t in inputs.items()
            )
        else:
            specs = tuple((str(n), tuple(int(x) for x in s), str(d)) for n, s, d in inputs)
        return KeyParts(
            graph=graph,
            weights=weights,
            inputs=specs,
            backend=backend,
            backend_version=backend_version,
            flags=tuple(sorted((str(k), str(v)) for k, v in (flags or {}).items())),
            kind=kind,
        )


_DROP_CONFIG_KEYS = {"_name_or_path", "name_or_path", "_commit_hash", "transformers_version"}


def graph_digest(model: torch.nn.Module) -> str:
    """Architecture digest: module tree (classes + extra_repr), parameter names/shapes/dtypes/ties, config,
    the source of each class's forward, and the versions of the libraries those classes come from. No
    paths."""
    import inspect
    import sys

    h = hashlib.sha256()
    classes: dict[str, type] = {}
    for name, mod in model.named_modules(remove_duplicate=False):
        cls = type(mod)
        qn = f"{cls.__module__}.{cls.__qualname__}"
        classes[qn] = cls
        try:
            extra = mod.extra_repr()
        except Exception:  # some third-party extra_repr need state we do not have
            extra = ""
        h.update(_canon([name, qn, extra, bool(mod.training)]))
    ptr_ids: dict[int, int] = {}
    tensors = list(model.named_parameters(remove_duplicate=False)) + list(
        model.named_buffers(remove_duplicate=False)
    )
    for name, t in tensors:
        tie = ptr_ids.setdefault(id(t), len(ptr_ids))
        h.update(_canon([name, list(t.shape), str(t.dtype), t.device.type, tie]))
    for qn in sorted(classes):
        cls = classes[qn]
        try:
            src = inspect.getsource(cls.forward)
        except (OSError, TypeError):
            src = ""
        top = cls.__module__.split(".")[0]
        ver = getattr(sys.modules.get(top), "__version__", "")
        h.update(_canon([qn, hashlib.sha256(src.encode()).hexdigest(), top, ver]))
    cfg = getattr(model, "config", None)
    if cfg is None:
        for mod in model.modules():
            cfg = getattr(mod, "config", None)
            if cfg is not None:
                break
    if cfg is not None:
        d = cfg.to_dict() if hasattr(cfg, "to_dict") else (dict(cfg) if isinstance(cfg, Mapping) else {})
        h.update(_canon({k: v for k, v in d.items() if k not in _DROP_CONFIG_KEYS}))
    return h.hexdigest()


def weights_digest(model: torch.nn.Module) -> str:
    """sha256 over every parameter and buffer (name, dtype, shape, bytes), in name order."""
    h = hashlib.sha256()
    seen: dict[str, Any] = {}
    for n, t in model.named_parameters(remove_duplicate=False):
        seen[n] = t
    for n, t in model.named_buffers(remove_duplicate=False):
        seen[n] = t
    for n in sorted(seen):
        t = seen[n].detach()
        h.update(_canon([n, str(t.dtype), list(t.shape)]))
        if t.device.type == "meta":
            h.update(b"meta")
            continue
        flat = t.contiguous().cpu().reshape(-1)
        if flat.numel():
            import torch

            h.update(flat.view(torch.uint8).numpy().tobytes())
    return h.hexdigest()


# ---------------------------------------------------------------------------------------------- entries
@dataclass
class Entry:
    key: str
    state: str  # ready | failed | locked | corrupt
    path: Path
    meta: dict[str, Any] = field(default_factory=dict)

    @property
    def files(self) -> dict[str, dict[str, Any]]:
        return dict(self.meta.get("files", {}))

    @property
    def size(self) -> int:
        return sum(int(v.get("size", 0)) for v in self.files.values())

    @property
    def log_path(self) -> Path:
        return self.path / LOG_FILE


class CompileFailed(ChipswapError):
    pass


def _sha256_file(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as fh:
        for chunk in iter(lambda: fh.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def _fsync_path(path: Path, directory: bool = False) -> None:
    fd = os.open(path, os.O_RDONLY | (os.O_DIRECTORY if directory else 0))
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _write_file(path: Path, data: bytes) -> None:
    """Write + fsync one file (tests inject ENOSPC here to simulate a full disk during publish)."""
    with open(path, "wb") as fh:
        fh.write(data)
        fh.flush()
        os.fsync(fh.fileno())


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _disk_error(path: Path, exc: OSError) -> ChipswapError:
    what = exc.strerror or str(exc)
    if exc.errno in (errno.ENOSPC, errno.EDQUOT):
        fix = "free disk space or pass --cache-dir on a bigger disk"
    else:
        fix = "pass --cache-dir (or set CHIPSWAP_CACHE_DIR) to a writable folder"
    return ChipswapError(f"cannot write the compile cache at {path}: {what}; {fix}")


class ArtifactCache:
    """One cache root. Safe to use from many processes at once (one compile per key)."""

    def __init__(self, root: str | os.PathLike[str] | None = None) -> None:
        self.root = Path(root).expanduser() if root is not None else default_cache_dir()
        self.entries = self.root / "entries"
        self.locks = self.root / "locks"
        self.tmp = self.root / "tmp"
        self.trash = self.root / "trash"
        self._ready = False

    # -- setup
    def ensure_writable(self) -> None:
        if self._ready:
            return
        try:
            for d in (self.entries, self.locks, self.tmp, self.trash):
                d.mkdir(parents=True, exist_ok=True)
            probe = self.tmp / f".probe.{os.getpid()}.{secrets.token_hex(4)}"
            probe.write_bytes(b"")
            probe.unlink()
        except OSError as exc:
            raise ChipswapError(
                f"cache dir is not writable: {self.root} ({exc.strerror or exc});"
                " pass --cache-dir or set CHIPSWAP_CACHE_DIR to a writable folder"
            ) from None
        self._ready = True

    # -- reading
    def entry_dir(self, key: str) -> Path:
        return self.entries / key

    def read(self, key: str) -> Entry | None:
        d = self.entry_dir(key)
        try:
            meta = json.loads((d / ENTRY_FILE).read_text())
        except FileNotFoundError:
            if d.exists():
                return Entry(key, "corrupt", d, {})
            return None
        except (OSError, ValueError):
            return Entry(key, "corrupt", d, {})
        if not isinstance(meta, dict) or meta.get("schema") != SCHEMA or meta.get("key") != key:
            return Entry(key, "corrupt", d, meta if isinstance(meta, dict) else {})
        return Entry(key, str(meta.get("state", "corrupt")), d, meta)

    def verify_entry(self, entry: Entry) -> list[str]:
        """Problems with an entry's files (empty list = intact)."""
        if entry.state == "corrupt":
            return ["entry.json missing or unreadable"]
        problems = []
        for rel, info in entry.files.items():
            p = entry.path / rel
            try:
                if p.stat().st_size != int(info["size"]):
                    problems.append(f"{rel}: size {p.stat().st_size} != {info['size']}")
                elif _sha256_file(p) != info["sha256"]:
                    problems.append(f"{rel}: checksum mismatch")
            except FileNotFoundError:
                problems.append(f"{rel}: missing")
            except (OSError, KeyError, ValueError) as exc:
                problems.append(f"{rel}: {exc}")
        return problems

    def get(self, key: str) -> Entry | None:
        """The ready, verified entry for ``key``; None when absent. A corrupt entry is discarded (then
        None)."""
        e = self.read(key)
        if e is None:
            return None
        if e.state == "ready" and not self.verify_entry(e):
            self._touch(e)
            return e
        if e.state == "failed":
            return e
        with self.lock(key):
            e2 = self.read(key)
            if e2 is not None and (e2.state == "corrupt" or (e2.state == "ready" and self.verify_entry(e2))):
                self._discard(key)
                return None
            return e2

    # -- locking
    @contextmanager
    def lock(
        self, key: str, timeout: float | None = None, on_wait: Callable[[dict[str, Any]], None] | None = None
    ) -> Iterator[None]:
        self.ensure_writable()
        path = self.locks / f"{key}.lock"
        try:
            fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
        except OSError as exc:
            raise _disk_error(self.root, exc) from None
        try:
            start = time.monotonic()
            waited = False
            while True:
                try:
                    fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                    break
                except BlockingIOError:
                    if not waited and on_wait is not None:
                        on_wait(self.lock_holder(key))
                    waited = True
                    if timeout is not None and time.monotonic() - start > timeout:
                        holder = self.lock_holder(key)
                        raise ChipswapError(
                            f"another process is compiling cache key {key[:12]} (pid {holder.get('pid')} on"
                            f" {holder.get('host')}) for over {timeout:.0f}s; wait for it or remove it with"
                            f" chipswap cache rm {key[:12]}"
                        ) from None
                    time.sleep(0.05)
            info = _canon({"pid": os.getpid(), "host": socket.gethostname(), "since": time.time()})
            try:
                os.ftruncate(fd, 0)
                os.pwrite(fd, info, 0)
            except OSError:
                pass
            yield
        finally:
            try:
                fcntl.flock(fd, fcntl.LOCK_UN)
            finally:
                os.close(fd)

    def lock_holder(self, key: str) -> dict[str, Any]:
        try:
            return json.loads((self.locks / f"{key}.lock").read_text() or "{}")
        except (OSError, ValueError):
            return {}

    def is_locked(self, key: str) -> bool:
        path = self.locks / f"{key}.lock"
        try:
            fd = os.open(path, os.O_RDONLY)
        except OSError:
            return False
        try:
            fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
            fcntl.flock(fd, fcntl.LOCK_UN)
            return False
        except BlockingIOError:
            return True
        finally:
            os.close(fd)

    # -- building
    def get_or_build(
        self,
        parts: KeyParts | str,
        build: Callable[[Path], Any],
        *,
        meta: Mapping[str, Any] | None = None,
        retry_failed: bool = False,
        lock_timeout: float | None = None,
        on_wait: Callable[[dict[str, Any]], None] | None = None,
    ) -> tuple[Entry, bool]:
        """Return (entry, built_here). ``build(staging_dir)`` writes the artifact files; called at most
        once per key across all processes sharing this cache (others wait on the lock and then read the
        published entry)."""
        key = parts.key if isinstance(parts, KeyParts) else parts
        self.ensure_writable()
        e = self.read(key)
        if e is not None and e.state == "ready" and not self.verify_entry(e):
            self._touch(e)
            return e, False
        if e is not None and e.state == "failed" and not retry_failed:
            raise self._failed_error(e)
        with self.lock(key, timeout=lock_timeout, on_wait=on_wait):
            e = self.read(key)
            if e is not None and e.state == "ready":
                if not self.verify_entry(e):
                    self._touch(e)
                    return e, False
            elif e is not None and e.state == "failed" and not retry_failed:
                raise self._failed_error(e)
            self._clean_staging(key)
            all_meta = dict(meta or {})
            if isinstance(parts, KeyParts):
                all_meta["parts"] = parts.to_json()
            staging = self.tmp / f"{key}.{os.getpid()}.{secrets.token_hex(4)}"
            try:
                staging.mkdir(parents=True)
            except OSError as exc:
                raise _disk_error(self.root, exc) from None
            t0 = time.monotonic()
            try:
                build(staging)
            except BaseException as exc:
                if isinstance(exc, OSError) and exc.errno in _DISK_ERRNOS:
                    shutil.rmtree(staging, ignore_errors=True)
                    raise _disk_error(self.root, exc) from None
                if not isinstance(exc, Exception):  # KeyboardInterrupt / SystemExit: leave no entry
                    shutil.rmtree(staging, ignore_errors=True)
                    raise
                self._publish_failed(key, staging, all_meta, exc)
                raise CompileFailed(
                    f"compile failed for cache key {key[:12]}: {str(exc) or type(exc).__name__}"
                    f" (log: {self.entry_dir(key) / LOG_FILE}); fix the cause, then retry with --retry-failed"
                ) from None
            all_meta["compile_seconds"] = round(time.monotonic() - t0, 3)
            entry = self.publish(key, staging, all_meta, state="ready")
            return entry, True

    def _failed_error(self, e: Entry) -> CompileFailed:
        first = str(e.meta.get("error", "unknown error"))
        return CompileFailed(
            f"cache key {e.key[:12]} failed to compile before ({first}); log: {e.log_path};"
            " pass --retry-failed to compile it again"
        )

    def _publish_failed(self, key: str, staging: Path, meta: dict[str, Any], exc: BaseException) -> None:
        log = "".join(traceback.format_exception(type(exc), exc, exc.__traceback__))
        try:
            for p in list(staging.iterdir()):
                if p.is_dir():
                    shutil.rmtree(p, ignore_errors=True)
                elif p.name != LOG_FILE and not p.name.endswith(".log"):
                    p.unlink()
            old = staging / LOG_FILE
            prev = old.read_text() if old.exists() else ""
            (staging / LOG_FILE).write_text(prev + log)
            meta = {**meta, "error": (str(exc) or type(exc).__name__).splitlines()[0][:300]}
            self.publish(key, staging, meta, state="failed")
        except ChipswapError:
            pass  # cannot record the failure (disk full?): the compile error itself is what the user needs

    def publish(self, key: str, staging: Path, meta: Mapping[str, Any], state: str = "ready") -> Entry:
        """Checksum, fsync and rename ``staging`` into ``entries/<key>``. All or nothing."""
        target = self.entry_dir(key)
        try:
            files: dict[str, dict[str, Any]] = {}
            for p in sorted(staging.rglob("*")):
                if p.is_file() and p.name != ENTRY_FILE:
                    rel = p.relative_to(staging).as_posix()
                    files[rel] = {"size": p.stat().st_size, "sha256": _sha256_file(p)}
                    _fsync_path(p)
            doc = {
                "schema": SCHEMA,
                "key": key,
                "state": state,
                "created": time.time(),
                "host": socket.gethostname(),
                **{k: v for k, v in meta.items() if k not in ("schema", "key", "state", "files")},
                "files": files,
            }
            _write_file(staging / ENTRY_FILE, json.dumps(doc, indent=1, sort_keys=True, default=str).encode())
            for p in sorted(staging.rglob("*"), reverse=True):
                if p.is_dir():
                    _fsync_path(p, directory=True)
            _fsync_path(staging, directory=True)
            if target.exists():
                self._discard(key)
            os.rename(staging, target)
            _fsync_path(self.entries, directory=True)
        except OSError as exc:
            shutil.rmtree(staging, ignore_errors=True)
            raise _disk_error(self.root, exc) from None
        return Entry(key, state, target, doc)

    def _clean_staging(self, key: str) -> None:
        """Staging folders of this key belong to dead writers (we hold the key's lock): remove them."""
        for p in self.tmp.glob(f"{key}.*"):
            shutil.rmtree(p, ignore_errors=True)
        for p in self.trash.glob(f"{key}.*"):
            shutil.rmtree(p, ignore_errors=True)

    def _discard(self, key: str) -> None:
        src = self.entry_dir(key)
        if not src.exists():
            return
        dst = self.trash / f"{key}.{os.getpid()}.{secrets.token_hex(4)}"
        os.rename(src, dst)
        shutil.rmtree(dst, ignore_errors=True)

    def _touch(self, e: Entry) -> None:
        try:
            os.utime(e.path)
        except OSError:
            pass

    # -- management
    def list(self) -> list[Entry]:
        out: dict[str, Entry] = {}
        if self.entries.exists():
            for d in sorted(self.entries.iterdir()):
                if d.is_dir():
                    e = self.read(d.name)
                    if e is not None:
                        out[d.name] = e
        if self.locks.exists():
            for lk in sorted(self.locks.glob("*.lock")):
                key = lk.name.removesuffix(".lock")
                if key not in out and self.is_locked(key):
                    out[key] = Entry(key, "locked", self.entry_dir(key), {"holder": self.lock_holder(key)})
        return sorted(out.values(), key=lambda e: e.key)

    def resolve(self, key_or_prefix: str) -> str:
        keys = [e.key for e in self.list()]
        if key_or_prefix in keys:
            return key_or_prefix
        hits = [k for k in keys if k.startswith(key_or_prefix)] if len(key_or_prefix) >= 4 else []
        if len(hits) == 1:
            return hits[0]
        if not hits:
            raise ChipswapError(
                f"no cache entry with key {key_or_prefix!r} in {self.root}; list keys with chipswap cache ls"
            )
        raise ChipswapError(
            f"cache key prefix {key_or_prefix!r} matches {len(hits)} entries; give more characters"
        )

    def remove(self, key_or_prefix: str) -> str:
        key = self.resolve(key_or_prefix)
        with self.lock(key, timeout=30):
            self._discard(key)
        return key

    def prune(
        self,
        *,
        failed: bool = True,
        corrupt: bool = True,
        older_than_s: float | None = None,
        max_bytes: int | None = None,
        dry_run: bool = False,
    ) -> list[tuple[str, str]]:
        """Remove failed / corrupt / unused-for-long entries (and leftovers of killed writers). (key, why)
        pairs."""
        import math

        for name, value in (("older_than_s", older_than_s), ("max_bytes", max_bytes)):
            if value is not None and (not math.isfinite(value) or value < 0):
                raise ChipswapError(
                    f"prune {name} must be a finite number >= 0, got {value!r}; pass a non-negative limit"
                )
        removed: list[tuple[str, str]] = []
        now = time.time()
        ready: list[tuple[float, int, str]] = []
        for e in self.list():
            if e.state == "locked":
                continue
            why = None
            if e.state == "failed" and failed:
                why = "failed"
            elif corrupt and (e.state == "corrupt" or (e.state == "ready" and self.verify_entry(e))):
                why = "corrupt"
            elif older_than_s is not None and now - e.path.stat().st_mtime > older_than_s:
                why = "unused"
            if why:
                removed.append((e.key, why))
            elif e.state == "ready":
                ready.append((e.path.stat().st_mtime, e.size, e.key))
        if max_bytes is not None:
            total = sum(s for _, s, _ in ready)
            for _mt, size, key in sorted(ready):
                if total <= max_bytes:
                    break
                removed.append((key, "over size"))
                total -= size
        if not dry_run:
            for key, _why in removed:
                try:
                    with self.lock(key, timeout=0):
                        self._discard(key)
                except ChipswapError:
                    pass
            for folder in (self.tmp, self.trash):
                if folder.exists():
                    for p in folder.iterdir():
                        k = p.name.split(".")[0]
                        if not self.is_locked(k):
                            shutil.rmtree(p, ignore_errors=True) if p.is_dir() else p.unlink(missing_ok=True)
        return removed
