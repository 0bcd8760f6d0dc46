"""Issue 39, item 4: every flip row is re-planned before it is printed: a row whose value, put in the workload
and planned again, does not give the verdict it names is not printed. The issue's spot row ("buying on spot
would flip it to 'move'", re-planned: "close call — stay" inside the error band) is the case kept here; and
every printed row names its lever (cost or objective)."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from tests.test_flips_both_ways import _edited
from tests.test_plan_stages import no_blockers, plan, serving  # noqa: F401 - no_blockers is a fixture


def _banded(rps: float, band_pct: float, term: str = "on-demand") -> dict[str, Any]:
    d = serving(
        figures={"inf2.xlarge": {"throughput": {"value": rps, "unit": "requests/s", "band_pct": band_pct}}},
        pricing={"term": term},
    )
    d["throughput"] = {"gpu_requests_per_s": 3.0, "candidates": {}}
    d["fleet"] = {**d["fleet"], "term": term}
    return d


CASES = [(0.9, 30.0), (1.2, 40.0), (0.7, 25.0), (1.8, 60.0), (1.0, 80.0), (1.4, 150.0)]


@pytest.mark.parametrize(("rps", "band"), CASES)
def test_every_printed_cost_row_holds_when_re_planned(no_blockers, rps: float, band: float) -> None:  # noqa: F811
    from chipswap.report.wording import flip_lines

    d = _banded(rps, band)
    r = plan(d)
    printed = [f for f in r.flips if f.value is not None and not f.knob.endswith(" objective")]
    for f in printed:
        again = plan(_edited(copy.deepcopy(d), f.knob, f.value))
        assert again.verdict.verdict == f.verdict, (f.text, again.verdict.verdict, again.verdict.why)
    assert all("(lever: cost" in line for line in flip_lines(r) if "would flip it" in line)


def test_the_spot_row_is_printed_only_when_spot_re_planned_flips(no_blockers) -> None:  # noqa: F811
    """The issue's case: at on-demand the saving is inside the close-call margin; on spot it is over it, but
    the error band still straddles the flip point, so the re-planned spot verdict is a close call: no spot
    row."""
    for rps, band in CASES:
        d = _banded(rps, band)
        r = plan(d)
        spot = [f for f in r.flips if f.knob == "price term" and f.value == "spot"]
        replanned = plan(_edited(copy.deepcopy(d), "price term", "spot")).verdict.verdict
        for f in spot:
            assert f.verdict == replanned, (f.text, replanned)
