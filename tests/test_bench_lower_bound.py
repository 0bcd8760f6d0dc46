"""Issue 39, item 3: a benchmark that did not saturate (completed rate = offered rate, latency flat) is a
lower bound on capacity, labelled so; it outranks a projection only above it. Imported runs (`vllm bench
serve`'s request_rate) and `chipswap bench` files (load.offered_rps) alike."""

from __future__ import annotations

import json
from pathlib import Path

from chipswap.bench.importers import convert
from chipswap.bench.results import did_not_saturate, measured_serving, parse_bench_results
from chipswap.plan.figures import Figure, pick

PEERS = Path(__file__).parent / "peer_results"
RPS = "requests/s per instance"


def _vllm(**over: object) -> dict:
    d = json.loads((PEERS / "vllm_bench_serve.json").read_text())
    return d | over


def _measured(doc: dict):
    return measured_serving(parse_bench_results(convert(doc, "v.json", "g6e.12xlarge"), "v.json"))


def test_a_run_that_kept_up_with_its_offered_rate_is_a_lower_bound() -> None:
    # the run: request rate 8, 500 of 500 answered at 8.01 requests/s, latency flat
    m = _measured(_vllm(request_rate=8.0, num_prompts=500, completed=500, failed=0, request_throughput=8.01))
    assert m.lower_bound and "lower bound" in m.note and "8.01 of 8 requests/s offered" in m.note


def test_a_saturated_run_is_capacity() -> None:
    # offered 16, carried 8.01: the server fell behind, so 8.01 is what it carries
    m = _measured(_vllm(request_rate=16.0, num_prompts=500, completed=500, failed=0, request_throughput=8.01))
    assert not m.lower_bound and "lower bound" not in m.note
    # all at once (request_rate inf, saved as a string or absent): no offered rate, so no lower bound
    assert not _measured(_vllm(request_rate="inf", request_throughput=8.01)).lower_bound
    # latency that climbs (p99 far over p50: a queue building) is saturation even at the offered rate
    climbing = _vllm(request_rate=8.0, request_throughput=8.0, median_e2el_ms=1000.0, p99_e2el_ms=9000.0)
    assert not _measured(climbing).lower_bound


def test_a_lower_bound_outranks_a_projection_only_above_it() -> None:
    bound = Figure(8.01, RPS + " (at least)", "measured", at_least=True)
    projected = Figure(15.92, RPS, "projected", band=0.3)
    chosen = pick([bound, projected])
    assert chosen.figure is projected and chosen.overridden == (bound,)
    low = Figure(5.0, RPS, "projected", band=0.3)
    chosen = pick([bound, low])
    assert chosen.figure is bound and chosen.figure.label == "measured, a lower bound"
    # a saturated measurement outranks every projection, as before
    capacity = Figure(8.01, RPS, "measured")
    assert pick([capacity, projected]).figure is capacity


def test_chipswap_bench_files_say_the_same(tmp_path: Path) -> None:
    doc = convert(_vllm(request_rate=8.0, completed=500, failed=0, num_prompts=500, request_throughput=8.01),
                  "v.json", "g6e.12xlarge")  # fmt: skip
    assert doc["load"]["offered_rps"] == 8.0  # the chipswap.bench/2 field a `chipswap bench` run writes
    res = parse_bench_results(doc, "b.json")
    assert did_not_saturate(res) is not None
    doc["load"]["offered_rps"] = 20.0
    assert did_not_saturate(parse_bench_results(doc, "b.json")) is None
