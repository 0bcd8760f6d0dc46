"""Content-addressed artifact cache with entry states, one compile per key across processes, and atomic
publish.

Layout under the cache root (default: the user's cache dir, ``--cache-dir`` or ``CHIPSWAP_CACHE_DIR``)::

    entries/<key>/entry.json    state (ready | failed), key parts, checksum manifest of every file
    entries/<key>/...           the artifact files (or compile.log for a failed entry)
    locks/<key>.lock            fcntl.flock lock held while one process compiles <key>; holder pid/host inside
    tmp/<key>.<pid>.<rand>/     staging folder; renamed into entries/ only when complete
    trash/                      entries being deleted (rename first, then remove)
    verified/<key>.json         stat fingerprint of an entry's files when their checksums last matched

The key (chipswap.compile.keys) hashes the graph/architecture digest, the weights digest, input
names/shapes/dtypes, backend and its version, compiler flags and the chipswap version -- never a path, so a
moved project or a copied cache still hits.

States: *locked* (a process holds the key's lock and no ready entry exists), *ready*, *failed* (the compile
raised; its log is kept and the key is not retried unless ``retry_failed``). Crash safety: an entry appears in
``entries/`` only by ``rename`` of a complete, fsynced staging folder; a process killed at any point leaves at
most a staging folder (removed by the next holder of the lock) and never a half entry. flock locks die with
their process, so a killed compiler never leaves a stale lock. Every load re-checks the manifest (size +
sha256); a corrupt entry is discarded and rebuilt.

Every entry.json carries a ``tag`` (HMAC-SHA256 of the manifest under a key outside the cache, see
chipswap.compile.signing), checked by every load and ``cache verify``: without a valid one an entry is
refused with one line naming it and the fix (UnsignedEntry) and never loaded; a build of the same key replaces
it with a signed entry of its own (with a warning line).

A cache may be copied from someone else, so everything in it is data: a key is 32 lowercase hex digits or
it is refused before any file system call (a compiled set naming ``../../x`` never reaches a path); the
cache's own folders must be real folders, not symbolic links; an entry's files must be regular files inside
the entry, exactly those its manifest lists. ``cache ls`` does not hash every byte: an entry whose files still
have the size, mtime, ctime and inode recorded when their checksums last matched is shown *ready*; a changed
one is hashed when small (then *ready* or *corrupt*) and otherwise shown *unverified* until ``cache verify``
(or a load) checks it. May not write outside its root, follow a name read from data without checking it, or
import torch at module level.
"""

from __future__ import annotations

import errno
import fcntl
import json
import os
import re
import secrets
import shutil
import socket
import stat
import sys
import time
import traceback
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from chipswap.compile import signing
from chipswap.compile.cachefiles import disk_error as _disk_error
from chipswap.compile.cachefiles import fsync_path as _fsync_path
from chipswap.compile.cachefiles import read_small as _read_small
from chipswap.compile.cachefiles import remove as _remove
from chipswap.compile.cachefiles import sha256_file as _sha256_file
from chipswap.compile.cachefiles import write_file as _write_file
from chipswap.compile.keys import KEY_LEN, KeyParts, canonical_json
from chipswap.compile.signing import UnsignedEntry
from chipswap.datafile import inside, parse_json, read_json
from chipswap.errors import ChipswapError
from chipswap.textsafe import one_line

SCHEMA = "chipswap.cache/1"
_PathArg = str | os.PathLike[str] | None
ENTRY_FILE = "entry.json"
LOG_FILE = "compile.log"
ENV_VAR = "CHIPSWAP_CACHE_DIR"
_DISK_ERRNOS = {errno.ENOSPC, errno.EDQUOT, errno.EROFS, errno.EACCES, errno.EPERM, errno.EIO}
_KEY = re.compile(rf"[0-9a-f]{{{KEY_LEN}}}")
_KEY_PREFIX = re.compile(rf"[0-9a-f]{{4,{KEY_LEN}}}")
_SHA256 = re.compile(r"[0-9a-f]{64}")
MAX_ENTRY_JSON_BYTES = 4 * 2**20  # a manifest lists a handful of files; megabytes of it is not from chipswap
MAX_ENTRY_FILES = 10_000
MAX_FILE_BYTES = 2**50  # a manifest size beyond 1 PiB is not a real file
# `cache ls` hashes changed entries up to this many bytes in all; larger ones show as "unverified"
LS_HASH_BUDGET_BYTES = 256 * 2**20


