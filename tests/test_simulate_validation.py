"""The simulator against published behaviour under load (../shared/reference/neuron-benchmarks-modern/) and
against queueing theory: mean TTFT and TPOT within 25 % at each published rate and the saturation rate within
20 %, for every check not listed as a known miss (each with its reason in docs/simulation.md); the shared
queue's mean wait matches Erlang C and per-replica queues wait longer. No timing is asserted.

The published part needs ../shared/reference (CI has it) and is skipped with the reason otherwise.
"""

from __future__ import annotations

import csv
from pathlib import Path

import pytest

from chipswap.simulation import validation as V

DATA = (
    Path(__file__).resolve().parents[1] / ".." / "shared" / "reference" / "neuron-benchmarks-modern"
) / "llm_serving.csv"


@pytest.mark.skipif(
    not DATA.exists(), reason="../shared/reference/neuron-benchmarks-modern is not checked out"
)
def test_published_behaviour_under_load_within_bounds() -> None:
    rows = list(csv.DictReader(DATA.open(encoding="utf-8")))
    checks = V.validate(rows)
    inside = [c for c in checks if not V.known_miss(c)]
    rates = [c for c in inside if c.scenario.startswith("asynchronous")]
    saturations = [c for c in inside if c.scenario == "saturation"]
    # enough of each kind that the bounds mean something: three models, two stacks
    assert len(rates) >= 5 and len(saturations) >= 5
    assert len({c.source_id for c in inside}) >= 3
    for c in rates:
        e = c.errors()
        assert abs(e["ttft"]) <= V.TTFT_TPOT_BOUND, (c.source_id, c.scenario, e)
        assert abs(e["tpot"]) <= V.TTFT_TPOT_BOUND, (c.source_id, c.scenario, e)
    for c in saturations:
        assert abs(c.errors()["rps"]) <= V.SATURATION_BOUND, (c.source_id, c.config, c.errors())
    # every known miss still names a check that exists (a stale entry would hide nothing)
    for source, *_ in V.KNOWN_MISSES:
        assert any(c.source_id.startswith(source) for c in checks)


@pytest.mark.skipif(
    not DATA.exists(), reason="../shared/reference/neuron-benchmarks-modern is not checked out"
)
def test_the_check_fails_on_wrong_costs() -> None:
    """The bounds can fail: the same runs with every idle cost 1.5x too slow land outside them."""
    rows = list(csv.DictReader(DATA.open(encoding="utf-8")))
    slow = [
        {
            **r,
            "ttft_ms_mean": str(float(r["ttft_ms_mean"]) * 1.5),
            "tpot_ms_mean": str(float(r["tpot_ms_mean"]) * 1.5),
        }
        if r["scenario"].split()[-1] == "synchronous"
        else r
        for r in rows
        if r["source_id"] == "optimum-neuron-tgi-70b-inf2"
    ]
    checks = V.validate(slow)
    assert checks
    assert all(
        max(abs(e) for e in c.errors().values()) > min(V.TTFT_TPOT_BOUND, V.SATURATION_BOUND) for c in checks
    )


@pytest.mark.slow
def test_shared_queue_is_erlang_c_and_per_replica_queues_wait_longer() -> None:
    by = {q.dispatch: q for q in V.mmc_checks(n=400_000)}
    shared = by["shared"]
    assert shared.simulated_wait_s == pytest.approx(shared.erlang_c_wait_s, rel=0.12)
    assert by["round_robin"].simulated_wait_s > 2 * shared.erlang_c_wait_s
    assert by["least_loaded"].simulated_wait_s > by["shared"].simulated_wait_s
