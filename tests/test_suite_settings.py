"""The suite's own settings (tests/conftest.py): hypothesis is derandomized in `make test` and CI; no test
skips on a time budget (a skip for time fails the run); `make test` / `make test-slow` split the suite and CI
runs both side by side."""

from __future__ import annotations

import os
import re
from pathlib import Path

import pytest
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


# ------------------------------------------------------------------------------ no skip on a time budget
REPO = Path(__file__).resolve().parents[1]
_CLOCK_SKIP = re.compile(
    r"(monotonic|perf_counter|time\.time|TALLY\.seconds|_S\b)[^\n]*\n?[^\n]*pytest\.skip"
)


def test_no_test_skips_on_a_clock() -> None:
    """No test file reads a clock and then skips (the fuzz suite's old 240 s budget): a loaded machine must
    take longer, never test less (issue 38). A skip's reason may name a missing tool, never time."""
    offenders = []
    for f in sorted((REPO / "tests").rglob("*.py")):
        text = f.read_text()
        if f.name == "test_suite_settings.py":
            continue
        if _CLOCK_SKIP.search(text) or re.search(r"skip\([^)]*(budget|too slow|time)", text):
            offenders.append(str(f.relative_to(REPO)))
    assert offenders == []


def test_a_skip_for_time_fails_the_run(pytester: pytest.Pytester) -> None:
    """The suite's guard (tests/conftest.py): a test that skips for time turns the run red and is named."""
    pytester.makeconftest((REPO / "tests" / "conftest.py").read_text())
    pytester.makepyfile(
        test_x="import pytest\n\ndef test_t():\n    pytest.skip('fuzz time budget used up')\n\n"
        "def test_ok():\n    pytest.skip('no C compiler')\n"
    )
    r = pytester.runpytest("-p", "no:cacheprovider")
    assert r.ret == pytest.ExitCode.TESTS_FAILED
    r.stdout.fnmatch_lines(["*0 passed, 0 failed, 2 skipped*1 skipped for time (must be 0)*",
                            "*FAIL: test_x.py::test_t skipped for time*"])  # fmt: skip
    ok = pytester.makepyfile(test_x="import pytest\n\ndef test_ok():\n    pytest.skip('no C compiler')\n")
    assert ok.exists()
    assert pytester.runpytest("-p", "no:cacheprovider").ret == pytest.ExitCode.OK


def test_fuzz_counts_are_fixed_and_scaled() -> None:
    """Every fuzz kind runs max(1, examples x CHIPSWAP_FUZZ_SCALE) inputs: a count, not a clock."""
    from tests.fuzz import test_fuzz_inputs as F

    @F._settings("plans", "x", 5)
    def f() -> None:
        return None

    assert f._hypothesis_internal_use_settings.max_examples == max(1, int(5 * F.SCALE))
    assert not hasattr(F, "TOTAL_S") and not hasattr(F, "_within_budget")


def test_make_targets_split_the_suite_and_ci_runs_both() -> None:
    make = (REPO / "Makefile").read_text()
    ci = (REPO / ".ci" / "run").read_text()
    assert '-m "not slow"' in make.split("\ntest:", 1)[1].split("\n\n", 1)[0]
    assert "-m slow" in make.split("\ntest-slow:", 1)[1].split("\n\n", 1)[0]
    assert "make test-slow" in ci and "\nmake test\n" in ci  # side by side: the slow suite in the background
    assert ci.index("make test-slow") < ci.index("\nmake test\n") < ci.index('wait "$slow"')
