"""Scheduler policies: the named rules a serving stack uses to decide, at every step, which requests prefill
and which decode, and which stack each one models. `scheduler_policy_for(stack_id)` is what the plan calls;
the simulator (`chipswap.simulation.simulate`) reads the policy from the `ReplicaSetup`.

Pure data and one lookup: no numpy, no I/O. It may not import the projection or the plan (the stack ids are
the shared names fixed in the stacks table; unknown ids are refused with a one-line error).
"""

from __future__ import annotations

from dataclasses import dataclass

from chipswap.errors import ChipswapError

CHUNKED_PREFILL = "chunked-prefill"
PREFILL_FIRST = "prefill-first"
NEURON_STATIC_SLOTS = "neuron-static-slots"
DYNAMIC_BATCHING = "dynamic-batching"


@dataclass(frozen=True)
class Policy:
    name: str
    models: str  # the stacks and engines it stands for
    rule: str  # one paragraph: what happens at a step


POLICIES: dict[str, Policy] = {
    CHUNKED_PREFILL: Policy(
        CHUNKED_PREFILL,
        "vLLM V1 and TensorRT-LLM (in-flight batching with chunked context)",
        "every step has a token budget (vLLM's max_num_batched_tokens); running decodes take one token "
        "each, then unfinished prefills, then new requests from the queue get the rest, a long prompt "
        "split over several steps; prefill and decode share the step (no stall); the KV cache is paged "
        "(blocks of 16 tokens) and when a decode step needs a block and none is free the most recently "
        "admitted request is preempted and recomputed later (its prompt plus the tokens it had generated)",
    ),
    PREFILL_FIRST: Policy(
        PREFILL_FIRST,
        "TGI (GPU) and vLLM's pre-V1 default scheduler",
        "at each step boundary a waiting request that fits (a free slot and KV blocks for its prompt) is "
        "prefilled alone, its first token out when the prefill ends; decoding pauses meanwhile; otherwise "
        "one decode step runs for every running request; KV blocks and recompute preemption as above",
    ),
    NEURON_STATIC_SLOTS: Policy(
        NEURON_STATIC_SLOTS,
        "vLLM on NxD Inference, optimum-neuron TGI, Transformers NeuronX (every Neuron stack)",
        "continuous batching into the compiled batch's slots: a decode step runs the compiled graph, so it "
        "costs the compiled batch size at the decode bucket of the longest context whatever the number in "
        "flight; a new request's prefill (context encoding, padded to its bucket) pauses decoding, or, on "
        "a stack with chunked prefill enabled, shares the step as a chunk within the token budget; each "
        "slot holds one request up to the compiled max length (no paging, no preemption)",
    ),
    DYNAMIC_BATCHING: Policy(
        DYNAMIC_BATCHING,
        "encoder serving on every stack (classifiers, embedders)",
        "a free replica starts a batch as soon as the batch is full or the oldest request has waited the "
        "queue delay; the batch runs at the next compiled batch size and bucket",
    ),
}

LLM_POLICIES = (CHUNKED_PREFILL, PREFILL_FIRST, NEURON_STATIC_SLOTS)

# the stacks table shared with the projection (issue 20 owns the ids and the defaults, in
# chipswap.projection.stacks; these are the policies they run; tests/test_simulate_policies.py keeps the
# two in step)
STACK_POLICY: dict[str, str] = {
    "nxdi-vllm": NEURON_STATIC_SLOTS,
    "nxdi-tgi": NEURON_STATIC_SLOTS,
    "tnx-2.18": NEURON_STATIC_SLOTS,
    "vllm": CHUNKED_PREFILL,
    "trtllm": CHUNKED_PREFILL,
    "tgi": PREFILL_FIRST,
}
# stacks whose Neuron build can chunk prefills (when the workload turns it on); the others always stall decode
CHUNKING_STACKS = frozenset({"nxdi-vllm", "vllm", "trtllm"})

# vLLM's per-step token budget for chunked prefill (max_num_batched_tokens) and its sequence cap
# (max_num_seqs) for its OpenAI server: 8192 and 1024 on GPUs with >= 70 GiB that are not A100s (H100, H200,
# MI300X), 2048 and 256 on the others (stated defaults: vLLM EngineArgs.get_batch_defaults, 2025). The first
# pair is the simulator's default; the plan picks by the instance's GPU (`vllm_defaults`).
DEFAULT_TOKEN_BUDGET = 8192
DEFAULT_MAX_NUM_SEQS = 1024
DEFAULT_NEURON_CHUNK = 1024  # optimum-neuron's chunked-prefill runs use 1024-token chunks (published config)


def scheduler_policy_for(stack_id: str, mode: str = "llm") -> str:
    """The scheduler policy the simulator runs for a serving stack (encoders: dynamic batching)."""
    if stack_id not in STACK_POLICY:
        known = ", ".join(sorted(STACK_POLICY))
        raise ChipswapError(f"serving stack {stack_id!r} is not known; use one of {known}")
    return DYNAMIC_BATCHING if mode == "encoder" else STACK_POLICY[stack_id]


def vllm_defaults(gpu_memory_gib: float, chip: str) -> tuple[int, int]:
    """(token budget, max_num_seqs) vLLM's online server uses on one GPU of this size and chip."""
    if gpu_memory_gib >= 70 and "a100" not in chip.lower():
        return DEFAULT_TOKEN_BUDGET, DEFAULT_MAX_NUM_SEQS
    return 2048, 256


def check_policy(name: str) -> str:
    if name not in LLM_POLICIES:
        raise ChipswapError(f"scheduler policy {name!r} is not known; use one of {', '.join(LLM_POLICIES)}")
    return name


def describe(name: str) -> str:
    """One line for plans and reports: the policy and what it models."""
    p = POLICIES[name]
    return f"{p.name} ({p.models})"
