"""`chipswap plan` end to end: each verdict branch on small workloads, the examples, bad input (exit 2)."""

from __future__ import annotations

import json
import math
import subprocess
import sys
import tomllib
from dataclasses import replace
from decimal import Decimal
from pathlib import Path
from typing import Any

import pytest

from chipswap import plan as pipeline
from chipswap.cli.plan import example_path
from chipswap.economics import cost
from chipswap.economics.catalog_io import load_catalog
from chipswap.errors import ChipswapError
from chipswap.plan import ReadinessSummary, run_plan
from chipswap.plan import readiness as readiness_stage
from chipswap.plan import shapes as shapes_stage
from chipswap.plan import traffic as traffic_stage
from chipswap.plan.workload_file import load_workload, parse_workload
from chipswap.verdict.rules import CLOSE, MOVE_INF, MOVE_TRN, STAY

CAT = load_catalog()


def rate(name: str, term: str = "on-demand") -> Decimal:
    return Decimal(CAT.rate(name, "us-east-1", term).usd_per_hour)


def serving(**over: Any) -> dict[str, Any]:
    """Small serving workload: steady 20 req/s, 10 x g6e.xlarge at 3 req/s each (sized to the traffic at 70%),
    inf2.xlarge at 1.8 req/s."""
    d: dict[str, Any] = {
        "title": "small serving",
        "kind": "serving",
        "horizon_months": 12,
        "traffic": {"steady_rps": 20.0, "prompt_tokens": 512, "output_tokens": 32},
        "fleet": {"instance": "g6e.xlarge", "count": 10},
        "targets": {"candidates": ["inf2.xlarge"]},
        "porting": {"engineer_days": 10},
        "throughput": {
            "gpu_requests_per_s": 3.0,
            "target_utilization": 0.7,
            "candidates": {"inf2.xlarge": {"requests_per_s": 1.8}},
        },
    }
    for k, v in over.items():
        if isinstance(v, dict) and isinstance(d.get(k), dict):
            d[k] = {**d[k], **v}
        else:
            d[k] = v
    return d


@pytest.fixture
def readiness(monkeypatch: pytest.MonkeyPatch):
    """Stand in for the readiness check (its own tests cover it): a checked model with `blockers` blockers."""

    def use(blockers: int | None) -> None:
        def fake(s: Any, shapes: Any) -> ReadinessSummary:
            if blockers is None:
                return ReadinessSummary(False, "not checked (test)")
            target = readiness_stage.targets(s)[0]
            return ReadinessSummary(True, "test", target=target, blockers=blockers, support_pct=100.0)

        monkeypatch.setattr(readiness_stage, "readiness", fake)

    return use


def plan(d: dict[str, Any], **kw: Any) -> pipeline.PlanResult:
    return run_plan(parse_workload(d, "small.toml"), "small.toml", **kw)


def test_small_serving_moves_to_inferentia(readiness) -> None:
    readiness(0)
    r = plan(serving())
    now = cost.monthly_cost(rate("g6e.xlarge"), 10, 730)
    count = math.ceil(20.0 / (1.8 * 0.7))
    after = cost.monthly_cost(rate("inf2.xlarge"), count, 730)
    assert r.monthly_now.value == now
    assert r.best is not None and r.best.count == count and r.best.monthly_usd == after
    assert r.best.saving_pct == (now - after) / now * 100
    assert r.best.payback_month == math.ceil(Decimal(8000) / (now - after))
    assert r.verdict.verdict == MOVE_INF
    assert r.best.cost_per_million_usd == cost.cost_per_million(1.8, rate("inf2.xlarge"), 0.7)


def test_close_margin_turns_the_same_workload_into_a_close_call(readiness) -> None:
    readiness(0)
    saving = plan(serving()).best.saving_pct  # type: ignore[union-attr]
    assert saving is not None
    assert plan(serving(), close_margin_pct=saving + Decimal("0.5")).verdict.verdict == CLOSE
    assert plan(serving(), close_margin_pct=saving - Decimal("0.5")).verdict.verdict == MOVE_INF


def test_research_churn_stays_on_gpu(readiness) -> None:
    readiness(0)
    r = plan(serving(stability={"research_churn": True}))
    assert r.verdict.verdict == STAY
    assert "research-churn" in r.verdict.why


