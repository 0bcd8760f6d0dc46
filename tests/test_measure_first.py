"""Issue 39: the fourth answer, "measure first"; the decision first (a reason on every candidate line, the
right-sizing headline); the trial names exactly the candidate the verdict names."""

from __future__ import annotations

from dataclasses import replace
from decimal import Decimal
from types import SimpleNamespace

import pytest

from chipswap.verdict.rules import (
    CLOSE,
    MEASURE,
    MOVE_INF,
    STAY,
    VERDICTS,
    Unmeasured,
    decide,
    measure_lines,
)
from tests.test_verdict import clean

COVERAGE = Unmeasured(
    "inf2.24xlarge",
    "coverage",
    "outside what the calibration covers: MoE model",
    "the move flips at >= 25.9 requests/s per inf2.24xlarge within the SLO",
)
NO_PICK = {"target": None, "target_kind": None, "monthly_after_usd": None, "payback_month": None}


def test_measure_first_is_a_fourth_answer() -> None:
    assert MEASURE in VERDICTS and len(set(VERDICTS)) == 5


def test_a_candidate_that_could_win_without_a_figure_is_measure_first() -> None:
    v = decide(clean(**NO_PICK, unmeasured=(COVERAGE,)))
    assert v.verdict == MEASURE
    assert v.measure == COVERAGE
    assert "inf2.24xlarge" in v.why and "calibration" in v.why
    # without it the same facts are a plain "stay": nothing to sign off, nothing to measure
    assert decide(clean(**NO_PICK)).verdict == STAY


def test_a_fixable_readiness_blocker_is_a_flip_not_a_reason_to_stay() -> None:
    blocked = clean(
        **NO_PICK, readiness_blockers=1, unmeasured=(replace(COVERAGE, fix="port with NxDI MoE"),)
    )
    assert decide(replace(blocked, blockers_fixable=True)).verdict == MEASURE
    # a blocker without a known fix stays a screening failure
    v = decide(replace(blocked, blockers_fixable=False))
    assert v.verdict == STAY and "standard-architecture" in v.why


def test_a_hard_screening_failure_still_stays() -> None:
    v = decide(clean(**NO_PICK, custom_cuda_kernels=True, unmeasured=(COVERAGE,)))
    assert v.verdict == STAY and "custom-cuda-kernels" in v.why


def test_no_candidate_can_win_says_stay_with_why() -> None:
    v = decide(clean(**NO_PICK, unmeasured=(), cannot_win="even 2 x inf2.24xlarge cost 9,476.32 USD/month"))
    assert v.verdict == STAY and "no candidate can win at any throughput" in v.why


def test_a_figured_clear_move_is_not_held_back_by_an_unmeasured_other() -> None:
    assert decide(clean(unmeasured=(COVERAGE,))).verdict == MOVE_INF
    # ... but when the pick itself is the unmeasured one, its figure does not decide
    own = replace(COVERAGE, target="inf2.xlarge")
    assert decide(clean(unmeasured=(own,))).verdict == MEASURE


def test_a_close_call_with_a_candidate_to_measure_is_measure_first() -> None:
    band = Unmeasured("inf2.xlarge", "band", "projected ± 40%: across the band 5% to 45%", "flips at 3 rps")
    close = clean(band_flip="the move rests on projections")
    assert decide(close).verdict == CLOSE
    assert decide(replace(close, unmeasured=(band,))).verdict == MEASURE


def test_measure_lines_carry_why_fix_flip_cost_and_command() -> None:
    u = replace(
        COVERAGE, fix="port with the fix", trial="Trial: 1.2 h on 1 x inf2.24xlarge = $7.80", next="x"
    )
    rows = measure_lines(replace(u, next="chipswap trial w.toml --candidate inf2.24xlarge"))
    assert [r.split(":")[0] for r in rows] == ["why no figure", "first", "what flips it", "the trial", "next"]
    assert rows[-1].endswith("--candidate inf2.24xlarge")


