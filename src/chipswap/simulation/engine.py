"""The closed-form continuous-batching engine: prefill-first (and static slots without chunking) on
per-replica queues, round robin or least loaded, with no KV-cache limit that can bind. Between two events the
batch on a replica is fixed and its representative context grows by one token per step, so the time of m
decode steps is a difference of a cumulative step-time table; a request alone on its replica is computed in
closed form. `chipswap.simulation.simulate` picks it when its rules are exactly the policy's; the reference
simulator in the tests steps through every call and must agree with it.

Pure: numpy and the standard library; no files, clock, printing or torch.
"""

from __future__ import annotations

import heapq
from array import array
from bisect import bisect_left
from collections import deque
from collections.abc import Generator

import numpy as np

from chipswap.simulation.model import (
    ReplicaSetup,
    _DecodeTables,
    _Run,
    _take,
    padded_lengths,
    prefill_times,
)
from chipswap.simulation.servicetime import ServiceTimes, positions_held
from chipswap.simulation.traffic import Traffic


class _LlmFleet:
    """Everything the LLM replica loops share: per-request inputs as Python lists (fast scalar access), the
    step-time tables, and the per-request outputs they fill in."""

    def __init__(
        self, traffic: Traffic, service: ServiceTimes, setup: ReplicaSetup, accepted: np.ndarray
    ) -> None:
        n = len(traffic)
        self.setup = setup
        self.accepted = accepted
        self.prompts_np = traffic.prompt_tokens
        self.outs_np = traffic.output_tokens
        self.prefill_len = padded_lengths(self.prompts_np[accepted], setup.prefill_buckets)
        self.pre_np = np.zeros(n)
        if accepted.size:
            self.pre_np[accepted] = prefill_times(service, self.prefill_len)
        held = positions_held(self.prompts_np[accepted], self.outs_np[accepted])
        top = int(held.max()) if accepted.size else 1
        self.tables = _DecodeTables(service, setup, top)
        self.arrivals_np = traffic.arrivals_s
        self.arrive = traffic.arrivals_s.tolist() + [float("inf")]
        self.sentinel = n  # the index of a request that never arrives: ends every inbox
        self.nreq = n + 1  # heap keys pack (value, request) into one int: value * nreq + request
        self.prompt = self.prompts_np.tolist()
        self.pre = self.pre_np.tolist()
        steps = self.outs_np - 1  # decode steps each request needs
        # finish key: (decode steps) * nreq + request, -1 for one-token requests (no decode step)
        self.finish_key = np.where(steps > 0, steps * self.nreq + np.arange(n), -1).tolist()
        self.retire_key = (self.prompts_np + steps).tolist()  # prompt - admit step = this - finish step
        # a request alone on a replica decodes at batch 1 from context prompt + 1 to prompt + output - 1:
        # its decode time is read from the same table, with the same arithmetic, as the loop's (bit for bit)
        row1 = self.tables.row(1)
        decodes = accepted[steps[accepted] > 0]
        self.alone_np = np.zeros(n)  # (one-token and rejected requests: 0.0, and adding 0.0 is exact)
        self.alone_np[decodes] = _take(row1, self.prompts_np[decodes] + steps[decodes] + 1) - _take(
            row1, self.prompts_np[decodes] + 1
        )
        self.alone_decode = self.alone_np.tolist()
        self.alone = bytearray(n + 1)  # requests that ran alone (their steps are counted afterwards)
        self.jumped: list[tuple[np.ndarray, np.ndarray]] = []  # (requests, last-token times) jumped over
        # outputs as C doubles: set one at a time by the loops, handed to numpy without a copy
        self.e2e = array("d", [float("nan")]) * (n + 1)
        self.start = array("d", [float("nan")]) * (n + 1)
        self.running_flag = bytearray(n + 1)  # Neuron: whether a request is still in its replica's batch

    def alone_done(self, requests: np.ndarray) -> np.ndarray:
        """When each request would be done if it ran alone from its arrival (the loop's own arithmetic)."""
        return self.arrivals_np[requests] + self.pre_np[requests] + self.alone_np[requests]

    def ran_alone(self, requests: np.ndarray, done: np.ndarray) -> None:
        """A replica jumped over these requests: each ran alone from its arrival to `done`."""
        self.jumped.append((requests, done))

    def replica(
        self,
        r: int,
        inbox: list[int],
        loads: list[int] | None,
        totals: list[tuple[int, float, int]],
        alone_until: list[int] | None = None,
        skipped: list[int] | None = None,
    ) -> Generator[float, float, None]:
        """One replica as a coroutine. `inbox` holds the requests dispatched to it, in arrival order, and ends
        with the sentinel request `self.sentinel` (arriving at infinity); the caller inserts before it. Each
        `send(horizon)` promises that no other request will arrive before `horizon`. The replica then runs
        every call boundary before the horizon and yields the time of its next event (the end of its decode
        run, or a one-token request's completion; inf when idle). Completions decrement loads[r] at their
        time (when loads are tracked). When it is idle with an infinite horizon it writes its totals (decode
        steps, padded decode positions, padded batch slots) to totals[r].

        When the whole inbox is known in advance (round robin), `alone_until[j]` is the first inbox position
        from j on whose request is not done before the next one arrives: a replica idle when request j
        arrives runs requests j .. alone_until[j] - 1 alone, one after the other, so it jumps over them (their
        times are filled in afterwards from the same arithmetic) and notes the positions in `skipped`."""
        arrive, prompt, pre, start, e2e = self.arrive, self.prompt, self.pre, self.start, self.e2e
        finish_key, retire_key, running_flag = self.finish_key, self.retire_key, self.running_flag
        alone_decode = self.alone_decode
        tables = self.tables
        positions = tables.positions
        by_batch = tables.by_batch
        row_of = tables.row
        B = self.setup.max_batch
        max_mode = bool(self.setup.decode_buckets)
        account = max_mode or bool(self.setup.batch_sizes)  # padding exists only with compiled shapes
        padded_of = [self.setup.padded_batch(k) if k else 0 for k in range(B + 1)]
        push, pop = heapq.heappush, heapq.heappop
        inf = float("inf")
        NREQ = self.nreq
        finish: list[int] = []  # finish iteration * NREQ + request
        longest: list[int] = []  # Neuron: -(prompt - admit iteration) * NREQ + request
        pending: deque[float] = deque()  # one-token requests done at a future prefill end (load tracking)
        # batch size, decode steps done (and that x NREQ), sum over the batch of (prompt - admit step)
        nr = it = itN = key_sum = 0
        head = 0  # next request in the inbox not yet admitted
        decode_pad = 0.0
        pad_slots = 0
        t = 0.0
        horizon = yield inf
        while True:
            # call boundary at t: prefill the requests that have arrived, while slots are free
            while nr < B:
                i = inbox[head]
                if arrive[i] > t:
                    break  # (the sentinel at the end of the inbox arrives at infinity)
                head += 1
                start[i] = t
                t += pre[i]
                key = finish_key[i]
                if key < 0:  # one token: done when its prefill ends
                    e2e[i] = t
                    if loads is not None:
                        if t < horizon:
                            loads[r] -= 1
                        else:
                            pending.append(t)
                    continue
                push(finish, itN + key)
                key = prompt[i] - it
                key_sum += key
                if max_mode:
                    push(longest, -key * NREQ + i)
                    running_flag[i] = 1
                nr += 1
            if not nr:
                i = inbox[head]
                a = arrive[i]
                if a < inf:
                    if a >= t and alone_until is not None:
                        k = alone_until[head]
                        if k > head:
                            skipped.append(head)  # type: ignore[union-attr]
                            skipped.append(k)  # type: ignore[union-attr]
                            head = k
                            j = inbox[k - 1]
                            t = arrive[j] + pre[j] + alone_decode[j]
                            continue
                        t = a
                        continue
                    if a > t:
                        t = a
                    continue  # (if it arrived while one-token prefills ran, it is prefilled next, at t)
                if horizon == inf and not pending:
                    totals[r] = (it, decode_pad, pad_slots)
                horizon = yield pending[0] if pending else inf
                while pending and pending[0] < horizon:
                    pending.popleft()
                    loads[r] -= 1  # type: ignore[index]
                continue
            # decode until the next completion, or until the first step boundary after the next arrival
            m = (finish[0] - itN) // NREQ
            if max_mode:
                while not running_flag[longest[0] % NREQ]:
                    pop(longest)
                c0 = it + 1 - longest[0] // NREQ
            else:
                c0 = -(-(key_sum + nr * (it + 1)) // nr)
            row = by_batch[nr] or row_of(nr)
            base = row[c0]
            end = t + (row[c0 + m] - base)
            while True:
                a = arrive[inbox[head]]
                if a < end and nr < B:
                    if a <= t:
                        m = 0  # it arrived during the prefills: it is prefilled right after them
                        end = t
                    else:
                        c_cut = bisect_left(row, base + (a - t), c0 + 1, c0 + m)
                        if c_cut < c0 + m:
                            m = c_cut - c0
                            end = t + (row[c_cut] - base)
                if end < horizon:
                    break
                horizon = yield min(end, pending[0]) if pending else end
                while pending and pending[0] < horizon:
                    pending.popleft()
                    loads[r] -= 1  # type: ignore[index]
            if not m:
                continue
            t = end
            if account:
                pb = padded_of[nr]
                decode_pad += pb * (positions[c0 + m] - positions[c0])
                pad_slots += pb * m
            it += m
            itN += m * NREQ
            lim = itN + NREQ
            if finish[0] < lim:
                done = 0
                while finish and finish[0] < lim:
                    i = pop(finish) % NREQ
                    e2e[i] = t
                    key_sum -= retire_key[i] - it
                    done += 1
                    if max_mode:
                        running_flag[i] = 0
                nr -= done
                if loads is not None:
                    loads[r] -= done

    def result(self, replica_of: np.ndarray, totals: list[tuple[int, float, int]]) -> _Run:
        accepted = self.accepted
        e2e = np.frombuffer(self.e2e, dtype=np.float64)[:-1].copy()
        start = np.frombuffer(self.start, dtype=np.float64)[:-1].copy()
        alone = np.frombuffer(self.alone, dtype=np.uint8)[:-1].astype(bool)
        for requests, done in self.jumped:
            e2e[requests] = done
            start[requests] = self.arrivals_np[requests]
            alone[requests] = True
        served = accepted[~np.isnan(e2e[accepted])]
        decode_counts = np.maximum(self.outs_np[served] - 1, 0)
        real_positions = int(
            (decode_counts * self.prompts_np[served] + decode_counts * (decode_counts + 1) // 2).sum()
        )
        slots = int(decode_counts.sum())
        # requests that ran alone skipped the per-call path: count their steps and padding here
        steps_alone = np.maximum(self.outs_np[alone] - 1, 0)
        p_alone = self.prompts_np[alone]
        pb1 = self.setup.padded_batch(1)
        positions = self.tables.positions
        pad_alone = pb1 * float(
            np.sum(_take(positions, p_alone + steps_alone + 1) - _take(positions, p_alone + 1))
        )
        padded = self.setup.decode_buckets or self.setup.batch_sizes
        ttft = start + self.pre_np
        ttft[np.isnan(start)] = np.nan
        return _Run(
            ttft=ttft,
            e2e=e2e,
            start=start,
            replica_of=replica_of,
            busy=_busy_time(replica_of[accepted], start[accepted], e2e[accepted], len(totals)),
            calls=sum(tot[0] for tot in totals) + int(steps_alone.sum()),
            prefill_tokens=int(self.prompts_np[accepted].sum()),
            prefill_padded=int(self.prefill_len.sum()),
            decode_positions=real_positions,
            decode_padded=int(round(sum(tot[1] for tot in totals) + pad_alone)) if padded else real_positions,
            slots=slots,
            padded_slots=sum(tot[2] for tot in totals) + pb1 * int(steps_alone.sum()) if padded else slots,
        )


def _busy_time(replica: np.ndarray, start: np.ndarray, end: np.ndarray, R: int) -> np.ndarray:
    """Per replica, the length of the union of its requests' [first call, last token] intervals: a replica
    runs calls back to back whenever it holds a request, so this is its busy time."""
    busy = np.zeros(R)
    if start.size == 0:
        return busy
    offset = (
        float(np.max(end) - np.min(start)) + 1.0
    )  # replicas' timelines laid end to end, never overlapping
    small = replica.astype(np.int16) if R <= np.iinfo(np.int16).max else replica  # (radix sort)
    order = np.argsort(small, kind="stable")  # FIFO: a replica's requests start in arrival order
    rep = replica[order]
    s = start[order] - start.min() + rep * offset
    e = end[order] - start.min() + rep * offset
    covered = np.maximum.accumulate(e)
    prev = np.concatenate(([-np.inf], covered[:-1]))
    np.add.at(busy, rep, np.maximum(0.0, e - np.maximum(s, prev)))
    return busy


class _LeastLoaded:
    """The lowest-numbered replica among the least loaded, for large fleets (a scan of every load per arrival
    costs too much there): a min-heap of replica numbers per load level, stale entries dropped lazily."""

    def __init__(self, loads: list[int]) -> None:
        self.loads = loads
        self.levels: list[list[int]] = [list(range(len(loads)))]
        self.low = 0

    def pick(self) -> int:
        loads, levels = self.loads, self.levels
        while True:
            h = levels[self.low]
            while h and loads[h[0]] != self.low:
                heapq.heappop(h)
            if h:
                return h[0]
            self.low += 1

    def moved(self, r: int) -> None:
        """Replica r's load changed."""
        level = self.loads[r]
        while len(self.levels) <= level:
            self.levels.append([])
        heapq.heappush(self.levels[level], r)
        self.low = min(self.low, level)


SCAN_REPLICAS = 64  # up to this many replicas, finding the least loaded by a scan is faster than heaps


def _simulate_llm(
    traffic: Traffic, service: ServiceTimes, setup: ReplicaSetup, R: int, accepted: np.ndarray, jsq: bool
) -> _Run:
    """Continuous batching on R replicas, each a `_LlmFleet.replica` coroutine.

    Round robin: replicas never interact, so each one is given all its requests and run to the end at once.
    Least loaded: arrivals are dispatched in time order; before each one, every replica whose next event comes
    earlier is run up to it (an event list orders them), so the loads the dispatcher compares are exact. A
    request arriving at the same instant as an event is dispatched first."""
    fleet = _LlmFleet(traffic, service, setup, accepted)
    loads = [0] * R
    totals: list[tuple[int, float, int]] = [(0, 0.0, 0)] * R
    inboxes: list[list[int]] = [[fleet.sentinel] for _ in range(R)]
    replica_of = np.full(len(traffic), -1, dtype=np.int64)
    inf = float("inf")
    if not jsq:
        replica_of[accepted] = np.arange(accepted.size) % R
        for r in range(R):
            mine = accepted[r::R]
            inboxes[r] = mine.tolist() + [fleet.sentinel]
            done = fleet.alone_done(mine)
            # position j runs alone if idle on arrival and done before j + 1 arrives; alone_until[j] = first
            # position >= j that does not
            runs_alone = np.append(traffic.arrivals_s[mine[1:]] >= done[:-1], True)
            blockers = np.flatnonzero(~runs_alone)
            alone_until = np.append(blockers, mine.size)[np.searchsorted(blockers, np.arange(mine.size))]
            skipped: list[int] = []
            g = fleet.replica(r, inboxes[r], None, totals, alone_until.tolist() + [mine.size], skipped)
            next(g)
            g.send(inf)
            if skipped:
                cover = np.zeros(mine.size + 1, dtype=np.int64)
                np.add.at(cover, skipped[0::2], 1)
                np.add.at(cover, skipped[1::2], -1)
                ran_alone = np.cumsum(cover[:-1]) > 0
                fleet.ran_alone(mine[ran_alone], done[ran_alone])
        return fleet.result(replica_of, totals)

    gens = [fleet.replica(r, inboxes[r], loads, totals) for r in range(R)]
    for g in gens:
        next(g)
    resume = [g.send for g in gens]
    sentinel = fleet.sentinel
    scheduled = [inf] * R  # each replica's next event; heap entries with another time are stale
    events: list[tuple[float, int]] = []
    push, pop = heapq.heappush, heapq.heappop
    order = accepted.tolist()
    times = traffic.arrivals_s[accepted].tolist()
    nexts = times[1:] + [inf] if times else []
    least = _LeastLoaded(loads) if R > SCAN_REPLICAS else None
    times_of = fleet.arrive
    # A request sent to an idle replica runs alone until another one joins it: it is done at alone_done
    # unless the dispatcher sends that replica a second request first (only when every replica is busy).
    # Until then the replica's coroutine does not see it; `solo[r]` holds it.
    solo = [-1] * R
    where = [-1] * len(traffic)
    pre, alone_decode, start, e2e, alone = fleet.pre, fleet.alone_decode, fleet.start, fleet.e2e, fleet.alone
    for i, a, a_next in zip(order, times, nexts, strict=True):
        while events and events[0][0] < a:
            te, r = pop(events)
            if te == scheduled[r]:
                j = solo[r]
                if j >= 0:  # it ran alone to the end
                    start[j] = times_of[j]
                    e2e[j] = te
                    alone[j] = 1
                    solo[r] = -1
                    scheduled[r] = inf
                    loads[r] -= 1
                    if least is not None:
                        least.moved(r)
                    continue
                before = loads[r]
                nt = scheduled[r] = resume[r](a)
                if nt < inf:
                    push(events, (nt, r))
                if least is not None and loads[r] != before:
                    least.moved(r)
        if least is None:
            r = loads.index(min(loads))
        else:
            r = least.pick()
        loads[r] += 1
        where[i] = r
        if least is not None:
            least.moved(r)
        if loads[r] == 1:
            solo[r] = i
            nt = scheduled[r] = a + pre[i] + alone_decode[i]
            push(events, (nt, r))
            continue
        inbox = inboxes[r]
        j = solo[r]
        if j >= 0:  # a second request joins: the replica's coroutine takes over the first from its arrival
            solo[r] = -1
            inbox[-1] = j
            inbox.append(sentinel)
        inbox[-1] = i
        inbox.append(sentinel)
        nt = resume[r](a_next)
        if nt != scheduled[r]:
            scheduled[r] = nt
            if nt < inf:
                push(events, (nt, r))
    for r, g in enumerate(gens):
        j = solo[r]
        if j >= 0:  # nobody else came
            start[j] = times_of[j]
            e2e[j] = scheduled[r]
            alone[j] = 1
        g.send(inf)
    replica_of[accepted] = np.asarray(where)[accepted]
    return fleet.result(replica_of, totals)
