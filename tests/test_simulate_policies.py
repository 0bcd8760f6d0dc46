"""Scheduler policies, the KV cache and dispatch (chipswap.simulation.steps): the step scheduler runs the
closed-form engine's rules request for request when the policy is the same; chunked prefill splits a long
prompt over steps without changing its cost alone; static slots charge the compiled batch; a KV cache that
fills up preempts and recomputes, and every request is still served; a shared queue waits no longer than
per-replica queues. Each stack id maps to its documented policy."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest

from chipswap.errors import ChipswapError
from chipswap.simulation import simulate as S
from chipswap.simulation.policies import (
    CHUNKED_PREFILL,
    NEURON_STATIC_SLOTS,
    POLICIES,
    PREFILL_FIRST,
    STACK_POLICY,
    scheduler_policy_for,
)
from chipswap.simulation.simulate import simulate_steps
from tests.sim_services import GpuLike, TokenLinear
from tests.test_simulate_exact import GPU as EXACT_GPU
from tests.test_simulate_exact import NEURON as EXACT_NEURON
from tests.test_simulate_exact import _traffic

GPU = EXACT_GPU
NEURON = replace(EXACT_NEURON, policy=NEURON_STATIC_SLOTS)


def _one_line(exc: pytest.ExceptionInfo[BaseException]) -> str:
    text = str(exc.value)
    assert "\n" not in text
    return text


def test_every_stack_has_its_documented_policy() -> None:
    assert scheduler_policy_for("vllm") == CHUNKED_PREFILL
    assert scheduler_policy_for("trtllm") == CHUNKED_PREFILL
    assert scheduler_policy_for("tgi") == PREFILL_FIRST
    for neuron in ("nxdi-vllm", "nxdi-tgi", "tnx-2.18"):
        assert scheduler_policy_for(neuron) == NEURON_STATIC_SLOTS
    assert scheduler_policy_for("vllm", mode="encoder") == "dynamic-batching"
    assert set(STACK_POLICY.values()) <= set(POLICIES)
    with pytest.raises(ChipswapError) as exc:
        scheduler_policy_for("sglang")
    assert "nxdi-vllm" in _one_line(exc)
    with pytest.raises(ChipswapError) as exc:
        S.ReplicaSetup(max_batch=4, policy="fifo")
    assert "scheduler policy" in _one_line(exc)


def test_policy_table_names_exactly_the_stacks_registry() -> None:
    """STACK_POLICY and CHUNKING_STACKS are keyed by the ids of chipswap.projection.stacks (which the
    simulator may not import): a stack added there without a policy here, or a stale id here, fails."""
    from chipswap.projection.stacks import stack_ids
    from chipswap.simulation.policies import CHUNKING_STACKS

    assert set(STACK_POLICY) == set(stack_ids())
    assert CHUNKING_STACKS <= set(stack_ids())
    assert {STACK_POLICY[s] for s in stack_ids("neuron")} == {NEURON_STATIC_SLOTS}
    assert NEURON_STATIC_SLOTS not in {STACK_POLICY[s] for s in stack_ids("gpu")}


@pytest.mark.parametrize("dispatch", S.DISPATCH)
@pytest.mark.parametrize("setup", [GPU, NEURON], ids=["gpu", "neuron"])
@pytest.mark.parametrize("rate", [0.3, 2.0, 12.0], ids=["light", "busy", "overloaded"])
def test_step_scheduler_runs_the_closed_form_rules(rate: float, setup: S.ReplicaSetup, dispatch: str) -> None:
    """Prefill-first / static slots without chunking: the step scheduler and the closed-form engine (itself
    checked against the naive reference) give every request the same replica and the same times."""
    traffic = _traffic(rate * 3, 300, seed=int(rate * 10))
    rejected, _ = S.reject_mask(traffic, setup, "llm")
    fast = S.simulate(traffic, GpuLike(), setup, 3, dispatch=dispatch)
    run = simulate_steps(traffic, GpuLike(), setup, 3, np.flatnonzero(~rejected), dispatch)
    np.testing.assert_array_equal(run.replica_of, fast.replica_of)
    np.testing.assert_allclose(run.e2e - traffic.arrivals_s, fast.e2e_s, rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(run.ttft - traffic.arrivals_s, fast.ttft_s, rtol=1e-12, atol=1e-12)
    assert run.calls == fast.calls


def test_chunked_prefill_alone_costs_the_whole_prefill() -> None:
    """One request at a time: a prompt split into chunks of the token budget costs its whole prefill (chunks
    add up), so TTFT and e2e are the closed-form floor whatever the budget."""
    traffic = S.make_traffic(np.arange(20) * 100.0, np.arange(1, 21) * 97, np.full(20, 30))
    service = TokenLinear(per_call=0.0, per_token=1e-3, per_kv=1e-6)
    ttft0, e2e0, _ = S.request_work(traffic, service, GPU, "llm")
    for budget in (64, 256, 8192):
        setup = S.ReplicaSetup(max_batch=8, max_length=4096, policy=CHUNKED_PREFILL, token_budget=budget)
        res = S.simulate(traffic, service, setup, 1)
        np.testing.assert_allclose(res.ttft_s, ttft0, rtol=1e-9)
        np.testing.assert_allclose(res.e2e_s, e2e0, rtol=1e-9)
        assert res.policy == CHUNKED_PREFILL


def test_chunked_prefill_keeps_decoding_while_prompts_arrive() -> None:
    """Under load, long prompts stall every running decode under prefill-first; in chunked steps the decode
    goes on, so the time between tokens (e2e - TTFT per token) is shorter for the requests that decode."""
    traffic = _traffic(3.0, 1500, seed=5, max_prompt=4000, max_out=100)
    service = TokenLinear(per_call=0.01, per_token=2e-4, per_kv=0.0)
    out = {}
    for policy in (PREFILL_FIRST, CHUNKED_PREFILL):
        budget = 512 if policy == CHUNKED_PREFILL else 0
        setup = S.ReplicaSetup(max_batch=32, max_length=8192, policy=policy, token_budget=budget)
        res = S.simulate(traffic, service, setup, 1)
        long = traffic.output_tokens > 10
        out[policy] = float(np.mean((res.e2e_s[long] - res.ttft_s[long]) / (traffic.output_tokens[long] - 1)))
    assert out[CHUNKED_PREFILL] < 0.8 * out[PREFILL_FIRST]


def test_static_slots_charge_the_compiled_batch() -> None:
    """A request alone on a Neuron replica decodes at the compiled batch (8), not at 1."""
    service = TokenLinear(per_call=0.0, per_token=1e-3, per_kv=0.0)
    setup = S.ReplicaSetup(
        max_batch=8,
        batch_sizes=(8,),
        prefill_buckets=(256,),
        decode_buckets=(512,),
        policy=NEURON_STATIC_SLOTS,
    )
    res = S.simulate(S.make_traffic([0.0], [100], [11]), service, setup, 1)
    assert res.e2e_s[0] - res.ttft_s[0] == pytest.approx(10 * service.decode_step_s(8, 512))
    assert res.ttft_s[0] == pytest.approx(service.prefill_s(1, 256))


@pytest.mark.parametrize("policy", [PREFILL_FIRST, CHUNKED_PREFILL])
def test_a_full_kv_cache_preempts_and_recomputes(policy: str) -> None:
    """With room for about 4 long requests in the cache but 16 slots, decodes run out of blocks: requests are
    preempted and prefilled again, every one is still served, and nothing finishes faster than alone."""
    traffic = _traffic(4.0, 400, seed=7, max_prompt=1000, max_out=300)
    service = GpuLike()
    roomy = S.ReplicaSetup(max_batch=16, max_length=4096, policy=policy)
    tight = S.ReplicaSetup(max_batch=16, max_length=4096, policy=policy, kv_blocks=300)
    a = S.simulate(traffic, service, roomy, 2)
    b = S.simulate(traffic, service, tight, 2)
    assert a.preemptions == 0 and b.preemptions > 0
    assert np.isfinite(b.e2e_s).all()
    _, floor, _ = S.request_work(traffic, service, roomy, "llm")
    assert np.all(b.e2e_s >= floor - 1e-9)
    assert b.e2e.mean > a.e2e.mean


def test_a_shared_queue_waits_less_than_round_robin() -> None:
    traffic = _traffic(6.0, 2000, seed=11)
    setup = S.ReplicaSetup(max_batch=4, max_length=4096, policy=PREFILL_FIRST)
    shared = S.simulate(traffic, GpuLike(), setup, 4, dispatch="shared")
    rr = S.simulate(traffic, GpuLike(), setup, 4, dispatch="round_robin")
    assert shared.dispatch == "shared" and np.isfinite(shared.e2e_s).all()
    assert shared.wait.mean < rr.wait.mean
    with pytest.raises(ChipswapError) as exc:
        S.simulate(traffic, GpuLike(), setup, 4, dispatch="random")
    assert "shared" in _one_line(exc)


@pytest.mark.parametrize(
    "setup",
    [
        S.ReplicaSetup(max_batch=16, max_length=4096, policy=CHUNKED_PREFILL),
        S.ReplicaSetup(max_batch=16, max_length=4096, policy=CHUNKED_PREFILL, token_budget=300),
        S.ReplicaSetup(max_batch=16, max_length=4096, policy=CHUNKED_PREFILL, kv_blocks=250),
        S.ReplicaSetup(max_batch=16, max_length=4096, policy=PREFILL_FIRST, kv_blocks=250),
        S.ReplicaSetup(
            max_batch=8,
            batch_sizes=(8,),
            prefill_buckets=(512, 1024, 2048),
            decode_buckets=(1024, 2048, 2304),
            policy=NEURON_STATIC_SLOTS,
            token_budget=256,
        ),
    ],
    ids=["chunked", "chunked-300", "chunked-kv", "prefill-first-kv", "static-chunked"],
)
def test_round_robin_shortcuts_match_the_event_list(setup: S.ReplicaSetup) -> None:
    """One replica: round robin (each replica on its own, alone requests in closed form, steps chained up to
    the next arrival) and the event list (least loaded, shared queue) are the same schedule."""
    traffic = _traffic(2.5, 600, seed=13)
    rr = S.simulate(traffic, GpuLike(), setup, 1, dispatch="round_robin")
    for other in ("least_loaded", "shared"):
        ev = S.simulate(traffic, GpuLike(), setup, 1, dispatch=other)
        np.testing.assert_allclose(rr.e2e_s, ev.e2e_s, rtol=1e-9, atol=1e-9)
        np.testing.assert_allclose(rr.ttft_s, ev.ttft_s, rtol=1e-9, atol=1e-9)
        assert rr.preemptions == ev.preemptions


def test_a_request_longer_than_the_kv_cache_is_rejected_not_looped() -> None:
    traffic = S.make_traffic([0.0, 1.0, 2.0], [100, 5000, 100], [50, 100, 50])
    setup = S.ReplicaSetup(max_batch=8, max_length=8192, policy=CHUNKED_PREFILL, kv_blocks=100)
    res = S.simulate(traffic, GpuLike(), setup, 1)
    assert res.rejected == 1 and dict(res.reject_reasons) == {"longer than the replica's whole KV cache": 1}
    assert np.isfinite(res.e2e_s[[0, 2]]).all() and np.isnan(res.e2e_s[1])