def check_key(key: object, what: str = "cache key") -> str:
    """`key` if it is a cache key (32 lowercase hex digits); otherwise one error line, before any file
    system call (keys come from compiled sets and command lines, and become folder names)."""
    if isinstance(key, str) and _KEY.fullmatch(key):
        return key
    shown = one_line(repr(key), 80)
    raise ChipswapError(
        f"{what} {shown} is not a cache key ({KEY_LEN} lowercase hex digits); the file naming it was edited"
        " or was not written by chipswap compile; recompile to get a fresh compiled set"
    )


def is_key(name: str) -> bool:
    return bool(_KEY.fullmatch(name))


def default_cache_dir() -> Path:
    env = os.environ.get(ENV_VAR)
    if env:
        return Path(env).expanduser()
    import platformdirs

    return Path(platformdirs.user_cache_dir("chipswap")) / "artifacts"


# ---------------------------------------------------------------------------------------------- entries
@dataclass
class Entry:
    key: str
    state: str  # ready | failed | locked | corrupt
    path: Path
    meta: dict[str, Any] = field(default_factory=dict)

    @property
    def files(self) -> dict[str, dict[str, Any]]:
        """The checksum manifest (relative path -> size, sha256); empty unless it passed _manifest_problem."""
        files = self.meta.get("files")
        if self.state == "corrupt" or _manifest_problem(files) is not None:
            return {}
        return dict(files)

    @property
    def size(self) -> int:
        return sum(int(v["size"]) for v in self.files.values())

    @property
    def log_path(self) -> Path:
        return self.path / LOG_FILE


class CompileFailed(ChipswapError):
    pass


def _manifest_problem(files: Any) -> str | None:
    """Why an entry's ``files`` manifest is not one chipswap wrote (None when it is): relative names that stay
    inside the entry, integer sizes, sha256 hex digests; bounded in count."""
    if not isinstance(files, dict):
        return "files is not a table"
    if len(files) > MAX_ENTRY_FILES:
        return f"more than {MAX_ENTRY_FILES} files"
    for rel, info in files.items():
        parts = rel.split("/") if isinstance(rel, str) else []
        if (
            not parts
            or rel == ENTRY_FILE
            or any(p in ("", ".", "..") for p in parts)
            or "\x00" in rel
            or "\\" in rel
        ):
            return f"file name {one_line(repr(rel), 80)} is not a plain relative path"
        if not isinstance(info, dict):
            return f"{one_line(rel, 80)}: no size and checksum"
        size, digest = info.get("size"), info.get("sha256")
        if isinstance(size, bool) or not isinstance(size, int) or not 0 <= size <= MAX_FILE_BYTES:
            return f"{one_line(rel, 80)}: size is not a whole number of bytes"
        if not isinstance(digest, str) or not _SHA256.fullmatch(digest):
            return f"{one_line(rel, 80)}: sha256 is not a hex digest"
    return None


