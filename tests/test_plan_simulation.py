"""The simulation stage: both fleets sized by the simulator for the SLO, like for like; sizing monotone in
traffic and objective; an SLO no fleet can meet is a verdict with the floor, not a hang; the layouts of an
instance are each sized and the cheapest kept. Small steady workloads on Llama 3 8B (projection in closed
form, no export)."""

from __future__ import annotations

import time
from typing import Any

import pytest

from chipswap.plan import run_plan
from chipswap.plan.workload_file import parse_workload
from chipswap.verdict.rules import STAY

pytest.importorskip("chipswap.simulation.simulate")


@pytest.fixture(autouse=True)
def no_export(monkeypatch: pytest.MonkeyPatch) -> None:
    """Readiness has its own tests; here a clean check stands in so no graph is exported."""
    from chipswap.plan import readiness as stage
    from chipswap.plan.result import ReadinessSummary

    def fake(s: Any, shapes: Any) -> ReadinessSummary:
        return ReadinessSummary(True, "test", target=stage.targets(s)[0], blockers=0, support_pct=100.0)

    monkeypatch.setattr(stage, "readiness", fake)


def llama(rps: float = 3.0, **over: Any) -> dict[str, Any]:
    d: dict[str, Any] = {
        "title": "llama small",
        "model": {"preset": "llama-3-8b"},
        "traffic": {"steady_rps": rps, "prompt_tokens": 512, "output_tokens": 64, "burst_window_s": 120},
        "fleet": {"instance": "g6e.xlarge", "count": 2},
        "slo": {"ttft_p99_ms": 1500, "p99_ms": 8000},
        "targets": {"candidates": ["inf2.xlarge"]},
        "porting": {"engineer_days": 10},
    }
    d.update(over)
    return d


def plan(d: dict[str, Any]) -> Any:
    return run_plan(parse_workload(d, "w.toml"), "w.toml")


def test_both_fleets_are_simulated_for_the_slo() -> None:
    r = plan(llama())
    for fleet in (r.gpu_fleet, r.candidates[0].fleet):
        assert fleet.throughput.kind == "projected" and fleet.sizing.startswith("simulated")
        assert fleet.count is not None and fleet.meets_slo is True
        # the latency at the chosen size meets every objective, and the distributions are kept for the report
        assert fleet.ttft_p99.value <= 1500 and fleet.e2e_p99.value <= 8000
        assert fleet.latency.e2e_ms.size > 10 and fleet.latency.ttft_ms.size > 10
        assert fleet.config is not None and fleet.config.tp_degree >= 1
        lo, hi = fleet.count_range
        # hi is None when no size meets the SLO at the slow edge of the band (Neuron at prompts outside the
        # published runs' 1,500 tokens carries a widened band)
        assert lo is not None and lo <= fleet.count and (hi is None or fleet.count <= hi)
    assert r.monthly_now.note.startswith(f"{r.gpu_fleet.count} x g6e.xlarge (sized for the busiest window")


@pytest.mark.slow
def test_sizing_is_monotone_in_traffic_and_objective() -> None:
    counts = [plan(llama(rps)).candidates[0].count for rps in (1.0, 3.0, 9.0)]
    assert counts[0] <= counts[1] <= counts[2] and counts[0] < counts[2]
    loose = plan(llama(3.0, slo={"ttft_p99_ms": 4000, "p99_ms": 20000})).candidates[0].count
    tight = plan(llama(3.0, slo={"ttft_p99_ms": 1500, "p99_ms": 8000})).candidates[0].count
    assert loose <= tight


def test_slo_below_the_floor_is_a_verdict_with_the_floor_not_a_hang() -> None:
    t0 = time.perf_counter()
    r = plan(llama(slo={"ttft_p99_ms": 5}))
    assert time.perf_counter() - t0 < 300  # a bound, not a speed (holds at load 20)
    assert r.verdict.verdict == STAY and r.best is None
    why = r.verdict.why
    assert "no fleet size meets the SLO" in why and "TTFT p99 alone is" in why and "reachable when set" in why
    c = r.candidates[0]
    assert c.excluded.startswith("no fleet size meets the SLO") and c.fleet.slo_floor_ms > 5
    assert any("no number of g6e.xlarge meets the SLO" in n for n in r.notes)


def test_today_fleet_too_small_is_said() -> None:
    r = plan(llama(40.0, fleet={"instance": "g6e.xlarge", "count": 1}))
    assert r.gpu_fleet.count > 1
    assert any("misses the SLO at the busiest window" in n for n in r.notes)


@pytest.mark.slow
def test_each_layout_is_sized_and_the_cheapest_kept() -> None:
    # min_replicas 1: the count is the sizing's own answer, which the layout note names
    r = plan(llama(3.0, targets={"candidates": ["inf2.48xlarge"], "min_replicas": 1}))
    f = r.candidates[0].fleet
    note = f.throughput.note
    assert "layouts tried:" in note and note.count("TP") >= 3  # every tensor-parallel degree considered
    assert f"TP{f.config.tp_degree} x {f.config.replicas}: {f.count} instance" in note


def test_the_plan_names_its_scheduler_policies_and_scaling() -> None:
    """Each side is simulated with its stack's policy (defaults: vLLM's chunked prefill on the GPUs, static
    slots on Neuron), and the plan says so in its notes and in report.json."""
    r = plan(llama())
    sched = r.scheduling
    assert sched["gpu_stack"] == "vllm" and sched["gpu_policy"] == "chunked-prefill"
    assert sched["neuron_stack"] == "nxdi-vllm" and sched["neuron_policy"] == "neuron-static-slots"
    assert sched["scale_method"] == "superpose" and sched["dispatch"] == "round_robin"
    assert any("chunked-prefill" in n and "neuron-static-slots" in n for n in r.notes)
    assert r.to_json()["scheduling"]["gpu_policy"] == "chunked-prefill"
    assert "chunked-prefill" in (r.gpu_fleet.throughput.note or "")
