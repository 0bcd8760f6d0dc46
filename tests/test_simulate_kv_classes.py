"""The step scheduler's KV bookkeeping by class (issue 38: a step counts the blocks its decoding requests need
by key mod block, not by visiting every running request) against the per-request bookkeeping it replaced, kept
here as a subclass: every request's blocks recomputed at every allocation. Both must give the same run,
request by request, on chunked prefill (which the naive reference does not model), prompts padded to buckets
(blocks given ahead of the positions written), block sizes 1, 5 and 16, and every dispatcher.
"""

from __future__ import annotations

import numpy as np
import pytest

from chipswap.simulation import simulate as S
from chipswap.simulation import steps as ST
from chipswap.simulation.policies import CHUNKED_PREFILL, PREFILL_FIRST
from tests.sim_services import GpuLike


class PerRequestKV(ST.StepSim):
    """The bookkeeping before the change: held[i] of every decoding request is kept up to date, one request
    at a time."""

    def _decoding(self, rp: ST._Replica) -> list[int]:
        # (a request preempted and re-admitted one step later has two identical entries: counted once)
        return list(dict.fromkeys(i for f, i in rp.dec if self._valid(rp, f, i)))

    def _release(self, rp: ST._Replica, i: int) -> None:
        pass  # held[i] is always current

    grows = 0  # allocations made by this bookkeeping (the test checks that it ran)

    def _grow(self, rp: ST._Replica, steps: int) -> None:
        PerRequestKV.grows += 1
        b, s = self.block, rp.it + steps
        for i in self._decoding(rp):
            add = -(-(self.key[i] + s) // b) - self.held[i]
            if add > 0:
                self.held[i] += add
                rp.blocks += add
        rp.grown = max(rp.grown, s)

    def _room_for_one_step(self, rp: ST._Replica) -> int:
        while rp.nr:
            s = rp.it + 1
            need = [i for i in self._decoding(rp) if -(-(self.key[i] + s) // self.block) > self.held[i]]
            if len(need) <= self.kv - rp.blocks:
                for i in need:
                    self.held[i] += 1
                rp.blocks += len(need)
                rp.grown = max(rp.grown, s)
                return 1
            self._preempt(rp)
        return 0


def _cases() -> list[tuple[int, str]]:
    return [(seed, d) for seed in range(18) for d in ("round_robin", "least_loaded", "shared")]


def _case(seed: int) -> tuple[S.Traffic, S.ReplicaSetup, int]:
    """Seeds 0-11: short prompts, blocks of 1, 5 or 16 tokens, padded prompts on every third. Seeds 12-17:
    prompts up to 3,000 tokens against a small cache, so a queued prompt often cannot be admitted while
    others decode (chunked steps with no prefill to run, then a decode run short of blocks)."""
    rng = np.random.default_rng(seed)
    n, replicas = int(rng.integers(60, 200)), int(rng.integers(1, 4))
    arrivals = S.poisson_arrivals(float(rng.uniform(5, 40)), rng, n=n)
    if seed >= 12:
        tr = S.make_traffic(arrivals, rng.integers(200, 3000, n), rng.integers(1, 300, n))
        setup = S.ReplicaSetup(
            max_batch=int(rng.integers(16, 64)), max_length=4096, policy=CHUNKED_PREFILL,
            token_budget=int(rng.choice([2048, 8192])), kv_blocks=int(rng.integers(200, 320)),
        )  # fmt: skip
        return tr, setup, replicas
    tr = S.make_traffic(arrivals, rng.integers(1, 600, n), rng.integers(1, 200, n))
    block = int(rng.choice([1, 5, 16]))
    buckets = (128, 256, 512, 1024) if seed % 3 == 0 else ()  # padded prompts: blocks ahead of positions
    setup = S.ReplicaSetup(
        max_batch=int(rng.integers(4, 24)),
        max_length=4096,
        policy=CHUNKED_PREFILL if seed % 4 else PREFILL_FIRST,
        token_budget=int(rng.choice([64, 256, 2048])) if seed % 4 else 0,
        kv_blocks=int(rng.integers(60, 200)) * (16 // block if block < 16 else 1),
        context_block=block,
        prefill_buckets=buckets,
    )
    return tr, setup, replicas


@pytest.mark.parametrize("seed,dispatch", _cases())
def test_kv_by_class_matches_kv_per_request(
    seed: int, dispatch: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    tr, setup, replicas = _case(seed)
    fast = S.simulate(tr, GpuLike(), setup, replicas, dispatch=dispatch)
    monkeypatch.setattr(S, "StepSim", PerRequestKV)  # the name simulate_steps runs
    before = PerRequestKV.grows
    slow = S.simulate(tr, GpuLike(), setup, replicas, dispatch=dispatch)
    assert PerRequestKV.grows > before  # the per-request bookkeeping did run
    assert fast.preemptions == slow.preemptions
    for got, want in ((fast.ttft_s, slow.ttft_s), (fast.e2e_s, slow.e2e_s), (fast.start_s, slow.start_s)):
        np.testing.assert_array_equal(got, want)
    np.testing.assert_array_equal(fast.replica_utilization, slow.replica_utilization)


def test_the_cases_preempt_and_pad() -> None:
    """The cases above exercise what the class bookkeeping must get right: preemptions (requests leave their
    class mid-run) and padded prompts (blocks held ahead)."""
    preempted = padded = 0
    for seed, dispatch in _cases():
        tr, setup, replicas = _case(seed)
        r = S.simulate(tr, GpuLike(), setup, replicas, dispatch=dispatch)
        preempted += r.preemptions > 0
        padded += bool(setup.prefill_buckets) and r.preemptions > 0
    assert preempted >= 30 and padded >= 3, (preempted, padded)
