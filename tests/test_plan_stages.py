"""The plan's stages on small workloads (no model, so no export and no projection): the one precedence rule,
measured overrides, unit conversion, the error band's close call, like-for-like sensitivities, training hours
from a job size. Fast: every test here runs the whole chain in well under a second after imports."""

from __future__ import annotations

import math
from dataclasses import replace
from decimal import Decimal
from typing import Any

import pytest

from chipswap.economics import cost
from chipswap.economics.catalog_io import load_catalog
from chipswap.errors import ChipswapError
from chipswap.plan import run_plan
from chipswap.plan.economics import Scenario, economics
from chipswap.plan.figures import Figure, pick, source_kind
from chipswap.plan.sizing import CurveSizer, RateSizer
from chipswap.plan.workload_file import parse_workload
from chipswap.verdict.rules import CLOSE, MEASURE, MOVE_INF, MOVE_TRN, STAY

CAT = load_catalog()


@pytest.fixture(autouse=True)
def no_blockers(monkeypatch: pytest.MonkeyPatch) -> None:
    """These workloads name no model; stand in a clean readiness check (its own tests cover it)."""
    from chipswap.plan import readiness as stage
    from chipswap.plan.result import ReadinessSummary

    def fake(s: Any, shapes: Any) -> ReadinessSummary:
        return ReadinessSummary(True, "test", target=stage.targets(s)[0], blockers=0, support_pct=100.0)

    monkeypatch.setattr(stage, "readiness", fake)


def rate(name: str, term: str = "on-demand") -> Decimal:
    return Decimal(CAT.rate(name, "us-east-1", term).usd_per_hour)


def serving(**over: Any) -> dict[str, Any]:
    """Steady 20 req/s; 10 x g6e.xlarge at 3 req/s (sized to the traffic at 70%); inf2.xlarge at 1.8 req/s."""
    d: dict[str, Any] = {
        "title": "small serving",
        "traffic": {"steady_rps": 20.0, "prompt_tokens": 512, "output_tokens": 32},
        "fleet": {"instance": "g6e.xlarge", "count": 10},
        "targets": {"candidates": ["inf2.xlarge"]},
        "porting": {"engineer_days": 10},
        "throughput": {"gpu_requests_per_s": 3.0, "candidates": {"inf2.xlarge": {"requests_per_s": 1.8}}},
    }
    d.update(over)
    return d


def plan(d: dict[str, Any], **kw: Any) -> Any:
    return run_plan(parse_workload(d, "w.toml"), "w.toml", **kw)


# ------------------------------------------------------------------------------------ the precedence rule


def test_pick_ranks_measured_over_projected_over_published_over_stated_over_assumption() -> None:
    figs = [
        Figure(1.0, "x", "assumption"),
        Figure(2.0, "x", "seed example"),
        Figure(3.0, "x", "published benchmark"),
        Figure(4.0, "x", "projected", band=0.2),
        Figure(5.0, "x", "measured"),
    ]
    for k in range(len(figs)):
        chosen = pick(figs[: k + 1][::-1])
        assert chosen.figure is figs[k]
        assert set(chosen.overridden) == set(figs[:k])
    assert pick([None, None]).figure is None
    # ties keep the first given; "seed example" is a stated figure, a catalog price a published one
    a, b = Figure(1.0, "x", "stated"), Figure(2.0, "x", "seed example")
    assert pick([a, b]).figure is a
    assert source_kind("catalog: aws (2025-06)") == "published" and source_kind("computed") == "derived"


def test_measured_figure_overrides_a_stated_one_and_the_loser_is_listed() -> None:
    d = serving(
        figures={"inf2.xlarge": {"throughput": {"value": 2.4, "unit": "requests/s", "source": "measured"}}}
    )
    r = plan(d)
    inf2 = r.candidates[0]
    assert inf2.throughput.value == 2.4 and inf2.throughput.source == "measured"
    assert inf2.fleet.overridden[0].value == 1.8 and inf2.fleet.overridden[0].source == "stated"
    assert inf2.count == math.ceil(20.0 / (2.4 * 0.7))


