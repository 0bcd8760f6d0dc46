"""`chipswap trial` for a candidate with no projected figure (issue 27): where the projection says "outside
what the calibration covers — measure it (chipswap trial)", the trial measures the layout the projection
picks by memory fit (or the one pinned), labels the figure unknown, costs the trial on its own and sweeps one
instance up a ladder of rates; the fleet is sized by the follow-up plan from the measurement."""

from __future__ import annotations

import json

import pytest

from chipswap.models import resolve_model
from chipswap.projection import api
from chipswap.projection.flops import model_work
from chipswap.projection.serving.coverage import OUTSIDE
from chipswap.trial.benchscript import UNKNOWN_LADDER, sweep_rates
from chipswap.trial.costing import trial_cost
from chipswap.trial.spec import UNKNOWN_FIGURE
from tests.cli_helpers import run_inproc

# 8-token prompts: 4 doublings below the shortest fitted prompt (128 since issue 37), beyond every held-out
# test's reach
WORKLOAD = """title = "short prompts outside the calibration"
kind = "serving"

[model]
preset = "llama-3-8b"
task = "causal-lm"

[traffic]
steady_rps = 4
prompt_tokens = 8
output_tokens = 16
mode = "llm"

[fleet]
instance = "g6e.12xlarge"
count = 1

[slo]
p99_ms = 20000
ttft_p99_ms = 2000

[targets]
candidates = ["{cand}"]

[porting]
engineer_days = 5
"""


def test_an_outside_projection_names_the_layout_to_measure():
    w = model_work(resolve_model("llama-3-8b"))
    # 8 tokens: 4 doublings under the shortest fitted prompt (128 since issue 37 fitted the SDK tables)
    p = api.project_serving(w, "inf2.48xlarge", prompt_tokens=8, output_tokens=16)
    assert not p.fits and p.reason.startswith(OUTSIDE) and p.requests_per_s is None
    m = p.to_measure
    assert m is not None and m.tp_degree * m.replicas <= 24 and m.max_batch >= 1
    assert f"a trial measures TP{m.tp_degree} x {m.replicas} replicas" in p.reason
    assert p.as_dict()["to_measure"]["figure"].startswith("unknown")
    # memory fit: no other layout holds more sequences at once
    pinned = api.project_serving(w, "inf2.48xlarge", prompt_tokens=8, output_tokens=16, tp=8, batch=4)
    assert (pinned.to_measure.tp_degree, pinned.to_measure.max_batch) == (8, 4) and "pinned" in pinned.reason
    # inside the calibration there is no layout "to measure": the figure is projected
    inside = api.project_serving(w, "inf2.48xlarge", prompt_tokens=2000, output_tokens=200)
    assert inside.fits and inside.to_measure is None


def test_moe_on_neuron_is_refused_with_what_to_do():
    w = model_work(resolve_model("qwen3-30b-a3b"))
    p = api.project_serving(w, "trn2.48xlarge", prompt_tokens=2000, output_tokens=200)
    assert not p.fits and "MoE model" in p.reason and "measure it (chipswap trial)" in p.reason
    assert p.to_measure is not None and "\n" not in p.reason


@pytest.mark.slow
def test_plan_then_trial_writes_a_kit_whose_figure_is_to_be_measured(tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)  # the plan's report folder
    wl = tmp_path / "wl.toml"
    wl.write_text(WORKLOAD.format(cand="inf2.48xlarge"))
    code, out, err = run_inproc(capsys, "plan", str(wl), "--no-aws", "--json", "--out", str(tmp_path / "r"))
    assert code == 0, err
    cand = next(c for c in json.loads(out)["candidates"] if c["instance"] == "inf2.48xlarge")
    assert cand["excluded"].startswith(OUTSIDE) and cand["count"] is None
    layout = cand["fleet"]["to_measure"]
    assert layout["tp_degree"] >= 1 and layout["max_batch"] >= 1
    kit = tmp_path / "kit"
    code, out, err = run_inproc(capsys, "trial", str(wl), "--out", str(kit))
    assert code == 0, err
    trial = json.loads((kit / "trial.json").read_text())
    n = trial["spec"]["neuron"]
    assert (
        n["figure_known"] is False and n["projected_rps"] is None and n["throughput_label"] == UNKNOWN_FIGURE
    )
    assert (n["tp"], n["replicas"], n["max_batch"]) == (
        layout["tp_degree"], layout["replicas"], layout["max_batch"]
    )  # fmt: skip
    assert (
        n["count"] == 1 and trial["cost"]["usd"] is not None and "1 x inf2.48xlarge" in trial["cost"]["line"]
    )
    readme = (kit / "README.md").read_text()
    assert "to be measured" in readme and "No fleet is sized yet" in readme
    assert trial["follow_up"] in readme and "--bench results/*.json" in trial["follow_up"]
    bench = (kit / "bench.sh").read_text()
    ladder = " ".join(f"{4 * f:.4g}" for f in UNKNOWN_LADDER)
    assert f'SWEEP_RATES="${{SWEEP_RATES:-{ladder}}}"' in bench
    for f in ("launch.sh", "stop.sh", "deploy/k8s/deployment.yaml", "deploy/sagemaker.json"):
        assert (kit / f).exists()
    # the user's pin replaces the memory-fit layout (checked by the projection's rules)
    pinned = tmp_path / "pinned"
    code, out, err = run_inproc(capsys, "trial", str(wl), "--out", str(pinned), "--tp", "8", "--batch", "4")
    assert code == 0, err
    spec = json.loads((pinned / "trial.json").read_text())["spec"]
    n = spec["neuron"]
    assert (n["tp"], n["replicas"], n["max_batch"], n["figure_known"]) == (8, 3, 4, False)
    assert "as pinned (--tp 8 / --batch 4)" in spec["notes"][0]


def test_a_bad_pin_is_one_line_before_any_plan_runs(tmp_path, capsys):
    wl = tmp_path / "wl.toml"
    wl.write_text(WORKLOAD.format(cand="inf2.48xlarge"))
    code, out, err = run_inproc(capsys, "trial", str(wl), "--out", str(tmp_path / "k"), "--tp", "0")
    assert code == 2 and err.count("\n") == 1 and "--tp is 0, outside 1 to" in err
    assert not (tmp_path / "k").exists()


def test_an_unknown_figure_sweeps_a_ladder_and_is_costed_on_its_own():
    from dataclasses import replace

    from tests.trial_helpers import llm_spec

    known = llm_spec()
    unknown = replace(known, neuron=replace(known.neuron, count=1, count_high=1, projected_rps=None,
                                            throughput_label=UNKNOWN_FIGURE, figure_known=False))  # fmt: skip
    assert sweep_rates(unknown, unknown.neuron) == [10.0 * f for f in UNKNOWN_LADDER]
    assert sweep_rates(known, known.neuron)[2] == known.neuron.projected_rps  # 1.0 x the projection
    cost = trial_cost(unknown)
    assert cost.usd is not None and cost.hours == pytest.approx(sum(p.hours for p in cost.parts))
