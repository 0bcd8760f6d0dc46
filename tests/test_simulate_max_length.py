"""Lengths beyond a projected max length (issue 40, item 3): a setup built from a projection refuses traffic
it would otherwise drop, with the count (one line); a stated serving limit still rejects and counts; the
plan's simulator setup takes its max length from the workload's traffic, not from the mean request."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from chipswap.errors import ChipswapError
from chipswap.simulation import simulate as S
from chipswap.simulation.servicetime import ServingConfig, positions_held
from tests.sim_services import GpuLike

# a projection at the mean request (prompt 1000, output 200) sets max_length = 1000 + 200 - 1
MEAN_CONFIG = ServingConfig("g6e.xlarge", tp_degree=1, replicas=1, max_batch=16, weight_dtype="bf16",
                            max_length=1199)  # fmt: skip


def _mix(n: int = 400, seed: int = 3) -> S.Traffic:
    """A +-10 % length mix around the mean request: about half hold more than the mean's positions."""
    rng = np.random.default_rng(seed)
    prompt = rng.integers(900, 1101, n)
    out = rng.integers(180, 221, n)
    return S.make_traffic(np.sort(rng.uniform(0, 60, n)), prompt, out)


def test_lengths_beyond_the_projected_max_length_are_refused_with_the_count() -> None:
    tr = _mix()
    over = int((positions_held(tr.prompt_tokens, tr.output_tokens) > 1199).sum())
    assert 0 < over < len(tr)  # the mix really does cross the mean's length
    setup = S.setup_from_serving(MEAN_CONFIG)
    with pytest.raises(ChipswapError) as exc:
        S.simulate(tr, GpuLike(), setup, 1)
    msg = str(exc.value)
    assert "\n" not in msg and f"{over:,} of {len(tr):,} requests" in msg and "max length 1,199" in msg
    with pytest.raises(ChipswapError, match=f"{over:,} of {len(tr):,} requests"):
        S.request_work(tr, GpuLike(), setup)  # the fleet search's bound refuses alike


def test_max_length_from_the_traffic_serves_every_request() -> None:
    tr = _mix()
    longest = int(positions_held(tr.prompt_tokens, tr.output_tokens).max())
    res = S.simulate(tr, GpuLike(), S.setup_from_serving(MEAN_CONFIG, max_length=longest), 1)
    assert res.rejected == 0 and res.requests == len(tr)


def test_a_stated_serving_limit_still_rejects_and_counts() -> None:
    tr = _mix()
    over = int((positions_held(tr.prompt_tokens, tr.output_tokens) > 1199).sum())
    res = S.simulate(tr, GpuLike(), S.setup_from_serving(MEAN_CONFIG, over_length="reject"), 1)
    assert res.rejected == over and res.reject_reasons == (("longer than the replica's max length", over),)
    assert S.ReplicaSetup(max_batch=4, max_length=100).over_length == "reject"  # a bare setup: a stated limit
    with pytest.raises(ChipswapError, match="over_length 'drop' is not known"):
        S.ReplicaSetup(max_batch=4, over_length="drop")


def test_the_plans_simulator_takes_max_length_from_the_traffic(tmp_path: Any) -> None:
    """A steady rate with lengths from a histogram: the projection and the simulator see the histogram's
    lengths (before: the projection was asked for a length of None and failed with a TypeError)."""
    from chipswap.plan import run_plan
    from chipswap.plan import simulation as stage
    from chipswap.plan.workload_file import parse_workload

    rows = ["prompt_tokens,output_tokens,count", "400,50,30", "500,64,40", "700,90,30"]
    (tmp_path / "hist.csv").write_text("\n".join(rows) + "\n")
    seen: list[Any] = []
    real = stage._Fleet.__init__

    def spy(self: Any, *a: Any, **k: Any) -> None:
        real(self, *a, **k)
        seen.append((self.setup, self.load))

    d = {
        "title": "histogram lengths",
        "model": {"preset": "llama-3-8b"},
        "traffic": {"histogram": "hist.csv", "steady_rps": 3.0, "burst_window_s": 120},
        "fleet": {"instance": "g6e.xlarge", "count": 2},
        "slo": {"ttft_p99_ms": 1500, "p99_ms": 8000},
        "targets": {"candidates": ["inf2.xlarge"]},
        "porting": {"engineer_days": 10},
    }
    mp = pytest.MonkeyPatch()
    mp.setattr(stage._Fleet, "__init__", spy)
    try:
        run_plan(parse_workload(d, tmp_path / "w.toml"), tmp_path / "w.toml")
    finally:
        mp.undo()
    assert seen
    for setup, load in seen:
        t = load.traffic
        assert setup.max_length == 700 + 90 - 1
        rejected, reasons = S.reject_mask(t, setup, "llm")
        assert not rejected.any(), reasons
