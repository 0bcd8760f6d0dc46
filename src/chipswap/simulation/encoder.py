"""Dynamic batching for fixed-shape encoders on a fleet of replicas (round robin or least loaded): a free
replica starts a batch when it is full or the oldest request has waited the queue delay.

Pure: numpy and the standard library; no files, clock, printing or torch.
"""

from __future__ import annotations

import heapq
from bisect import bisect_left
from collections import deque

import numpy as np

from chipswap.simulation.model import ReplicaSetup, _Run, _service_value
from chipswap.simulation.servicetime import ServiceTimes
from chipswap.simulation.traffic import Traffic


def _simulate_encoder(
    traffic: Traffic, service: ServiceTimes, setup: ReplicaSetup, R: int, accepted: np.ndarray, jsq: bool
) -> _Run:
    """Dynamic batching on R replicas: same event list and dispatch as the LLM loop; a replica with a short
    queue waits for the oldest request's queue delay to expire (a timer event) unless the batch fills
    first."""
    n_all = len(traffic)
    arrive = traffic.arrivals_s.tolist()
    prompt = traffic.prompt_tokens.tolist()
    buckets = list(setup.prefill_buckets)
    B = setup.max_batch
    delay = float(setup.max_queue_delay_s)
    padded_of = [setup.padded_batch(k) if k else 0 for k in range(B + 1)]
    call_cache: dict[tuple[int, int], float] = {}
    nan = float("nan")
    done = [nan] * n_all
    start = [nan] * n_all
    replica_of = [-1] * n_all

    queues: list[deque[int]] = [deque() for _ in range(R)]
    state = [0] * R  # 0 idle, 1 running a batch, 2 waiting for the queue delay to expire
    version = [0] * R
    in_batch: list[list[int]] = [[] for _ in range(R)]
    busy = [0.0] * R
    loads = [0] * R
    events: list[tuple[float, int, int]] = []
    push, pop = heapq.heappush, heapq.heappop
    batches = padded_tokens = padded_slots = 0
    order = accepted.tolist()
    na = len(order)
    ai = 0
    rr = R - 1
    inf = float("inf")
    next_a = arrive[order[0]] if na else inf
    while True:
        if events and events[0][0] < next_a:
            t, ver, r = pop(events)
            if ver != version[r]:
                continue
            if state[r] == 1:
                members = in_batch[r]
                for i in members:
                    done[i] = t
                loads[r] -= len(members)
        elif ai < na:
            i = order[ai]
            t = next_a
            ai += 1
            next_a = arrive[order[ai]] if ai < na else inf
            if jsq:
                r = loads.index(min(loads))
            else:
                r = rr = rr + 1 if rr + 1 < R else 0
            replica_of[i] = r
            loads[r] += 1
            queues[r].append(i)
            if state[r] == 1 or (state[r] == 2 and len(queues[r]) < B):
                continue
        else:
            break
        # replica r is free at t (its batch ended, its timer expired, or it is idle / waiting and a request
        # came)
        q = queues[r]
        if not q:
            state[r] = 0
            continue
        if len(q) < B and t < arrive[q[0]] + delay:
            if state[r] != 2:
                state[r] = 2
                version[r] += 1
                push(events, (arrive[q[0]] + delay, version[r], r))
            continue
        k = min(B, len(q))
        members = [q.popleft() for _ in range(k)]
        longest = max([prompt[i] for i in members])
        length = buckets[bisect_left(buckets, longest)] if buckets else longest
        pb = padded_of[k]
        dt = call_cache.get((pb, length))
        if dt is None:
            dt = call_cache[(pb, length)] = _service_value(
                service.encoder_s(pb, length), f"an encoder call at batch {pb}, length {length}"
            )
        for i in members:
            start[i] = t
        batches += 1
        padded_tokens += pb * length
        padded_slots += pb
        busy[r] += dt
        in_batch[r] = members
        state[r] = 1
        version[r] += 1
        push(events, (t + dt, version[r], r))

    done_np = np.asarray(done)
    return _Run(
        ttft=done_np,
        e2e=done_np,
        start=np.asarray(start),
        replica_of=np.asarray(replica_of, dtype=np.int64),
        busy=np.asarray(busy),
        calls=batches,
        prefill_tokens=int(traffic.prompt_tokens[accepted].sum()),
        prefill_padded=padded_tokens,
        decode_positions=0,
        decode_padded=0,
        slots=int(accepted.size),
        padded_slots=padded_slots,
    )