def test_blockers_stay_on_gpu(readiness) -> None:
    readiness(3)
    r = plan(serving())
    assert r.verdict.verdict == STAY
    assert next(x for x in r.verdict.reasons if x.rule == "standard-architecture").input_value == 3


def test_unchecked_model_is_never_a_move(readiness) -> None:
    readiness(None)
    assert plan(serving()).verdict.verdict == CLOSE


def test_slow_candidate_costs_more_and_stays(readiness) -> None:
    readiness(0)
    r = plan(serving(throughput={"candidates": {"inf2.xlarge": {"requests_per_s": 0.3}}}))
    assert r.best is not None and r.best.saving_usd is not None and r.best.saving_usd < 0
    assert r.verdict.verdict == STAY


def test_bursty_traffic_stays(readiness, tmp_path: Path) -> None:
    readiness(0)
    # all requests arrive in 1 minute out of 10 -> peak-to-mean far above 2
    rows = ["TIMESTAMP,ContextTokens,GeneratedTokens"]
    rows += [f"{i * 0.01:.2f},500,20" for i in range(3000)]
    rows += [f"{600 + i * 0.5:.2f},500,20" for i in range(2)]
    (tmp_path / "t.csv").write_text("\n".join(rows) + "\n")
    d = serving(traffic={"steady_rps": None, "prompt_tokens": None, "output_tokens": None})
    d["traffic"] = {"trace": "t.csv", "burst_window_s": 60}
    r = run_plan(parse_workload(d, tmp_path / "w.toml"), tmp_path / "w.toml")
    assert r.traffic is not None and r.traffic.peak_to_mean is not None and r.traffic.peak_to_mean > 2
    assert r.verdict.verdict == STAY
    assert "steady-traffic" in r.verdict.why


def test_slo_miss_excludes_candidate(readiness) -> None:
    readiness(0)
    d = serving(slo={"p99_ms": 500})
    d["throughput"]["candidates"]["inf2.xlarge"]["p99_ms"] = 900
    r = plan(d)
    assert r.candidates[0].excluded and "misses" in r.candidates[0].excluded
    assert r.verdict.verdict == STAY


def test_finetune_example_shows_what_published_data_imply(readiness) -> None:
    """The seed's 20 h on the p5 is the stated GPU-side input; the run's size is inferred from it with the
    p5's projected bf16 throughput, and trn1's hours are projected like for like (bf16 both sides),
    outranking the seed's 26 h. The summary names both sides' dtype and layout."""
    from chipswap.cli.plan import summary_lines

    readiness(0)
    wl = load_workload(example_path("finetune"))
    r = run_plan(wl, example_path("finetune"))
    gpu, trn = r.gpu_fleet, r.candidates[0]
    assert gpu.throughput.value == 20 and gpu.throughput.source == "seed example"
    assert trn.throughput.kind == "projected" and trn.throughput.band is not None
    assert trn.throughput.note.startswith("run size inferred: 20 h stated on GPU")
    assert [o.value for o in trn.fleet.overridden] == [26]
    lines = "\n".join(summary_lines(r))
    assert "like for like: p5.48xlarge trains in bf16" in lines and "trn1.32xlarge trains in bf16" in lines
    per_run_gpu = cost.job_cost(20, rate("p5.48xlarge"))
    assert r.monthly_now.value == per_run_gpu * 4
    assert (trn.throughput.value > 26) == (r.verdict.verdict == STAY)


def test_plan_from_hours_on_p4d_without_a_token_count(readiness, tmp_path) -> None:
    """Issue 22: "10 h on p4d.24xlarge" and no token count: the tokens are inferred and labelled."""
    readiness(0)
    d = tomllib.loads(example_path("finetune").read_text())
    d["fleet"]["instance"] = "p4d.24xlarge"
    d["job"]["gpu_hours"] = 10
    d["job"]["gpu_source"] = "measured"
    del d["job"]["candidates"]
    r = plan(d)
    gpu, trn = r.gpu_fleet, r.candidates[0]
    assert gpu.throughput.value == 10 and gpu.throughput.kind == "measured"
    assert trn.throughput.kind == "projected"
    assert "run size inferred: 10 h stated on GPU" in trn.throughput.note
    assert 10 < trn.throughput.value < 40  # trn1 is slower than p4d per node in bf16, not 10x


