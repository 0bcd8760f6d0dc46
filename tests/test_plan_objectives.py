"""Objectives as users state them: TTFT, TPOT and end-to-end at p50/p90/p99 and goodput, in the workload and
in the sizing; the unreachable-objective message names what blocks and a value that, set, is reachable (the
test follows the hint and re-plans). Small steady workloads on Llama 3 8B (projection in closed form)."""

from __future__ import annotations

import re
from typing import Any

import pytest

from chipswap.errors import ChipswapError
from chipswap.plan.workload_file import parse_workload
from tests.test_plan_simulation import llama, no_export, plan  # noqa: F401 - the fixture is used by name

pytest.importorskip("chipswap.simulation.simulate")

HINT = re.compile(r"reachable when set: (.*?) \((\d+) x (\S+) meet every objective then\)")


def _follow(d: dict[str, Any], why: str) -> tuple[dict[str, Any], str]:
    """The workload with every value the hint prints set, and the instance it names."""
    m = HINT.search(why)
    assert m, why
    slo = dict(d["slo"])
    for key, value in re.findall(r"slo\.(\w+) = ([\d.e+]+)", m.group(1)):
        slo[key] = float(value)
    return {**d, "slo": slo}, m.group(3)


@pytest.mark.parametrize(
    "slo",
    [
        {"ttft_p99_ms": 20, "p99_ms": 300},  # both below what a request alone gets
        {"ttft_p99_ms": 5000, "e2e_p99_ms": 500, "tpot_p99_ms": 5},  # end-to-end and TPOT block, TTFT not
    ],
)
def test_the_unreachable_hint_names_the_objective_and_is_reachable_when_followed(slo: dict[str, Any]) -> None:
    d = llama(3.0, slo=slo, targets={"candidates": ["inf2.xlarge", "trn1.32xlarge"]})
    r = plan(d)
    why = r.verdict.why
    assert r.best is None and "no fleet size meets the SLO" in why
    blockers = re.findall(r"(TTFT|TPOT|end-to-end) p99 alone is", why)
    assert blockers, why  # the message names the objective that blocks
    followed, instance = _follow(d, why)
    # only the objectives that block move; the ones that hold stay as stated
    moved = {k for k in followed["slo"] if followed["slo"][k] != slo.get(k)}
    named = {"TTFT": "ttft_p99_ms", "TPOT": "tpot_p99_ms", "end-to-end": ("p99_ms", "e2e_p99_ms")}
    for b in set(blockers):
        keys = named[b] if isinstance(named[b], tuple) else (named[b],)
        assert any(k in moved for k in keys if k in slo), (b, moved)
    again = plan(followed)
    fleet = next(c.fleet for c in again.candidates if c.instance == instance)
    assert fleet.meets_slo is True and fleet.count is not None, again.verdict.why
    assert "reachable when set" not in again.verdict.why


def test_tpot_objective_is_honoured_by_the_sizing() -> None:
    loose = plan(llama(6.0, slo={"ttft_p99_ms": 3000}))
    base = loose.candidates[0].fleet
    tpot = base.objectives.get("tpot_p99")
    assert tpot is None  # not an objective: not sized on
    tight_slo = {"ttft_p99_ms": 3000, "tpot_p99_ms": 40.0}
    tight = plan(llama(6.0, slo=tight_slo)).candidates[0].fleet
    if tight.count is not None:
        assert tight.objectives["tpot_p99"] <= 40.0 and tight.objectives["ttft_p99"] <= 3000
        assert tight.count >= (base.count or 0)
    else:
        assert any("TPOT p99" in b for b in tight.slo_blocking)


def test_goodput_is_reported_and_a_goodput_objective_sizes() -> None:
    r = plan(llama(6.0, slo={"ttft_p99_ms": 1500, "p99_ms": 8000}))
    f = r.gpu_fleet
    assert f.goodput_pct is not None and 0 < f.goodput_pct <= 100
    strict = plan(llama(6.0, slo={"ttft_p99_ms": 1500, "p99_ms": 8000, "goodput_pct": 99.9})).gpu_fleet
    assert strict.count is not None and strict.count >= f.count and strict.goodput_pct >= 99.9


def test_workload_objectives_any_subset_and_old_spellings() -> None:
    wl = parse_workload(llama(slo={"p99_ms": 8000, "ttft_p90_ms": 900, "tpot_p50_ms": 30}), "w.toml")
    assert wl.slo.objectives() == {"ttft_p90": 900.0, "tpot_p50": 30.0, "e2e_p99": 8000.0}
    assert wl.slo.with_objective("e2e_p99", 9000).objectives()["e2e_p99"] == 9000.0
    for bad, words in (
        ({"p99_ms": 8000, "e2e_p99_ms": 9000}, "not both"),
        ({"ttft_p50_ms": 900, "ttft_p99_ms": 800}, "ttft_p50_ms <= ttft_p99_ms"),
        ({"goodput_pct": 99}, "goodput_pct with at least one"),
    ):
        with pytest.raises(ChipswapError, match=words):
            parse_workload(llama(slo=bad), "w.toml")


