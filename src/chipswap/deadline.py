"""A time limit for commands that run code chipswap does not control (a factory, a model's forward).

``deadline(seconds, what, fix)`` raises a one-line ChipswapError when the block runs past ``seconds`` (the
line says how much CPU the block used and the load it ran under: a busy machine, not the model, may be why): a
timer signal interrupts Python code (a ``while True`` in a forward, a factory that sleeps); a watchdog thread
ends the process with the same one line (exit 2) if the block is still stuck ``GRACE_S`` later in native code
the signal cannot interrupt. Only the main thread of a CLI process uses it; elsewhere it is a no-op.

May not: touch files, or outlive the block (the timer and the watchdog are cancelled on exit).
"""

from __future__ import annotations

import contextlib
import os
import signal
import sys
import threading
import time
from collections.abc import Iterator

from chipswap.errors import ChipswapError

GRACE_S = 10.0
MAX_TIMEOUT_S = 7 * 24 * 3600.0


class DeadlinePassed(BaseException):
    """The block ran past its time limit. A BaseException (like KeyboardInterrupt), so the ``except
    Exception`` fallbacks of an export do not swallow it; ``deadline`` makes it a ChipswapError."""


def check_timeout(value: float, flag: str = "--timeout") -> float:
    import math

    if not math.isfinite(value) or not 0 < value <= MAX_TIMEOUT_S:
        raise ChipswapError(f"{flag} must be a number of seconds in (0, {MAX_TIMEOUT_S:,.0f}], got {value}")
    return float(value)


def on_this_machine(cpu_s: float) -> str:
    """Wall-clock limits measure the machine as much as the work: the CPU the block used and the load it ran
    under, so a busy machine is not read as a model that never returns."""
    try:
        load = f", load average {os.getloadavg()[0]:.1f} on {os.cpu_count() or '?'} CPUs"
    except OSError:
        load = ""
    return f"on this machine ({cpu_s:.1f} s of CPU used{load})"


@contextlib.contextmanager
def deadline(seconds: float | None, what: str, fix: str) -> Iterator[None]:
    if not seconds or threading.current_thread() is not threading.main_thread():
        yield
        return
    cpu0 = time.process_time()

    def message() -> str:
        used = on_this_machine(time.process_time() - cpu0)
        return f"{what} did not finish within {seconds:g} s {used}; {fix}"

    def on_alarm(_sig: int, _frame: object) -> None:
        raise DeadlinePassed(message())

    done = threading.Event()

    def watchdog() -> None:
        if not done.wait(seconds + GRACE_S):
            sys.stderr.write(f"chipswap: error: {message()}\n")
            sys.stderr.flush()
            os._exit(2)

    old = signal.signal(signal.SIGALRM, on_alarm)
    dog = threading.Thread(target=watchdog, name="chipswap-deadline", daemon=True)
    try:  # the timer starts inside the try: a limit of a microsecond fires before the next line (issue 32)
        signal.setitimer(signal.ITIMER_REAL, seconds, 1.0)  # then every second, in case something swallows it
        dog.start()
        yield
    except DeadlinePassed:
        signal.setitimer(signal.ITIMER_REAL, 0)
        raise ChipswapError(message()) from None
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, old)
        done.set()