def test_right_sizing_headline_and_candidate_reasons() -> None:
    from chipswap.report.wording import candidate_reason, right_sizing_line

    r = SimpleNamespace(
        kind="serving",
        gpu_fleet=SimpleNamespace(count=2, min_count_why=""),
        monthly_today=SimpleNamespace(value=Decimal("40179.20")),
        monthly_now=SimpleNamespace(value=Decimal("10044.80")),
        fleet_count=8,
        fleet_instance="p5.4xlarge",
        candidates=(
            SimpleNamespace(instance="inf2.24xlarge", excluded="outside what the calibration covers: MoE"),
            SimpleNamespace(instance="inf2.48xlarge", excluded=None),
        ),
    )
    line = right_sizing_line(r)
    assert line.startswith("right-size: 2 x p5.4xlarge instead of 8")
    assert "$30,134.40" in line and "75.0%" in line and "without a port" in line
    assert candidate_reason(r, "inf2.24xlarge") == " — outside what the calibration covers: MoE"
    assert candidate_reason(r, "inf2.48xlarge") == ""
    r.gpu_fleet.count = 8
    assert right_sizing_line(r) == ""


def _cand(name: str, config: object = None, to_measure: object = None) -> SimpleNamespace:
    fleet = SimpleNamespace(config=config, to_measure=to_measure)
    return SimpleNamespace(
        instance=name, kind="inferentia", excluded=None, count=None, meets_slo=None, fleet=fleet,
        rate=None, monthly_usd=None,
    )  # fmt: skip


def test_the_trial_is_for_exactly_the_candidate_the_verdict_names() -> None:
    from chipswap.errors import ChipswapError
    from chipswap.trial.spec import pick_candidate

    cands = (_cand("inf2.24xlarge", to_measure=object()), _cand("inf2.48xlarge", to_measure=object()))
    result = SimpleNamespace(
        candidates=cands,
        best=None,
        verdict=SimpleNamespace(measure=replace(COVERAGE, target="inf2.48xlarge")),
    )
    assert pick_candidate(result).instance == "inf2.48xlarge"
    assert pick_candidate(result, "inf2.24xlarge").instance == "inf2.24xlarge"
    with pytest.raises(ChipswapError, match="--candidate trn9.huge is not a Neuron candidate"):
        pick_candidate(result, "trn9.huge")


# ---- through the plan (stated figures: no projection, fast) ----------------------------------------------
from tests.test_plan import plan, readiness, serving  # noqa: E402,F401,I001  (the fixture and helpers)


MOE = {
    "rule": "CHIP_MOE_ROUTING",
    "severity": "blocker",
    "fix": "Route with static shapes: capacity-factor routing (fixed capacity), or NxD Inference's MoE "
    "modules. The op inventory covers the rest.",
}


@pytest.fixture
def blocked(monkeypatch: pytest.MonkeyPatch):
    """The readiness stage standing in with one blocker, with or without a known fix."""
    from chipswap.plan import ReadinessSummary
    from chipswap.plan import readiness as readiness_stage

    def use(fix: bool) -> None:
        finding = MOE if fix else {**MOE, "fix": ""}

        def fake(s: object, shapes: object) -> ReadinessSummary:
            target = readiness_stage.targets(s)[0]
            return ReadinessSummary(
                True, "test", target=target, blockers=1, support_pct=99.0, findings=(finding,)
            )

        monkeypatch.setattr(readiness_stage, "readiness", fake)

    return use


def test_plan_says_measure_first_for_a_candidate_behind_a_fixable_blocker(blocked) -> None:
    blocked(True)
    r = plan(serving())
    assert r.verdict.verdict == MEASURE
    m = r.verdict.measure
    assert m is not None and m.target == "inf2.xlarge" and m.cause == "readiness"
    assert "capacity-factor routing" in m.fix and "(fixed capacity)" not in m.fix  # the fix in a few words
    assert "requests/s per inf2.xlarge" in m.flip  # the figure that flips it
    assert r.to_json()["verdict"]["measure"]["target"] == "inf2.xlarge"
    assert r.flips == ()  # the measurement flips it; no knob searched
    blocked(False)  # no known fix: a reason to stay, as before
    r = plan(serving())
    assert r.verdict.verdict == STAY and "standard-architecture" in r.verdict.why


