"""The error family users see. Every message names the bad value and how to fix it.

The CLI turns ChipswapError into one line on stderr and exit code 2. No other module prints errors.
"""

from __future__ import annotations

import difflib
from collections.abc import Iterable


class ChipswapError(Exception):
    """A problem with the user's input or environment; the message is shown as-is (one line)."""

    exit_code = 2

    def __init__(self, message: str) -> None:
        super().__init__(" ".join(message.split()))  # always one line
        self.message = " ".join(message.split())

    def __str__(self) -> str:
        return self.message


def closest(name: str, choices: Iterable[str], n: int = 5) -> list[str]:
    """Closest names to `name`, for 'did you mean' hints."""
    choices = list(choices)
    found = difflib.get_close_matches(name, choices, n=n, cutoff=0.5)
    if not found:
        found = [c for c in choices if name.lower() in c.lower() or c.lower() in name.lower()][:n]
    return found
