"""Serving rules the simulator must follow, checked on hand-sized cases whose answers are worked out here:
overlong requests are rejected and counted (never resized), padding waste is accounted, dynamic batching waits
at most the queue delay, measurement windows, per-bucket latency, distributions for plots."""

from __future__ import annotations

import numpy as np
import pytest

from chipswap.errors import ChipswapError
from chipswap.simulation import simulate as S
from chipswap.simulation.servicetime import ServingConfig
from tests.sim_services import Constant, GpuLike, TokenLinear

NEURON = S.ReplicaSetup(max_batch=4, batch_sizes=(4,), prefill_buckets=(16, 64), decode_buckets=(32, 80))


def test_overlong_requests_are_rejected_and_counted_never_resized():
    # prompts: fits, beyond the largest prefill bucket, fits but prompt + output beyond the largest decode
    # bucket
    t = S.make_traffic([0.0, 1.0, 2.0, 3.0], [10, 65, 60, 64], [5, 1, 30, 16])
    res = S.simulate(t, Constant(0.5), NEURON, 1)
    assert res.requests == 4 and res.rejected == 2
    assert dict(res.reject_reasons) == {
        "prompt longer than the largest prefill bucket": 1,
        "prompt + output longer than the largest decode bucket": 1,
    }
    assert np.isnan(res.e2e_s[[1, 2]]).all() and not np.isnan(res.e2e_s[[0, 3]]).any()
    assert res.replica_of.tolist() == [0, -1, -1, 0]
    # served requests are padded to their own bucket: 10 -> 16, 64 -> 64 (nobody was cut down to fit)
    assert res.padding.prefill_tokens == 74 and res.padding.prefill_padded_tokens == 80
    # all rejected: still a result, nothing served
    none = S.simulate(S.make_traffic([0.0], [500], [1]), Constant(), NEURON, 1)
    assert none.rejected == 1 and np.isnan(none.e2e.p99)


def test_gpu_max_length_rejects():
    t = S.make_traffic([0.0, 1.0], [100, 100], [10, 2000])
    res = S.simulate(t, GpuLike(), S.ReplicaSetup(max_batch=2, max_length=1024), 1)
    assert res.rejected == 1 and res.reject_reasons == (("longer than the replica's max length", 1),)


def test_decode_padding_is_batch_and_bucket_waste():
    """One request alone on a Neuron replica compiled for batch 4: every decode step runs 4 slots at the
    bucket that holds the context. Prompt 20 (bucket 64), 15 outputs -> 14 steps at contexts 21..34: 12 in
    bucket 32 and 2 in bucket 80."""
    t = S.make_traffic([0.0], [20], [15])
    res = S.simulate(t, Constant(0.5), NEURON, 1)
    pad = res.padding
    assert res.calls == 14
    assert (pad.batch_slots, pad.batch_padded_slots) == (14, 56)
    assert pad.decode_positions == sum(range(21, 35))
    assert pad.decode_padded_positions == 4 * (12 * 32 + 2 * 80)
    assert pad.decode_waste == pytest.approx(1 - sum(range(21, 35)) / (4 * (12 * 32 + 2 * 80)))
    assert (pad.prefill_tokens, pad.prefill_padded_tokens) == (20, 64)
    assert pad.prefill_waste == pytest.approx(1 - 20 / 64)
    assert res.e2e_s[0] == pytest.approx(0.5 + 14 * 0.5)


def test_gpu_has_no_padding():
    rng = np.random.default_rng(0)
    t = S.make_traffic(
        S.poisson_arrivals(5.0, rng, n=400), rng.integers(1, 500, 400), rng.integers(1, 50, 400)
    )
    res = S.simulate(t, GpuLike(), S.ReplicaSetup(max_batch=8), 2)
    assert res.padding.prefill_waste == 0 and res.padding.decode_waste == 0
    assert res.padding.batch_slots == res.padding.batch_padded_slots == int((t.output_tokens - 1).sum())


