"""Worker processes for the plan's independent work (the readiness check beside the fleet simulations, the
simulations of different fleets and searches beside each other): one small interface, `Workers.submit(fn,
*args)` -> a `Job` whose `get()` returns fn's value or raises its error.

The work is deterministic and every result is read back in the order the caller chooses, so a plan's figures
do not depend on how many workers there are. With one core (or off Linux, where a forked worker is not safe)
there are no workers: `submit` runs the function at once, in this process, exactly as the serial code did.
Workers are forked when the pool opens (before the plan imports torch or starts a thread), by default only
in a process that runs no other Python thread (a fork copies locks those threads hold); they ignore
Ctrl-C (the plan's process gets it and ends them), are always ended when the pool closes, and end if the
plan's process is killed; a worker killed under it is an error, never a hang. May not touch the plan's data:
it only runs the functions it is given.
"""

from __future__ import annotations

import os
import pickle
import signal
import sys
from collections.abc import Callable
from typing import Any, Generic, TypeVar

from chipswap.errors import ChipswapError

T = TypeVar("T")
MAX_WORKERS = 8  # a bound whatever the machine: the plan has a few dozen independent searches at most


def available_cores() -> int:
    """Cores this process may run on (its CPU affinity, not the machine's count)."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except (AttributeError, OSError):  # no affinity call (not Linux)
        return max(1, os.cpu_count() or 1)


def _threads() -> int:
    """Python threads in this process, the main one included (a server, a timer, a test runner's channel).
    `_thread._count` also sees threads started without `threading` (pytest-xdist's execnet channel is one:
    `threading.active_count()` missed it and a forked worker hung). Native pools (BLAS) are not counted:
    OpenBLAS re-creates its own after a fork."""
    import _thread

    return 1 + _thread._count()


def _worker_start() -> None:
    """In each worker: Ctrl-C is the plan's to handle, and the worker ends when the plan's process does
    (killed, not only closed: Linux's parent-death signal)."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    try:
        import ctypes

        ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGTERM)  # 1: PR_SET_PDEATHSIG
    except (OSError, AttributeError):  # no prctl: the worker ends after its task, when its queue closes
        pass


def _by_name(fn: Callable[..., Any]) -> bool:
    """Can a worker be sent `fn` (a module-level function, sent by name)? A local function or a lambda (a
    test's stand-in) cannot: it runs here instead."""
    try:
        pickle.dumps(fn)
    except (pickle.PicklingError, AttributeError, TypeError):
        return False
    return True


class Job(Generic[T]):
    """A submitted call: `get()` waits for it (a worker's) or returns what it already gave (serial)."""

    def __init__(self, pending: Any = None, value: Any = None, error: BaseException | None = None) -> None:
        self._pending, self._value, self._error = pending, value, error

    def get(self) -> T:
        if self._pending is not None:
            from concurrent.futures.process import BrokenProcessPool

            try:
                return self._pending.result()  # type: ignore[no-any-return]
            except BrokenProcessPool:  # a worker was killed (out of memory?): an error, never a hang
                raise ChipswapError(
                    "a worker process of the plan ended before its result (killed, out of memory?); run "
                    "again, with more memory free"
                ) from None
        if self._error is not None:
            raise self._error
        return self._value  # type: ignore[no-any-return]


class Workers:
    """`with Workers(n) as w: a = w.submit(f, x); b = w.submit(g, y); a.get(), b.get()`. n <= 1: serial."""

    def __init__(self, size: int | None = None) -> None:
        n = available_cores() if size is None else size
        self.size = max(1, min(MAX_WORKERS, n)) if sys.platform == "linux" else 1
        if size is None and _threads() > 1:
            # a fork from a process that runs other threads can copy a lock one of them holds, and the child
            # waits on it forever (seen: a plan run inside a test runner with server threads): serial here
            self.size = 1
        self._pool: Any = None
        if self.size > 1:
            import multiprocessing
            from concurrent.futures import ProcessPoolExecutor

            try:
                self._pool = ProcessPoolExecutor(
                    self.size, mp_context=multiprocessing.get_context("fork"), initializer=_worker_start
                )
                # a first call forks every worker now, while this process runs no other thread (a progress
                # timer or spinner started later could hold a lock a forked child would then wait on)
                self._pool.submit(int).result()
            except OSError:  # no semaphores here (a locked-down container): no workers
                self.close()
                self.size = 1

    def submit(self, fn: Callable[..., T], *args: Any) -> Job[T]:
        if self._pool is None or not _by_name(fn):
            try:
                return Job(value=fn(*args))
            except Exception as exc:  # noqa: BLE001 - raised again, unchanged, by get()
                return Job(error=exc)
        return Job(self._pool.submit(fn, *args))

    def close(self) -> None:
        """End the workers (their results, if any, were read; a late one is not waited for)."""
        if self._pool is None:
            return
        pool, self._pool = self._pool, None
        procs = list((getattr(pool, "_processes", None) or {}).values())  # started workers, to end them
        pool.shutdown(wait=False, cancel_futures=True)
        for proc in procs:
            proc.terminate()
        for proc in procs:
            proc.join(timeout=5)

    def __enter__(self) -> Workers:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