def test_finetune_job_layout_pins_the_gpu_fleet(readiness) -> None:
    """Issue 28: job.layout pins the GPU fleet's training layout; a bad key is a one-line workload error."""
    readiness(0)
    d = tomllib.loads(example_path("finetune").read_text())
    d["job"]["layout"] = {"tp": 2, "recompute": "full"}
    r = plan(d)
    free = plan(tomllib.loads(example_path("finetune").read_text()))
    assert "TP2 x " in str(r.gpu_fleet) and "TP2 x " not in str(free.gpu_fleet)
    # the pinned p5 layout is slower, so the run the seed's 20 h imply is smaller: trn1 takes fewer hours
    assert r.candidates[0].throughput.value < free.candidates[0].throughput.value
    d["job"]["layout"] = {"tp": 2, "shard": "fsdp"}
    with pytest.raises(ChipswapError, match="shard"):
        plan(d)
    # issue 41: the same checks and lines as --train-layout, naming the workload's job.layout; vp is a key
    d["job"]["layout"] = {"tp": 3, "pp": 1, "vp": 2}
    with pytest.raises(ChipswapError) as exc:
        plan(d)
    lines = getattr(exc.value, "lines", [str(exc.value)])
    assert any("job.layout tp=3: does not divide the model's 32 attention heads" in x for x in lines)
    assert any("job.layout vp=2: virtual stages need pipeline stages" in x for x in lines)
    # job.fp8_recipe: mxfp8 where the chip has it (B200), tensorwise elsewhere; never an error on a p5 fleet
    d["job"]["layout"] = {"tp": 2}
    d["job"]["dtype"], d["job"]["fp8_recipe"] = "fp8", "mxfp8"
    r8 = plan(d)
    assert "TP2 x " in str(r8.gpu_fleet) and "fp8" in str(r8.gpu_fleet)


def test_finetune_example_with_measured_hours_is_the_seed(readiness) -> None:
    """Mark the seed's hours as measured and they decide: the move pays back on the 5th identical run."""
    readiness(0)
    d = tomllib.loads(example_path("finetune").read_text())
    d["job"]["gpu_source"] = "measured"
    d["job"]["candidates"]["trn1.32xlarge"]["source"] = "measured"
    r = plan(d)
    per_run_gpu = cost.job_cost(20, rate("p5.48xlarge"))
    per_run_trn = cost.job_cost(26, rate("trn1.32xlarge"))
    assert r.monthly_now.value == per_run_gpu * 4
    assert r.best is not None and r.best.monthly_usd == per_run_trn * 4
    # "by the fifth identical run it is [cheaper]"
    assert r.best.payback_run == cost.break_even(cost.porting_cost(3), per_run_gpu - per_run_trn).period == 5
    assert r.verdict.verdict == MOVE_TRN


@pytest.mark.slow
def test_classifier_example_moves_by_the_projection(readiness) -> None:
    readiness(0)
    wl = load_workload(example_path("classifier-serving"))
    r = run_plan(wl, example_path("classifier-serving"))
    assert r.verdict.verdict == MOVE_INF and r.best is not None and r.best.instance == "inf2.xlarge"
    for fleet in (r.gpu_fleet, *(c.fleet for c in r.candidates)):
        assert fleet.throughput.kind == "projected" and fleet.sizing.startswith("simulated")
        assert fleet.e2e_p99 is not None and fleet.e2e_p99.value <= wl.slo.p99_ms
    # clear at every edge of the error band, so the band does not make it a close call
    lo, hi = r.best.saving_pct_range
    assert (
        lo is not None
        and hi is not None
        and lo >= r.thresholds.close_margin_pct
        and lo < r.best.saving_pct < hi
    )
    assert "projected ±" in r.verdict.why