class ArtifactCache:
    """One cache root. Safe to use from many processes at once (one compile per key)."""

    def __init__(self, root: _PathArg = None, key_path: _PathArg = None) -> None:
        self.root = Path(root).expanduser() if root is not None else default_cache_dir()
        self.key_path = Path(key_path).expanduser() if key_path is not None else signing.default_key_path()
        self._key: bytes | None = None
        self.entries = self.root / "entries"
        self.locks = self.root / "locks"
        self.tmp = self.root / "tmp"
        self.trash = self.root / "trash"
        self.verified = self.root / "verified"
        self._ready = False

    # -- setup
    def _check_own_folders(self) -> None:
        """The cache's own folders are real folders: a symlinked ``trash`` (say, in a copied cache) would
        make prune empty whatever it points at."""
        for d in (self.entries, self.locks, self.tmp, self.trash, self.verified):
            if d.is_symlink() or (d.exists() and not d.is_dir()):
                raise ChipswapError(
                    f"cache folder {d} is a symbolic link or not a folder; a cache's own folders must be real"
                    " folders; remove it (or pass --cache-dir to another cache)"
                )

    def ensure_writable(self) -> None:
        if self._ready:
            return
        self._check_own_folders()
        try:
            for d in (self.entries, self.locks, self.tmp, self.trash, self.verified):
                d.mkdir(parents=True, exist_ok=True)
            probe = self.tmp / f".probe.{os.getpid()}.{secrets.token_hex(4)}"
            probe.write_bytes(b"")
            probe.unlink()
        except OSError as exc:
            raise ChipswapError(
                f"cache dir is not writable: {self.root} ({exc.strerror or exc});"
                " pass --cache-dir or set CHIPSWAP_CACHE_DIR to a writable folder"
            ) from None
        self._check_own_folders()
        self._ready = True

    # -- signatures (chipswap.compile.signing)
    def signing_key(self, create: bool = False) -> bytes:
        """The key entries are signed with (MissingKey when there is none and ``create`` is False)."""
        if self._key is None:
            self._key = signing.cache_key(self.key_path, self.root, create=create)
        return self._key

    def signature_problem(self, entry: Entry) -> str | None:
        """Why no valid tag vouches for a ready or failed entry's manifest (None when one does)."""
        if entry.state not in ("ready", "failed"):
            return None
        return signing.tag_problem(self.signing_key(), entry.meta)

    def _require_signed(self, entry: Entry | None) -> None:
        why = self.signature_problem(entry) if entry is not None else None
        if entry is not None and why:
            raise UnsignedEntry(signing.refusal(entry.key, str(self.root), why))

    def _signed_or_none(self, entry: Entry | None) -> Entry | None:
        """A build's view of an entry: one without a valid tag (written before entries were signed, or not by
        chipswap) is never loaded; the build replaces it with a signed one of its own, and says so."""
        why = self.signature_problem(entry) if entry is not None else None
        if entry is None or not why:
            return entry
        sys.stderr.write(
            f"chipswap: warning: cache entry {entry.key} in {self.root} has no valid signature ({why}); "
            "not loaded, compiling it again\n"
        )
        return None

    # -- reading
    def entry_dir(self, key: str) -> Path:
        return self.entries / check_key(key)

    def _lock_path(self, key: str) -> Path:
        return self.locks / f"{check_key(key)}.lock"

    def _stamp_path(self, key: str) -> Path:
        return self.verified / f"{check_key(key)}.json"

    def read(self, key: str) -> Entry | None:
        d = self.entry_dir(key)
        try:
            st = os.lstat(d)
        except FileNotFoundError:
            return None
        except OSError:
            return Entry(key, "corrupt", d, {})
        if not stat.S_ISDIR(st.st_mode):  # a symlink or a file where an entry folder belongs
            return Entry(key, "corrupt", d, {})
        f = d / ENTRY_FILE
        try:
            if not stat.S_ISREG(os.lstat(f).st_mode):
                return Entry(key, "corrupt", d, {})
            meta = read_json(f, "cache entry file", max_bytes=MAX_ENTRY_JSON_BYTES)
        except (OSError, ChipswapError):
            return Entry(key, "corrupt", d, {})
        if not isinstance(meta, dict) or meta.get("schema") != SCHEMA or meta.get("key") != key:
            return Entry(key, "corrupt", d, meta if isinstance(meta, dict) else {})
        state = meta.get("state")
        if state not in ("ready", "failed") or _manifest_problem(meta.get("files")) is not None:
            return Entry(key, "corrupt", d, meta)
        return Entry(key, str(state), d, meta)

    def _files_on_disk(self, entry: Entry) -> tuple[dict[str, os.stat_result], list[str]]:
        """Every file under an entry folder (relative POSIX path -> lstat), and problems: symlinks and
        anything that is neither a folder nor a regular file. Never follows links."""
        found: dict[str, os.stat_result] = {}
        problems: list[str] = []
        stack = [entry.path]
        while stack:
            folder = stack.pop()
            try:
                names = os.listdir(folder)
            except OSError as exc:
                problems.append(f"{folder.name}: {exc.strerror or exc}")
                continue
            for name in names:
                p = folder / name
                rel = p.relative_to(entry.path).as_posix()
                try:
                    st = os.lstat(p)
                except OSError as exc:
                    problems.append(f"{rel}: {exc.strerror or exc}")
                    continue
                if stat.S_ISDIR(st.st_mode):
                    stack.append(p)
                elif stat.S_ISREG(st.st_mode):
                    found[rel] = st
                else:
                    problems.append(f"{one_line(rel, 120)}: not a regular file (symlink or special file)")
                if len(found) + len(problems) > MAX_ENTRY_FILES + 1:
                    return found, [*problems, f"more than {MAX_ENTRY_FILES} files"]
        return found, problems

    def _layout_problems(self, entry: Entry) -> tuple[dict[str, os.stat_result], list[str]]:
        """Cheap checks (no hashing): the manifest's files exist as regular files inside the entry with their
        recorded sizes, and nothing else is there."""
        if entry.state == "corrupt":
            return {}, ["entry.json missing, unreadable or not a chipswap manifest"]
        on_disk, problems = self._files_on_disk(entry)
        on_disk.pop(ENTRY_FILE, None)
        files = entry.files
        for rel, info in files.items():
            st = on_disk.get(rel)
            try:  # the walk never follows links; this also catches a symlinked folder on the way
                inside(entry.path, rel, "cache entry file")
            except ChipswapError as exc:
                problems.append(str(exc))
                continue
            if st is None:
                problems.append(f"{one_line(rel, 120)}: missing")
            elif st.st_size != info["size"]:
                problems.append(f"{one_line(rel, 120)}: size {st.st_size} != {info['size']}")
        extra = sorted(set(on_disk) - set(files))
        if extra:
            problems.append(f"files not in the manifest: {one_line(', '.join(extra[:3]), 200)}")
        return on_disk, problems

    def verify_entry(self, entry: Entry) -> list[str]:
        """Problems with an entry (empty list = intact): its tag, layout, sizes, then every sha256."""
        why = self.signature_problem(entry)
        _, problems = self._layout_problems(entry)
        problems = [f"refused: {why}", *problems] if why else problems
        if problems:
            return problems
        for rel, info in entry.files.items():
            try:
                if _sha256_file(entry.path / rel) != info["sha256"]:
                    problems.append(f"{one_line(rel, 120)}: checksum mismatch")
            except OSError as exc:
                problems.append(f"{one_line(rel, 120)}: {exc.strerror or exc}")
        if not problems:
            self._stamp(entry)
        return problems

    # -- "ready" without hashing: a signed stat fingerprint written when the checksums last matched
    def _fingerprint(self, entry: Entry) -> dict[str, Any] | None:
        out: dict[str, Any] = {}
        for rel in [ENTRY_FILE, *sorted(entry.files)]:
            try:
                st = os.lstat(entry.path / rel)
            except OSError:
                return None
            out[rel] = [st.st_size, st.st_mtime_ns, st.st_ctime_ns, st.st_ino, st.st_dev]
        try:  # signed too: whoever writes verified/ cannot make `ls` call changed files ready
            return {"files": out, "tag": signing.tag(self.signing_key(), {"stamp": entry.key, "files": out})}
        except ChipswapError:
            return None

    def _stamp(self, entry: Entry) -> None:
        """Record that this entry's files matched their checksums (best effort: skipped when read-only)."""
        fp = self._fingerprint(entry)
        if fp is None or not self.verified.is_dir() or self.verified.is_symlink():
            return
        path = self._stamp_path(entry.key)
        text = json.dumps(fp, sort_keys=True)
        try:
            if _read_small(path, MAX_ENTRY_JSON_BYTES) == text:
                return
        except OSError:
            pass  # no stamp yet (or not a regular file: replaced below)
        try:
            tmp = self.verified / f".{entry.key}.{os.getpid()}.{secrets.token_hex(4)}"
            tmp.write_text(text)
            os.replace(tmp, path)
        except OSError:
            pass

    def _stamp_matches(self, entry: Entry) -> bool:
        path = self._stamp_path(entry.key)
        try:
            recorded = parse_json(_read_small(path, MAX_ENTRY_JSON_BYTES), "cache stamp", str(path))
        except (OSError, ChipswapError):
            return False
        return recorded == self._fingerprint(entry)

    def quick_state(self, entry: Entry, budget: list[int] | None = None) -> str:
        """The state `cache ls` shows: unsigned | ready | unverified | corrupt (failed / locked unchanged).

        Layout and sizes are always checked; an entry whose files changed since their checksums last
        matched is hashed while ``budget[0]`` bytes remain (the budget is shared across calls), else
        *unverified*."""
        try:
            if self.signature_problem(entry):
                return "unsigned"
        except ChipswapError:  # no key: nothing here can be vouched for
            return "unsigned"
        if entry.state not in ("ready", "corrupt"):
            return entry.state
        if self._layout_problems(entry)[1]:
            return "corrupt"
        if self._stamp_matches(entry):
            return "ready"
        if budget is not None and entry.size <= budget[0]:
            budget[0] -= entry.size
            return "corrupt" if self.verify_entry(entry) else "ready"
        return "unverified"

    def get(self, key: str) -> Entry | None:
        """The ready, verified entry for ``key``; None when absent. A corrupt entry is discarded (then
        None)."""
        e = self.read(key)
        if e is None:
            return None
        self._require_signed(e)
        if e.state == "ready" and not self.verify_entry(e):
            self._touch(e)
            return e
        if e.state == "failed":
            return e
        with self.lock(key):
            e2 = self.read(key)
            self._require_signed(e2)
            if e2 is not None and (e2.state == "corrupt" or (e2.state == "ready" and self.verify_entry(e2))):
                self._discard(key)
                return None
            return e2

    # -- locking
    @contextmanager
    def lock(
        self, key: str, timeout: float | None = None, on_wait: Callable[[dict[str, Any]], None] | None = None
    ) -> Iterator[None]:
        path = self._lock_path(key)
        self.ensure_writable()
        try:
            fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW, 0o644)
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
                            f"another process is compiling cache key {key[:12]}"
                            f" (pid {one_line(holder.get('pid'), 20)} on {one_line(holder.get('host'), 80)})"
                            f" for over {timeout:.0f}s; wait for it or remove it with"
                            f" chipswap cache rm {key[:12]}"
                        ) from None
                    time.sleep(0.05)
            info = canonical_json({"pid": os.getpid(), "host": socket.gethostname(), "since": time.time()})
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
        path = self._lock_path(key)
        try:
            holder = parse_json(_read_small(path, 4096) or "{}", "lock file", str(path))
        except (OSError, ChipswapError):
            return {}
        return holder if isinstance(holder, dict) else {}

    def is_locked(self, key: str) -> bool:
        path = self._lock_path(key)
        try:
            fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
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
        key = parts.key if isinstance(parts, KeyParts) else check_key(parts)
        self.ensure_writable()
        self.signing_key(create=True)
        e = self._signed_or_none(self.read(key))
        if e is not None and e.state == "ready" and not self.verify_entry(e):
            self._touch(e)
            return e, False
        if e is not None and e.state == "failed" and not retry_failed:
            raise self._failed_error(e)
        with self.lock(key, timeout=lock_timeout, on_wait=on_wait):
            e = self._signed_or_none(self.read(key))
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
                **{k: v for k, v in meta.items() if k not in ("schema", "key", "state", "files", "tag")},
                "files": files,
            }
            doc = json.loads(json.dumps(doc, default=str))  # the tag covers the manifest as it is read back
            doc[signing.TAG_FIELD] = signing.tag(self.signing_key(create=True), doc)
            _write_file(staging / ENTRY_FILE, json.dumps(doc, indent=1, sort_keys=True).encode())
            for p in sorted(staging.rglob("*"), reverse=True):
                if p.is_dir():
                    _fsync_path(p, directory=True)
            _fsync_path(staging, directory=True)
            if os.path.lexists(target):
                self._discard(key)
            os.rename(staging, target)
            _fsync_path(self.entries, directory=True)
        except OSError as exc:
            shutil.rmtree(staging, ignore_errors=True)
            raise _disk_error(self.root, exc) from None
        entry = Entry(key, state, target, doc)
        self._stamp(entry)  # checksums were just computed from these very files
        return entry

    def _clean_staging(self, key: str) -> None:
        """Staging folders of this key belong to dead writers (we hold the key's lock): remove them."""
        check_key(key)
        for p in self.tmp.glob(f"{key}.*"):
            _remove(p)
        for p in self.trash.glob(f"{key}.*"):
            _remove(p)

    def _discard(self, key: str) -> None:
        src = self.entry_dir(key)
        if not os.path.lexists(src):
            return
        dst = self.trash / f"{key}.{os.getpid()}.{secrets.token_hex(4)}"
        os.rename(src, dst)  # a symlinked entry moves as the link itself, never its target
        _remove(dst)
        with_stamp = self._stamp_path(key)
        if os.path.lexists(with_stamp):
            with_stamp.unlink()

    def _touch(self, e: Entry) -> None:
        try:
            os.utime(e.path)
        except OSError:
            pass

    # -- management
    def list(self) -> list[Entry]:
        """Every entry (by key name; other names in entries/ are ignored) and every key locked right now."""
        self._check_own_folders()
        out: dict[str, Entry] = {}
        if self.entries.is_dir():
            for name in sorted(os.listdir(self.entries)):
                if is_key(name):
                    e = self.read(name)
                    if e is not None:
                        out[name] = e
        if self.locks.is_dir():
            for name in sorted(os.listdir(self.locks)):
                key = name.removesuffix(".lock")
                if name.endswith(".lock") and is_key(key) and key not in out and self.is_locked(key):
                    out[key] = Entry(key, "locked", self.entry_dir(key), {"holder": self.lock_holder(key)})
        return sorted(out.values(), key=lambda e: e.key)

    def resolve(self, key_or_prefix: str) -> str:
        if not _KEY_PREFIX.fullmatch(key_or_prefix):
            raise ChipswapError(
                f"{one_line(repr(key_or_prefix), 80)} is not a cache key or key prefix (4 to {KEY_LEN}"
                " lowercase hex digits); list keys with chipswap cache ls"
            )
        keys = [e.key for e in self.list()]
        if key_or_prefix in keys:
            return key_or_prefix
        hits = [k for k in keys if k.startswith(key_or_prefix)]
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

    def _mtime(self, e: Entry) -> float:
        try:
            return os.lstat(e.path).st_mtime
        except OSError:
            return 0.0

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
            elif older_than_s is not None and now - self._mtime(e) > older_than_s:
                why = "unused"
            if why:
                removed.append((e.key, why))
            elif e.state == "ready":
                ready.append((self._mtime(e), e.size, e.key))
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
            self._remove_leftovers()
        return removed

    def _remove_leftovers(self) -> None:
        """Staging and trash folders of writers that no longer hold their key's lock, and stamps (or stamp
        temp files) of entries that are gone. Only inside the cache's own (non-symlink) folders."""
        self._check_own_folders()
        for folder in (self.tmp, self.trash):
            if not folder.is_dir():
                continue
            for name in os.listdir(folder):
                k = name.split(".")[0]
                if not (is_key(k) and self.is_locked(k)):
                    _remove(folder / name)
        if self.verified.is_dir():
            for name in os.listdir(self.verified):
                k = name.removesuffix(".json")
                if not (name.endswith(".json") and is_key(k) and os.path.lexists(self.entries / k)):
                    _remove(self.verified / name)
