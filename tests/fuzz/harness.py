"""Run one hostile input through a public entry point, in this process, and check the contract of
docs/security.md:

- the exit code is allowed for that entry point (0, 1 only where it means "blockers found", 2 for bad input),
  and an exit 2 says so in one `chipswap: error:` line;
- no traceback: no exception other than the CLI's own SystemExit (or ChipswapError from a library call);
- nothing written outside the sandbox's roots (work/, out/, cache/, home/): the canary tree beside them and
  the sandbox's parent (pytest's own temporary folder) are compared before and after. A case runs with its
  cwd in work/, so a relative write lands there; the checkout is not watched: what a person (or the README
  walk-through, which writes plan.json there) does in it while the suite runs is not chipswap's write;
- memory: each case may add at most CEILING_BYTES to the data segment (RLIMIT_DATA, so an unbounded
  allocation fails at once instead of swapping the machine); peak RSS is recorded per case (VmHWM, reset per
  case through /proc/self/clear_refs);
- time: a case using more than CASE_TIMEOUT_S of CPU (a runaway loop), or waiting more than WALL_FACTOR times
  that on the wall clock (a hang on a FIFO, which uses no CPU), is a failure. The limit is CPU time so a
  loaded machine (a second suite beside this one) makes a case slower, never a failure.

Counts go to a session-wide tally printed at the end of the run (tests/fuzz/conftest.py).
"""

from __future__ import annotations

import contextlib
import io
import os
import resource
import shutil
import signal
import stat
import time
import traceback
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from chipswap.errors import ChipswapError

CEILING_BYTES = 2 * 2**30
CASE_TIMEOUT_S = 30  # CPU seconds of this process
FILE_NODE_TIMEOUT_S = 2  # a FIFO or /dev/zero given as an input: a correct reader answers in milliseconds
WALL_FACTOR = 10  # a case may wait this many times its CPU limit on the wall clock (load, blocked reads)
FILE_NODE_CEILING_BYTES = 512 * 2**20  # ... and reads at most its size limit (64 MiB) of /dev/zero


class CaseTimeout(BaseException):
    """Raised by SIGALRM inside a case that ran too long."""


# what Tally.counts counts; known_open_failures: failing inputs of a (class, kind) listed in KNOWN_OPEN
COUNTS = (
    "tried", "ok", "blockers", "clean_errors", "tracebacks", "bad_exit", "outside_writes", "timeouts",
    "over_memory", "known_open_failures"
)


@dataclass
class Tally:
    counts: Counter[str] = field(default_factory=Counter)  # by the names in COUNTS
    peak_rss_kib: int = 0
    peak_growth_kib: int = 0
    seconds: float = 0.0
    by_class: dict[str, dict[str, int]] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        """Every count (zeros included), the peaks, the seconds and the per-class counts: one flat object."""
        counts = {name: self.counts[name] for name in COUNTS}
        return {**counts, **{k: v for k, v in self.__dict__.items() if k != "counts"}}

    def add(self, cls: str, outcome: Outcome, problems: list[str], known_open: bool = False) -> None:
        """Count one input. A failing input of a known-open kind is counted apart (it is xfail, listed in
        KNOWN_OPEN); every other count is of the contract enforced now."""
        n = self.counts
        n["tried"] += 1
        self.seconds += outcome.seconds
        self.peak_rss_kib = max(self.peak_rss_kib, outcome.peak_rss_kib)
        self.peak_growth_kib = max(self.peak_growth_kib, outcome.growth_kib)
        c = self.by_class.setdefault(
            cls, {"tried": 0, "clean_errors": 0, "failures": 0, "known_open": 0, "ms": 0}
        )
        c["tried"] += 1
        c["ms"] += int(outcome.seconds * 1000)
        if known_open and problems:
            n["known_open_failures"] += 1
            c["known_open"] += 1
            return
        if outcome.code == 0:
            n["ok"] += 1
        elif outcome.code == 1:
            n["blockers"] += 1
        elif outcome.code == 2 and not problems:
            n["clean_errors"] += 1
            c["clean_errors"] += 1
        if outcome.error:
            n["tracebacks"] += 1
        if outcome.timed_out:
            n["timeouts"] += 1
        if outcome.over_memory:
            n["over_memory"] += 1
        if outcome.outside:
            n["outside_writes"] += 1
        if any(p.startswith("exit code") or p.startswith("exit 2 without") for p in problems):
            n["bad_exit"] += 1
        if problems:
            c["failures"] += 1


