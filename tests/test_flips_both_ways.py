"""What would flip it, both ways: every verdict gets the smallest change toward each verdict it can flip to
(toward move, toward stay), and each printed value is re-checked by re-running the WHOLE plan with the
workload edited to that value. The LLM traffic rule counts tokens/s and says so."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from chipswap.verdict.rules import CLOSE, MOVES, STAY, Facts, Thresholds, screen
from tests.test_plan_stages import no_blockers, plan, serving  # noqa: F401 - no_blockers is a fixture


def _edited(d: dict[str, Any], knob: str, value: Any) -> dict[str, Any]:
    """The workload with one input set to the printed flip value."""
    e = copy.deepcopy(d)
    if knob == "engineer-days":
        e["porting"]["engineer_days"] = value
    elif knob == "throughput ratio":
        for c in e["throughput"]["candidates"].values():
            c["requests_per_s"] = c["requests_per_s"] * value
    elif knob == "GPU throughput ratio":
        e["throughput"]["gpu_requests_per_s"] = e["throughput"]["gpu_requests_per_s"] * value
    elif knob == "traffic":
        e["traffic"]["steady_rps"] = e["traffic"]["steady_rps"] * value
    elif knob == "utilization":
        e["throughput"]["target_utilization"] = value
    elif knob == "price term":
        e["pricing"] = {"term": value}
        e["fleet"]["term"] = value
    elif knob == "goodput objective":
        e["slo"]["goodput_pct"] = value
    elif knob.endswith(" objective"):  # "TTFT p99 objective" -> slo.ttft_p99_ms (the first spellings dropped)
        metric, pct = knob.removesuffix(" objective").split(" p")
        key = {"TTFT": "ttft", "TPOT": "tpot", "end-to-end": "e2e"}[metric] + f"_p{pct}"
        if key in ("e2e_p99", "e2e_p50"):
            e["slo"].pop(key.replace("e2e_", ""), None)
        e["slo"][f"{key}_ms"] = value
    else:  # pragma: no cover - a new knob needs its edit here
        raise AssertionError(knob)
    return e


def _hit(direction: str, verdict: str) -> bool:
    return verdict in MOVES if direction == "toward move" else verdict not in MOVES


def _at(rps: float) -> dict[str, Any]:
    return serving(
        throughput={"gpu_requests_per_s": 3.0, "candidates": {"inf2.xlarge": {"requests_per_s": rps}}}
    )


CASES = {"move": serving(), "close": _at(1.4), "stay": _at(1.0)}


@pytest.mark.parametrize("case", sorted(CASES))
def test_every_printed_flip_flips_a_rerun_of_the_plan(case: str) -> None:
    d = CASES[case]
    r = plan(d)
    base = r.verdict.verdict
    want = {"move": MOVES, "close": {CLOSE}, "stay": {STAY}}[case]
    assert base in want, (case, base, r.verdict.why)
    dirs = {f.direction for f in r.flips}
    # a move can only flip toward stay, a stay only toward move, a close call both ways
    expected = {"move": {"toward stay"}, "stay": {"toward move"}, "close": {"toward move", "toward stay"}}[
        case
    ]
    assert dirs == expected, dirs
    printed = [f for f in r.flips if f.value is not None]
    assert {f.direction for f in printed} == expected, [f.text for f in r.flips]
    for f in printed:
        again = plan(_edited(d, f.knob, f.value)).verdict.verdict
        assert again == f.verdict and _hit(f.direction, again), (f.text, again)
        assert f"would flip it to '{again}'" in f.text


def test_llm_traffic_volume_is_counted_in_tokens() -> None:
    """0.58 requests/s of ~1,000-token prompts is not low volume: the rule reads tokens/s for LLM traffic."""
    facts = Facts(
        kind="serving", target_kind=None, target=None, research_churn=False, custom_cuda_kernels=False,
        model_changes_per_month=0, readiness_blockers=0, peak_to_mean=1.0, mean_rps=0.58, horizon_months=12,
        monthly_now_usd=0, monthly_after_usd=None, porting_usd=0, payback_month=None,
    )  # fmt: skip
    by_rps = {r.rule: r for r in screen(facts, Thresholds())}["traffic-volume"]
    assert by_rps.outcome == "fail" and "requests/s" in by_rps.input_label
    llm = {r.rule: r for r in screen(Facts(**{**facts.__dict__, "tokens_per_request": 1250.0}), Thresholds())}
    tok = llm["traffic-volume"]
    assert tok.outcome == "pass" and "tokens" in tok.text and tok.input_value == pytest.approx(725.0)
    assert sum(r.rule == "traffic-volume" for r in llm.values()) == 1
    slow = Facts(**{**facts.__dict__, "mean_rps": 0.1, "tokens_per_request": 1250.0})
    low = {r.rule: r for r in screen(slow, Thresholds())}["traffic-volume"]
    assert low.outcome == "fail" and "counted in tokens" in low.text
