"""The naive reference simulator: every prefill, every decode step and every encoder call is one event, every
step calls the ServiceTimes directly and recomputes the batch's context from each running request.

It implements the serving rules written at the top of `chipswap.simulation.simulate` independently of that
module's skip-ahead tables, heaps and bookkeeping (issue 40: also the paged KV cache with recompute
preemption and the shared queue, for the policies without chunking: docs/simulation.md, "Every scheduling
rule"), so the tests can check the fast simulator against it request by
request, and the benchmark can show what skipping ahead buys. It is far too slow for real traces (one Python
iteration per decode step and a scan over all replicas per event); use
`chipswap.simulation.simulate.simulate`.

Pure: the standard library and numpy only; no files, clock or printing.
"""

from __future__ import annotations

import math
from collections import deque
from dataclasses import dataclass

import numpy as np

from chipswap.simulation.servicetime import ServiceTimes
from chipswap.simulation.simulate import MAX_TABLE_COLUMNS, ReplicaSetup, Traffic, reject_mask

INF = float("inf")


@dataclass(frozen=True)
class ReferenceRun:
    """Per-request latencies (seconds from arrival; NaN where rejected) and per-replica busy time."""

    ttft_s: np.ndarray
    e2e_s: np.ndarray
    start_s: np.ndarray  # absolute time the request's first call started
    replica_of: np.ndarray
    busy_s: np.ndarray
    decode_steps: int  # calls made, for the benchmark
    prefill_padded_tokens: int
    decode_padded_positions: int
    preemptions: int = 0  # KV-cache recompute preemptions


def _first_at_least(values: tuple[int, ...], x: int) -> int:
    for v in values:
        if v >= x:
            return v
    raise AssertionError(f"{x} beyond {values}")  # rejected before dispatch


def _choose(loads: list[int], last: int, least_loaded: bool) -> int:
    """Least outstanding requests (lowest index on ties), or the next replica in turn."""
    if not least_loaded:
        return (last + 1) % len(loads)
    best = 0
    for r in range(1, len(loads)):
        if loads[r] < loads[best]:
            best = r
    return best