def test_blockers_on_one_target_pick_the_other(readiness, monkeypatch: pytest.MonkeyPatch) -> None:
    """The captured graph is judged per target; a candidate whose target has blockers is not the pick."""

    def fake(s: Any, shapes: Any) -> ReadinessSummary:
        return ReadinessSummary(
            True, "test", target="inf2", blockers=1, by_target={"inf2": (1, 90.0, ()), "trn1": (0, 100.0, ())}
        )

    monkeypatch.setattr(readiness_stage, "readiness", fake)
    # 200 req/s on 96 GPUs (sized to the traffic at 70%): inf2 saves ~32%, trn1 ~28%
    d = serving(
        targets={"candidates": ["inf2.xlarge", "trn1.32xlarge"]},
        fleet={"count": 96},
        traffic={"steady_rps": 200.0},
    )
    d["throughput"]["candidates"]["trn1.32xlarge"] = {"requests_per_s": 50.0}
    r = plan(d)
    inf2 = next(c for c in r.candidates if c.instance == "inf2.xlarge")
    assert r.best is not None and r.best.instance == "trn1.32xlarge"
    # inf2 would save more, but its target has a predicted blocker
    assert inf2.saving_usd is not None and r.best.saving_usd is not None
    assert inf2.saving_usd > r.best.saving_usd
    assert r.readiness.target == "trn1" and r.readiness.blockers == 0
    assert r.verdict.verdict == MOVE_TRN


def test_representative_check_keeps_two_layers_only_when_layers_are_alike() -> None:
    from chipswap.models import representative, resolve_model

    ref = resolve_model("llama-3-8b")
    small, what = representative(ref)
    assert small.config["num_hidden_layers"] == 2 and ref.config["num_hidden_layers"] == 32
    assert "2-layer copy" in what
    mixed = replace(ref, config={**ref.config, "layer_types": ["full_attention", "sliding_attention"] * 16})
    assert representative(mixed)[0] is mixed


@pytest.mark.slow
def test_two_layer_copy_finds_what_the_full_model_finds() -> None:
    from chipswap.models import resolve_model
    from chipswap.readiness.check import run_check

    ref = resolve_model("gpt2")
    from chipswap.models import representative

    small, _ = representative(ref)
    assert small.config["n_layer"] == 2
    full = run_check(ref, ["input_ids=1x128:int64"], target="inf2")
    part = run_check(small, ["input_ids=1x128:int64"], target="inf2")

    def kinds(rep: Any) -> set[tuple[str, str, str]]:
        return {(f["rule"], f["severity"], f["op"] or "") for f in rep.findings_json()}

    assert kinds(part) == kinds(full)
    assert part.exit_code == full.exit_code


def test_sensitivity_flip_is_real(readiness) -> None:
    """Re-evaluate the pipeline's pure economics just inside and just past the reported flip point."""
    readiness(0)
    r = plan(serving())
    flip = next(f for f in r.flips if f.knob == "engineer-days")
    assert flip.value is not None and flip.verdict is not None
    wl = parse_workload(serving(porting={"engineer_days": float(flip.value) * 1.001}), "x.toml")
    assert run_plan(wl, "x.toml").verdict.verdict == flip.verdict
    wl = parse_workload(serving(porting={"engineer_days": float(flip.value) * 0.995}), "x.toml")
    assert run_plan(wl, "x.toml").verdict.verdict == r.verdict.verdict


@pytest.mark.slow
def test_candidate_that_cannot_run_the_model_is_excluded(readiness) -> None:
    readiness(0)
    d = serving(model={"preset": "llama-3-8b"}, targets={"candidates": ["inf1.xlarge", "inf2.xlarge"]})
    d["throughput"]["candidates"]["inf1.xlarge"] = {"requests_per_s": 5.0}
    r = plan(d)
    assert r.weights is not None and 14 < r.weights.value < 16  # 8.03B parameters x 2 bytes
    inf1, inf2 = r.candidates
    # inf1 has no LLM serving calibration (and 16 GiB for 15 GiB of weights): its stated 5 req/s is not enough
    assert inf1.excluded and "not projected" in inf1.excluded
    assert inf2.excluded is None and inf2.throughput.kind == "projected"
    assert r.best is not None and r.best.instance == "inf2.xlarge"


def test_unknown_model_preset_names_key(readiness) -> None:
    readiness(0)
    with pytest.raises(ChipswapError, match=r"small.toml: model.preset: unknown model preset: 'lama-3-8b'"):
        plan(serving(model={"preset": "lama-3-8b"}))


# ---------------------------------------------------------------------------------------------------- errors


