"""Load generator pieces without a network: the schedule from a trace, the figures from records, and the
chipswap.bench/1 file (written, read back strictly, turned into measured figures and a planner latency
table)."""

from __future__ import annotations

import json
from decimal import Decimal

import numpy as np
import pytest

from chipswap.bench import (
    SCHEMA,
    bucket_latency_table,
    measured_serving,
    parse_bench_results,
    read_bench_results,
)
from chipswap.bench.job import check_url, parse_extra_body
from chipswap.bench.results import build_results
from chipswap.bench.schedule import build_schedule, map_lengths
from chipswap.bench.stats import Record, Slo, summarize
from chipswap.errors import ChipswapError
from tests.cli_helpers import one_line_error

TS = np.array([0.0, 0.5, 0.7, 2.0, 2.1, 4.0])
PROMPTS = np.array([10, 400, 30, 1000, 5, 200])
OUTS = np.array([3, 0, 7, 2, 9, 1])


# --------------------------------------------------------------------------------------------- schedule
def test_trace_replay_keeps_gaps_times_the_scale():
    s = build_schedule(PROMPTS, OUTS, TS, max_requests=6, duration_s=100, time_scale=0.5, length_map="none")
    assert np.allclose(s.at_s, TS * 0.5)
    assert s.prompt_tokens.tolist() == PROMPTS.tolist()
    assert s.output_tokens.tolist() == [3, 1, 7, 2, 9, 1]  # 0 generated tokens still asks for one
    assert s.arrivals == "trace" and s.offered_rps == pytest.approx(5 / 2.0)


def test_rate_rescales_the_trace_to_that_mean_rate():
    s = build_schedule(PROMPTS, OUTS, TS, max_requests=6, duration_s=100, rate=10.0)
    assert s.offered_rps == pytest.approx(10.0)
    gaps = np.diff(s.at_s)
    assert np.allclose(gaps / gaps.sum(), np.diff(TS) / np.diff(TS).sum())  # the trace's shape is kept


def test_no_timestamps_needs_a_rate_and_gets_poisson():
    with pytest.raises(ChipswapError, match="--rate"):
        build_schedule(PROMPTS, None, None, max_requests=6, duration_s=10)
    s = build_schedule(PROMPTS, None, None, max_requests=5000, duration_s=1e4, rate=50.0, seed=3)
    assert s.arrivals == "poisson"
    assert s.offered_rps == pytest.approx(50.0, rel=0.05)
    again = build_schedule(PROMPTS, None, None, max_requests=5000, duration_s=1e4, rate=50.0, seed=3)
    assert np.array_equal(s.at_s, again.at_s)  # seeded


def test_poisson_arrivals_on_request_even_with_timestamps():
    s = build_schedule(PROMPTS, OUTS, TS, max_requests=3000, duration_s=100, rate=30.0, arrivals="poisson")
    assert s.arrivals == "poisson" and s.offered_rps == pytest.approx(30.0, rel=0.07)
    gaps = np.diff(s.at_s)
    assert np.std(gaps) / np.mean(gaps) == pytest.approx(1.0, abs=0.1)  # exponential gaps: CV 1
    assert s.prompt_tokens.tolist()[:6] == PROMPTS.tolist()  # lengths still from the trace
    with pytest.raises(ChipswapError, match="need --rate"):
        build_schedule(PROMPTS, OUTS, TS, max_requests=5, duration_s=10, arrivals="poisson")
    with pytest.raises(ChipswapError, match="unknown arrivals"):
        build_schedule(PROMPTS, OUTS, TS, max_requests=5, duration_s=10, rate=1.0, arrivals="bursty")


def test_bounded_by_count_and_duration_and_wraps_the_trace():
    s = build_schedule(PROMPTS, OUTS, TS, max_requests=3, duration_s=100, length_map="none")
    assert len(s) == 3
    s = build_schedule(PROMPTS, OUTS, TS, max_requests=100, duration_s=2.05, length_map="none")
    assert len(s) == 4 and s.at_s[-1] <= 2.05
    s = build_schedule(PROMPTS, OUTS, TS, max_requests=12, duration_s=1000, length_map="none")
    assert s.prompt_tokens.tolist() == PROMPTS.tolist() * 2  # the trace repeats, gaps too
    assert np.all(np.diff(s.at_s) >= 0)