def simulate_reference(
    traffic: Traffic, service: ServiceTimes, setup: ReplicaSetup, replicas: int, *, mode: str = "llm",
    dispatch: str = "least_loaded",
) -> ReferenceRun:
    n = len(traffic)
    rejected, _ = reject_mask(traffic, setup, mode)
    arrivals = [float(x) for x in traffic.arrivals_s]
    prompts = [int(x) for x in traffic.prompt_tokens]
    outputs = [int(x) for x in traffic.output_tokens]
    todo = [i for i in range(n) if not rejected[i]]
    R = replicas
    first_token = [math.nan] * n
    finished = [math.nan] * n
    started = [math.nan] * n
    where = [-1] * n
    busy = [0.0] * R
    loads = [0] * R
    shared_q: deque[int] = deque()
    shared = dispatch == "shared"
    queue: list[deque[int]] = [shared_q if shared else deque() for _ in range(R)]
    # paged KV cache (setup.kv_blocks > 0): blocks in use per replica, blocks each request holds, running
    # requests in admission order (the last is preempted first), requests that left each replica, where a
    # preempted request may not return yet, tokens a preempted request re-prefills, decode steps it has had
    kv, kb = setup.kv_blocks, setup.context_block
    used = [0] * R
    held = [0] * n
    order: list[list[int]] = [[] for _ in range(R)]
    left_count = [0] * R
    back: dict[int, tuple[int, int]] = {}
    refill = [0] * n
    done = [0] * n
    call_end = [INF] * R  # when the replica's current call (or queue-delay timer) ends
    call: list[tuple] = [()] * R  # ("prefill", i) | ("decode",) | ("batch", members) | ("timer",)
    running: list[list[list[int]]] = [[] for _ in range(R)]  # [request, context of its next step, steps left]
    counters = {"steps": 0, "prefill_padded": 0, "decode_padded": 0, "preemptions": 0}
    # GPU decode context granularity: the KV block, widened for very long contexts (the documented rule)
    longest_total = max((prompts[i] + outputs[i] for i in todo), default=1)
    block = setup.context_block
    if longest_total > MAX_TABLE_COLUMNS * block:
        block *= math.ceil(longest_total / block / MAX_TABLE_COLUMNS)

    def batch_of(k: int) -> int:
        return _first_at_least(setup.batch_sizes, k) if setup.batch_sizes else k

    def blocks(tokens: int) -> int:
        return -(-tokens // kb)

    def leave(r: int, i: int, t: float) -> None:
        finished[i] = t
        loads[r] -= 1
        used[r] -= held[i]
        held[i] = 0
        left_count[r] += 1
        if kv:
            order[r].remove(i)

    def may_take(r: int, i: int) -> bool:
        """KV: blocks for the whole prompt (or recompute) free, or nothing running; a request this replica
        preempted comes back only after another request has left it (or when nothing runs there)."""
        if not kv:
            return True
        b = back.get(i)
        if b is not None and b[0] == r and b[1] == left_count[r] and running[r]:
            return False
        return blocks(refill[i] or prompts[i]) <= kv - used[r] or not running[r]

    def preempt(r: int, t: float) -> None:
        i = order[r].pop()
        counters["preemptions"] += 1
        running[r] = [x for x in running[r] if x[0] != i]
        used[r] -= held[i]
        held[i] = 0
        refill[i] = prompts[i] + done[i] + 1  # the prompt, its first token and one per decode step
        back[i] = (r, left_count[r])
        queue[r].appendleft(i)
        wake.append(t)

    def llm_next(r: int, t: float) -> None:
        q = queue[r]
        if q and len(running[r]) < setup.max_batch and may_take(r, q[0]):
            i = q.popleft()
            if math.isnan(started[i]):
                started[i] = t
            where[i] = r
            if kv:
                held[i] = blocks(refill[i] or prompts[i])
                used[r] += held[i]
                order[r].append(i)
            if refill[i]:
                length = refill[i]
            else:
                buckets = setup.prefill_buckets
                length = _first_at_least(buckets, prompts[i]) if buckets else prompts[i]
            counters["prefill_padded"] += length
            d = service.prefill_s(1, length)
            call[r] = ("prefill", i)
        elif running[r]:
            while kv and running[r]:  # each running request holds the blocks of the position it writes
                need = [x for x in running[r] if blocks(x[1]) > held[x[0]]]
                if len(need) <= kv - used[r]:
                    for x in need:
                        held[x[0]] += 1
                    used[r] += len(need)
                    break
                preempt(r, t)
            if not running[r]:
                llm_next(r, t)
                return
            contexts = [x[1] for x in running[r]]
            k = len(contexts)
            if setup.decode_buckets:
                ctx = _first_at_least(setup.decode_buckets, max(contexts))
            else:
                mean_up = -(-sum(contexts) // k)
                ctx = -(-mean_up // block) * block
                if setup.max_length:
                    ctx = min(ctx, setup.max_length)
            # padding only exists with compiled shapes; a GPU step computes exactly the batch's contexts
            padded = setup.decode_buckets or setup.batch_sizes
            counters["decode_padded"] += batch_of(k) * ctx if padded else sum(contexts)
            d = service.decode_step_s(batch_of(k), ctx) + k * setup.live_step_s  # per live sequence
            call[r] = ("decode",)
        else:
            call_end[r] = INF
            call[r] = ()
            return
        busy[r] += d
        call_end[r] = t + d

    def llm_end(r: int, t: float) -> None:
        kind = call[r]
        if kind[0] == "prefill":
            i = kind[1]
            if math.isnan(first_token[i]):
                first_token[i] = t
            else:  # a recompute samples the next token, as the decode step would have
                done[i] += 1
            refill[i] = 0
            left = outputs[i] - 1 - done[i]
            if left <= 0:
                leave(r, i, t)
            else:
                running[r].append([i, prompts[i] + done[i] + 1, left])
        else:
            counters["steps"] += 1
            still = []
            for item in running[r]:
                item[1] += 1
                item[2] -= 1
                done[item[0]] += 1
                if item[2] == 0:
                    leave(r, item[0], t)
                else:
                    still.append(item)
            running[r] = still
        llm_next(r, t)
        wake_idle()

    def wake_idle() -> None:
        """Shared queue: a request back in the queue after a preemption starts on an idle replica at once
        (the lowest-numbered), as an arrival does; otherwise at the first step boundary with a free slot."""
        while wake:
            t = wake.pop(0)
            if shared:
                idle = next((x for x in range(R) if not call[x]), -1)
                if idle >= 0 and shared_q:
                    llm_next(idle, t)

    def encoder_next(r: int, t: float) -> None:
        q = queue[r]
        if not q:
            call_end[r] = INF
            call[r] = ()
        elif len(q) >= setup.max_batch or t >= arrivals[q[0]] + setup.max_queue_delay_s:
            members = [q.popleft() for _ in range(min(setup.max_batch, len(q)))]
            longest = max(prompts[i] for i in members)
            length = _first_at_least(setup.prefill_buckets, longest) if setup.prefill_buckets else longest
            k = batch_of(len(members))
            counters["prefill_padded"] += k * length
            d = service.encoder_s(k, length)
            for i in members:
                started[i] = t
            busy[r] += d
            call_end[r] = t + d
            call[r] = ("batch", members)
        else:
            call_end[r] = arrivals[q[0]] + setup.max_queue_delay_s
            call[r] = ("timer",)

    def encoder_end(r: int, t: float) -> None:
        if call[r][0] == "batch":
            for i in call[r][1]:
                first_token[i] = finished[i] = t
                loads[r] -= 1
        encoder_next(r, t)

    wake: list[float] = []
    on_next, on_end = (llm_next, llm_end) if mode == "llm" else (encoder_next, encoder_end)
    last = R - 1
    k = 0
    while True:
        a = arrivals[todo[k]] if k < len(todo) else INF
        r_end = min(range(R), key=call_end.__getitem__)
        t_end = call_end[r_end]
        if a == INF and t_end == INF:
            break
        if a <= t_end:
            i = todo[k]
            k += 1
            if shared:  # one queue: an idle replica (the lowest-numbered) starts it, else a free slot
                shared_q.append(i)
                r = next((x for x in range(R) if not call[x]), -1)
                if r >= 0:
                    on_next(r, a)
                    wake_idle()
                continue
            r = _choose(loads, last, dispatch == "least_loaded")
            last = r
            where[i] = r
            loads[r] += 1
            queue[r].append(i)
            if not call[r]:
                on_next(r, a)
                wake_idle()
            elif mode == "encoder" and call[r][0] == "timer" and len(queue[r]) >= setup.max_batch:
                on_next(r, a)
        else:
            on_end(r_end, t_end)

    arr = np.asarray(arrivals)
    return ReferenceRun(
        ttft_s=np.asarray(first_token) - arr,
        e2e_s=np.asarray(finished) - arr,
        start_s=np.asarray(started),
        replica_of=np.asarray(where),
        busy_s=np.asarray(busy),
        decode_steps=counters["steps"],
        prefill_padded_tokens=counters["prefill_padded"],
        decode_padded_positions=counters["decode_padded"],
        preemptions=counters["preemptions"],
    )
