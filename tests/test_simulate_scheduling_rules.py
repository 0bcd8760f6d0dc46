"""Scheduling rules of the step scheduler (chipswap.simulation.steps) that issue 30 found broken, each
checked on the schedule the simulator produced: least loaded reads the loads at the arrival; a shared queue
starts a waiting request at the first free slot; the paged KV cache holds only the blocks in use; a
preempted request recomputes its prompt and every token it had produced; two requests cannot preempt each
other over and over."""

from __future__ import annotations

import numpy as np
import pytest

from chipswap.simulation import simulate as S
from chipswap.simulation.policies import CHUNKED_PREFILL, NEURON_STATIC_SLOTS, PREFILL_FIRST
from tests.sim_services import GpuLike, TokenLinear
from tests.test_simulate_exact import _traffic

NEURON_CHUNKED = S.ReplicaSetup(
    max_batch=8, batch_sizes=(8,), prefill_buckets=(512, 1024, 2048), decode_buckets=(1024, 2048, 2304),
    policy=NEURON_STATIC_SLOTS, token_budget=256,
)  # fmt: skip


def _busier_choices(res: S.SimResult) -> int:
    """Arrivals sent to a replica with more outstanding requests (arrived before, last token not out by the
    arrival; a completion at the very instant still counts) than another replica had."""
    a, rep = res.arrivals_s, res.replica_of
    done = res.e2e_s + a
    bad = 0
    for i in np.flatnonzero(rep >= 0):
        out = (np.arange(a.size) < i) & (rep >= 0) & (done >= a[i])
        loads = np.bincount(rep[out], minlength=res.replicas)
        bad += int(loads[rep[i]] > loads.min())
    return bad


@pytest.mark.parametrize(
    "setup",
    [
        S.ReplicaSetup(max_batch=16, max_length=4096, policy=CHUNKED_PREFILL),
        S.ReplicaSetup(max_batch=16, max_length=4096, policy=CHUNKED_PREFILL, kv_blocks=250),
        NEURON_CHUNKED,
        S.ReplicaSetup(max_batch=16, max_length=4096, policy=PREFILL_FIRST, kv_blocks=250),
    ],
    ids=["chunked", "chunked-kv", "neuron-chunked", "prefill-first-kv"],
)
def test_least_loaded_reads_the_loads_at_each_arrival(setup: S.ReplicaSetup) -> None:
    """Requests that finish at the end of a step that carries a prefill chunk leave the dispatcher's count
    when their last token is out, not when the step starts (3-10 % of arrivals went to a busier replica)."""
    res = S.simulate(_traffic(6.0, 1500, seed=3), GpuLike(), setup, 3, dispatch="least_loaded")
    assert np.isfinite(res.e2e_s).all()
    assert _busier_choices(res) == 0


def test_a_shared_queue_starts_a_waiting_request_at_the_first_free_slot() -> None:
    """Replica 0 is claimed for request 3 but its next step's token budget goes to request 2's long prompt;
    replica 1 has free slots and steps every ~21 ms. Request 3 must start at replica 1's next step boundary,
    not when request 2's prompt is done on replica 0 (about 0.25 s later)."""
    setup = S.ReplicaSetup(
        max_batch=3, batch_sizes=(3,), prefill_buckets=(128, 2048), decode_buckets=(2048, 4096),
        policy=NEURON_STATIC_SLOTS, token_budget=256,
    )  # fmt: skip
    service = GpuLike()
    step = service.decode_step_s(3, 2048)
    waits = []
    for a3 in np.arange(0.50, 0.70, 0.005):
        tr = S.make_traffic([0.0, 0.001, 0.5, a3], [100, 100, 2000, 100], [1000, 1000, 10, 10])
        res = S.simulate(tr, service, setup, 2, dispatch="shared")
        waits.append(res.start_s[3] - a3)
    # the claimed replica's step (a decode plus a 255-token chunk) and then replica 1's next step
    assert max(waits) <= 2 * (step + service.prefill_s(1, 256))