def test_length_maps():
    lens = np.array([1, 50, 512, 1024, 7437])
    scaled = map_lengths(lens, 512, "scale")
    assert scaled.max() == 512 and scaled.min() >= 1
    assert np.all(np.diff(scaled) >= 0)  # order kept
    assert map_lengths(lens, 512, "clip").tolist() == [1, 50, 512, 512, 512]
    assert map_lengths(lens, 512, "none").tolist() == lens.tolist()
    assert map_lengths(np.array([3, 9]), 512, "scale").tolist() == [3, 9]  # already in range: unchanged


@pytest.mark.parametrize(
    "kw,words",
    [
        ({"max_requests": 0}, "--requests"),
        ({"duration_s": 0}, "--duration"),
        ({"time_scale": 1.0, "rate": 2.0}, "not both"),
        ({"time_scale": -1.0}, "--time-scale"),
        ({"rate": 0.0}, "--rate"),
        ({"length_map": "squash"}, "length map"),
    ],
)
def test_schedule_bad_options(kw, words):
    args = {"max_requests": 5, "duration_s": 10, **kw}
    with pytest.raises(ChipswapError, match=words):
        build_schedule(PROMPTS, OUTS, TS, max_length=64, **args)


# ------------------------------------------------------------------------------------------------ stats
def _rec(i, status="ok", e2e=0.1, **kw):
    r = Record(i, scheduled_s=i * 0.1, prompt_tokens=kw.pop("prompt_tokens", 10))
    r.status, r.sent_s, r.e2e_s = status, i * 0.1 + 0.001, e2e if status == "ok" else None
    for k, v in kw.items():
        setattr(r, k, v)
    return r


def test_summary_counts_rates_percentiles_and_goodput():
    e2e = [0.010 * (k + 1) for k in range(20)]  # 10..200 ms
    recs = [_rec(k, e2e=e) for k, e in enumerate(e2e)]
    recs += [_rec(20, "rejected", error="HTTP 429: full"), _rec(21, "http_error", error="HTTP 500: boom")]
    recs += [_rec(22, "timeout", error="slow"), _rec(23, "not_sent")]
    recs[-1].sent_s = None
    out = summarize(recs, Slo(e2e_ms=100))
    c = out["counts"]
    assert (c["planned"], c["sent"], c["ok"], c["rejected"], c["errors"], c["timeouts"], c["not_sent"]) == (
        24,
        23,
        20,
        1,
        2,
        1,
        1,
    )
    p = out["latency_ms"]["e2e"]
    want = np.percentile(np.array(e2e) * 1000, [50, 90, 99])
    assert (p["p50"], p["p90"], p["p99"]) == pytest.approx(tuple(want), abs=1e-3)
    assert out["rates"]["reject"] == pytest.approx(1 / 23, abs=1e-6)
    assert out["rates"]["error"] == pytest.approx(2 / 23, abs=1e-6)
    ends = [r.sent_s + r.e2e_s for r in recs if r.e2e_s is not None] + [r.sent_s for r in recs if r.sent_s]
    dur = max(ends)  # first planned send to the last answer or send (the timed-out one left last)
    assert out["duration_s"] == pytest.approx(dur, abs=1e-3)
    assert out["throughput"]["requests_per_s"] == pytest.approx(20 / dur, rel=1e-3)
    assert out["goodput"]["requests_per_s"] == pytest.approx(10 / dur, rel=1e-3)  # 10 of 20 within 100 ms
    assert {e["message"] for e in out["errors"]} == {"HTTP 429: full", "HTTP 500: boom", "slow"}
    assert out["latency_ms"]["ttft"] is None and out["padding"] is None


