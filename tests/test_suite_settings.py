"""The suite's own settings (tests/conftest.py): hypothesis is derandomized in `make test` and CI."""

from __future__ import annotations

import os

from hypothesis import given, settings
from hypothesis import strategies as st

DRAWN: list[int] = []


def test_the_default_profile_is_derandomized() -> None:
    profile = os.environ.get("HYPOTHESIS_PROFILE", "ci")
    assert settings.default.derandomize is (profile == "ci")
    assert settings.default.deadline is None  # a busy machine never turns a slow example into a failure


@settings(max_examples=5)
@given(st.integers())
def _draw(x: int) -> None:
    DRAWN.append(x)


def test_two_runs_draw_the_same_examples() -> None:
    if os.environ.get("HYPOTHESIS_PROFILE", "ci") != "ci":
        return
    DRAWN.clear()
    _draw()
    first = list(DRAWN)
    DRAWN.clear()
    _draw()
    assert first and DRAWN == first
