"""Fleet sizing for an SLO: the answer is the smallest size that meets it (checked one below), the verdicts
when no size can, monotonicity in traffic and in the SLO (property tests), and one-line errors."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from chipswap.errors import ChipswapError
from chipswap.simulation import fleet as F
from chipswap.simulation import simulate as S
from tests.sim_services import GpuLike, TokenLinear

SETUP = S.ReplicaSetup(max_batch=8, max_length=8192)


def _traffic(rate: float, n: int, seed: int) -> S.Traffic:
    rng = np.random.default_rng(seed)
    arrivals = S.bursty_arrivals(rate, n / rate, rng, burst_factor=3.0, burst_share=0.2, mean_burst_s=20.0)
    m = arrivals.size
    return S.make_traffic(arrivals, rng.integers(50, 2000, m), rng.integers(1, 120, m))


def test_sized_fleet_is_the_smallest_that_meets():
    traffic = _traffic(8.0, 3000, seed=1)
    slo = F.Slo(ttft_s=1.0, e2e_s=4.0)
    sz = F.size_fleet(traffic, GpuLike(), SETUP, 2, slo, window_s=60.0, warmup_s=30.0, cooldown_s=20.0)
    assert sz.verdict == "meets" and sz.instances is not None and sz.replicas == 2 * sz.instances
    assert sz.check is not None and sz.check.meets and sz.check.instances == sz.instances
    assert sz.check.ttft_s <= 1.0 and sz.check.e2e_s <= 4.0
    assert sz.lower_bound <= sz.instances
    part, window = F.window_traffic(traffic, 60.0, warmup_s=30.0, cooldown_s=20.0)
    assert window == sz.window
    measure = (window.start_s, window.end_s)
    below = F.check_fleet(part, GpuLike(), SETUP, sz.instances - 1, 2, slo, measure=measure)
    assert not below.meets and ("TTFT" in below.why or "end-to-end" in below.why)
    probed = {n: meets for n, _, _, meets in sz.probes}
    assert probed[sz.instances] and probed.get(sz.instances + 1, True)
    assert str(sz.instances) in sz.message and "\n" not in sz.message


def test_encoder_fleet_sizing_on_neuron_shapes():
    """Dynamic batching to compiled batch sizes, padded to buckets: the same search, the same guarantee."""
    rng = np.random.default_rng(6)
    arrivals = S.poisson_arrivals(300.0, rng, duration_s=120.0)
    traffic = S.make_traffic(arrivals, rng.integers(8, 500, arrivals.size))
    setup = S.ReplicaSetup(
        max_batch=8, batch_sizes=(1, 4, 8), prefill_buckets=(128, 512), max_queue_delay_s=0.01
    )
    service = TokenLinear(per_call=0.004, per_token=2e-5)
    slo = F.Slo(e2e_s=0.08)
    sz = F.size_fleet(traffic, service, setup, 2, slo, mode="encoder", window_s=30.0)
    assert sz.verdict == "meets" and sz.instances is not None and sz.instances > 1
    part, w = F.window_traffic(traffic, 30.0)
    below = F.check_fleet(
        part, service, setup, sz.instances - 1, 2, slo, mode="encoder", measure=(w.start_s, w.end_s)
    )
    assert not below.meets
    assert sz.check is not None and sz.check.result.padding.prefill_waste > 0


def test_today_fleet_check_says_whether_it_meets():
    traffic = _traffic(8.0, 2000, seed=2)
    slo = F.Slo(e2e_s=5.0)
    small = F.check_fleet(traffic, GpuLike(), SETUP, 1, 1, slo)
    big = F.check_fleet(traffic, GpuLike(), SETUP, 20, 1, slo)
    assert not small.meets and small.e2e_s > 5.0 and "end-to-end p99" in small.why
    assert big.meets and big.e2e_s <= 5.0 and math.isnan(big.ttft_s)
    assert big.result.replicas == 20


def test_slo_below_the_floor_is_a_verdict_with_the_floor_not_a_search():
    traffic = _traffic(4.0, 800, seed=3)
    _, e2e_alone, _ = S.request_work(traffic, GpuLike(), SETUP)
    sz = F.size_fleet(traffic, GpuLike(), SETUP, 1, F.Slo(e2e_s=0.05), window_s=60.0)
    assert sz.verdict == "below_floor" and sz.instances is None and sz.probes == ()
    assert sz.floor_e2e_s > 0.05
    part, w = F.window_traffic(traffic, 60.0)
    inside = (part.arrivals_s >= w.start_s) & (part.arrivals_s < w.end_s)
    _, alone, _ = S.request_work(part, GpuLike(), SETUP)
    assert sz.floor_e2e_s == float(np.percentile(alone[inside], 99, method="higher"))
    assert "no fleet size can meet" in sz.message and "alone" in sz.message


def test_over_cap_and_rejects_verdicts():
    traffic = _traffic(30.0, 3000, seed=4)
    slow = TokenLinear(per_call=0.05, per_token=0.001, per_kv=1e-6)
    sz = F.size_fleet(traffic, slow, SETUP, 1, F.Slo(e2e_s=60.0), max_instances=2, window_s=60.0)
    assert sz.verdict == "over_cap" and sz.instances is None
    assert sz.check is not None and not sz.check.meets and sz.check.instances == 2
    assert max(n for n, *_ in sz.probes) == 2
    tiny = S.ReplicaSetup(max_batch=8, prefill_buckets=(256,), decode_buckets=(512,), batch_sizes=(8,))
    sz = F.size_fleet(traffic, GpuLike(), tiny, 1, F.Slo(e2e_s=60.0), window_s=60.0)
    assert sz.verdict == "rejects" and "too long" in sz.message


@pytest.mark.parametrize(
    ("kwargs", "needle"),
    [
        ({}, "no objective"),
        ({"e2e_s": 0}, "positive"),
        ({"ttft_s": float("nan")}, "positive"),
        ({"e2e_s": 1.0, "percentile": 100}, "percentile"),
    ],
)
def test_bad_slo(kwargs, needle):
    with pytest.raises(ChipswapError) as exc:
        F.Slo(**kwargs)
    assert needle in str(exc.value)


def test_bad_fleet_arguments():
    traffic = _traffic(2.0, 100, seed=5)
    slo = F.Slo(e2e_s=10.0)
    for kwargs in ({"instances": 0}, {"replicas_per_instance": 0}, {"instances": True}):
        args = {"instances": 1, "replicas_per_instance": 1} | kwargs
        with pytest.raises(ChipswapError):
            F.check_fleet(traffic, GpuLike(), SETUP, args["instances"], args["replicas_per_instance"], slo)
    with pytest.raises(ChipswapError):
        F.size_fleet(traffic, GpuLike(), SETUP, 1, slo, max_instances=0)
    with pytest.raises(ChipswapError):
        F.window_traffic(traffic, 60.0, warmup_s=-1)
    with pytest.raises(ChipswapError) as exc:
        F.check_fleet(traffic, GpuLike(), SETUP, 1, 1, slo, measure=(1e6, 2e6))
    assert "no arrivals in the window" in str(exc.value)


# ---- monotonicity (property tests) -------------------------------------------------------------------------


def _size(traffic: S.Traffic, slo: F.Slo, rpi: int, dispatch: str) -> float:
    sz = F.size_fleet(traffic, GpuLike(), SETUP, rpi, slo, dispatch=dispatch, window_s=30.0, max_instances=64)
    return float(sz.instances) if sz.verdict == "meets" else math.inf


def _compressed(base: S.Traffic, factor: float) -> S.Traffic:
    """The same requests arriving `factor` times as fast."""
    return S.make_traffic(base.arrivals_s / factor, base.prompt_tokens, base.output_tokens)


def _rank(sz: F.FleetSizing) -> float:
    return float(sz.instances) if sz.verdict == "meets" else math.inf


def test_a_single_search_can_dip_with_more_traffic_the_sweep_cannot():
    """Near the floor the p99 of ~200 requests is noisy, and the same requests 1.25x faster happened to size
    smaller on their own (found by the property test below); a sweep over traffic levels never does."""
    base = _traffic(9.0, 400, 0)
    faster = _compressed(base, 1.25)
    slo = F.Slo(ttft_s=0.630859375, e2e_s=2.5234375)
    kwargs = {"dispatch": "least_loaded", "window_s": 30.0, "max_instances": 64}
    alone = [F.size_fleet(t, GpuLike(), SETUP, 1, slo, **kwargs).instances for t in (base, faster)]
    swept = F.size_fleet_sweep([base, faster], GpuLike(), SETUP, 1, slo, **kwargs)
    assert (
        alone[1] < alone[0]
    )  # the dip (if the simulator changes and this no longer dips, pick another case)
    assert [s.instances for s in swept] == [alone[0], alone[0]]
    assert swept[1].check is not None and swept[1].check.meets


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    seed=st.integers(0, 10_000),
    rate=st.floats(1.0, 12.0),
    more=st.lists(st.floats(1.05, 2.0), min_size=1, max_size=3),
    e2e=st.floats(2.0, 12.0),
    rpi=st.integers(1, 3),
    dispatch=st.sampled_from(S.DISPATCH),
)
def test_more_traffic_never_needs_fewer_instances(seed, rate, more, e2e, rpi, dispatch):
    base = _traffic(rate, 400, seed)
    levels = [base]
    for factor in more:
        levels.append(_compressed(levels[-1], factor))
    slo = F.Slo(ttft_s=e2e / 4, e2e_s=e2e)
    sizes = [
        _rank(s)
        for s in F.size_fleet_sweep(
            levels, GpuLike(), SETUP, rpi, slo, dispatch=dispatch, window_s=30.0, max_instances=64
        )
    ]
    assert sizes == sorted(sizes)
    first = F.size_fleet(base, GpuLike(), SETUP, rpi, slo, dispatch=dispatch, window_s=30.0, max_instances=64)
    assert sizes[0] == _rank(first)  # the first level is the plain answer


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    seed=st.integers(0, 10_000),
    rate=st.floats(1.0, 12.0),
    e2e=st.floats(1.0, 12.0),
    tighter=st.floats(0.3, 0.95),
    rpi=st.integers(1, 3),
    dispatch=st.sampled_from(S.DISPATCH),
)
def test_tighter_slo_never_needs_fewer_instances(seed, rate, e2e, tighter, rpi, dispatch):
    traffic = _traffic(rate, 400, seed)
    loose = _size(traffic, F.Slo(e2e_s=e2e), rpi, dispatch)
    tight = _size(traffic, F.Slo(e2e_s=e2e * tighter), rpi, dispatch)
    assert tight >= loose