def test_plan_stays_when_a_candidate_cannot_win_at_any_throughput(blocked) -> None:
    blocked(True)
    # two trn1.32xlarge (the redundancy floor) cost more than the ten g6e.xlarge: no throughput saves 20%
    r = plan(
        serving(
            targets={"candidates": ["trn1.32xlarge"]},
            throughput={"candidates": {"trn1.32xlarge": {"requests_per_s": 50.0}}},
        )
    )
    assert r.verdict.verdict == STAY and r.verdict.measure is None


def test_n_plus_one_is_redundancy_not_an_slo_miss(readiness) -> None:  # noqa: F811
    readiness(0)
    r = plan(serving(traffic={"steady_rps": 0.05}, fleet={"instance": "g6e.xlarge", "count": 1}))
    notes = " ".join(r.notes)
    assert "meets the SLO with 1; N+1 asks for 2" in notes
    assert "USD/month with 1" in notes and "with 2" in notes  # priced both ways
    assert "misses the SLO" not in notes and "too small for the busiest window" not in notes
    # the bill-size rule reads today's own bill, not the N+1 fleet ("now" not doubled)
    bill = next(x for x in r.verdict.reasons if x.rule == "bill-size")
    assert bill.input_value == r.monthly_today.value


def test_compile_estimate_follows_the_model_size() -> None:
    """A 20B model (about 40 GiB in bf16) is not costed at the "70B+ models" figure any more."""
    from chipswap.trial.costing import compile_estimate

    def minutes(gib: float) -> tuple[float, str]:
        return compile_estimate(SimpleNamespace(mode="llm", weights_gib=gib))  # type: ignore[arg-type]

    small, mid, big = minutes(14.0), minutes(40.0), minutes(140.0)
    assert small[0] == 15.0 and big[0] == 60.0 and "70B+" in big[1]
    assert 15.0 < mid[0] < 60.0 and "interpolated by weight size" in mid[1]
    assert minutes(60.0)[0] > mid[0]  # more weights, more compile time


def test_the_fix_is_said_in_a_few_words() -> None:
    from chipswap.plan.measure import _first_clause

    fix = str(MOE["fix"]) + " (a (nested) aside)"
    assert (
        _first_clause(fix)
        == "Route with static shapes: capacity-factor routing, or NxD Inference's MoE modules"
    )


def test_no_priced_candidate_leaves_no_saving_never_not_checked() -> None:
    """Report loose ends: with nothing priced, no "saving ... = never; not checked" reason and no yellow
    "Not checked: saving per month" box (the verdict's own reason says why nothing is priced)."""
    from chipswap.report.wording import caveat_lines

    v = decide(clean(**NO_PICK, unmeasured=(COVERAGE,)))
    assert v.economics == ()
    assert not any("never" in r.line() for r in v.reasons)
    assert caveat_lines(SimpleNamespace(verdict=v, best=None)) == []
    priced = decide(clean(monthly_after_usd=Decimal("39000")))  # a close call keeps its economics rows
    assert {r.rule for r in priced.economics} == {"monthly-saving", "payback"}


def test_the_readme_says_each_instance_s_share_not_its_capacity() -> None:
    import inspect

    from chipswap.trial import readme

    src = inspect.getsource(readme)
    assert "its share of the traffic, not its capacity" in src and 'requests/s per instance."' not in src


def test_an_unknown_bar_says_why() -> None:
    """The cost charts named "not priced, or no fleet size meets the SLO" whatever the cause; now the row's
    own reason (outside the calibration, MoE)."""
    from chipswap.report.plots import bars_svg

    svg = bars_svg(
        "Monthly cost",
        [("GPU", 100.0, "#000"), ("inf2.24xlarge", None, "#888")],
        "",
        "monthly",
        why=[None, "outside what the calibration covers: MoE model"],
    )
    assert "outside what the calibration covers" in svg and "no fleet size meets the SLO" not in svg