def test_unknown_instance_names_key(readiness) -> None:
    readiness(0)
    with pytest.raises(ChipswapError) as ei:
        plan(serving(fleet={"instance": "g6e.xlarg"}))
    assert str(ei.value).startswith("small.toml: fleet.instance: unknown instance type")
    assert "g6e.xlarge" in str(ei.value)
    with pytest.raises(ChipswapError, match=r"small.toml: targets.candidates: .*expected a Neuron instance"):
        d = serving(targets={"candidates": ["g5.xlarge"]})
        d["throughput"]["candidates"] = {"g5.xlarge": {"requests_per_s": 1.0}}
        plan(d)


def cli(*args: str, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "chipswap", *args], capture_output=True, text=True, timeout=900, cwd=cwd
    )


def _bad(tmp_path: Path, edit) -> subprocess.CompletedProcess[str]:
    d = tomllib.loads(example_path("llama-serving").read_text())
    edit(d)
    p = tmp_path / "bad.toml"
    p.write_text(_toml(d))
    return cli("plan", str(p), "--out", str(tmp_path / "out"))


def _toml(d: dict[str, Any], prefix: str = "") -> str:
    simple = {k: v for k, v in d.items() if not isinstance(v, dict)}
    tables = {k: v for k, v in d.items() if isinstance(v, dict)}
    out = [f"{k} = {json.dumps(v)}" for k, v in simple.items()]
    for k, v in tables.items():
        name = f'{prefix}"{k}"' if "." in k else f"{prefix}{k}"
        out.append(f"[{name}]")
        out.append(_toml(v, name + "."))
    return "\n".join(out) + "\n"


@pytest.mark.parametrize(
    ("case", "edit", "expect"),
    [
        ("unknown key", lambda d: d["fleet"].update(colour="blue"), "fleet.colour"),
        ("wrong type", lambda d: d["fleet"].update(count="five"), "fleet.count: expected an integer"),
        ("missing trace", lambda d: d["traffic"].update(trace="nope.csv"), "traffic.trace: file not found"),
        (
            "unknown instance",
            lambda d: d["fleet"].update(instance="p9.huge"),
            "fleet.instance: unknown instance",
        ),
        ("impossible SLO", lambda d: d["slo"].update(p99_ms=0), "slo.p99_ms: expected a number > 0"),
        ("impossible SLO order", lambda d: d["slo"].update(p50_ms=99000), "slo: expected p50_ms <= p99_ms"),
    ],
)
def test_bad_input_is_one_line_exit_2(tmp_path: Path, case: str, edit, expect: str) -> None:
    proc = _bad(tmp_path, edit)
    assert proc.returncode == 2, case
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in proc.stderr
    assert str(tmp_path / "bad.toml") in lines[0]
    assert expect in lines[0]
    assert not (tmp_path / "out").exists()


def test_unknown_example_exit_2() -> None:
    proc = cli("plan", "--example", "llama-servin")
    assert proc.returncode == 2
    assert "did you mean llama-serving" in proc.stderr


def test_workload_help_prints_the_schema() -> None:
    proc = cli("workload-help")
    assert proc.returncode == 0
    assert "fleet.count" in proc.stdout and "close_margin_pct" in proc.stdout


