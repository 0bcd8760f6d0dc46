"""Atomic file writes: temp file in the same folder, fsync, rename. A crash never leaves half a file.

Only a regular file (or a new path) is replaced by rename. What the user means by other targets:
- ``-``, ``/dev/stdout``, ``/dev/stderr``, ``/dev/fd/N``: the bytes go to that open descriptor (never a rename
  over the ``/dev/stdout`` link, never a reopen that would truncate a redirected file);
- a FIFO, a terminal or ``/dev/null``: a direct write to the existing node (so ``--out /dev/null`` as root
  discards the output and leaves the device alone);
- a folder, a block device, a socket or any other character device: one error line, nothing written.
A symlink at the target path is replaced by the new file (never written through), as `mv` would.

Temp files are named ``.<name>.<writer>.<random>.tmp`` where <writer> says which host/pid-namespace and pid
wrote it, so the next write to the same target removes the temp files of writers that died (killed runs)
without touching one a live process is still writing. May not touch anything but the target path and its temp
siblings.
"""

from __future__ import annotations

import errno
import hashlib
import os
import re
import socket
import stat
import sys
import tempfile
import time
from pathlib import Path

from chipswap.errors import ChipswapError

STALE_FOREIGN_TEMP_S = 24 * 3600  # a temp file from another host / pid namespace: stale after a day
STALE_LEGACY_TEMP_S = 3600  # a temp file in the old unmarked format (mkstemp's random name): after an hour
_FD_NAMES = {"-": 1, "/dev/stdout": 1, "/dev/stderr": 2}
_FD_PATH = re.compile(r"/(?:dev|proc/self)/fd/(\d{1,9})")
_NULL_DEVICE = (1, 3)  # Linux major/minor of /dev/null


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
    errno.ENXIO: "nothing is reading that FIFO; start the reader first or write to a file",
    errno.EPIPE: "the reader of that pipe went away; write to a file instead",
}


def _write_error(target: Path, exc: OSError) -> ChipswapError:
    fix = _FIXES.get(exc.errno or 0, "choose another output path")
    return ChipswapError(f"cannot write {target}: {exc.strerror or exc}; {fix}")


# ------------------------------------------------------------------------------------- what the target is
def _descriptor(path: str) -> int | None:
    """The open file descriptor a path names (``-``, /dev/stdout, /dev/fd/N), or None."""
    if path in _FD_NAMES:
        return _FD_NAMES[path]
    m = _FD_PATH.fullmatch(path)
    return int(m.group(1)) if m else None


def target_kind(path: str | os.PathLike[str]) -> str:
    """How a write to ``path`` goes: "fd" (an open descriptor), "stream" (FIFO, terminal, /dev/null: a direct
    write), "file" (a regular file, replaced atomically) or "new" (nothing there yet). Anything else is a
    one-line ChipswapError naming what it is."""
    name = os.fspath(path)
    if _descriptor(name) is not None:
        return "fd"
    try:
        st = os.stat(name)
    except FileNotFoundError:
        return "new"  # including a dangling symlink: replaced by the new file
    except NotADirectoryError:
        raise ChipswapError(
            f"cannot write {name}: a part of that path is a file, not a folder; choose another output path"
        ) from None
    except OSError as exc:
        raise _write_error(Path(name), exc) from None
    mode = st.st_mode
    if stat.S_ISREG(mode):
        return "file"
    if stat.S_ISDIR(mode):
        raise ChipswapError(f"cannot write {name}: it is a folder; give a file name")
    if stat.S_ISFIFO(mode):
        return "stream"
    if stat.S_ISCHR(mode) and ((os.major(st.st_rdev), os.minor(st.st_rdev)) == _NULL_DEVICE or _is_tty(name)):
        return "stream"
    kind = (
        "a block device"
        if stat.S_ISBLK(mode)
        else "a socket"
        if stat.S_ISSOCK(mode)
        else "a character device"
        if stat.S_ISCHR(mode)
        else "not a regular file"
    )
    raise ChipswapError(
        f"cannot write {name}: it is {kind}, not a regular file; give a file path (or - for standard output)"
    )


def _is_tty(name: str) -> bool:
    try:
        fd = os.open(name, os.O_WRONLY | os.O_NOCTTY | os.O_NONBLOCK)
    except OSError:
        return False
    try:
        return os.isatty(fd)
    finally:
        os.close(fd)


def check_target(path: str | os.PathLike[str], flag: str = "--out") -> str:
    """Fail before any work when ``path`` cannot take the output: the error names the flag. The kind."""
    try:
        kind = target_kind(path)
    except ChipswapError as exc:
        raise ChipswapError(f"{flag}: {exc}") from None
    if kind == "fd":
        fd = _descriptor(os.fspath(path))
        try:
            os.fstat(fd)  # type: ignore[arg-type]
        except OSError:
            raise ChipswapError(
                f"{flag} {os.fspath(path)}: file descriptor {fd} is not open; give a file path"
            ) from None
    return kind


