"""Progress of a long command on stderr, one stage at a time: a rich spinner with the stage and the time on
a terminal, one line per stage otherwise (pipes, CI logs, --json), nothing with --quiet. stdout is left to
the command's own output (the summary or the JSON).

Off a terminal a stage line is written when its stage starts ``quiet_start_s`` (2 s) or later: bad input
fails before that as the one error line it must be. A stage that starts earlier and is still running after
``FIRST_LINE_S`` (1 s) is written then, by a timer, so a long command says where it is within a second even
when its first stage is its longest (issue 38: `plan` printed nothing until its readiness stage ended). The
timer starts with the first stage that is not "reading ..." (the workload, the traces: where bad input is
found, so its error line still stands alone). Once a line is out, every later stage gets its line. A
command whose early stages can still end in a usage error (``check`` builds the model before it knows the
config is sound) gives ``hold_until``: off a terminal its lines wait until a stage starting with one of those
words begins, then come out together, each with its own time (and no timer).
"""

from __future__ import annotations

import sys
import threading
import time
from typing import Any

QUIET_START_S = 2.0  # off a terminal, the first stage line waits this long (read at each start)
FIRST_LINE_S = 1.0  # off a terminal, a stage still running this long after the start is written then


class StageProgress:
    """``say(stage)`` for each stage (``chipswap.plan.run_plan(progress=...)``), then ``close()``."""

    def __init__(
        self,
        name: str,
        quiet: bool = False,
        tty: bool | None = None,
        quiet_start_s: float | None = None,
        hold_until: tuple[str, ...] = (),
    ) -> None:
        self.name = name
        self.hold_until = hold_until
        self._held: list[tuple[str, float]] = []
        self.quiet_start_s = QUIET_START_S if quiet_start_s is None else quiet_start_s
        self.quiet = quiet
        self.tty = sys.stderr.isatty() if tty is None else tty
        self.t0 = time.perf_counter()
        self._bar: Any = None
        self._task: Any = None
        self._lock = threading.Lock()
        self._written = False
        self._current: tuple[str, float] | None = None  # the stage running now and when it started
        self._stream = sys.stderr  # the timer writes where the command's lines go, even if it fires late
        self._timer: threading.Timer | None = None
        self._armed = quiet or self.tty or bool(hold_until)  # True: no timer (any more)

    def _first_line(self) -> None:
        """The timer: nothing written yet and a stage running: write that stage's line now."""
        with self._lock:
            if self._written or self._current is None or self._timer is None or self.hold_until:
                return
            stage, took = self._current
            self._written = True
            try:
                self._stream.write(f"{self.name}: {stage} ({took:.1f} s)\n")
                self._stream.flush()
            except (OSError, ValueError):  # the stream was closed meanwhile
                pass

    def say(self, stage: str) -> None:
        if self.quiet:
            return
        if not self.tty:
            with self._lock:
                self._held.append((stage, time.perf_counter() - self.t0))
                self._current = self._held[-1]
                # the first stage past reading the inputs (where bad input surfaces as its one error line):
                # its line comes FIRST_LINE_S after the start if it is still running then
                if not self._armed and not stage.startswith("reading"):
                    self._armed = True
                    self._timer = threading.Timer(max(0.0, FIRST_LINE_S - self._current[1]), self._first_line)
                    self._timer.daemon = True
                    self._timer.start()
                if self.hold_until and not stage.startswith(self.hold_until):
                    return
                self.hold_until = ()
                for held, took in self._held:
                    if took >= self.quiet_start_s or self._written:  # (once one is out, every one)
                        sys.stderr.write(f"{self.name}: {held} ({took:.1f} s)\n")
                        self._written = True
                self._held = []
                sys.stderr.flush()
            return
        if self._bar is None:
            from rich.console import Console
            from rich.progress import Progress, SpinnerColumn, TextColumn, TimeElapsedColumn

            self._bar = Progress(
                SpinnerColumn(),
                TextColumn(f"[bold]{self.name}[/]"),
                TextColumn("{task.description}"),
                TimeElapsedColumn(),
                console=Console(stderr=True),
                transient=True,
            )
            self._bar.start()
            self._task = self._bar.add_task(stage, total=None)
        else:
            self._bar.update(self._task, description=stage)

    def close(self) -> None:
        with self._lock:
            self._armed = True
            if self._timer is not None:
                self._timer.cancel()
                self._timer = None
        if self._bar is not None:
            self._bar.stop()
            self._bar = None
