"""Publish the plan report's files (report.html, report.json, report.md) as ONE set: a reader of the output
folder always sees three files from the same run, and a run killed at any point leaves the previous set
intact.

How: each run writes its files into a fresh folder `OUT/.chipswap-runs/run-<pid>-<token>/` (fsynced), then
swaps ONE symlink, `OUT/.chipswap-current`, to point at it (a new symlink renamed over the old one: rename is
atomic). `OUT/report.html` (and .json, .md) are symlinks through `.chipswap-current`, created once, so all
three
switch together. Linux cannot rename a folder over a non-empty folder, and swapping OUT itself would move
whatever else the user keeps there, hence the symlink (renameat2(RENAME_EXCHANGE) would need ctypes and is
Linux-only). Where symlinks are not possible (e.g. FAT) each file is written atomically on its own instead.

Cleanup: run folders and temp links left by killed runs (their process is gone) are removed on the next run,
and so is the previous run's folder once the new one is current. May write only inside OUT.

Ownership (issue 19): a report file is replaced only when chipswap wrote it: a symlink into
`.chipswap-current` (this scheme), or, where symlinks are not possible, a regular file whose sha256 is
listed in `OUT/.chipswap-owned.json` (written with it). A `report.html` the user wrote (or an older
chipswap's plain file) is never replaced: one error line names it.
"""

from __future__ import annotations

import errno
import os
import secrets
import shutil
import time
from pathlib import Path

from chipswap.atomic import _fsync_dir, _pid_alive, atomic_write_text
from chipswap.compile.cachefiles import sha256_file as _sha256_file
from chipswap.compile.cachefiles import write_file as _write_file
from chipswap.errors import ChipswapError

RUNS = ".chipswap-runs"
OWNED = ".chipswap-owned.json"  # sha256 of each report file chipswap wrote without symlinks
CURRENT = ".chipswap-current"
LEGACY_TEMP_AGE_S = 600  # `.report.*.tmp` files from atomic writes of older versions, when this old


def _pid_of(name: str) -> int:
    """The pid in a name like `run-1234-ab12cd` or `.chipswap-current.tmp-1234-ab12cd` (0 when none)."""
    parts = name.rsplit("-", 2)
    try:
        return int(parts[-2])
    except (IndexError, ValueError):
        return 0


def _current_target(out: Path) -> str | None:
    try:
        return os.readlink(out / CURRENT)
    except OSError:
        return None


def clean_stale(out: Path) -> list[Path]:
    """Remove run folders and temp links whose process is gone (never the current set); return what went."""
    removed: list[Path] = []
    current = _current_target(out)
    runs = out / RUNS
    if runs.is_dir():
        for d in runs.iterdir():
            if f"{RUNS}/{d.name}" == current or not d.name.startswith("run-") or _pid_alive(_pid_of(d.name)):
                continue
            shutil.rmtree(d, ignore_errors=True)
            removed.append(d)
    for p in out.iterdir() if out.is_dir() else ():
        name = p.name
        if ".tmp-" in name and name.startswith((CURRENT, "report.")):  # a link a killed run never renamed
            if not _pid_alive(_pid_of(name)):
                p.unlink(missing_ok=True)
                removed.append(p)
        elif name.startswith(".report.") and name.endswith(".tmp"):  # atomic-write temp of an older version
            try:
                old = time.time() - p.lstat().st_mtime > LEGACY_TEMP_AGE_S
            except OSError:
                continue
            if old:
                p.unlink(missing_ok=True)
                removed.append(p)
    return removed


def _swap_link(link: Path, target: str, token: str) -> None:
    tmp = link.with_name(f"{link.name}.tmp-{os.getpid()}-{token}")
    os.symlink(target, tmp)
    try:
        os.replace(tmp, link)
    except OSError:
        tmp.unlink(missing_ok=True)
        raise


def _owned(out: Path) -> dict[str, str]:
    import json

    try:
        data = json.loads((out / OWNED).read_text(encoding="utf-8")[:1_000_000])
    except (OSError, ValueError):
        return {}
    return (
        {k: v for k, v in data.items() if isinstance(k, str) and isinstance(v, str)}
        if isinstance(data, dict)
        else {}
    )


def check_owned(out: Path, names: list[str] | tuple[str, ...]) -> None:
    """Refuse (one line) when a report file in ``out`` exists and chipswap did not write it."""
    owned = None
    for name in names:
        p = out / name
        if p.is_symlink():
            if os.readlink(p) == f"{CURRENT}/{name}":
                continue
        elif not p.exists():
            continue
        elif p.is_file():
            owned = _owned(out) if owned is None else owned
            if owned.get(name) == _sha256_file(p):
                continue
        raise ChipswapError(
            f"{p} exists and chipswap did not write it; move it away or choose another --out "
            "(chipswap replaces only the report files it wrote)"
        )


def _write_owned(out: Path, files: dict[str, str]) -> None:
    import hashlib
    import json

    owned = {n: hashlib.sha256(t.encode("utf-8")).hexdigest() for n, t in files.items()}
    atomic_write_text(out / OWNED, json.dumps(owned, indent=1, sort_keys=True) + "\n")


def publish_report_set(out: Path, files: dict[str, str]) -> Path:
    """Write `files` (name -> text) into `out` as one set; returns the folder. Errors are one line."""
    for name in files:
        if "/" in name or name.startswith("."):
            raise ChipswapError(f"report file name {name!r} is not a plain name")  # never from data
    try:
        out.mkdir(parents=True, exist_ok=True)
        clean_stale(out)
        for name in files:
            if (out / name).is_dir() and not (out / name).is_symlink():
                raise ChipswapError(
                    f"cannot write {out / name}: it is a folder; remove it or choose another --out"
                )
        check_owned(out, list(files))
        token = secrets.token_hex(4)
        run_name = f"run-{os.getpid()}-{token}"
        run_dir = out / RUNS / run_name
        run_dir.mkdir(parents=True)
    except OSError as exc:
        raise ChipswapError(
            f"cannot write the report to {out}: {exc.strerror or exc}; choose another --out"
        ) from None
    try:
        for name, text in files.items():
            _write_file(run_dir / name, text.encode("utf-8"))
        _fsync_dir(run_dir)
        previous = _current_target(out)
        _swap_link(out / CURRENT, f"{RUNS}/{run_name}", token)
        for name in files:
            link = out / name
            want = f"{CURRENT}/{name}"
            if not (link.is_symlink() and os.readlink(link) == want):
                _swap_link(link, want, token)
        _fsync_dir(out)
    except OSError as exc:
        shutil.rmtree(run_dir, ignore_errors=True)
        if exc.errno in (errno.EPERM, errno.ENOTSUP, errno.EOPNOTSUPP):  # no symlinks here: file by file
            _write_owned(out, {})  # a crash between the files below leaves them unowned, never wrongly owned
            for name, text in files.items():
                atomic_write_text(out / name, text)
            _write_owned(out, files)
            return out
        raise ChipswapError(
            f"cannot write the report to {out}: {exc.strerror or exc}; choose another --out"
        ) from None
    if previous and previous != f"{RUNS}/{run_name}" and previous.startswith(f"{RUNS}/run-"):
        shutil.rmtree(out / previous, ignore_errors=True)
    return out