def test_figure_units_are_converted() -> None:
    d = serving(
        figures={"inf2.xlarge": {"throughput": {"value": 120, "unit": "requests/min", "source": "measured"}}}
    )
    r = plan(d)
    assert r.candidates[0].throughput.value == pytest.approx(2.0)
    assert "120 requests/min" in r.candidates[0].throughput.note


@pytest.mark.parametrize(
    ("figure", "key"),
    [
        ({"unit": "requests/s", "source": "measured"}, 'figures."inf2.xlarge".throughput.value'),
        ({"value": 2.0, "source": "measured"}, 'figures."inf2.xlarge".throughput.unit'),
        ({"value": 2.0, "unit": "qps", "source": "measured"}, 'figures."inf2.xlarge".throughput.unit'),
    ],
)
def test_measured_figure_without_value_or_unit_names_the_key(figure: dict[str, Any], key: str) -> None:
    with pytest.raises(ChipswapError) as e:
        parse_workload(serving(figures={"inf2.xlarge": {"throughput": figure}}), "w.toml")
    assert str(e.value).startswith(f"w.toml: {key}: expected")


def test_assumed_speed_factor_is_labelled_and_loses_to_a_stated_figure() -> None:
    d = serving()
    d["throughput"]["candidates"]["inf2.xlarge"] = {"speed_factor": 0.6}
    r = plan(d)
    assert r.candidates[0].throughput.source == "assumption"
    assert r.candidates[0].throughput.value == pytest.approx(1.8)
    assert "(throughput assumed, not measured)" in r.verdict.why or r.verdict.verdict != MOVE_INF
    d["figures"] = {"inf2.xlarge": {"throughput": {"value": 1.8, "unit": "requests/s"}}}
    assert plan(d).candidates[0].throughput.source == "stated"


# ------------------------------------------------------------------------------------------- the band


def _banded(band_pct: float) -> dict[str, Any]:
    d = serving(
        figures={"inf2.xlarge": {"throughput": {"value": 1.8, "unit": "requests/s", "band_pct": band_pct}}}
    )
    return d


def test_flip_inside_the_band_is_a_close_call_naming_the_figure_and_band() -> None:
    clear = plan(serving())
    assert clear.verdict.verdict == MOVE_INF
    flip = next(f for f in clear.flips if f.knob == "throughput ratio")
    slower = 1 / float(flip.edge)  # the move flips at this many times slower
    inside = plan(_banded((slower - 1) * 100 + 5))  # a band wider than the flip point
    # issue 39: the candidate's own band straddles the flip point, and a trial costs less than the stake: the
    # answer is to measure it, naming the figure and its band
    assert inside.verdict.verdict == MEASURE and "inf2.xlarge" in inside.verdict.why
    m = inside.verdict.measure
    assert m.cause == "band" and "inf2.xlarge throughput" in m.why and "across the band" in m.why
    assert f"± {(slower - 1) * 100 + 5:.0f}%" in m.why
    lo, hi = inside.best.saving_pct_range
    assert lo is not None and hi is not None and lo < inside.best.saving_pct < hi
    outside = plan(_banded((slower - 1) * 100 - 5))  # the band stops short of the flip: still a move
    assert outside.verdict.verdict == MOVE_INF
    assert outside.best.saving_pct_range[0] < outside.best.saving_pct < outside.best.saving_pct_range[1]


def test_gpu_band_counts_too() -> None:
    """A faster GPU is as much a threat to the move as a slower Neuron: its band is part of the check."""
    d = serving(figures={"g6e.xlarge": {"throughput": {"value": 3.0, "unit": "requests/s", "band_pct": 80}}})
    r = plan(d)
    assert r.verdict.verdict == CLOSE and "g6e.xlarge throughput (band ±80%)" in r.verdict.why


# ------------------------------------------------------------------------------------- like for like