TALLY = Tally()


@dataclass
class Outcome:
    code: int | None
    out: str
    err: str
    error: str | None  # traceback text of an unexpected exception
    seconds: float
    peak_rss_kib: int
    growth_kib: int
    outside: list[str]
    timed_out: bool = False
    over_memory: bool = False
    value: Any = None


def _status(key: str) -> int:
    """A /proc/self/status field in KiB (0 where /proc is missing: then no limit is set, nothing measured)."""
    try:
        with open("/proc/self/status") as fh:
            for line in fh:
                if line.startswith(key + ":"):
                    return int(line.split()[1])
    except OSError:
        pass
    return 0


def _reset_peak_rss() -> bool:
    try:
        with open("/proc/self/clear_refs", "w") as fh:
            fh.write("5")
        return True
    except OSError:
        return False


def _snapshot_tree(root: Path) -> dict[str, tuple[int, int, int]]:
    out = {}
    for dirpath, dirnames, filenames in os.walk(root):
        for name in dirnames + filenames:
            p = os.path.join(dirpath, name)
            st = os.lstat(p)
            out[os.path.relpath(p, root)] = (st.st_mode, st.st_size, st.st_mtime_ns)
    return out


class Sandbox:
    """base/{work,out,cache,home} are the roots a case may write; base/canary is what hostile names aim at."""

    ROOTS = ("work", "out", "cache", "home")
    def __init__(self, base: Path, repo_root: Path | None = None) -> None:
        self.base = base  # repo_root: no longer watched (see the module's docstring); kept for callers
        self.work, self.out, self.cache, self.home = (base / r for r in self.ROOTS)
        self.canary = base / "canary"
        (self.canary / "victim").mkdir(parents=True, exist_ok=True)
        (self.canary / "victim" / "precious.txt").write_text("keep me")
        (self.canary / "victim.json").write_text('{"schema": "chipswap.compiled/1"}')
        self.reset()
        self._reference = self._snapshot()

    def reset(self) -> None:
        for d in (self.work, self.out, self.cache, self.home):
            if d.is_symlink() or d.is_file():
                d.unlink()
            elif d.exists():
                shutil.rmtree(d)
        self.work.mkdir()
        self.home.mkdir()

    def _snapshot(self) -> dict[str, Any]:
        return {
            "canary": _snapshot_tree(self.canary),
            "base": sorted(n for n in os.listdir(self.base) if n not in self.ROOTS),
            "parent": sorted(os.listdir(self.base.parent)),
        }

    def outside_changes(self) -> list[str]:
        now = self._snapshot()
        changes = []
        for part, ref in self._reference.items():
            if now[part] != ref:
                if isinstance(ref, dict):
                    diff = sorted(set(ref.items()) ^ set(now[part].items()))[:3]
                else:
                    diff = sorted(set(ref) ^ set(now[part]))[:3]
                changes.append(f"{part}: {diff}")
        if changes:  # put the canary back so later cases are judged on their own
            shutil.rmtree(self.canary, ignore_errors=True)
            (self.canary / "victim").mkdir(parents=True, exist_ok=True)
            (self.canary / "victim" / "precious.txt").write_text("keep me")
            (self.canary / "victim.json").write_text('{"schema": "chipswap.compiled/1"}')
            self._reference = self._snapshot()
        return changes

    def place(self, name: str, hostile: Any) -> Path:
        """Put a strategies.HostileFile at work/<name> and return its path."""
        path = self.work / name
        node = hostile.node
        if node == "file":
            path.write_bytes(hostile.data)
        elif node == "folder":
            path.mkdir()
        elif node == "dangling_link":
            path.symlink_to(self.work / "missing-target")
        elif node == "zero_device":
            path.symlink_to("/dev/zero")
        elif node == "fifo":
            os.mkfifo(path)
        return path


def _alarm(signum: int, frame: Any) -> None:
    raise CaseTimeout("case ran over its time limit")


def _is_memory_error(exc: BaseException) -> bool:
    return isinstance(exc, MemoryError) or "can't allocate memory" in str(exc) or "out of memory" in str(exc)