def test_padding_per_request_adds_up_to_the_batches():
    # batch A: bucket 16, compiled batch 4, 3 real rows of 5, 9, 16 tokens
    # batch B: bucket 32, batch 1, 20 tokens
    recs = [
        _rec(0, prompt_tokens=5, bucket=16, batch=4, fill=3, server_model_ms=4.0),
        _rec(1, prompt_tokens=9, bucket=16, batch=4, fill=3, server_model_ms=4.0),
        _rec(2, prompt_tokens=16, bucket=16, batch=4, fill=3, server_model_ms=4.0),
        _rec(3, prompt_tokens=20, bucket=32, batch=1, fill=1, server_model_ms=3.0),
    ]
    out = summarize(recs)
    pad = out["padding"]
    assert pad["real_tokens"] == 50
    assert pad["computed_tokens"] == pytest.approx(4 * 16 + 32)
    assert pad["waste_fraction"] == pytest.approx(1 - 50 / 96)
    b16, b32 = out["buckets"]
    assert (b16["seq_len"], b16["requests"], b32["seq_len"]) == (16, 3, 32)
    assert b16["slot_model_ms_p50"] == pytest.approx(1.0) and b32["slot_model_ms_p50"] == pytest.approx(3.0)
    assert b16["padding_waste"] == pytest.approx(1 - 30 / 64) and b16["mean_fill"] == pytest.approx(0.75)


def test_streamed_records_give_ttft_itl_tpot():
    r = _rec(0, e2e=1.0, ttft_s=0.2, itl_s=[0.1] * 8, output_tokens=9)
    out = summarize([r], Slo(ttft_ms=250, itl_ms=150))
    assert out["latency_ms"]["ttft"]["p50"] == pytest.approx(200)
    assert out["latency_ms"]["itl"]["p99"] == pytest.approx(100)
    assert out["latency_ms"]["tpot"]["p50"] == pytest.approx(100)  # (1.0 - 0.2) / 8
    assert out["goodput"]["fraction_of_sent"] == 1.0
    assert summarize([r], Slo(ttft_ms=150))["goodput"]["fraction_of_sent"] == 0.0


# ---------------------------------------------------------------------------------------- results file
def _doc(**over):
    recs = [
        _rec(
            k,
            e2e=0.02 + 0.001 * k,
            prompt_tokens=5 + k,
            bucket=16 if k < 6 else 32,
            batch=4,
            fill=2,
            server_model_ms=8.0 if k < 6 else 12.0,
        )
        for k in range(10)
    ]
    result = summarize(recs, Slo(e2e_ms=25))
    doc = build_results(
        outcome_result=result,
        target={"url": "http://127.0.0.1:8000", "protocol": "chipswap-predict", "model": "m", "server": None},
        load={"trace": "t.csv"},
        slo=Slo(e2e_ms=25).to_json(),
        complete=True,
        stop_reason="every planned request was sent",
        command="chipswap bench http://127.0.0.1:8000",
        instance={
            "name": "inf2.xlarge",
            "term": "on-demand",
            "region": "us-east-1",
            "usd_per_hour": "0.7582",
        },
        cost={"per_million_requests_usd": "12.5000", "basis": "goodput at the SLO"},
    )
    doc.update(over)
    return json.loads(json.dumps(doc))  # what a file holds


def test_results_round_trip_and_measured_figures(tmp_path):
    doc = _doc()
    assert doc["schema"] == SCHEMA == "chipswap.bench/2"
    assert doc["tool"]["version"] and doc["measured_at"].endswith("Z")
    path = tmp_path / "bench.json"
    path.write_text(json.dumps(doc))
    res = read_bench_results(path)
    assert res.protocol == "chipswap-predict" and res.instance == "inf2.xlarge" and res.term == "on-demand"
    assert res.ok == 10 and res.complete
    assert res.e2e_p99_ms == doc["latency_ms"]["e2e"]["p99"]
    assert res.cost_per_million_usd == Decimal("12.5000")
    m = measured_serving(res)
    assert m.source == "measured" and m.instance == "inf2.xlarge"
    assert m.requests_per_s == doc["goodput"]["requests_per_s"] and m.basis == "goodput at the SLO"
    assert m.p99_ms == res.e2e_p99_ms