def scenario(**kw: Any) -> Scenario:
    """10 x g6e.xlarge today against inf2.xlarge, both on demand, $8,000 of porting."""
    base = Scenario(
        kind="serving",
        monthly_today=cost.monthly_cost(rate("g6e.xlarge"), 10, 730),
        fleet_count=10,
        hours_per_month=Decimal(730),
        gpu_rate=rate("g6e.xlarge"),
        cand_rate=rate("inf2.xlarge"),
        porting_usd=Decimal(8000),
        horizon_months=12,
    )
    return replace(base, **kw)


def test_traffic_resizes_both_fleets() -> None:
    scn = scenario(gpu_sizer=RateSizer(20.0, 3.0, 0.7), cand_sizer=RateSizer(20.0, 1.8, 0.7))
    for f in (0.5, 1.0, 2.0, 5.0):
        m = economics(replace(scn, traffic_factor=f))
        assert m.gpu_count == math.ceil(20 * f / 2.1 - 1e-9)
        assert m.count == math.ceil(20 * f / 1.26 - 1e-9)
        assert m.monthly_now == cost.monthly_cost(rate("g6e.xlarge"), m.gpu_count, 730)


def test_old_traffic_flip_held_the_gpu_fleet_still() -> None:
    """The QA case: '1.57x today's traffic would flip it' grew only the Neuron fleet. Re-sizing both, the
    saving barely moves with traffic, so the flip (if any) is far away and a rerun agrees."""
    r = plan(serving())
    t = next(f for f in r.flips if f.knob == "traffic")
    if t.value is not None:
        assert (
            plan(serving(traffic={"steady_rps": 20.0 * float(t.value), "prompt_tokens": 512})).verdict.verdict
            == t.verdict
        )
    # at twice the traffic both fleets double and the verdict holds
    r2 = plan(serving(traffic={"steady_rps": 40.0, "prompt_tokens": 512}))
    assert r2.gpu_fleet.count == math.ceil(40 / 2.1) and r2.best.count == math.ceil(40 / 1.26)
    assert r2.verdict.verdict == r.verdict.verdict


def test_price_term_flip_compares_like_terms_on_both_sides() -> None:
    from chipswap.plan import setup as setup_stage
    from chipswap.plan import verdict as verdict_stage
    from chipswap.plan.sensitivity import at_term

    wl = parse_workload(serving(), "w.toml")
    s = setup_stage.setup(wl, "w.toml")
    scn = scenario()
    spot = at_term(s, scn, "inf2.xlarge", "spot")
    assert spot is not None
    assert spot.cand_rate == rate("inf2.xlarge", "spot") and spot.gpu_rate == rate("g6e.xlarge", "spot")
    # a term one side has no price for is not evaluated
    unpriced = [t for t in ("1yr", "3yr") if verdict_stage.rate(CAT, "inf2.xlarge", "us-east-1", t) is None]
    for t in unpriced:
        assert at_term(s, scn, "inf2.xlarge", t) is None


def test_spot_on_one_side_only_is_not_offered_as_a_flip() -> None:
    """Old code: 'buying on spot would flip it' priced Neuron on spot against GPU on demand."""
    r = plan(
        serving(
            throughput={"gpu_requests_per_s": 3.0, "candidates": {"inf2.xlarge": {"requests_per_s": 1.05}}}
        )
    )
    term = next(f for f in r.flips if f.knob == "price term")
    # with both sides on spot the ratio of prices decides, not a one-sided discount
    gpu_ratio = rate("g6e.xlarge", "spot") / rate("g6e.xlarge")
    inf_ratio = rate("inf2.xlarge", "spot") / rate("inf2.xlarge")
    if term.value == "spot":
        assert inf_ratio < gpu_ratio
    else:
        assert "spot" not in term.text or "no published price" in term.text


# --------------------------------------------------------------------------------------------- training


def training(**job: Any) -> dict[str, Any]:
    return {
        "title": "small training",
        "kind": "training",
        "fleet": {"instance": "p5.48xlarge", "count": 2},
        "targets": {"candidates": ["trn1.32xlarge"]},
        "porting": {"engineer_days": 3},
        "job": {"runs_per_month": 4, **job},
    }


