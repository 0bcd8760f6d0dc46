"""The step scheduler: continuous batching with the named policies (`simulate_policies`), a paged KV cache
with recompute preemption, and three dispatchers (round robin, least loaded, one shared queue).

`chipswap.simulation.simulate` runs its closed-form engine where that engine's rules are exactly the policy's
(prefill-first or static slots without chunking, a KV cache that cannot fill up, per-replica queues); this
module runs everything else. It skips whole runs of decode steps between events with the same cumulative
step-time tables, so a step is only simulated one by one when it carries a prefill chunk or when the KV cache
is nearly full.

Rules per replica, at each step boundary (time t):
- decoding requests whose last token is out leave; their KV blocks are freed;
- prefill-first / static slots without chunking: the head of the queue, if a slot is free (and, with a KV
  limit, blocks for its prompt), is prefilled alone at `prefill_s(1, padded length)`; its first token is out
  at the end;
- chunked prefill: a step of at most `token_budget` tokens: one for each decoding request, then the rest of
  unfinished prefills in admission order, then new requests from the queue while a slot (and blocks) are
  free. Its time is the decode step's (batch = decoding requests) plus each chunk's share of its prefill,
  `prefill_s(1, done + chunk) - prefill_s(1, done)` (an assumption: chunks add, no overlap credit);
- otherwise a run of decode steps to the next completion (cut at the first boundary after an arrival that
  could join, or where the KV cache could run out, after which steps go one at a time);
- KV (GPU): a request holds the blocks of the positions it has written, ceil(positions / block) (a decode
  run takes its blocks at its end, for the steps it ran); when a decode step needs more blocks than are
  free, the most recently admitted running request is preempted (blocks freed, back to the head of the
  queue) and later prefilled again over its prompt plus every token it had produced (recompute, as vLLM
  does; that prefill samples its next token); it returns to the replica that preempted it only after
  another request has left it (no ping-pong).

Dispatch: round robin and least loaded (fewest outstanding, counted until a request's last token is out)
send each arrival to one replica's queue; "shared" keeps one queue that every replica draws from at its step
boundaries (idle replicas first, lowest number; otherwise the replica with a free slot whose next step
boundary comes first is claimed, and a claim that cannot take the head passes on; a new head gets its own
claim; a replica short of KV blocks for the head is not claimed; a request preempted there is back at the
head of the one queue and waits as an arrival does). docs/simulation.md lists every rule.

Pure: numpy and the standard library. No files, clock, printing or torch.
"""

from __future__ import annotations

import heapq
import math
from bisect import bisect_left
from collections import deque
from typing import Any

import numpy as np

from chipswap.simulation.model import _take
from chipswap.simulation.policies import CHUNKED_PREFILL

INF = float("inf")


class _Replica:
    __slots__ = (
        "queue",
        "dec",
        "dec_order",
        "running_n",
        "longest",
        "key_sum",
        "nr",
        "it",
        "partial",
        "blocks",
        "busy",
        "run",
        "event_t",
        "load",
        "steps",
        "pad",
        "pad_slots",
        "idle",
        "pending",
        "claimed",
        "finished",
        "grown",
        "phase",
        "ahead",
        "stale",
    )

    def __init__(self, queue: deque[int]) -> None:
        self.queue = queue
        self.dec: list[tuple[int, int]] = []  # heap: (finish step, request)
        self.dec_order: list[int] = []  # with a KV limit: running requests in admission order (preemption)
        self.running_n = 0  # requests admitted and not finished (prefilling or decoding): the slots in use
        self.longest: list[tuple[int, int]] = []  # heap: (-key, request), static slots: longest context
        self.key_sum = 0  # sum of key over decoding requests (context of step s = key + s)
        self.nr = 0  # decoding requests
        self.it = 0  # decode steps run so far
        self.partial: list[int] = []  # admitted requests still prefilling (chunked)
        self.blocks = 0  # KV blocks held
        self.busy = 0.0
        self.run: tuple[float, int, Any, int] | None = None  # decode run: (start t, c0, row, m)
        self.event_t = INF
        self.load = 0
        self.steps = 0
        self.pad = 0.0
        self.pad_slots = 0
        self.idle = True
        self.claimed = False  # shared queue: cut for a waiting request, not yet at that boundary
        self.pending: deque[float] = deque()  # loads to drop at these (future) times: completions at the end
        # of a step that was still running when they were scheduled
        self.finished = 0  # requests that have left this replica (a preempted request waits for one)
        # KV blocks of decoding requests, kept per class, not per request (a step would otherwise visit
        # every running request): request i holds max(held[i], ceil((key[i] + grown) / block)) blocks;
        # `phase[p]` counts the requests whose blocks follow the ceiling (key mod block = p); `ahead` is a
        # heap of (step, request, join) of those still within the blocks they were given at admission (a
        # prompt padded to its bucket, say) until that step. `dec` entries of preempted requests stay in the
        # heap (`stale` of them) and are skipped when they come up.
        self.grown = 0  # the decode step the decoding requests' blocks are allocated to
        self.phase: dict[int, int] = {}
        self.ahead: list[tuple[int, int, int]] = []
        self.stale = 0


