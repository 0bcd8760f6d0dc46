"""The fast simulator against the naive per-call reference (tests.simulate_reference): the same
requests under the same serving rules must get the same replica and the same times, request by request.

With dyadic service times and arrival times (multiples of 2**-10) every sum is exact in float64, so the two
must agree bit for bit, ties included (an arrival at the very instant a step ends). With general floats they
agree to rounding."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from chipswap.simulation import simulate as S
from tests.sim_services import GpuLike, TokenLinear
from tests.simulate_reference import simulate_reference

GPU = S.ReplicaSetup(max_batch=8, max_length=4096)
NEURON = S.ReplicaSetup(
    max_batch=8,
    batch_sizes=(4, 8),
    prefill_buckets=(128, 512, 1024, 2048),
    decode_buckets=(512, 1024, 2048, 2304),
)


def _traffic(rate: float, n: int, seed: int, max_prompt: int = 2000, max_out: int = 200) -> S.Traffic:
    rng = np.random.default_rng(seed)
    arrivals = S.poisson_arrivals(rate, rng, n=n)
    return S.make_traffic(arrivals, rng.integers(1, max_prompt, n), rng.integers(0, max_out, n))


def _agree(traffic, service, setup, replicas, mode, dispatch, *, exact=False):
    fast = S.simulate(traffic, service, setup, replicas, mode=mode, dispatch=dispatch)
    ref = simulate_reference(traffic, service, setup, replicas, mode=mode, dispatch=dispatch)
    np.testing.assert_array_equal(fast.replica_of, ref.replica_of)
    for got, want in ((fast.ttft_s, ref.ttft_s), (fast.e2e_s, ref.e2e_s), (fast.start_s, ref.start_s)):
        if exact:
            np.testing.assert_array_equal(got, want)
        else:
            np.testing.assert_allclose(got, want, rtol=1e-9, atol=1e-9)
    np.testing.assert_allclose(fast.replica_utilization * fast.span_s, ref.busy_s, rtol=1e-9, atol=1e-9)
    assert fast.padding.prefill_padded_tokens == ref.prefill_padded_tokens
    if mode == "llm":
        assert fast.calls == ref.decode_steps
        assert fast.padding.decode_padded_positions == ref.decode_padded_positions
    return fast


@pytest.mark.parametrize("dispatch", S.DISPATCH)
@pytest.mark.parametrize("replicas", [1, 3])
@pytest.mark.parametrize("setup", [GPU, NEURON], ids=["gpu", "neuron"])
@pytest.mark.parametrize("rate", [0.3, 2.0, 12.0], ids=["light", "busy", "overloaded"])
def test_llm_matches_reference(rate, setup, replicas, dispatch):
    traffic = _traffic(rate * replicas, 300, seed=int(rate * 10) + replicas)
    fast = _agree(traffic, GpuLike(), setup, replicas, "llm", dispatch)
    assert fast.rejected == 0 or setup is NEURON
    assert fast.calls > 0


@pytest.mark.parametrize("dispatch", S.DISPATCH)
@pytest.mark.parametrize("replicas", [1, 3])
@pytest.mark.parametrize(
    "setup",
    [
        S.ReplicaSetup(max_batch=8, max_queue_delay_s=0.02),
        S.ReplicaSetup(
            max_batch=8, batch_sizes=(1, 4, 8), prefill_buckets=(256, 1024, 2048), max_queue_delay_s=0.0
        ),
    ],
    ids=["gpu", "neuron"],
)
def test_encoder_matches_reference(setup, replicas, dispatch):
    traffic = _traffic(40.0 * replicas, 600, seed=replicas)
    _agree(traffic, TokenLinear(per_call=0.002, per_token=2e-5), setup, replicas, "encoder", dispatch)


def test_long_contexts_use_on_demand_tables(monkeypatch):
    """Contexts too long for per-token tables: the block widens and tables are computed on demand; same
    answers as the reference."""
    monkeypatch.setattr(S, "DENSE_TABLE_ENTRIES", 100)
    traffic = _traffic(2.0, 200, seed=5, max_prompt=60_000, max_out=300)
    setup = S.ReplicaSetup(max_batch=4)
    _agree(traffic, GpuLike(), setup, 2, "llm", "least_loaded")
    _agree(
        traffic,
        GpuLike(),
        S.ReplicaSetup(max_batch=4, decode_buckets=(30_000, 61_000)),
        2,
        "llm",
        "round_robin",
    )


DYADIC = 2.0**-10


@st.composite
def small_case(draw):
    n = draw(st.integers(1, 25))
    gaps = draw(st.lists(st.sampled_from([0.0, 0.25, 1.0, 2.5, 7.0, 30.0]), min_size=n, max_size=n))
    arrivals = np.cumsum(gaps)
    prompts = draw(st.lists(st.integers(1, 70), min_size=n, max_size=n))
    outputs = draw(st.lists(st.integers(0, 12), min_size=n, max_size=n))
    max_batch = draw(st.integers(1, 4))
    neuron = draw(st.booleans())
    if neuron:
        prefill = tuple(sorted(draw(st.sets(st.sampled_from([8, 16, 32, 64]), min_size=1))))
        decode = tuple(sorted(draw(st.sets(st.sampled_from([16, 40, 64, 90]), min_size=1))))
        sizes = draw(st.sampled_from([(max_batch,), tuple(sorted({1, max_batch}))]))
        setup = S.ReplicaSetup(
            max_batch, sizes, prefill, decode, max_queue_delay_s=draw(st.sampled_from([0.0, 1.0]))
        )
    else:
        setup = S.ReplicaSetup(
            max_batch,
            max_length=draw(st.sampled_from([0, 60, 200])),
            context_block=draw(st.sampled_from([1, 4, 16])),
            max_queue_delay_s=draw(st.sampled_from([0.0, 0.5, 2.0])),
        )
    service = TokenLinear(
        per_call=draw(st.sampled_from([0.25, 1.0])),
        per_token=draw(st.sampled_from([DYADIC, 8 * DYADIC, 0.125])),
        per_kv=draw(st.sampled_from([0.0, DYADIC])),
    )
    return (
        S.make_traffic(arrivals, prompts, outputs),
        service,
        setup,
        draw(st.integers(1, 3)),
        draw(st.sampled_from(S.MODES)),
        draw(st.sampled_from(S.DISPATCH)),
    )


@settings(max_examples=800, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(small_case())
def test_bit_exact_on_random_small_cases(case):
    traffic, service, setup, replicas, mode, dispatch = case
    rejected, _ = S.reject_mask(traffic, setup, mode)
    if rejected.all():
        return
    _agree(traffic, service, setup, replicas, mode, dispatch, exact=True)


@pytest.mark.parametrize("dispatch", S.DISPATCH)
def test_large_fleet_dispatch_matches_reference(dispatch):
    """More replicas than a scan handles: the least-loaded choice comes from per-level heaps instead."""
    replicas = S.SCAN_REPLICAS + 16
    traffic = _traffic(40.0, 1500, seed=9)
    fast = _agree(traffic, GpuLike(), GPU, replicas, "llm", dispatch)
    assert len(set(fast.replica_of.tolist())) > S.SCAN_REPLICAS // 2


@pytest.mark.parametrize("dispatch", S.DISPATCH)
@pytest.mark.parametrize("setup", [GPU, NEURON], ids=["gpu", "neuron"])
def test_the_step_grows_with_the_live_batch_as_the_reference_charges_it(setup, dispatch):
    """Issue 40: ReplicaSetup.live_step_s adds that many seconds per live sequence to every decode step; the
    reference charges it call by call (k live x live_step_s), the engine through its per-batch tables."""
    from dataclasses import replace

    traffic = _traffic(6.0, 300, seed=11)
    grown = _agree(traffic, GpuLike(), replace(setup, live_step_s=3e-3), 2, "llm", dispatch)
    flat = S.simulate(traffic, GpuLike(), setup, 2, mode="llm", dispatch=dispatch)
    assert np.nanmean(grown.e2e_s) > np.nanmean(flat.e2e_s)


def test_a_bad_live_step_is_one_line():
    from chipswap.errors import ChipswapError

    with pytest.raises(ChipswapError, match="live_step_s"):
        S.ReplicaSetup(max_batch=4, live_step_s=-1.0)