def test_bucket_latency_table_feeds_the_planner_measured_cost_model():
    from chipswap.shapes.shapeplan import build_cost_models

    res = parse_bench_results(_doc(), "mem")
    table = bucket_latency_table(res)
    assert table == {16: pytest.approx(0.002), 32: pytest.approx(0.003)}  # 8 ms / 4 rows, 12 ms / 4 rows
    seq, _, desc = build_cost_models("measured", measured_table=table)
    assert desc["kind"] == "measured" and seq.kind == "measured"
    # noise that makes a longer bucket look faster is flattened (the planner refuses falling latency)
    doc = _doc()
    doc["buckets"][1]["slot_model_ms_p50"] = 1.0
    assert bucket_latency_table(parse_bench_results(doc, "mem"))[32] == pytest.approx(0.002)


def test_measured_serving_refuses_what_it_cannot_use():
    with pytest.raises(ChipswapError, match="--instance"):
        measured_serving(parse_bench_results(_doc(instance=None), "f.json"))
    doc = _doc()
    doc["counts"]["ok"] = 0
    doc["throughput"]["requests_per_s"] = 0
    with pytest.raises(ChipswapError, match="no successful request"):
        measured_serving(parse_bench_results(doc, "f.json"))
    doc = _doc(buckets=[])
    with pytest.raises(ChipswapError, match="per-bucket"):
        bucket_latency_table(parse_bench_results(doc, "f.json"))


def _set(doc, dotted, value):
    *head, last = dotted.split(".")
    for k in head:
        doc = doc[k]
    doc[last] = value


@pytest.mark.parametrize(
    "field,value,words",
    [
        ("schema", "chipswap.bench/0", "schema"),
        ("target.protocol", "grpc", "target.protocol"),
        ("counts.ok", "10", "counts.ok"),
        ("counts.ok", 99, "ok 99 > sent"),
        ("counts.sent", True, "counts.sent"),
        ("duration_s", -1, "duration_s"),
        ("throughput.requests_per_s", None, "throughput.requests_per_s"),
        ("latency_ms.e2e.p99", "fast", "latency_ms.e2e.p99"),
        ("rates.error", 2, "rates.error"),
        ("complete", "yes", "complete"),
        ("instance.name", "", "instance.name"),
        ("buckets", {"16": 1}, "buckets"),
        ("cost.per_million_requests_usd", 12.5, "decimal string"),
        ("target", [], "target"),
    ],
)
def test_bad_results_files_are_one_line_errors(tmp_path, field, value, words):
    doc = _doc()
    _set(doc, field, value)
    path = tmp_path / "bad.json"
    path.write_text(json.dumps(doc))
    message = one_line_error(None, read_bench_results, path)
    assert words in message and str(path) in message


def test_not_json_and_missing_files(tmp_path):
    p = tmp_path / "x.json"
    p.write_text('{"schema": "chipswap.bench/1", "duration_s": NaN}')
    one_line_error("NaN", read_bench_results, p)
    one_line_error("cannot read bench results", read_bench_results, tmp_path / "missing.json")
    one_line_error("must be an object", parse_bench_results, [1, 2], "list.json")


# ------------------------------------------------------------------------------------------ options
def test_url_and_extra_body_checks():
    assert check_url("http://127.0.0.1:8000/v1/") == "http://127.0.0.1:8000"
    assert check_url("https://h.example/api") == "https://h.example/api"
    for bad in ("127.0.0.1:8000", "ftp://x", "http://", "http://u:p@h/", "http://h:99999"):
        with pytest.raises(ChipswapError):
            check_url(bad)
    assert parse_extra_body('{"ignore_eos": true}') == {"ignore_eos": True}
    with pytest.raises(ChipswapError, match="not JSON"):
        parse_extra_body("{")
    with pytest.raises(ChipswapError, match="max_tokens"):
        parse_extra_body('{"max_tokens": 3}')
