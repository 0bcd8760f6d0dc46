"""plan_shapes on real and synthetic traces; the plan file contract; snippets; the SVG plot."""

from __future__ import annotations

import json
import xml.etree.ElementTree as ET

import numpy as np
import pytest

from chipswap import shapes as B
from chipswap.errors import ChipswapError
from chipswap.report.shapes_plot import histogram_svg
from chipswap.shapes.shapeplan import ShapePlan, batch_buckets_for_rate, load_plan, plan_shapes
from chipswap.traffic import Trace, bundled_trace_path, read_trace


def _trace(prompt, output=None, ts=None):
    return Trace(
        path="mem",
        prompt_tokens=np.asarray(prompt, dtype=np.int64),
        output_tokens=None if output is None else np.asarray(output, dtype=np.int64),
        timestamps_s=None if ts is None else np.asarray(ts, dtype=np.float64),
        columns={},
    )


@pytest.fixture(scope="module")
def azure():
    return read_trace(bundled_trace_path())


def test_llm_plan_on_azure_beats_every_equal_k_baseline(azure):
    plan = plan_shapes(azure, mode="llm", k=6)
    assert plan.mode == "llm" and len(plan.sequence_buckets) == 6 and len(plan.decode_buckets) == 6
    assert plan.max_length == int(azure.prompt_tokens.max()) == plan.sequence_buckets[-1]
    assert plan.max_total_length == int((azure.prompt_tokens + azure.output_tokens).max())
    # recompute the optimal padding overhead independently from the trace
    edges = np.asarray(plan.sequence_buckets)
    padded = edges[np.searchsorted(edges, azure.prompt_tokens)]
    expect = 100 * (padded.sum() - azure.prompt_tokens.sum()) / azure.prompt_tokens.sum()
    assert plan.padding_overhead_pct == pytest.approx(expect)
    for name in ("powers_of_two", "quantiles", "geometric", "linear"):
        row = plan.baselines[name]
        assert row["k"] == 6
        assert row["waste"] >= plan.totals["waste"]
        assert plan.decode_baselines[name]["waste"] >= plan.decode_totals["waste"]
    assert sum(r["share"] for r in plan.buckets) == pytest.approx(1.0)


def test_decode_buckets_weigh_each_generated_token():
    # one long request generating many tokens dominates decode; a short one with 1 token barely counts
    tr = _trace([10, 500], [1, 400])
    plan = plan_shapes(tr, mode="llm", k=1, decode_k=2)
    steps = np.concatenate([np.arange(11, 12), np.arange(501, 901)])
    edges = np.asarray(plan.decode_buckets)
    assert edges[-1] == 900
    padded = edges[np.searchsorted(edges, steps)]
    best = min((np.where(steps <= e, e, 900).sum(), e) for e in np.unique(steps)[:-1])
    assert padded.sum() == best[0]
    assert plan.decode_totals["real"] == steps.sum()


def test_reject_policy_drops_requests_from_decode_and_reports_share():
    tr = _trace([10, 20, 5000], [5, 5, 5])
    plan = plan_shapes(tr, mode="llm", k=1, max_length=64, policy="reject")
    assert plan.overflow_share == pytest.approx(1 / 3)
    assert plan.decode_buckets == [25]
    tr2 = plan_shapes(tr, mode="llm", k=1, max_length=64, policy="truncate")
    assert tr2.decode_buckets == [69]  # truncated prompt 64 + 5 generated