def test_training_hours_from_job_size_and_measured_tokens_per_s() -> None:
    d = training(tokens=7.2e9, gpu_hours=20, candidates={"trn1.32xlarge": {"hours": 26}})
    d["figures"] = {
        "p5.48xlarge": {"tokens_per_s": {"value": 100_000, "unit": "tokens/s", "source": "measured"}},
        "trn1.32xlarge": {"tokens_per_s": {"value": 1_000_000, "unit": "tokens/min", "source": "measured"}},
    }
    r = plan(d)
    gpu_h = 7.2e9 / (100_000 * 2) / 3600  # 10 h on two nodes
    trn_h = 7.2e9 / (1e6 / 60 * 2) / 3600
    assert r.gpu_throughput.value == pytest.approx(gpu_h) and r.gpu_throughput.source == "measured"
    assert r.candidates[0].throughput.value == pytest.approx(trn_h)
    assert r.monthly_now.value == pytest.approx(cost.job_cost(gpu_h, rate("p5.48xlarge"), 2) * 4)
    # the stated hours lost to the measurement and are listed, not used
    assert r.gpu_fleet.overridden[0].value == 20


def test_training_needs_hours_or_a_size_with_a_model() -> None:
    with pytest.raises(
        ChipswapError, match=r"job.gpu_hours: expected the hours of one run, or the run's size"
    ):
        parse_workload(training(candidates={"trn1.32xlarge": {"hours": 26}}), "w.toml")
    with pytest.raises(ChipswapError, match="epochs and dataset_tokens together"):
        parse_workload(training(gpu_hours=2, epochs=2, candidates={"trn1.32xlarge": {"hours": 3}}), "w.toml")
    wl = parse_workload(
        training(gpu_hours=2, epochs=2, dataset_tokens=1e9, candidates={"trn1.32xlarge": {"hours": 3}}),
        "w.toml",
    )
    assert wl.job is not None and wl.job.job_tokens == 2e9


def test_training_moves_to_trainium_when_it_pays() -> None:
    r = plan(training(gpu_hours=20, candidates={"trn1.32xlarge": {"hours": 26}}))
    per_run = cost.job_cost(20, rate("p5.48xlarge"), 2) - cost.job_cost(26, rate("trn1.32xlarge"), 2)
    assert r.verdict.verdict == MOVE_TRN
    assert r.best.payback_run == cost.break_even(cost.porting_cost(3), per_run).period == 3


# ------------------------------------------------------------------------------------------- sizers


def test_curve_sizer_interpolates_capacity_and_refuses_infeasible() -> None:
    c = CurveSizer(100.0, (0.5, 1.0, 2.0), (10.0, 25.0, 60.0))
    assert c.count() == 4 and c.count(2.0) == 8
    assert c.capacity(1.0) == 25.0 and 10.0 < c.capacity(0.7) < 25.0
    assert CurveSizer(100.0, (0.5, 1.0), (None, 25.0)).count(1.0, 0.5) is None
    assert RateSizer(20.0, 2.0, 0.5).count() == 20  # exactly 20, not 21 from float noise


def test_no_candidate_says_why() -> None:
    d = serving()
    d["throughput"]["candidates"]["inf2.xlarge"]["p99_ms"] = 900
    d["slo"] = {"p99_ms": 500}
    r = plan(d)
    assert r.best is None and r.verdict.verdict == STAY
    assert "inf2.xlarge" in r.verdict.why


# ------------------------------------------------------------- measured figures from `chipswap bench`


