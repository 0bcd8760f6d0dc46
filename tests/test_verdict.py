"""The verdict core: every branch of the decision table, each screening rule, and the close-call margin."""

from __future__ import annotations

from dataclasses import replace
from decimal import Decimal

import pytest

from chipswap.verdict.rules import (
    CLOSE,
    DECISION_TABLE,
    MOVE_INF,
    MOVE_TRN,
    SCREENING_RULES,
    STAY,
    Facts,
    Thresholds,
    decide,
    screen,
)

TH = Thresholds()


def clean(**kw: object) -> Facts:
    """A serving workload that passes every rule: 50% saving, payback month 1."""
    base = Facts(
        kind="serving",
        target_kind="inferentia",
        target="inf2.xlarge",
        research_churn=False,
        custom_cuda_kernels=False,
        model_changes_per_month=0.0,
        readiness_blockers=0,
        peak_to_mean=1.3,
        mean_rps=20.0,
        horizon_months=12,
        monthly_now_usd=Decimal("40000"),
        monthly_after_usd=Decimal("20000"),
        porting_usd=Decimal("16000"),
        payback_month=1,
    )
    return replace(base, **kw)  # type: ignore[arg-type]


def test_clean_serving_on_inferentia_moves_serving() -> None:
    v = decide(clean())
    assert v.verdict == MOVE_INF
    assert all(r.outcome == "pass" for r in v.reasons)


def test_training_on_trainium_moves_to_trainium() -> None:
    f = clean(
        kind="training", target_kind="trainium", target="trn1.32xlarge", peak_to_mean=None, mean_rps=None
    )
    v = decide(f)
    assert v.verdict == MOVE_TRN
    # traffic rules do not apply to a training job
    assert {r.rule for r in v.reasons}.isdisjoint({"steady-traffic", "traffic-volume"})


def test_serving_on_trainium_is_move_to_trainium() -> None:
    assert decide(clean(target_kind="trainium", target="trn1.32xlarge")).verdict == MOVE_TRN


# One failing value per screening rule (a table, like the rules themselves).
FAILING = {
    "research-churn": {"research_churn": True},
    "custom-cuda-kernels": {"custom_cuda_kernels": True},
    "stable-model": {"model_changes_per_month": 4.0},
    "standard-architecture": {"readiness_blockers": 2},
    "steady-traffic": {"peak_to_mean": 4.2},
    "traffic-volume": {"mean_rps": 0.2},
    "long-lived": {"horizon_months": 3},
    "bill-size": {"monthly_now_usd": Decimal("1500"), "monthly_after_usd": Decimal("700")},
}


def test_every_seed_rule_is_in_the_table() -> None:
    assert {r.id for r in SCREENING_RULES} == set(FAILING)


@pytest.mark.parametrize("rule", sorted(FAILING))
def test_each_failing_screening_rule_means_stay_on_gpu(rule: str) -> None:
    f = clean(**FAILING[rule])  # type: ignore[arg-type]
    v = decide(f)
    assert v.verdict == STAY
    failed = [r for r in v.reasons if r.outcome == "fail"]
    assert [r.rule for r in failed] == [rule]
    assert rule in v.why
    # the reason carries the input it was judged on
    spec = next(s for s in SCREENING_RULES if s.id == rule)
    assert failed[0].input_value == getattr(f, spec.fact)
    assert failed[0].favours == "gpu"


def test_reasons_carry_their_inputs() -> None:
    f = clean(mean_rps=37.5, peak_to_mean=1.7)
    by_id = {r.rule: r for r in decide(f).reasons}
    assert by_id["traffic-volume"].input_value == 37.5
    assert by_id["steady-traffic"].input_value == 1.7
    assert "37.5" in by_id["traffic-volume"].line()


def test_unknown_readiness_is_not_a_pass() -> None:
    v = decide(clean(readiness_blockers=None))
    assert v.verdict == CLOSE
    r = next(r for r in v.reasons if r.rule == "standard-architecture")
    assert r.outcome == "unknown" and r.favours is None


def test_costs_more_stays() -> None:
    f = clean(monthly_after_usd=Decimal("41000"), payback_month=None)
    v = decide(f)
    assert v.verdict == STAY
    ratio = f.monthly_after_usd / f.monthly_now_usd  # the words say the ratio, not "as much or more"
    assert f"costs {ratio.quantize(Decimal('0.01'))}x as much" in v.why and "or more" not in v.why
    for after, words in ((f.monthly_now_usd * 8, "costs 8.0x as much"), (f.monthly_now_usd, "costs as much")):
        assert words + " per month as" in decide(replace(f, monthly_after_usd=after, payback_month=None)).why


def test_never_pays_back_within_horizon_stays() -> None:
    v = decide(clean(payback_month=13))
    assert v.verdict == STAY
    assert "horizon" in v.why


def test_no_priced_candidate_stays() -> None:
    assert decide(clean(monthly_after_usd=None, payback_month=None)).verdict == STAY


def test_missing_slo_candidate_stays() -> None:
    assert decide(clean(meets_slo=False)).verdict == STAY


@pytest.mark.parametrize("margin", [Decimal("10"), Decimal("20"), Decimal("35")])
def test_close_call_margin_on_saving(margin: Decimal) -> None:
    th = Thresholds(close_margin_pct=margin)
    now = Decimal("40000")
    just_below = now * (1 - (margin - Decimal("0.1")) / 100)  # saving = margin - 0.1 %
    at_margin = now * (1 - margin / 100)  # saving = margin %
    assert decide(clean(monthly_after_usd=just_below), th).verdict == CLOSE
    assert decide(clean(monthly_after_usd=at_margin), th).verdict == MOVE_INF