def test_encoder_mode_and_snippets(azure):
    plan = plan_shapes(azure, mode="encoder", k=3)
    assert plan.decode_buckets == [] and plan.batch_buckets == [1]
    snip = plan.snippets()
    lines = [x for x in snip["optimum_neuron"].splitlines() if x.startswith("optimum-cli")]
    assert [int(x.split("--sequence_length ")[1].split()[0]) for x in lines] == plan.sequence_buckets
    llm = plan_shapes(azure, mode="llm", k=3)
    s = llm.snippets()
    assert f"context_encoding_buckets={llm.sequence_buckets}" in s["nxdi"]
    assert f"token_generation_buckets={llm.decode_buckets}" in s["nxdi"]
    assert "NEURON_TOKEN_GEN_BUCKETS=" + ",".join(map(str, llm.decode_buckets)) in s["vllm_neuron"]
    over = json.loads(s["vllm_neuron"].split("--additional-config '")[1].split("'")[0])
    assert over["override_neuron_config"]["context_encoding_buckets"] == llm.sequence_buckets


def test_attention_cost_model_uses_model_dims(azure):
    dims = {"hidden_size": 768, "num_layers": 12}
    plan = plan_shapes(azure, mode="encoder", k=4, cost_model="attention", model_dims=dims)
    a, b = B.attention_coefficients(768, 12)
    assert plan.cost_coefficients["a"] == a and plan.cost_coefficients["b"] == b
    model = B.attention_cost(a, b)
    h = B.histogram_from_lengths(azure.prompt_tokens)
    assert B.evaluate(h, plan.sequence_buckets, model).padded_total == pytest.approx(plan.totals["padded"])
    tok = plan_shapes(azure, mode="encoder", k=4)
    assert plan.totals["padded"] <= B.evaluate(h, tok.sequence_buckets, model).padded_total


def test_measured_cost_model_table():
    tr = _trace([30, 60, 100, 120, 250])
    table = {64: 1.0, 128: 2.0, 256: 5.0}
    plan = plan_shapes(
        tr, mode="encoder", k=2, cost_model="measured", measured_table=table, measured_interpolate=False
    )
    assert set(plan.sequence_buckets) <= set(table) and plan.max_length == 256
    with pytest.raises(ChipswapError, match="needs a latency table"):
        plan_shapes(tr, mode="encoder", cost_model="measured")


def test_plan_json_round_trip_and_contract(tmp_path, azure):
    plan = plan_shapes(azure, mode="llm", k=4, arrival_rate_rps="trace")
    path = plan.save(tmp_path / "plan.json")
    d = json.loads(path.read_text())
    for key in (
        "schema",
        "mode",
        "sequence_buckets",
        "decode_buckets",
        "batch_buckets",
        "max_length",
        "overflow_policy",
        "cost_model",
        "padding_overhead_pct",
        "overflow_share",
        "source_trace",
    ):
        assert key in d
    assert d["schema"] == "chipswap.shapeplan/1" and d["max_length"] == d["sequence_buckets"][-1]
    back = load_plan(path)
    assert back == ShapePlan.from_dict(d)
    assert back.sequence_buckets == plan.sequence_buckets and back.decode_buckets == plan.decode_buckets
    assert back.batch_buckets == plan.batch_buckets


@pytest.mark.parametrize(
    ("mutate", "match"),
    [
        (lambda d: d.pop("sequence_buckets"), "key 'sequence_buckets' is missing"),
        (lambda d: d.update(sequence_buckets=[5, 3]), "strictly ascending"),
        (lambda d: d.update(max_length=1), "key 'max_length' = 1 differs"),
        (lambda d: d.update(mode="gpu"), "key 'mode' is 'gpu'"),
        (lambda d: d.update(schema="x/2"), "key 'schema'"),
        (lambda d: d.update(batch_buckets=[0]), "key 'batch_buckets'"),
        (lambda d: d.update(overflow_policy="drop"), "key 'overflow_policy'"),
        (lambda d: d.update(padding_overhead_pct="a lot"), "key 'padding_overhead_pct' has str"),
    ],
)
def test_load_plan_errors_name_file_and_key(tmp_path, azure, mutate, match):
    d = plan_shapes(azure, mode="llm", k=2).to_dict()
    mutate(d)
    p = tmp_path / "plan.json"
    p.write_text(json.dumps(d))
    with pytest.raises(ChipswapError, match=match) as exc:
        load_plan(p)
    assert str(p) in str(exc.value)