# -------------------------------------------------------------------------------------------------- writing
def _write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        n = os.write(fd, view)
        view = view[n:]


def _write_descriptor(name: str, data: bytes) -> None:
    fd = _descriptor(name)
    assert fd is not None
    for stream in (sys.stdout, sys.stderr):  # keep what was printed before ahead of these bytes
        try:
            stream.flush()
        except (OSError, ValueError):
            pass
    try:
        _write_all(fd, data)
    except OSError as exc:
        raise _write_error(Path(name), exc) from None


def _write_stream(target: Path, data: bytes) -> None:
    """A direct write to an existing FIFO / terminal / null device: no create, no truncate, no rename."""
    try:
        # O_NONBLOCK: a FIFO nobody reads fails with ENXIO instead of hanging; cleared before writing
        fd = os.open(target, os.O_WRONLY | os.O_NOCTTY | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError as exc:
        raise _write_error(target, exc) from None
    try:
        st = os.fstat(fd)
        if stat.S_ISREG(st.st_mode) or stat.S_ISDIR(st.st_mode) or stat.S_ISBLK(st.st_mode):
            raise ChipswapError(f"cannot write {target}: it changed while being opened; try again")
        os.set_blocking(fd, True)
        _write_all(fd, data)
    except OSError as exc:
        raise _write_error(target, exc) from None
    finally:
        os.close(fd)


def _writer_tag() -> str:
    """Host and pid namespace (hashed, 8 hex digits) and pid of this process, for temp file names."""
    try:
        ns = os.stat("/proc/self/ns/pid").st_ino
    except OSError:
        ns = 0
    where = hashlib.sha256(f"{socket.gethostname()}/{ns}".encode()).hexdigest()[:8]
    return f"{where}-{os.getpid()}"


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except (PermissionError, OverflowError):
        return True
    return True


def clean_stale_temps(target: Path, now: float | None = None) -> list[Path]:
    """Remove temp siblings of ``target`` left by killed writers; return what was removed.

    A temp written on this host and pid namespace is stale when its pid is gone; one from elsewhere (a shared
    folder) after STALE_FOREIGN_TEMP_S; one in the old unmarked format after STALE_LEGACY_TEMP_S."""
    now = time.time() if now is None else now
    prefix = f".{target.name}."
    mine = _writer_tag().split("-")[0]
    marked = re.compile(r"([0-9a-f]{8})-(\d{1,10})\.[A-Za-z0-9_]+\.tmp")
    removed: list[Path] = []
    try:
        names = os.listdir(target.parent)
    except OSError:
        return removed
    for name in names:
        if not (name.startswith(prefix) and name.endswith(".tmp")):
            continue
        p = target.parent / name
        try:
            st = os.lstat(p)
        except OSError:
            continue
        if not stat.S_ISREG(st.st_mode):
            continue
        age = now - st.st_mtime
        m = marked.fullmatch(name[len(prefix) :])
        if m:
            stale = not _pid_alive(int(m.group(2))) if m.group(1) == mine else age > STALE_FOREIGN_TEMP_S
        else:
            stale = age > STALE_LEGACY_TEMP_S
        if stale:
            try:
                p.unlink()
                removed.append(p)
            except OSError:
                pass
    return removed


def atomic_write_bytes(path: str | os.PathLike[str], data: bytes) -> Path:
    target = Path(path)
    kind = target_kind(path)
    if kind == "fd":
        _write_descriptor(os.fspath(path), data)
        return target
    if kind == "stream":
        _write_stream(target, data)
        return target
    try:
        target.parent.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise _write_error(target, exc) from None
    clean_stale_temps(target)
    try:
        fd, tmp = tempfile.mkstemp(
            prefix=f".{target.name}.{_writer_tag()}.", suffix=".tmp", dir=target.parent
        )
    except OSError as exc:
        raise _write_error(target, exc) from None
    try:
        # mkstemp creates 0600; give the file the mode a plain open() would (0666 less the umask)
        os.fchmod(fd, 0o666 & ~_current_umask())
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
            fh.flush()
            os.fsync(fh.fileno())
        if target_kind(target) not in ("file", "new"):  # it became a device or FIFO: never rename over it
            raise ChipswapError(f"cannot write {target}: it is no longer a regular file; try again")
        os.replace(tmp, target)
    except (OSError, ChipswapError) as exc:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        if isinstance(exc, ChipswapError):
            raise
        raise _write_error(target, exc) from None
    _fsync_dir(target.parent)
    return target


def atomic_write_text(path: str | os.PathLike[str], text: str) -> Path:
    return atomic_write_bytes(path, text.encode("utf-8"))