def test_each_objective_is_a_sensitivity_rechecked_by_replanning() -> None:
    """TTFT below what inf2.xlarge gets alone: stay; relaxing it flips toward a move, and the plan run again
    at the printed value gives that verdict."""
    d = llama(3.0, slo={"ttft_p99_ms": 200, "p99_ms": 8000}, fleet={"instance": "g6e.12xlarge", "count": 2})
    r = plan(d)
    rows = [f for f in r.flips if f.knob.endswith(" objective")]
    assert {f.knob for f in rows} == {"TTFT p99 objective", "end-to-end p99 objective"}  # every objective
    flip = next(f for f in rows if f.knob == "TTFT p99 objective")
    assert flip.value is not None and flip.value > 200, flip.text
    assert f"relaxing TTFT p99 to {flip.value:,.0f} ms would flip it to '{flip.verdict}'" in flip.text
    again = plan({**d, "slo": {**d["slo"], "ttft_p99_ms": flip.value}})
    assert again.verdict.verdict == flip.verdict != r.verdict.verdict


def test_slo_flags_set_objectives_over_the_workload() -> None:
    from chipswap.cli.plan import with_slo_flags

    wl = parse_workload(llama(slo={"p99_ms": 8000, "ttft_p99_ms": 1500}), "w.toml")
    got = with_slo_flags(wl, ["tpot_p99=80", "e2e_p99_ms=9000", "goodput_pct=99"]).slo
    assert got.objectives() == {"ttft_p99": 1500.0, "tpot_p99": 80.0, "e2e_p99": 9000.0}
    assert got.goodput_pct == 99 and got.p99_ms is None  # the old spelling gives way to the flag's
    for bad, words in (
        ("ttft_p98=3", "did you mean ttft_p99"),
        ("tpot_p99=x", "expected a number"),
        ("ttft_p99=nan", "finite number"),
        ("ttft_p99=inf", "finite number"),
        ("ttft_p99=true", "expected a number"),
        ("ttft_p99=1e308", "less than or equal"),
        ("ttft_p99=-1", "greater than 0"),
        ("goodput_pct=150", "less than or equal to 100"),
        ("ttft_p99=", "expected a number"),
    ):
        with pytest.raises(ChipswapError, match=words):
            with_slo_flags(wl, [bad])


def test_redundancy_floor_and_the_replanned_curve() -> None:
    """targets.min_replicas: two instances by default where one carries the traffic, said in the notes; one
    when asked, said too. The fleet-size curve is re-planned at each traffic point (monotone, its 1x point the
    count, its band at 1x the count range) and the linear curve is kept beside it."""
    one = plan(llama(1.0, targets={"candidates": ["inf2.xlarge"], "min_replicas": 1}))
    two = plan(llama(1.0, targets={"candidates": ["inf2.xlarge"]}))
    assert one.gpu_fleet.count == 1 and two.gpu_fleet.count == 2
    assert any("2 for redundancy (targets.min_replicas = 2" in n for n in two.notes)
    assert any("no redundancy (targets.min_replicas = 1)" in n for n in one.notes)
    assert two.monthly_now.value == 2 * one.monthly_now.value  # the cost follows the count
    f = two.gpu_fleet
    factors = [g for g, _ in f.curve]
    counts = [n for _, n in f.curve]
    assert factors == [0.5, 1.0, 2.0, 4.0] and dict(f.curve)[1.0] == f.count
    assert all(a <= b for a, b in zip(counts, counts[1:], strict=False)) and min(counts) >= 2
    assert {g for g, _ in f.curve_linear} >= set(factors)
    at1 = next((lo, hi) for g, lo, hi in f.curve_band if g == 1.0)
    assert at1 == f.count_range


def test_goodput_is_a_sensitivity_row_too() -> None:
    """A stay verdict (TTFT below what inf2 gets alone) so the objective sweeps run: a 'measure first' verdict
    skips them, its flip being the measurement (issue 39)."""
    d = llama(3.0, slo={"ttft_p99_ms": 200, "p99_ms": 8000, "goodput_pct": 99.0},
              fleet={"instance": "g6e.12xlarge", "count": 2})
    r = plan(d)
    assert r.verdict.verdict == "stay on GPU"
    rows = {f.knob: f for f in r.flips if f.knob.endswith(" objective")}
    assert set(rows) == {"TTFT p99 objective", "end-to-end p99 objective", "goodput objective"}
    g = rows["goodput objective"]
    if g.value is not None:  # a flip is re-checked by planning again at the printed value
        again = plan({**d, "slo": {**d["slo"], "goodput_pct": g.value}})
        assert again.verdict.verdict == g.verdict
    else:
        assert "no goodput objective from 80 to 99.9 %" in g.text