def run(
    sandbox: Sandbox,
    call: Callable[[], Any],
    *,
    cli: bool,
    env: dict[str, str] | None = None,
    timeout_s: int = CASE_TIMEOUT_S,
    ceiling_bytes: int = CEILING_BYTES,
) -> Outcome:
    """Run `call` (the CLI's main(argv), or a library function) under the case limits."""
    env = {"CHIPSWAP_CACHE_DIR": str(sandbox.cache), "HOME": str(sandbox.home), **(env or {})}
    saved_env = {k: os.environ.get(k) for k in env}
    saved_cwd = os.getcwd()
    soft, hard = resource.getrlimit(resource.RLIMIT_DATA)
    out, err = io.StringIO(), io.StringIO()
    code: int | None = None
    error = None
    value = None
    timed_out = over_memory = False
    _reset_peak_rss()
    rss_before = _status("VmRSS")
    data_kib = _status("VmData")
    limit = data_kib * 1024 + ceiling_bytes
    old_handler = signal.signal(signal.SIGALRM, _alarm)
    old_prof = signal.signal(signal.SIGPROF, _alarm)
    t0 = time.monotonic()
    try:
        os.environ.update(env)
        os.chdir(sandbox.work)
        if data_kib and (hard == resource.RLIM_INFINITY or limit < hard):
            resource.setrlimit(resource.RLIMIT_DATA, (limit, hard))
        signal.setitimer(signal.ITIMER_PROF, timeout_s)  # CPU time: load does not count
        signal.alarm(timeout_s * WALL_FACTOR)  # wall: a read blocked on a FIFO uses no CPU
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            try:
                value = call()
                code = value if cli and isinstance(value, int) else 0
            except SystemExit as exc:
                code = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 2)
            except ChipswapError as exc:
                if cli:
                    raise
                code = 2
                err.write(f"chipswap: error: {exc}\n")
    except BaseException as exc:  # anything else escaping the entry point is a traceback for the user
        timed_out = isinstance(exc, CaseTimeout)
        over_memory = _is_memory_error(exc)
        error = "".join(traceback.format_exception(type(exc), exc, exc.__traceback__))[-4000:]
    finally:
        signal.alarm(0)
        signal.setitimer(signal.ITIMER_PROF, 0)
        signal.signal(signal.SIGALRM, old_handler)
        signal.signal(signal.SIGPROF, old_prof)
        resource.setrlimit(resource.RLIMIT_DATA, (soft, hard))
        os.chdir(saved_cwd)
        for k, v in saved_env.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v
    seconds = time.monotonic() - t0
    peak = _status("VmHWM")
    return Outcome(
        code, out.getvalue(), err.getvalue(), error, seconds, peak, max(0, peak - rss_before),
        sandbox.outside_changes(), timed_out, over_memory, value,
    )


def problems_of(outcome: Outcome, allowed: Sequence[int], extra: Sequence[str] = ()) -> list[str]:
    found = list(extra)
    if outcome.error:
        found.append("traceback:\n" + outcome.error)
    elif outcome.code not in allowed:
        found.append(f"exit code {outcome.code}, allowed {list(allowed)}; stderr: {outcome.err[-500:]!r}")
    elif outcome.code == 2:
        lines = outcome.err.rstrip("\n").split("\n")
        if not lines[-1].startswith("chipswap: error: ") or "Traceback" in outcome.err:
            found.append(f"exit 2 without one error line: {outcome.err[-500:]!r}")
    if outcome.outside:
        found.append(f"wrote outside the roots: {outcome.outside}")
    return found


def check(
    cls: str, outcome: Outcome, allowed: Sequence[int], extra: Sequence[str] = (), *, known_open: bool = False
) -> None:
    problems = problems_of(outcome, allowed, extra)
    TALLY.add(cls, outcome, problems, known_open)
    assert not problems, "\n".join(problems)


def echoed_controls(text: str) -> list[str]:
    """Terminal-unsafe characters printed raw (from data): escape sequences, C1 controls, bidi overrides."""
    bad = [c for c in text if (ord(c) < 0x20 and c not in "\n\t") or 0x7F <= ord(c) <= 0x9F]
    bad += [c for c in text if c in "\u202a\u202b\u202c\u202d\u202e\u2066\u2067\u2068\u2069\u2028\u2029"]
    return [f"raw control character {c!r} in the output" for c in sorted(set(bad))[:3]]


def is_regular_or_missing(path: Path) -> bool:
    try:
        return stat.S_ISREG(os.lstat(path).st_mode)
    except FileNotFoundError:
        return True
