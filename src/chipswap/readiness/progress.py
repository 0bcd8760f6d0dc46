"""Stage names for a caller's progress display: `reporting(callback)` around a check, `stage(name)` inside it.

The readiness core prints nothing; the CLI passes a callback (cli/check.py -> StageProgress) and hears each
stage as it starts. May not: print, or keep a callback past the `with` block that set it.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from contextvars import ContextVar

_PROGRESS: ContextVar[Callable[[str], None] | None] = ContextVar("check_progress", default=None)


@contextmanager
def reporting(callback: Callable[[str], None] | None) -> Iterator[None]:
    token = _PROGRESS.set(callback)
    try:
        yield
    finally:
        _PROGRESS.reset(token)


def stage(name: str) -> None:
    """Tell the current callback that `name` starts; silent without one."""
    if (say := _PROGRESS.get()) is not None:
        say(name)


def exporting(n_shapes: int, meta: bool = False) -> None:
    stage(f"exporting ({n_shapes} shape{'s' if n_shapes != 1 else ''}{', meta device' if meta else ''})")