def test_close_call_margin_on_payback() -> None:
    th = Thresholds(close_payback_months=6)
    assert decide(clean(payback_month=6), th).verdict == MOVE_INF
    v = decide(clean(payback_month=7), th)
    assert v.verdict == CLOSE
    assert "close" in v.why


def test_screening_failure_wins_over_a_big_saving() -> None:
    # "If you depend on hand-written CUDA kernels ... stay on GPU", however cheap Neuron looks.
    v = decide(clean(custom_cuda_kernels=True, monthly_after_usd=Decimal("1000")))
    assert v.verdict == STAY


def test_decision_table_ends_with_a_catch_all() -> None:
    name, test, _verdict, _why = DECISION_TABLE[-1]
    assert name == "clear-win"
    from chipswap.verdict.rules import _Assessment

    assert test(_Assessment(clean(), TH, screen(clean(), TH)))


def test_economics_reasons_report_saving_and_payback() -> None:
    v = decide(clean(monthly_after_usd=Decimal("30000"), payback_month=2))
    eco = {r.rule: r for r in v.economics}
    assert eco["monthly-saving"].input_value == Decimal(25)
    assert eco["payback"].input_value == 2


def test_unknown_slo_is_never_a_move() -> None:
    v = decide(clean(meets_slo=None, slo_p99_ms=2500.0), TH)
    assert v.verdict == CLOSE
    assert "SLO not evaluated for inf2.xlarge" in v.why
    slo = next(r for r in v.reasons if r.rule == "slo")
    assert slo.outcome == "unknown" and "not evaluated" in slo.line()
    # evaluated and met: the SLO is a pass, and the move stands
    ok = decide(clean(meets_slo=True, slo_p99_ms=2500.0), TH)
    assert ok.verdict == MOVE_INF
    assert next(r for r in ok.reasons if r.rule == "slo").outcome == "pass"


def test_failed_caution_is_a_close_call_not_a_stay() -> None:
    from chipswap.verdict.rules import Reason

    bad = Reason("overflow", "fail", "gpu", "77% of requests overflow", "overflow share (%)", 77.0, "<= 1%")
    v = decide(clean(cautions=(bad,)), TH)
    assert v.verdict == CLOSE and "77% of requests overflow" in v.why
    assert bad in v.reasons
    fine = replace(bad, outcome="pass", favours=None)
    assert decide(clean(cautions=(fine,)), TH).verdict == MOVE_INF


def test_assumed_throughput_is_named_in_the_headline() -> None:
    assert "(throughput assumed, not measured)" in decide(clean(throughput_assumed=True), TH).why
    assert "assumed" not in decide(clean(), TH).why


# ----------------------------------------------------------- issue 10: the error band and what is left


def test_flip_inside_the_band_is_a_close_call() -> None:
    """A move whose saving flips inside the projection's error band is not a clear win: the caller (the plan)
    works out where it flips and says so; the table turns it into 'close call — stay' with those words."""
    words = "a 1.12x slower inf2.xlarge throughput (projection band ±19%) would make it 'close call — stay'"
    v = decide(clean(band_flip=words), TH)
    assert v.verdict == CLOSE and v.why == words
    # the band is weighed only after everything else: a failing rule still says stay
    assert decide(clean(band_flip=words, research_churn=True), TH).verdict == STAY
    # without a flip inside the band the move stands, and says how its throughput was obtained
    ok = decide(clean(throughput_label="projected ± 19%"), TH)
    assert ok.verdict == MOVE_INF and "(throughput projected ± 19%)" in ok.why


def test_no_candidate_says_why() -> None:
    why = "no fleet size meets the SLO (TTFT p99 <= 5 ms) on any candidate: inf2.xlarge (unloaded 90 ms)"
    v = decide(clean(monthly_after_usd=None, payback_month=None, no_candidate_why=why), TH)
    assert v.verdict == STAY and v.why == why


def test_every_decision_row_is_reachable() -> None:
    """One Facts per row of the decision table, each giving that row's verdict (the rows are data)."""
    from chipswap.verdict.rules import Reason, Unmeasured

    fail = Reason("overflow", "fail", "gpu", "3% overflow", "overflow share (%)", 3.0, "<= 1%")
    cases = {
        "no-candidate-can-win": clean(cannot_win="even 2 x inf2.xlarge cost more"),
        "screening-fails": clean(research_churn=True),
        "measure-first": clean(
            monthly_after_usd=None, unmeasured=(Unmeasured("inf2.8xlarge", "coverage", "MoE", "flips at 3"),)
        ),
        "no-candidate": clean(monthly_after_usd=None, payback_month=None),
        "misses-slo": clean(meets_slo=False),
        "costs-more": clean(monthly_after_usd=Decimal("41000"), payback_month=None),
        "never-pays-back": clean(payback_month=13),
        "slo-not-evaluated": clean(meets_slo=None, slo_p99_ms=2500.0),
        "cautions": clean(cautions=(fail,)),
        "unknown-inputs": clean(readiness_blockers=None),
        "close-call": clean(monthly_after_usd=Decimal("39000")),
        "flip-inside-band": clean(band_flip="inside the band"),
        "clear-win": clean(),
    }
    assert set(cases) == {row[0] for row in DECISION_TABLE}
    from chipswap.verdict.rules import _Assessment

    for name, facts in cases.items():
        a = _Assessment(facts, TH, screen(facts, TH))
        first = next(row for row in DECISION_TABLE if row[1](a))
        assert first[0] == name, (name, first[0])