@pytest.mark.slow
def test_default_plan_writes_the_report(tmp_path: Path) -> None:
    """`make demo`: the bundled Llama serving example through the CLI. Every throughput and latency figure it
    prints is projected or measured, none assumed; both fleets are simulated for the SLO."""
    proc = cli("plan", "--no-aws", "--out", str(tmp_path / "rep"))
    assert proc.returncode == 0, proc.stderr
    data = json.loads((tmp_path / "rep" / "report.json").read_text())
    verdict = data["verdict"]["verdict"]
    assert f"Verdict: {verdict}" in proc.stdout and "assumed" not in proc.stdout.split("\n")[1]
    figures = proc.stdout.split("Figures:\n")[1].split("Reasons:")[0].strip().splitlines()
    assert len(figures) == 4  # today's GPU type and the three candidates
    for line in figures:
        assert "projected ±" in line or "measured" in line, line
        assert "assumption" not in line and "stated" not in line, line
    assert str(tmp_path / "rep" / "report.html") in proc.stdout
    html = (tmp_path / "rep" / "report.html").read_text()
    assert verdict in html
    md = (tmp_path / "rep" / "report.md").read_text()
    assert f"**Verdict: {verdict}**" in md
    # every screening rule appears in the report with its input
    for reason in data["verdict"]["reasons"]:
        assert reason["rule"] in html
    assert data["shapes"]["padding_overhead_pct"] is not None
    # the seed's story, re-derived: about $40k a month on GPU, computed from the catalog, flat traffic
    wl = load_workload(example_path("llama-serving"))
    today = cost.monthly_cost(rate(wl.fleet.instance), wl.fleet.count, 730)
    assert data["monthly_today"]["value"] == float(cost.usd(today)) and 35000 < float(today) < 45000
    assert data["traffic"]["requests"] > 8000 and data["traffic"]["peak_to_mean"] < 2
    gpu = data["gpu_fleet"]
    assert gpu["sizing"].startswith("simulated") and gpu["meets_slo"] is True
    assert gpu["ttft_p99"]["value"] <= wl.slo.ttft_p99_ms and gpu["e2e_p99"]["value"] <= wl.slo.p99_ms
    for c in data["candidates"]:
        assert c["fleet"]["throughput"]["source"] == "projected"
        assert c["excluded"] or c["fleet"]["meets_slo"] is True
    assert {f["knob"] for f in data["flips"]} >= {
        "throughput ratio",
        "GPU throughput ratio",
        "engineer-days",
        "traffic",
        "price term",
    }
    # the real readiness check ran, and its blocker count is the input of the architecture rule
    rd = data["readiness"]
    assert rd["checked"] and "2-layer copy of its 32 identical layers" in rd["note"]
    arch = next(x for x in data["verdict"]["reasons"] if x["rule"] == "standard-architecture")
    assert arch["input_value"] == rd["blockers"]


@pytest.mark.slow
def test_json_flag_and_close_margin(tmp_path: Path) -> None:
    proc = cli("plan", "--example", "finetune", "--json", "--close-margin", "99", "--out", str(tmp_path))
    assert proc.returncode == 0, proc.stderr
    data = json.loads(proc.stdout)
    assert data["verdict"]["verdict"] in (CLOSE, STAY)
    assert data["thresholds"]["close_margin_pct"] == 99


# ------------------------------------------------------------------------------------------ QA fixes


def bundled(**traffic: Any) -> dict[str, Any]:
    """The small serving workload on the bundled trace (scaled 10x), fleet sized to carry its peak."""
    d = serving(fleet={"count": 40})
    d["traffic"] = {"trace": "bundled", "scale": 10.0, "mode": "llm", "max_buckets": 4, **traffic}
    return d


def test_shape_baselines_are_filled_from_the_plan() -> None:
    trace = traffic_stage.read_trace(traffic_stage.bundled_trace(), None)
    s = shapes_stage.plan_shapes(trace, "llm", 6, None)
    assert s.plan_json is not None and s.plan_json["baselines"]
    for name, b in s.plan_json["baselines"].items():
        assert s.baselines[name] is not None
        assert s.baselines[name] == pytest.approx(b["overhead_pct"])
    assert s.overflow_share == pytest.approx(s.plan_json["overflow_share"])


def test_unknown_slo_cannot_be_the_move(readiness) -> None:
    readiness(0)
    r = plan(serving(slo={"p99_ms": 500}))
    assert r.best is not None and r.best.meets_slo is None
    assert r.verdict.verdict == CLOSE
    assert "SLO not evaluated for inf2.xlarge" in r.verdict.why
    assert any(x.rule == "slo" and "not evaluated" in x.line() for x in r.verdict.reasons)
    # a stated p99 under the objective is evaluated and counts
    d = serving(slo={"p99_ms": 500})
    d["throughput"]["candidates"]["inf2.xlarge"]["p99_ms"] = 300
    assert plan(d).verdict.verdict == MOVE_INF


def test_candidate_meeting_the_slo_beats_an_unevaluated_one(readiness) -> None:
    readiness(0)
    d = serving(slo={"p99_ms": 500}, targets={"candidates": ["inf2.xlarge", "inf2.8xlarge"]})
    d["throughput"]["candidates"]["inf2.8xlarge"] = {"requests_per_s": 2.0, "p99_ms": 200}
    r = plan(d)
    assert r.best is not None and r.best.instance == "inf2.8xlarge" and r.best.meets_slo is True