def _bench_file(tmp_path: Any, instance: str, e2e_s: float) -> Any:
    """A chipswap.bench/1 file as `chipswap bench` writes it (summarize + build_results over records)."""
    import json

    from chipswap.bench.results import build_results
    from chipswap.bench.stats import Record, Slo, summarize

    recs = []
    for i in range(200):
        r = Record(i, scheduled_s=i * 0.2, prompt_tokens=512)
        r.status, r.sent_s, r.e2e_s = "ok", i * 0.2 + 0.001, e2e_s
        recs.append(r)
    doc = build_results(
        outcome_result=summarize(recs, Slo(e2e_ms=1000)),
        target={"url": "http://127.0.0.1:8000", "protocol": "chipswap-predict", "model": "m", "server": None},
        load={"trace": "t.csv"},
        slo=Slo(e2e_ms=1000).to_json(),
        complete=True,
        stop_reason="every planned request was sent",
        command="chipswap bench http://127.0.0.1:8000 --instance " + instance,
        instance={"name": instance, "term": "on-demand", "region": "us-east-1", "usd_per_hour": "0.7582"},
    )
    p = tmp_path / f"bench-{instance}.json"
    p.write_text(json.dumps(doc))
    return p


def test_bench_results_outrank_stated_figures(tmp_path: Any) -> None:
    bench = _bench_file(tmp_path, "inf2.xlarge", 0.3)
    wl = parse_workload(serving(slo={"p99_ms": 500}), tmp_path / "w.toml")
    r = run_plan(wl, tmp_path / "w.toml", bench=(bench,))
    inf2 = r.candidates[0]
    assert inf2.throughput.source == "measured" and "chipswap bench" in inf2.throughput.note
    assert inf2.fleet.e2e_p99.source == "measured" and inf2.fleet.e2e_p99.value == pytest.approx(
        300, rel=0.01
    )
    assert inf2.meets_slo is True
    assert inf2.fleet.overridden and inf2.fleet.overridden[0].value == 1.8
    # through the workload file as well, relative to it
    d = serving(slo={"p99_ms": 500}, bench_results=[bench.name])
    assert (
        run_plan(parse_workload(d, tmp_path / "w.toml"), tmp_path / "w.toml").candidates[0].throughput.source
        == "measured"
    )


def test_bench_results_for_an_unknown_instance_is_one_line(tmp_path: Any) -> None:
    bench = _bench_file(tmp_path, "trn1.2xlarge", 0.3)
    wl = parse_workload(serving(), tmp_path / "w.toml")
    with pytest.raises(ChipswapError, match=r"bench_results: .* measured 'trn1.2xlarge', which is neither"):
        run_plan(wl, tmp_path / "w.toml", bench=(bench,))


# -------------------------------------------------------------- traffic from a pre-aggregated histogram


def test_histogram_file_with_a_stated_rate(tmp_path: Any) -> None:
    """Lengths from a histogram (no arrival times in it), Poisson arrivals at steady_rps: the same shapes as
    planning the raw trace, and a fleet sized for the stated rate."""
    import csv

    from chipswap.traffic import bundled_trace_path

    counts: dict[tuple[int, int], int] = {}
    with bundled_trace_path().open() as fh:
        for row in csv.DictReader(fh):
            key = (int(row["ContextTokens"]), int(row["GeneratedTokens"]))
            counts[key] = counts.get(key, 0) + 1
    rows = ["prompt_tokens,output_tokens,count"] + [f"{p},{o},{n}" for (p, o), n in counts.items()]
    (tmp_path / "hist.csv").write_text("\n".join(rows) + "\n")
    d = serving(traffic={"histogram": "hist.csv", "steady_rps": 20.0, "max_buckets": 4})
    r = run_plan(parse_workload(d, tmp_path / "w.toml"), tmp_path / "w.toml")
    raw = serving(traffic={"trace": "bundled", "max_buckets": 4})
    r_raw = run_plan(parse_workload(raw, tmp_path / "w.toml"), tmp_path / "w.toml")
    assert r.shapes.sequence_buckets == r_raw.shapes.sequence_buckets
    assert r.traffic.requests == sum(counts.values()) and "histogram" in r.traffic.source
    assert r.best.count == math.ceil(20.0 / (1.8 * 0.7))
    with pytest.raises(ChipswapError, match="traffic: expected a trace or a histogram, not both"):
        parse_workload(serving(traffic={"histogram": "h.csv", "trace": "bundled"}), "w.toml")