def test_load_plan_missing_and_not_json(tmp_path):
    with pytest.raises(ChipswapError, match="plan file not found"):
        load_plan(tmp_path / "nope.json")
    (tmp_path / "bad.json").write_text("{")
    with pytest.raises(ChipswapError, match="not JSON"):
        load_plan(tmp_path / "bad.json")


def test_batch_buckets_for_rate():
    low, _ = batch_buckets_for_rate(0.1, window_s=0.05, max_batch=8, k=3)
    assert low[0] == 1 and low[-1] <= 3
    high, info = batch_buckets_for_rate(1000, window_s=0.05, max_batch=8, k=3)
    assert high[-1] == 8 and info["mean_arrivals_per_window"] == pytest.approx(50)
    with pytest.raises(ChipswapError, match="positive"):
        batch_buckets_for_rate(0)
    with pytest.raises(ChipswapError, match="no timestamps"):
        plan_shapes(_trace([5, 6], [1, 1]), mode="llm", arrival_rate_rps="trace")


def test_llm_mode_needs_output_tokens():
    with pytest.raises(ChipswapError, match="no output column"):
        plan_shapes(_trace([5, 6]), mode="llm")
    with pytest.raises(ChipswapError, match="mode 'gpu' is unknown"):
        plan_shapes(_trace([5, 6]), mode="gpu")


def test_histogram_svg_draws_bars_and_edges(azure):
    plan = plan_shapes(azure, mode="encoder", k=5)
    svg = histogram_svg(plan, plan.sequence_buckets, compare_edges=[128, 256, 7437])
    root = ET.fromstring(svg)
    ns = "{http://www.w3.org/2000/svg}"
    groups = {g.get("id", ""): g for g in root.iter(f"{ns}g")}  # matplotlib: one group per artist gid

    def x0(g: ET.Element) -> float:
        return float(next(g.iter(f"{ns}path")).get("d", "").split()[1])

    edges = [groups[f"edge-{i}"] for i in range(5) if f"edge-{i}" in groups]
    bars = [g for gid, g in groups.items() if gid.startswith("bar-")]
    assert len(edges) == 5 and len(bars) > 20
    xs = [x0(e) for e in edges]
    frame = next(groups[gid] for gid in groups if gid == "frame").iter(f"{ns}path")
    right = float(next(frame).get("d", "").split()[4])
    # largest edge near the right of the plot but inside its border, so the line stays visible
    assert xs == sorted(xs) and right * 0.9 < xs[-1] < right - 2
    assert len([gid for gid in groups if gid.startswith("compare-edge-")]) == 3
    # also accepts a bare (lengths, counts) pair
    ET.fromstring(histogram_svg(([1, 2, 3], [4, 5, 6]), [2, 3]))


def test_batch_model_tables_are_bounded():
    with pytest.raises(ChipswapError, match="arrivals per window, more than 1,000,000"):
        batch_buckets_for_rate(1e12, window_s=0.05)
    with pytest.raises(ChipswapError, match="max batch 100000 exceeds the limit of 4,096"):
        batch_buckets_for_rate(10, max_batch=100_000)


def test_max_positions_names_the_model_limit():
    tr = _trace([10, 20, 5000], [5, 5, 5])
    with pytest.raises(ChipswapError, match="exceed the model's maximum positions 4,096"):
        plan_shapes(tr, mode="encoder", max_positions=4096)
    ok = plan_shapes(tr, mode="encoder", max_positions=4096, max_length=4096, policy="truncate")
    assert ok.max_length == 4096 and ok.overflow_share == pytest.approx(1 / 3)
    with pytest.raises(ChipswapError, match="--max-total-length 4096 or less"):
        plan_shapes(tr, mode="llm", max_positions=4096, max_length=64, max_total_length=5000)