def test_overflow_share_is_a_reason_against_a_clear_move(readiness) -> None:
    readiness(0)
    r = plan(bundled(max_length=512))
    assert r.shapes is not None and r.shapes.overflow_share is not None and r.shapes.overflow_share > 0.01
    ov = next(x for x in r.verdict.reasons if x.rule == "overflow")
    assert ov.outcome == "fail" and ov.input_value == pytest.approx(r.shapes.overflow_share * 100, abs=0.01)
    assert "policy reject" in ov.text
    assert r.verdict.verdict != MOVE_INF and "longer than the largest compiled shape" in r.verdict.why
    assert any("longer than the largest planned bucket" in n for n in r.notes)
    # without the cap nothing overflows, and no overflow reason is given
    r2 = plan(bundled())
    assert not any(x.rule == "overflow" for x in r2.verdict.reasons)


def test_max_length_beyond_the_model_is_an_error(readiness) -> None:
    readiness(0)
    d = bundled(max_length=4096)
    d["model"] = {"preset": "tiny-distilbert"}
    with pytest.raises(ChipswapError) as e:
        plan(d)
    msg = str(e.value)
    assert "traffic.max_length" in msg and "max_position_embeddings 512" in msg and "max_length = 512" in msg
    assert "\n" not in msg


def test_steady_length_beyond_the_model_is_an_error(readiness) -> None:
    readiness(0)
    d = serving(traffic={"prompt_tokens": 4096}, model={"preset": "tiny-distilbert"})
    with pytest.raises(ChipswapError, match=r"traffic.prompt_tokens.*max_position_embeddings 512"):
        plan(d)


def test_unset_max_length_is_capped_at_the_model(readiness) -> None:
    readiness(0)
    d = bundled()
    d["model"] = {"preset": "tiny-distilbert"}
    r = plan(d)
    assert r.shapes is not None and r.shapes.sequence_buckets and max(r.shapes.sequence_buckets) <= 512
    assert r.shapes.overflow_share is not None and r.shapes.overflow_share > 0
    assert any("max_position_embeddings" in n for n in r.notes)


def test_oversized_gpu_fleet_is_compared_right_sized(readiness) -> None:
    """Like for like: the saving of a move is measured against the GPU fleet the traffic needs (sized the same
    way as the candidate), and today's oversize is reported as a saving of its own."""
    readiness(0)
    needed = math.ceil(20.0 / (3.0 * 0.7))
    r = plan(serving(fleet={"count": 4 * needed}))
    g6e = rate("g6e.xlarge")
    assert r.monthly_today is not None and r.monthly_today.value == cost.monthly_cost(g6e, 4 * needed, 730)
    rs_now = cost.monthly_cost(g6e, needed, 730)
    assert r.gpu_fleet is not None and r.gpu_fleet.count == needed
    assert r.monthly_now.value == rs_now
    after = r.best.monthly_usd  # type: ignore[union-attr]
    assert r.best is not None and r.best.saving_pct == (rs_now - after) / rs_now * 100
    note = next(n for n in r.notes if "larger than the busiest window needs" in n)
    assert f"{needed} x g6e.xlarge would do" in note
    assert r.verdict.verdict == MOVE_INF
    # a slower candidate whose saving would only look clear against the oversized fleet: not a clear move
    d = serving(fleet={"count": 4 * needed})
    d["throughput"]["candidates"]["inf2.xlarge"]["requests_per_s"] = 1.5
    r2 = plan(d)
    count = math.ceil(20.0 / (1.5 * 0.7))
    after2 = cost.monthly_cost(rate("inf2.xlarge"), count, 730)
    vs_today = (r.monthly_today.value - after2) / r.monthly_today.value * 100
    vs_sized = (rs_now - after2) / rs_now * 100
    assert vs_today > 20 > vs_sized  # only the oversized comparison would have cleared the margin
    assert r2.best is not None and r2.best.saving_pct == vs_sized
    assert r2.verdict.verdict == CLOSE


def test_undersized_gpu_fleet_is_said_to_miss(readiness) -> None:
    readiness(0)
    needed = math.ceil(20.0 / (3.0 * 0.7))
    r = plan(serving(fleet={"count": needed - 4}))
    assert r.gpu_fleet is not None and r.gpu_fleet.count == needed
    assert any(
        "too small for the busiest window" in n and f"needs at 70% utilization {needed}" in n for n in r.notes
    )
    assert r.monthly_now.value == cost.monthly_cost(rate("g6e.xlarge"), needed, 730)