class StepSim:
    """One simulation. Inputs are numpy arrays over all requests (`accepted` are the ones that fit); call
    `run()` once; outputs are `ttft`, `e2e`, `start` (absolute times) and `replica_of`."""

    def __init__(
        self,
        traffic: Any,
        service: Any,
        setup: Any,
        R: int,
        accepted: np.ndarray,
        dispatch: str,
        tables: Any,
        prefill_len: np.ndarray,
    ) -> None:
        n = len(traffic)
        self.service, self.setup, self.R, self.dispatch = service, setup, R, dispatch
        self.accepted = accepted.tolist()
        self.arrive = traffic.arrivals_s.tolist()
        self.prompt = traffic.prompt_tokens.tolist()
        self.out = traffic.output_tokens.tolist()
        plen = traffic.prompt_tokens.copy()
        plen[accepted] = prefill_len
        self.plen = plen.tolist()  # prefill length (padded to the bucket on Neuron)
        self.tables = tables
        self.chunked = setup.policy == CHUNKED_PREFILL or bool(setup.token_budget)
        self.budget = setup.token_budget or (1 << 62)
        self.max_mode = bool(setup.decode_buckets)
        self.account = self.max_mode or bool(setup.batch_sizes)
        self.B = setup.max_batch
        self.block = setup.context_block
        self.kv = setup.kv_blocks  # 0: no limit
        self.padded_of = [setup.padded_batch(k) if k else 0 for k in range(self.B + 1)]
        nan = float("nan")
        self.ttft = [nan] * n
        self.e2e = [nan] * n
        self.start = [nan] * n
        self.replica_of = [-1] * n
        self.done_steps = [0] * n  # decode steps a request has had (survives preemption)
        self.key = [0] * n
        self.held = [0] * n  # KV blocks a running request holds
        self.filled = [0] * n  # prefill tokens computed so far (chunked)
        self.refill = [0] * n  # tokens to prefill (prompt, or prompt + produced after a preemption)
        self.back: dict[int, tuple[_Replica, int]] = {}  # preempted: (replica, its finished count then)
        self.running = bytearray(n)
        self.preemptions = 0
        self._pf: dict[int, float] = {}
        self.shared: deque[int] = deque()
        self.admits = 0  # requests admitted so far (a claimed replica that admitted none passes its claim on)
        self.requeued = 0  # shared queue: requests a preemption has just put back (each gets a free slot)
        # round robin: the replica's next arrival (a step that ends before it goes straight on to decoding)
        self.horizon = -INF
        self.alone: tuple[np.ndarray, ...] | None = None  # (requests, arrivals, first tokens, last tokens)
        self.reps = [_Replica(self.shared if dispatch == "shared" else deque()) for _ in range(R)]
        self.fin = [0] * n  # the finish step of a decoding request's `dec` entry
        self.on: list[_Replica | None] = [None] * n  # the replica a request decodes on
        self.joins = [0] * n  # times a request has started decoding (tells a stale `ahead` entry)

    # -- costs ----------------------------------------------------------------------------------------------
    def pf(self, length: int) -> float:
        v = self._pf.get(length)
        if v is None:
            if length <= 0:
                return 0.0
            v = self._pf[length] = float(self.service.prefill_s(1, length))
            if not (math.isfinite(v) and v > 0):
                from chipswap.errors import ChipswapError

                raise ChipswapError(
                    f"service time for a prefill of {length} tokens is {v!r}; "
                    "service times must be positive seconds"
                )
        return v

    def _prefill_of(self, length: np.ndarray) -> np.ndarray:
        """pf of every length, computed once per distinct length, in order of first appearance (so a bad
        service time is reported for the same length as one call per request would)."""
        if not length.size:
            return np.zeros(0)
        uniq, first, inv = np.unique(length, return_index=True, return_inverse=True)
        vals = np.empty(len(uniq))
        for k in np.argsort(first, kind="stable").tolist():
            vals[k] = self.pf(int(uniq[k]))
        return vals[inv.reshape(-1)]

    def _blocks(self, tokens: int) -> int:
        return -(-tokens // self.block)

    def _c0(self, rp: _Replica) -> int:
        """Context charged for the next decode step."""
        if self.max_mode:
            while not self.running[rp.longest[0][1]]:
                heapq.heappop(rp.longest)
            return rp.it + 1 - rp.longest[0][0]
        return -(-(rp.key_sum + rp.nr * (rp.it + 1)) // rp.nr)

    # -- request moves --------------------------------------------------------------------------------------
    def _join_decode(self, rp: _Replica, i: int, t: float) -> None:
        """Request i's prefill ended at t: first token out; it decodes its remaining steps (or is done)."""
        if self.ttft[i] != self.ttft[i]:
            self.ttft[i] = t
        else:  # a recompute: its prefill samples the next token, as a decode step would have
            self.done_steps[i] += 1
        self.refill[i] = 0
        remaining = self.out[i] - 1 - self.done_steps[i]
        if remaining <= 0:
            self._leave(rp, i, t, later=True)  # it leaves the dispatcher's count when its prefill ends
            return
        k = self.prompt[i] + self.done_steps[i] - rp.it
        self.key[i] = k
        rp.key_sum += k
        rp.nr += 1
        f = self.fin[i] = rp.it + remaining
        heapq.heappush(rp.dec, (f, i))
        if self.max_mode:
            heapq.heappush(rp.longest, (-k, i))
        self.running[i] = 1
        if self.kv:
            self.on[i] = rp
            self.joins[i] += 1
            b = self.block
            if -(-(k + rp.grown) // b) >= self.held[i]:
                p = k % b
                rp.phase[p] = rp.phase.get(p, 0) + 1
            else:  # it holds more than its positions need until step (held - 1) * block - key + 1
                heapq.heappush(rp.ahead, ((self.held[i] - 1) * b - k + 1, i, self.joins[i]))

    def _retire(self, rp: _Replica, t: float, later: bool = False) -> None:
        """Decoding requests whose last step is done by now leave at t (`later`: t is the end of a step
        that has just started, so the dispatcher still counts them until t)."""
        dec, it = rp.dec, rp.it
        while dec and dec[0][0] <= it:
            f, i = heapq.heappop(dec)
            if rp.stale and not self._valid(rp, f, i):
                rp.stale -= 1
                continue
            self.running[i] = 0
            rp.key_sum -= self.key[i]
            rp.nr -= 1
            if self.kv:
                self._release(rp, i)
            self._leave(rp, i, t, later)

    def _valid(self, rp: _Replica, f: int, i: int) -> bool:
        """Whether a `dec` entry is the request's current one (not left behind by a preemption)."""
        return bool(self.running[i]) and self.fin[i] == f and self.on[i] is rp

    def _next_finish(self, rp: _Replica) -> int:
        """The step at which the next decoding request finishes (stale entries dropped first)."""
        dec = rp.dec
        while rp.stale and not self._valid(rp, *dec[0]):
            heapq.heappop(dec)
            rp.stale -= 1
        return dec[0][0]

    def _release(self, rp: _Replica, i: int) -> None:
        """A decoding request stops decoding: its blocks (as allocated to `grown`) leave their class and are
        set in held[i], which `_leave` or `_preempt` frees."""
        k, b = self.key[i], self.block
        ceil = -(-(k + rp.grown) // b)
        if ceil >= self.held[i]:
            p = k % b
            c = rp.phase[p] - 1
            if c:
                rp.phase[p] = c
            else:
                del rp.phase[p]
            self.held[i] = ceil
        # else: its `ahead` entry is dropped when it comes up (no longer running there)

    def _leave(self, rp: _Replica, i: int, t: float, later: bool = False) -> None:
        self.e2e[i] = t
        rp.blocks -= self.held[i]
        self.held[i] = 0
        rp.running_n -= 1
        rp.finished += 1
        if self.kv:
            rp.dec_order.remove(i) if rp.dec_order[-1] != i else rp.dec_order.pop()
        if later:  # least loaded reads the load at each arrival: it drops when the last token is out
            rp.pending.append(t)
        else:
            rp.load -= 1

    def _admit(self, rp: _Replica, r: int, i: int, t: float) -> None:
        rp.queue.popleft()
        self.admits += 1
        if self.start[i] != self.start[i]:
            self.start[i] = t
        rp.running_n += 1
        if self.kv:
            rp.dec_order.append(i)
        self.filled[i] = 0
        self.replica_of[i] = r

    def _preempt(self, rp: _Replica) -> None:
        """Recompute preemption of the most recently admitted running request."""
        i = rp.dec_order.pop()
        rp.running_n -= 1
        self.preemptions += 1
        if i in rp.partial:
            rp.partial.remove(i)
        elif self.running[i]:
            self._release(rp, i)
            self.running[i] = 0
            # context of step s is key + s = prompt + done at join + (s - join step)
            self.done_steps[i] = self.key[i] + rp.it - self.prompt[i]
            rp.key_sum -= self.key[i]
            rp.nr -= 1
            rp.stale += 1  # its `dec` entry stays in the heap until it comes up
        rp.blocks -= self.held[i]
        self.held[i] = 0
        # recompute: the prompt and every token it had produced (the first, from its prefill, and one per
        # decode step); it returns to the head of the queue and, on this replica, waits for a request to
        # leave first (otherwise two requests that do not fit together preempt each other step after step)
        produced = self.done_steps[i] + (self.ttft[i] == self.ttft[i])  # (none before its first token)
        self.refill[i] = self.prompt[i] + produced
        self.back[i] = (rp, rp.finished)
        rp.queue.appendleft(i)
        if self.dispatch == "shared":
            self.requeued += 1

    def _may_return(self, rp: _Replica, i: int) -> bool:
        """Whether request i may be admitted on rp: not a request rp preempted, unless a request has left rp
        since (or nothing runs there)."""
        b = self.back.get(i)
        return b is None or b[0] is not rp or b[1] != rp.finished or not rp.running_n

    # -- one replica's step boundary ------------------------------------------------------------------------
    def boundary(self, r: int, t: float) -> float:
        """Replica r is at a step boundary at t: retire, then start its next step or run; return its end."""
        rp = self.reps[r]
        rp.claimed = False
        run = rp.run
        if run is not None:  # a decode run ended here
            t0, c0, row, m = run
            rp.run = None
            if self.account:
                self._account(rp, c0, m)
            else:
                rp.steps += m
            rp.it += m
            if rp.dec and rp.dec[0][0] <= rp.it:
                self._retire(rp, t)
            if self.kv:
                self._grow(rp, 0)  # the blocks of the positions the run wrote (taken as they are written)
        q = rp.queue
        if self.chunked:
            return self._chunked_step(rp, r, t) if q or rp.partial else self._decode(rp, t)
        if q and rp.running_n < self.B:
            i = q[0]
            need = self._blocks(self.refill[i] or self.prompt[i]) if self.kv else 0
            if not self.kv or (need <= self.kv - rp.blocks or not rp.running_n) and self._may_return(rp, i):
                self._admit(rp, r, i, t)
                length = self.refill[i] or self.plen[i]
                rp.blocks += need
                self.held[i] = need
                dt = self.pf(length)
                rp.busy += dt
                end = t + dt
                self._join_decode(rp, i, end)
                if q or end >= self.horizon:
                    return end
                return self._decode(rp, end)
        return self._decode(rp, t)

    def _chunked_step(self, rp: _Replica, r: int, t: float) -> float:
        """One step under a token budget from t (and, when nothing can join before they end, the steps that
        follow it, up to the next decode run); returns the end of the last step or run started."""
        while True:
            end, stepped = self._one_chunked_step(rp, r, t)
            if not stepped or rp.queue or end >= self.horizon:
                return end
            if len(rp.partial) == 1 and not self.kv:
                end = self._chunk_run(rp, end)
                if rp.partial:
                    return end
            if not rp.partial:
                return self._decode(rp, end)  # nothing can join before the step ends: decoding runs on
            t = end  # the next chunk of a long prompt, right away

    def _chunk_run(self, rp: _Replica, t: float) -> float:
        """The rest of one long prompt's chunks from t, all at once, when nothing else changes meanwhile (no
        decode finishes before the last chunk, no arrival before it ends): k steps cost the rest of its
        prefill plus k decode steps of the running batch (one table difference). Otherwise nothing is done."""
        i = rp.partial[0]
        nr = rp.nr
        per_step = self.budget - nr
        total = self.refill[i] or self.plen[i]
        k = -(-(total - self.filled[i]) // per_step)
        if per_step <= 0 or k < 2 or (nr and self._next_finish(rp) - rp.it < k):
            return t
        cost = self.pf(total) - self.pf(self.filled[i])
        if nr:
            c0 = self._c0(rp)
            row = self.tables.by_batch[nr] or self.tables.row(nr)
            cost += row[c0 + k] - row[c0]
        end = t + cost
        if end >= self.horizon:
            return t
        if nr:
            self._account(rp, c0, k)
            rp.it += k
        rp.busy += cost
        self.filled[i] = total
        rp.partial.clear()
        self._retire(rp, end)
        self._join_decode(rp, i, end)
        return end

    def _one_chunked_step(self, rp: _Replica, r: int, t: float) -> tuple[float, bool]:  # noqa: C901
        preempted = self.preemptions
        if rp.nr and self.kv:
            self._make_room(rp, 1)  # decodes are scheduled (and given blocks) first; may preempt
        left = self.budget - rp.nr
        cost = 0.0
        finished: list[int] = []
        pf_get, pf, filled, refill, plen = self._pf.get, self.pf, self.filled, self.refill, self.plen
        if rp.partial:
            for i in list(rp.partial):
                if left <= 0:
                    break
                total = refill[i] or plen[i]
                k = min(left, total - filled[i])
                cost += pf(filled[i] + k) - pf(filled[i])
                filled[i] += k
                left -= k
                if filled[i] >= total:
                    rp.partial.remove(i)
                    finished.append(i)
        q = rp.queue
        kv = self.kv
        # (a step that had to preempt admits no one new, as in vLLM)
        while left > 0 and q and rp.running_n < self.B and self.preemptions == preempted:
            i = q[0]
            total = refill[i] or plen[i]
            k = total if total <= left else left
            if kv:
                need = -(-total // self.block)
                if need > kv - rp.blocks and rp.running_n or not self._may_return(rp, i):
                    break
                rp.blocks += need
                self.held[i] = need
            self._admit(rp, r, i, t)
            cost += pf_get(k) or pf(k)
            filled[i] = k
            left -= k
            if k >= total:
                finished.append(i)
            else:
                rp.partial.append(i)
        if cost == 0.0:  # no prefill work: a decode run (or idle)
            return self._decode(rp, t), False
        if rp.nr:
            c0 = self._c0(rp)
            row = self.tables.by_batch[rp.nr] or self.tables.row(rp.nr)
            cost += row[c0 + 1] - row[c0]
            self._account(rp, c0, 1)
            rp.it += 1
        end = t + cost
        rp.busy += cost
        # decodes of this step are done at its end; prefills that finished emit their first token
        if rp.dec and rp.dec[0][0] <= rp.it:
            self._retire(rp, end, later=True)
        for i in finished:
            self._join_decode(rp, i, end)
        return end, True

    def _make_room(self, rp: _Replica, m: int, defer: bool = False) -> int:
        """KV: the most decode steps (<= m) that cannot run out of blocks; preempts when one step cannot.
        `defer`: a decode run takes its blocks at its end (the boundary), for the steps it ran, so an
        admission check never sees blocks held ahead of the positions written."""
        free = self.kv - rp.blocks
        safe = (free // rp.nr) * self.block if rp.nr else 0  # a request crosses <= ceil(s / block) blocks
        if safe >= 1:
            steps = min(m, safe)
            if not defer:
                self._grow(rp, steps)
            return steps
        return self._room_for_one_step(rp)

    def _room_for_one_step(self, rp: _Replica) -> int:
        """Fewer free blocks than decoding requests: one step, if the requests whose next position starts
        a block can have one each; else preempt (the most recent first) until they can. 1, or 0 when none
        is left decoding."""
        while rp.nr:
            # the requests whose next position starts a block (none when a chunked step that then had no
            # prefill to run has already allocated this step)
            need = rp.phase.get(-rp.it % self.block, 0) if rp.grown == rp.it else 0
            if need <= self.kv - rp.blocks:
                self._grow(rp, 1)
                return 1
            self._preempt(rp)
        return 0

    def _grow(self, rp: _Replica, steps: int) -> None:
        """Allocate the blocks the decode steps up to `rp.it + steps` need (exact per request): a request
        whose blocks follow ceil((key + s) / block) crosses ((key + grown - 1) mod block + k) // block block
        edges in k more steps, so each class of key mod block is counted at once."""
        b, g = self.block, rp.grown
        to = rp.it + steps
        k = to - g
        if k <= 0:
            return
        if k == 1:  # one step: the class whose next position starts a block
            added = rp.phase.get(-g % b, 0)
        else:
            added = sum(c * (((p + g - 1) % b + k) // b) for p, c in rp.phase.items())
        ahead = rp.ahead
        while ahead and ahead[0][0] <= to:  # requests whose positions reach past the blocks they were given
            _, i, join = heapq.heappop(ahead)
            if not self.running[i] or self.joins[i] != join:
                continue  # left or preempted meanwhile (its blocks were freed then)
            key = self.key[i]
            added += -(-(key + to) // b) - self.held[i]
            p = key % b
            rp.phase[p] = rp.phase.get(p, 0) + 1
        rp.blocks += added
        rp.grown = to

    def _account(self, rp: _Replica, c0: int, m: int) -> None:
        rp.steps += m
        if self.account:
            pb = self.padded_of[rp.nr]
            pos = self.tables.positions
            rp.pad += pb * (pos[c0 + m] - pos[c0])
            rp.pad_slots += pb * m

    def _decode(self, rp: _Replica, t: float) -> float:
        if not rp.nr:
            rp.idle = True
            return INF
        m = self._next_finish(rp) - rp.it
        if self.kv:
            m = self._make_room(rp, m, defer=True)
            if not rp.nr:
                return self.boundary(self.reps.index(rp), t)
        nr = rp.nr
        c0 = self._c0(rp) if self.max_mode else -(-(rp.key_sum + nr * (rp.it + 1)) // nr)
        row = self.tables.by_batch[nr] or self.tables.row(nr)
        dt = row[c0 + m] - row[c0]
        rp.run = (t, c0, row, m)
        rp.busy += dt
        return t + dt

    def cut(self, r: int, a: float) -> None:
        """An arrival at `a` could join replica r: end its decode run at the first step boundary at or after
        `a` (its KV blocks are taken at that boundary, for the steps it ran)."""
        rp = self.reps[r]
        run = rp.run
        if run is None or rp.running_n >= self.B:
            return
        t0, c0, row, m = run
        base = row[c0]
        c_cut = bisect_left(row, base + (a - t0), c0 + 1, c0 + m)
        if c_cut < c0 + m:
            rp.busy -= row[c0 + m] - row[c_cut]
            rp.run = (t0, c0, row, c_cut - c0)
            rp.event_t = t0 + (row[c_cut] - base)

    # -- the fleet ------------------------------------------------------------------------------------------
    def _alone_times(self) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        """Per accepted request, if it ran alone on an idle replica from its arrival: (first token, last
        token, decode steps, whether it could: its prompt fits one step). The same arithmetic as the step
        path (one prefill step, then one decode run at batch 1), so results do not depend on the path."""
        acc = np.asarray(self.accepted, dtype=np.int64)
        a = np.asarray(self.arrive)[acc]
        p = np.asarray(self.prompt, dtype=np.int64)[acc]
        steps = np.maximum(np.asarray(self.out, dtype=np.int64)[acc] - 1, 0)
        length = np.asarray(self.plen, dtype=np.int64)[acc]
        pre = self._prefill_of(length)
        row = self.tables.by_batch[1] or self.tables.row(1)
        ttft = a + pre
        dec = _take(row, p + 1 + steps) - _take(row, p + 1)
        done = np.where(steps > 0, ttft + dec, ttft)
        return ttft, done, steps, length <= self.budget

    def run_round_robin(self) -> None:
        """Round robin: replicas never interact, so each runs through its own arrivals, no event list. A
        replica idle when a request arrives jumps over the run of requests that are each done before the
        next one arrives (found with numpy beforehand); their times are filled in afterwards."""
        R, arrive = self.R, self.arrive
        acc = self.accepted
        ttft_a, done_a, steps_a, single = self._alone_times()
        acc_np = np.asarray(acc, dtype=np.int64)
        arr_np = np.asarray(arrive)[acc_np] if acc else np.zeros(0)
        jumped = np.zeros(len(acc), dtype=bool)
        for r in range(R):
            rp = self.reps[r]
            mine = acc[r::R]
            for i in mine:
                self.replica_of[i] = r
            q = rp.queue
            n = len(mine)
            pos = np.arange(r, len(acc), R)
            nxt = np.append(arr_np[pos[1:]], INF)
            ok = single[pos] & (done_a[pos] < nxt)
            blockers = np.flatnonzero(~ok)
            until = np.append(blockers, n)[np.searchsorted(blockers, np.arange(n))].tolist()
            h = 0
            end = INF
            while True:
                if end == INF:  # idle: the next arrival starts it
                    if h >= n:
                        break
                    k = until[h]
                    if k > h:  # requests h .. k-1 each run alone
                        jumped[pos[h:k]] = True
                        h = k
                        continue
                    i = mine[h]
                    a = arrive[i]
                    h += 1
                    q.append(i)
                    rp.idle = False
                    self.horizon = arrive[mine[h]] if h < n else INF
                    end = self.boundary(r, a)
                    continue
                while h < n and arrive[mine[h]] <= end:  # arrivals before the boundary join the queue
                    q.append(mine[h])
                    if rp.run is not None:
                        rp.event_t = end
                        self.cut(r, arrive[mine[h]])
                        end = rp.event_t
                    h += 1
                self.horizon = arrive[mine[h]] if h < n else INF
                end = self.boundary(r, end)
        self._fill_alone(acc_np[jumped], arr_np[jumped], ttft_a[jumped], done_a[jumped], steps_a[jumped])

    def _fill_alone(
        self, idx: np.ndarray, a: np.ndarray, ttft: np.ndarray, done: np.ndarray, steps: np.ndarray
    ) -> None:
        """Times, busy time, steps and padding of the requests that ran alone (round robin jumps)."""
        self.alone = (idx, a, ttft, done)
        rep = np.asarray(self.replica_of, dtype=np.int64)[idx]
        busy = np.bincount(rep, weights=done - a, minlength=self.R)
        nsteps = np.bincount(rep, weights=steps, minlength=self.R)
        if self.account:
            p = np.asarray(self.prompt, dtype=np.int64)[idx]
            pos = self.tables.positions
            pb = self.padded_of[1]
            per = pb * (_take(pos, p + 1 + steps) - _take(pos, p + 1))
            pad = np.bincount(rep, weights=per, minlength=self.R)
        for r, rp in enumerate(self.reps):
            rp.busy += float(busy[r])
            rp.steps += int(nsteps[r])
            if self.account:
                rp.pad += float(pad[r])
                rp.pad_slots += self.padded_of[1] * int(nsteps[r])

    def run(self) -> None:
        if self.dispatch == "round_robin":
            self.run_round_robin()
            return
        R, reps = self.R, self.reps
        events: list[tuple[float, int]] = []
        push = heapq.heappush
        arrive = self.arrive
        rr = -1
        shared = self.dispatch == "shared"
        for i in self.accepted:
            a = arrive[i]
            self._events_until(events, a)
            if shared:
                self.shared.append(i)
                idle = next((r for r in range(R) if reps[r].idle), -1)
                if idle >= 0:
                    self._start(events, idle, a)
                    continue
                self._claim(events, a)
                continue
            if self.dispatch == "least_loaded":
                for rp in reps:
                    while rp.pending and rp.pending[0] < a:
                        rp.pending.popleft()
                        rp.load -= 1
                loads = [rp.load for rp in reps]
                r = loads.index(min(loads))
            else:
                r = rr = rr + 1 if rr + 1 < R else 0
            rp = reps[r]
            rp.load += 1
            self.replica_of[i] = r
            rp.queue.append(i)
            if rp.idle:
                rp.idle = False
                nt = rp.event_t = self.boundary(r, a)
                if nt < INF:
                    push(events, (nt, r))
            else:
                before = rp.event_t
                self.cut(r, a)
                if rp.event_t != before:
                    push(events, (rp.event_t, r))
        self._events_until(events, INF)

    def _start(self, events: list[tuple[float, int]], r: int, t: float) -> None:
        """Shared queue: idle replica r starts at t (it takes the head of the queue)."""
        rp = self.reps[r]
        rp.idle = False
        nt = rp.event_t = self.boundary(r, t)
        if nt < INF:
            heapq.heappush(events, (nt, r))

    def _requeue(self, events: list[tuple[float, int]], t: float, r: int) -> None:
        """Shared queue: each request replica r preempted at t is back at the head of the queue and waits
        as an arrival does: an idle replica (the lowest-numbered) starts it at once, else the replica with a
        free slot whose step boundary comes first is claimed (not r: it takes the request back only after
        another has left it)."""
        while self.requeued:
            self.requeued -= 1
            idle = next((x for x, rp in enumerate(self.reps) if rp.idle), -1)
            if idle >= 0:
                self._start(events, idle, t)
            else:
                self._claim(events, t, skip=r)

    def _claim(self, events: list[tuple[float, int]], a: float, skip: int = -1) -> None:
        """Shared queue, a request waits at `a`: the unclaimed replica with a free slot that reaches a step
        boundary first (its decode run cut there) is claimed to take the head of the queue (`skip`: the
        replica whose claim just failed; it takes the head at its own next boundary if it can)."""
        best_t, best = INF, -1
        B = self.B
        if not self.shared:
            return
        head = self.shared[0]
        # with a KV limit, a replica short of blocks for the head (or that preempted it) cannot take it before
        # a request leaves it, at a step boundary of its own: claiming it would only cut its runs
        need = self._blocks(self.refill[head] or self.prompt[head]) if self.kv else 0
        for r, rp in enumerate(self.reps):
            if rp.claimed or rp.running_n >= B or r == skip:
                continue
            if need and rp.running_n and (need > self.kv - rp.blocks or not self._may_return(rp, head)):
                continue
            run = rp.run
            if run is None:
                tb = rp.event_t
            else:
                t0, c0, row, m = run
                tb = t0 + (row[bisect_left(row, row[c0] + (a - t0), c0 + 1, c0 + m)] - row[c0])
            if tb < best_t:
                best_t, best = tb, r
        if best >= 0:
            rp = self.reps[best]
            rp.claimed = True
            before = rp.event_t
            self.cut(best, a)
            if rp.event_t != before:
                heapq.heappush(events, (rp.event_t, best))

    def _events_until(self, events: list[tuple[float, int]], a: float) -> None:
        """Run every replica boundary on the event list before `a` (stale entries skipped). Shared queue: a
        claimed replica that could not take the waiting head at its boundary (its step's token budget went to
        a prompt already prefilling) passes the claim on, so the head starts at the first free slot."""
        reps = self.reps
        shared = self.shared
        while events and events[0][0] < a:
            te, r = heapq.heappop(events)
            rp = reps[r]
            if te != rp.event_t:
                continue
            claimed = rp.claimed
            admits = self.admits
            nt = rp.event_t = self.boundary(r, te)
            if nt < INF:
                heapq.heappush(events, (nt, r))
            if self.requeued:
                self._requeue(events, te, r)
            if shared:
                if self.admits != admits:  # a new head: the first free slot that can take it is claimed
                    self._claim(events, te)
                elif claimed:  # the head it was claimed for still waits: the claim passes on
                    self._claim(events, te, skip=r)