def test_encoder_batches_fill_or_wait_the_queue_delay():
    setup = S.ReplicaSetup(max_batch=3, batch_sizes=(1, 2, 4), prefill_buckets=(8, 32), max_queue_delay_s=0.1)
    service = TokenLinear(per_call=0.01, per_token=0.001)
    # alone: waits the full delay, runs at batch 1, bucket 8
    # three at once: the batch is full at once and runs at batch 4 (padded), bucket 32 (longest member 20)
    t = S.make_traffic([0.0, 10.0, 10.0, 10.0], [5, 5, 20, 7])
    res = S.simulate(t, service, setup, 1, mode="encoder")
    assert res.e2e_s[0] == pytest.approx(0.1 + 0.01 + 0.001 * 1 * 8)
    np.testing.assert_allclose(res.e2e_s[1:], 0.01 + 0.001 * 4 * 32)
    assert res.calls == 2 and res.mean_batch == pytest.approx(2.0)
    assert (res.padding.batch_slots, res.padding.batch_padded_slots) == (4, 5)
    assert res.padding.prefill_padded_tokens == 8 + 4 * 32
    assert np.array_equal(res.ttft_s, res.e2e_s)


def test_measure_window_counts_only_its_requests():
    rng = np.random.default_rng(1)
    t = S.make_traffic(
        S.poisson_arrivals(2.0, rng, n=600), rng.integers(1, 900, 600), rng.integers(1, 80, 600)
    )
    whole = S.simulate(t, GpuLike(), S.ReplicaSetup(max_batch=8), 2)
    part = S.simulate(t, GpuLike(), S.ReplicaSetup(max_batch=8), 2, measure=(100.0, 200.0))
    inside = (t.arrivals_s >= 100.0) & (t.arrivals_s < 200.0)
    assert part.requests == int(inside.sum()) < whole.requests
    np.testing.assert_array_equal(part.e2e_s, whole.e2e_s)  # the run is the same, only the statistics differ
    assert part.e2e.p99 == float(np.percentile(whole.e2e_s[inside], 99, method="higher"))
    q, lat = part.latency_cdf("e2e", points=11)
    assert q.tolist() == pytest.approx(np.linspace(0, 1, 11).tolist()) and np.all(np.diff(lat) >= 0)
    assert lat[-1] == part.e2e.max
    with pytest.raises(ChipswapError):
        part.latency_cdf("tpot")


def test_per_bucket_latency_groups_by_prompt_length():
    t = S.make_traffic([0.0, 100.0, 200.0], [10, 50, 60], [1, 1, 1])
    res = S.simulate(t, TokenLinear(per_token=0.01), S.ReplicaSetup(max_batch=1), 1, report_buckets=(32, 64))
    rows = {b.edge: b for b in res.per_bucket}
    assert rows[32].requests == 1 and rows[64].requests == 2
    assert rows[32].ttft.p50 == pytest.approx(0.1) and rows[64].ttft.max == pytest.approx(0.6)
    default = S.simulate(t, TokenLinear(per_token=0.01), S.ReplicaSetup(max_batch=1), 1)
    assert [b.edge for b in default.per_bucket] == [16, 64]  # powers of two


def test_setup_from_serving_config():
    gpu = ServingConfig(
        "g6e.12xlarge", tp_degree=1, replicas=4, max_batch=64, weight_dtype="bf16", max_length=8192
    )
    s = S.setup_from_serving(gpu)
    assert (s.max_batch, s.batch_sizes, s.padded, s.max_length) == (64, (), False, 8192)
    inf2 = ServingConfig(
        "inf2.48xlarge",
        tp_degree=8,
        replicas=3,
        max_batch=16,
        weight_dtype="bf16",
        max_length=8192,
        padded=True,
    )
    s = S.setup_from_serving(inf2, prefill_buckets=(1024, 4096, 8192))
    assert s.batch_sizes == (16,) and s.decode_buckets == (1024, 4096, 8192) and s.padded
    with pytest.raises(ChipswapError):
        S.setup_from_serving(inf2)
    enc = S.setup_from_serving(
        ServingConfig("inf2.xlarge", 2, 2, 8, "bf16", 512, batch_sizes=(1, 4, 8), padded=True),
        mode="encoder",
        prefill_buckets=(128, 512),
    )
    assert enc.batch_sizes == (1, 4, 8) and enc.decode_buckets == ()


def test_request_work_alone_latency_and_best_share():
    t = S.make_traffic([0.0, 0.0], [20, 100], [15, 1])
    alone_ttft, alone_e2e, work = S.request_work(t, Constant(0.5), NEURON)
    assert alone_ttft[0] == 0.5 and alone_e2e[0] == pytest.approx(0.5 + 14 * 0.5)
    assert np.isnan(alone_e2e[1])  # rejected: prompt beyond the largest bucket
    assert work[0] == pytest.approx(0.5 + 14 * 0.5 / 4)
    res = S.simulate(S.make_traffic([0.0], [20], [15]), Constant(0.5), NEURON, 1)
    assert res.e2e_s[0] == pytest.approx(alone_e2e[0])