def _beyond(flip: Any, base: float, eps: float = 0.002) -> float:
    """Just past the flip (a little further from the base than the printed value)."""
    return float(flip.value) * (1 - eps if flip.value < base else 1 + eps)


def _inside(flip: Any, base: float, eps: float = 1e-6) -> float:
    """Just inside the exact edge (toward the base)."""
    return float(flip.edge) * (1 + eps if flip.edge < base else 1 - eps)


def _traffic(d: dict[str, Any], x: float) -> None:
    d["traffic"]["steady_rps"] = 20.0 * x


def _neuron_speed(d: dict[str, Any], x: float) -> None:
    d["throughput"]["candidates"]["inf2.xlarge"]["requests_per_s"] = 1.8 * x


@pytest.mark.parametrize(("knob", "apply"), [("traffic", _traffic), ("throughput ratio", _neuron_speed)])
def test_traffic_and_throughput_flips_match_a_real_rerun(readiness, knob: str, apply: Any) -> None:
    readiness(0)
    r = plan(serving())
    f = next(f for f in r.flips if f.knob == knob)
    assert f.value is not None and f.verdict is not None
    for x, want in (
        (float(f.value), f.verdict),
        (_beyond(f, 1.0), f.verdict),
        (_inside(f, 1.0), r.verdict.verdict),
    ):
        d = serving()
        apply(d, x)
        assert plan(d).verdict.verdict == want, x


def test_assumed_throughput_is_labelled_and_named(readiness) -> None:
    readiness(0)
    d = serving()
    d["throughput"]["candidates"]["inf2.xlarge"]["note"] = "TFLOPS ratio (assumption, not measured)"
    r = plan(d)
    assert r.best is not None and r.best.throughput is not None and r.best.throughput.source == "assumption"
    assert "(throughput assumed, not measured)" in r.verdict.why
    plain = plan(serving())
    assert plain.best.throughput.source == "stated"  # type: ignore[union-attr]
    assert "assumed" not in plain.verdict.why


def test_report_json_money_is_numbers(readiness) -> None:
    readiness(0)
    j = json.loads(json.dumps(plan(serving()).to_json()))
    best = j["best"]
    for key in ("monthly_usd", "saving_usd", "cost_per_million_usd"):
        assert isinstance(best[key], float) and round(best[key], 2) == best[key]
    assert isinstance(best["saving_pct"], float) and round(best["saving_pct"], 2) == best["saving_pct"]
    assert best["rate"]["value"] == float(rate("inf2.xlarge"))

    def strings(o: Any) -> list[str]:
        if isinstance(o, dict):
            return [s for v in o.values() for s in strings(v)]
        if isinstance(o, list):
            return [s for v in o for s in strings(v)]
        return [o] if isinstance(o, str) else []

    for s in strings(j):
        try:
            Decimal(s)
        except ArithmeticError:
            continue
        raise AssertionError(f"number left as a string: {s}")


def test_training_sensitivity_speaks_of_runs(readiness) -> None:
    readiness(0)
    d = {
        "title": "small training",
        "kind": "training",
        "horizon_months": 12,
        "fleet": {"instance": "p5.48xlarge", "count": 1},
        "targets": {"candidates": ["trn1.32xlarge"]},
        "porting": {"engineer_days": 3},
        "job": {"gpu_hours": 20, "runs_per_month": 4, "candidates": {"trn1.32xlarge": {"hours": 26}}},
    }
    r = plan(d)
    knobs = {f.knob for f in r.flips}
    assert {"runs per month", "run time (hours)"} <= knobs and not knobs & {"traffic", "throughput ratio"}
    runs = next(f for f in r.flips if f.knob == "runs per month")
    if runs.value is not None:
        d2 = {**d, "job": {**d["job"], "runs_per_month": _beyond(runs, 4.0)}}
        assert plan(d2).verdict.verdict == runs.verdict
    # the payback month is the first whole month whose cumulative saving covers porting, in the plot data too
    assert r.best is not None and r.best.payback_month is not None and r.cumulative_after is not None
    first = next(
        m for m, (a, b) in enumerate(zip(r.cumulative_now, r.cumulative_after, strict=True)) if m and a >= b
    )
    assert first == r.best.payback_month
    be = r.break_even_months
    assert be is not None and first - 1 < be <= first
    assert r.to_json()["break_even_months"] == round(be, 2)
