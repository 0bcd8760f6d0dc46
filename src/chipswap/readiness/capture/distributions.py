"""Notice torch.distributions objects built with argument validation on, while the model runs for capture.

A Distribution's constructor with ``validate_args`` on checks its parameters with a Python branch on tensor
values, which the export reports only as a generic data-dependent failure at the user's line. This watcher
records each such construction (class and user line) as a ``distribution_validation`` capture issue, so the
rules can name the cause and the fix (``validate_args=False``; issue 19). It changes nothing the model does.

May not: alter the model's behaviour (the original constructor runs unchanged), touch files.
"""

from __future__ import annotations

import contextlib
import traceback
from collections.abc import Iterator

from chipswap.readiness.rules import CaptureIssue


@contextlib.contextmanager
def watch_distribution_validation(found: list[CaptureIssue]) -> Iterator[None]:
    """While active, each validating Distribution built adds one issue per class and line to ``found``."""
    try:
        from torch.distributions import Distribution
    except Exception:  # noqa: BLE001 - no torch.distributions: nothing to watch
        yield
        return
    from chipswap.readiness.capture.graph import pick_frame, rel

    original = Distribution.__init__
    seen: set[tuple[str, str]] = set()

    def init(self, *args, **kwargs):  # type: ignore[no-untyped-def]
        original(self, *args, **kwargs)
        if not getattr(self, "_validate_args", False):
            return
        stack = traceback.extract_stack()
        frames = [(f.filename, f.lineno or 0, f.name, (f.line or "").strip()) for f in stack]
        fr = pick_frame(frames[:-1])
        loc = f"{rel(fr[0])}:{fr[1]}" if fr else None
        key = (type(self).__name__, loc or "")
        if key in seen:
            return
        seen.add(key)
        found.append(
            CaptureIssue(
                kind="distribution_validation",
                message=f"torch.distributions.{type(self).__name__} is built with validate_args on: its "
                "constructor branches on tensor values",
                location=loc,
                code=fr[3] if fr else "",
                op=type(self).__name__,
            )
        )

    # torch._dynamo turns validation off for the whole process the first time it runs (TorchPatcher.patch,
    # e.g. once a torch.cond was exported); the model runs on Neuron with PyTorch's own default (on, unless
    # Python runs with -O), so capture with that default, whatever ran before in this process
    default = Distribution._validate_args
    Distribution.set_default_validate_args(__debug__)
    Distribution.__init__ = init  # type: ignore[method-assign]
    try:
        yield
    finally:
        Distribution.__init__ = original  # type: ignore[method-assign]
        Distribution.set_default_validate_args(default)
