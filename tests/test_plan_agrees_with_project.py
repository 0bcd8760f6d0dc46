"""`plan` and `project` agree (issue 27): at the same layout the fleet simulator behind `plan` carries the
throughput `project` states (slot occupancy taken from the projection's stack data through one code path,
servicetime.live_slots), `plan` prints the band of the layout it sized, the length rule is prompt + output - 1
positions (2,048 + 1 fits 2,048), and a plan whose figures are all measured never needs the model's work."""

from __future__ import annotations

import json
from dataclasses import replace
from typing import Any

import numpy as np
import pytest

from chipswap.models import load_preset
from chipswap.plan import projection, run_plan, setup, shapes, simulation, traffic
from chipswap.plan.workload_file import parse_workload
from chipswap.projection import api
from chipswap.projection.predict import Lengths
from chipswap.projection.work import work_from_config
from chipswap.simulation import simulate as S
from chipswap.simulation.servicetime import live_slots

INF2 = "inf2.48xlarge"


def workload(**over: Any) -> dict[str, Any]:
    d: dict[str, Any] = {
        "title": "agree",
        "kind": "serving",
        "horizon_months": 12,
        "model": {"preset": "llama-3.1-8b", "task": "causal-lm"},
        "traffic": {"steady_rps": 20.0, "prompt_tokens": 1024, "output_tokens": 256},
        "fleet": {"instance": "g6e.12xlarge", "count": 4},
        "targets": {"candidates": [INF2]},
        "slo": {"p99_ms": 60000},
        "porting": {"engineer_days": 10},
    }
    d.update(over)
    return d


@pytest.fixture(scope="module")
def staged() -> tuple[Any, Any, Any, Any]:
    s = setup.setup(parse_workload(workload(), "w.toml"), "w.toml", None, (), None, False)
    t = traffic.traffic(s)
    assert t is not None
    sh = shapes.shapes(s, t)
    return s, t.load, sh.summary, projection.projection(s, t.load, sh.summary)


def _saturated_rps(times: Any, replica_setup: Any, replicas: int, rate: float, p: int, o: int) -> float:
    n = 3000
    arrivals = np.arange(n) / rate
    res = S.simulate(S.make_traffic(arrivals, [p] * n, [o] * n), times, replica_setup, replicas)
    done = np.sort(arrivals + res.e2e_s)
    return (n // 2) / (done[3 * n // 4] - done[n // 4])  # the steady middle of an overloaded run


def test_plan_and_project_give_the_same_capacity_and_band_at_the_same_layout(staged):
    s, load, summary, pr = staged
    pick = pr.get(INF2)
    lay = next(a for a in pick.alternatives if a.config.tp_degree == 8)  # Llama-3.1-8B TP8 x 3 (issue 27)
    cfg = lay.config
    assert cfg.replicas == 3 and 0 < cfg.slot_occupancy < 1
    from chipswap.simulation.fleet import Slo

    fleet = simulation._Fleet(s, load, summary, lay, Slo(e2e_s=60.0))  # the plan's own setup
    assert fleet.setup.max_batch == live_slots(cfg.max_batch, cfg.slot_occupancy) < cfg.max_batch
    assert fleet.setup.batch_sizes == (cfg.max_batch,)  # every step still runs the compiled batch
    project_rps = lay.requests_per_s.value
    got = _saturated_rps(lay.times, fleet.setup, cfg.replicas, 2 * project_rps, 1024, 256)
    # within 2 % (issue 30): both charge a decode step at the compiled decode bucket's context (1,280 here;
    # servicetime.charged_context) and run output - 1 decode steps (tests/test_capacity_one_source.py)
    assert got == pytest.approx(project_rps, rel=0.02)
    # all compiled slots busy (what the simulator ran before): 20-30 % more than project states
    full = replace(fleet.setup, max_batch=cfg.max_batch)
    assert _saturated_rps(lay.times, full, cfg.replicas, 2 * project_rps, 1024, 256) > 1.15 * project_rps


def test_plan_prints_the_band_of_the_layout_it_sized(staged):
    s, load, summary, pr = staged
    pick = pr.get(INF2)
    slow = next(a for a in pick.alternatives if a.config.tp_degree == 24)
    wide = next(a for a in pick.alternatives if a.config.tp_degree == 3)
    # the physical model's band is per kind of extrapolation, the same for these two layouts: give the one the
    # plan will size a band of its own, so printing the pick's band instead would show
    wide = replace(wide, times=replace(wide.times, band=2.0 * slow.times.band))
    stage = replace(pr, by_instance={INF2: replace(slow, alternatives=(wide,))})
    out = simulation.simulation(s, load, summary, stage).get(INF2)
    assert out is not None and out.config.tp_degree == 3  # TP3 x 8 needs fewer instances than the TP24 pick
    assert out.band == wide.times.band
    lo, mid, hi = out.sizer.speeds
    assert hi == pytest.approx(1 + wide.times.band)


@pytest.mark.parametrize("output,fits", [(0, True), (1, True), (2, False)])
def test_a_full_length_prompt_plus_one_output_token_fits(output, fits):
    """2,048 prompt + 1 output token holds 2,048 positions (the last token is sampled, never fed back)."""
    cfg = dict(load_preset("llama-3.1-8b")["config"], max_position_embeddings=2048)
    work = work_from_config(cfg, name="m", task="causal-lm")
    assert Lengths.of(2048, output).max_total == 2048 + max(output - 1, 0)
    p = api.project_serving(work, "g6e.12xlarge", prompt_tokens=2048, output_tokens=output or None)
    assert p.fits is fits
    setup_ = S.ReplicaSetup(max_batch=4, max_length=2048)
    rejected, _ = S.reject_mask(S.make_traffic([0.0], [2048], [max(output, 1)]), setup_, "llm")
    assert bool(rejected[0]) is (output >= 2)
    neuron = S.ReplicaSetup(max_batch=4, batch_sizes=(4,), prefill_buckets=(2048,), decode_buckets=(2048,))
    rejected, _ = S.reject_mask(S.make_traffic([0.0], [2048], [max(output, 1)]), neuron, "llm")
    assert bool(rejected[0]) is (output >= 2)


def test_a_plan_whose_figures_are_all_measured_needs_no_model_work(tmp_path, monkeypatch):
    from chipswap.plan import readiness as stage
    from chipswap.plan.result import ReadinessSummary

    monkeypatch.setattr(stage, "readiness", lambda s, sh: ReadinessSummary(False, "not checked (test)"))
    cfg = dict(load_preset("llama-3.1-8b")["config"], architectures=["LlamaForCausalLM"], kv_lora_rank=64)
    path = tmp_path / "config.json"
    path.write_text(json.dumps(cfg))
    measured = {
        "gpu_requests_per_s": 3.0,
        "gpu_source": "measured",
        "candidates": {INF2: {"requests_per_s": 2.0, "source": "measured"}},
    }
    d = workload(model={"config": str(path), "task": "causal-lm"}, slo={}, throughput=measured)
    d["traffic"] = {"steady_rps": 20.0, "prompt_tokens": 512, "output_tokens": 64}
    r = run_plan(parse_workload(d, "w.toml"), "w.toml")
    assert r.gpu_fleet.throughput.kind == "measured"
    assert any("every figure is measured" in n and "kv_lora_rank" in n for n in r.notes)
    # one projected figure left to find: the unread field is the one-line error it was
    d["throughput"] = {**measured, "candidates": {INF2: {"requests_per_s": 2.0, "source": "stated"}}}
    with pytest.raises(Exception, match="kv_lora_rank"):
        run_plan(parse_workload(d, "w.toml"), "w.toml")
