"""Per-bucket dynamic batching with a bounded queue: gather requests of one bucket, pad to a compiled batch.

Each request goes to the queue of its sequence bucket. A worker takes the bucket whose oldest request has
waited longest once that bucket is *due*: it holds as many requests as the largest compiled batch size, or
its oldest request has waited ``max_batch_delay_s``, or the batcher is draining. It takes up to the largest
compiled batch size (FIFO) and picks the compiled batch size that serves them fastest per request, from the
measured time of each (batch, seq) shape (``calibrate`` times every shape once at start-up; every batch run
updates it). Where a bigger batch costs about the same as a small one (accelerators) it pads up with whole
padding rows; where time grows with the batch (CPU) it runs fewer and leaves the rest queued for the next
call, instead of computing padding rows. ``workers`` batches run at once (``default_workers``: the cores
over the threads one call uses, so one-thread calls on 2 cores run 2 batches at once).

Waiting for company is skipped where it cannot pay (issue 33): a bucket with one compiled batch size of 1 (the
batch cannot grow), a bucket whose measured shape times say a full batch serves a request no faster than the
smallest size (a CPU: time grows with the batch), and a bucket whose requests have lately come further apart
than the delay (no company is coming: one request at a time, light load) are due at once, so the first
request of a batch does not wait ``max_batch_delay_s`` for nothing.

Backpressure: a bucket queue holding ``max_queue`` requests, or ``max_queue_total`` across buckets, or an
estimated wait (queued requests x recent wall time per answered request) over ``max_queue_wait_s``,
rejects the next request with QueueFull and that estimate as Retry-After. So an admitted request waits
seconds, not minutes, however slow the model. A request whose deadline passes while it waits is completed
with RequestExpired and never run.
``close(drain=True)`` refuses new work and runs everything already queued.

May not: parse HTTP, format responses, or know about the model's backend (it sees a ServedModel).
"""

from __future__ import annotations

import math
import threading
import time
from collections import deque
from collections.abc import Callable, Sequence
from concurrent.futures import Future, InvalidStateError
from dataclasses import dataclass, field
from typing import Any

from chipswap.errors import ChipswapError
from chipswap.serve.metrics import ServeMetrics
from chipswap.serve.router import choose_batch
from chipswap.serve.served import ServedModel

WAIT_GAIN = (
    0.1  # a full batch must serve a request this much faster than the smallest size to wait for company
)


@dataclass(frozen=True)
class BatcherConfig:
    """How the batcher trades latency for batch fill and when it says no."""

    max_batch_delay_s: float = 0.005  # longest the first request of a batch waits for company
    max_queue: int = 64  # requests waiting in one bucket; the next one is rejected (429)
    max_queue_total: int = 256  # requests waiting across all buckets
    max_queue_wait_s: float = 2.0  # refuse (429) when the estimated wait for a new request is longer
    request_timeout_s: float = 30.0  # a request not started by then is dropped (the HTTP layer answers 504)
    workers: int = 1  # batches that run at the same time

    def __post_init__(self) -> None:
        if not 0 <= self.max_batch_delay_s <= 10:
            raise ChipswapError(
                f"max batch delay must be 0..10000 ms, got {self.max_batch_delay_s * 1000:g} ms"
            )
        if not (1 <= self.max_queue <= 100_000 and 1 <= self.max_queue_total <= 1_000_000):
            raise ChipswapError(
                f"queue limits must be 1..100,000 per bucket and 1..1,000,000 in all, got "
                f"{self.max_queue:,}/{self.max_queue_total:,}"
            )
        if not 0 < self.request_timeout_s <= 3600:
            raise ChipswapError(f"request timeout must be in (0, 3600] s, got {self.request_timeout_s}")
        if not 0 < self.max_queue_wait_s <= 3600:
            raise ChipswapError(f"max queue wait must be in (0, 3600] s, got {self.max_queue_wait_s}")
        if not 1 <= self.workers <= 64:
            raise ChipswapError(f"workers must be 1..64, got {self.workers}")


def default_workers(cores: int, threads_per_call: int | None) -> int:
    """Batches to run at once when --workers is not given: every core busy, none oversubscribed. A call with
    the library's own thread count (None) already uses every core: 1."""
    if threads_per_call is None or threads_per_call < 1:
        return 1
    return max(1, min(64, cores // threads_per_call))


class QueueFull(Exception):
    """Too many requests waiting; come back in ``retry_after_s``."""

    def __init__(self, bucket: int, depth: int, retry_after_s: int) -> None:
        super().__init__(f"queue of bucket {bucket} is full ({depth} waiting)")
        self.bucket = bucket
        self.depth = depth
        self.retry_after_s = retry_after_s


class Draining(Exception):
    """The batcher is shutting down and takes no new work."""


class RequestExpired(Exception):
    """The request's deadline passed before its batch started."""


@dataclass(frozen=True)
class Served:
    """One request's answer and how it was served."""

    outputs: tuple[Any, ...]
    bucket: int  # sequence bucket (padded length)
    batch: int  # compiled batch size it ran in
    fill: int  # real requests in that batch
    tokens: int
    queue_s: float
    model_s: float


@dataclass
class _Pending:
    row: list[int]
    bucket: int
    enqueued: float
    deadline: float
    future: Future[Served] = field(default_factory=Future)
    cancelled: bool = False


class DynamicBatcher:
    def __init__(
        self,
        model: ServedModel,
        config: BatcherConfig | None = None,
        metrics: ServeMetrics | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.model = model
        self.config = config or BatcherConfig()
        self.metrics = metrics
        self.clock = clock
        self._cond = threading.Condition()
        self._queues: dict[int, deque[_Pending]] = {}
        self._total = 0
        self._closing = False
        self._flush = False  # draining: run what is queued now, wait for no company
        self._threads: list[threading.Thread] = []
        self._running = 0  # batches executing now
        # moving average of wall seconds per answered request while busy, all workers together (model time
        # plus everything else the process does between batches): a new request's wait is estimated from it
        self._per_request_s = 0.0
        self._last_end: float | None = None  # when the last batch ended, if work was waiting then
        # fastest time seen per (batch, seq) call: the intrinsic cost, unlike a mean it ignores the runs a
        # busy machine preempted; it is what the batch-size choice compares
        self._shape_s: dict[tuple[int, int], float] = {}
        # per bucket: last arrival, smoothed gap between arrivals; a bucket whose requests come further apart
        # than the batch delay gets no company by waiting, so its batches start at once
        self._arrivals: dict[int, float] = {}
        self._gap_s: dict[int, float] = {}
        self._last_any: float | None = None  # the same across buckets: what a bucket without history goes by
        self._gap_all: float | None = None
        self._no_wait: dict[int, bool] = {}  # bucket -> company cannot pay (waits_for_company), cached
        self.batches_run = 0
        self.requests_run = 0

    # --- lifecycle ---------------------------------------------------------------------------------------
    def start(self) -> None:
        for i in range(self.config.workers):
            t = threading.Thread(target=self._worker, name=f"chipswap-batcher-{i}", daemon=True)
            t.start()
            self._threads.append(t)

    def close(self, *, drain: bool = True, timeout: float | None = None) -> int:
        """Stop taking work. With drain, queued requests still run; without, they fail with Draining.
        Returns how many requests were waiting or running when close was called."""
        with self._cond:
            self._closing = True
            waiting = self._total + self._running
            if not drain:
                for q in self._queues.values():
                    for p in q:
                        _fail(p.future, Draining("server is shutting down"))
                self._queues.clear()
                self._total = 0
            self._cond.notify_all()
        for t in self._threads:
            t.join(timeout)
        return waiting

    def flush_now(self) -> None:
        """Stop holding batches for company (no more requests are coming: the server is draining)."""
        with self._cond:
            self._flush = True
            self._cond.notify_all()

    @property
    def closing(self) -> bool:
        return self._closing

    # --- admission ---------------------------------------------------------------------------------------
    def submit(self, row: Sequence[int]) -> tuple[Future[Served], _Pending]:
        """Queue one request (token ids). Raises InputTooLong, QueueFull or Draining at once."""
        ids = list(row)
        bucket = self.model.bucket_for(len(ids))  # InputTooLong before anything is queued
        if len(ids) > bucket:
            ids = ids[:bucket]  # the model truncates (router truncate=True) and counts it
        now = self.clock()
        with self._cond:
            if self._closing:
                raise Draining("server is shutting down")
            q = self._queues.get(bucket)
            depth = len(q) if q else 0
            if (
                depth >= self.config.max_queue
                or self._total >= self.config.max_queue_total
                or self._too_long_locked()
            ):
                if self.metrics:
                    self.metrics.rejected("queue_full")
                raise QueueFull(bucket, depth, self._retry_after_locked())
            p = _Pending(ids, bucket, now, now + self.config.request_timeout_s)
            self._note_arrival(bucket, now)
            if q is None:
                q = self._queues[bucket] = deque()
            q.append(p)
            self._total += 1
            if self.metrics:
                self.metrics.queued(bucket, len(q))
            self._cond.notify()
        return p.future, p

    def cancel(self, pending: _Pending) -> None:
        """The caller gave up (timeout, disconnect): skip the request if it has not started."""
        pending.cancelled = True

    def overloaded(self) -> int | None:
        """Retry-After seconds when any new request would be refused now (whatever its bucket), else None:
        lets the HTTP layer shed load before it reads and parses a body."""
        with self._cond:
            if self._total >= self.config.max_queue_total or self._too_long_locked():
                return self._retry_after_locked()
        return None

    def _too_long_locked(self) -> bool:
        """Would a new request wait too long? Its expected start (queued x recent time per request) over
        max_queue_wait_s, or -- behind anyone -- its expected answer over half the request timeout (the rest
        is slack for the HTTP layer and a slow batch; issue 19). An empty queue always admits."""
        per = self._per_request_s
        if self._total * per > self.config.max_queue_wait_s:
            return True
        return self._total > 0 and (self._total + 1) * per > 0.5 * self.config.request_timeout_s

    def depth(self) -> dict[int, int]:
        with self._cond:
            return {b: len(q) for b, q in self._queues.items() if q}

    def _retry_after_locked(self) -> int:
        per = self._per_request_s or 0.01
        return max(1, math.ceil(self._total * per))

    # --- work --------------------------------------------------------------------------------------------
    def _worker(self) -> None:
        while True:
            with self._cond:
                job = self._next_batch_locked()
                if job is None:
                    return
                self._running += 1
            try:
                self._run(*job)
            finally:
                with self._cond:
                    self._running -= 1

    def _max_batch(self, bucket: int) -> int:
        sizes = self.model.batch_sizes(bucket)
        return sizes[-1] if sizes else 1

    def _next_batch_locked(self) -> tuple[int, list[_Pending]] | None:
        while True:
            now = self.clock()
            best: int | None = None
            best_t = math.inf
            wake = math.inf
            for bucket, q in self._queues.items():
                if not q:
                    continue
                head = q[0].enqueued
                due = head + self.config.max_batch_delay_s
                if (
                    self._closing
                    or self._flush
                    or len(q) >= self._max_batch(bucket)
                    or due <= now
                    or self._skip_wait(bucket)
                    or self._gap_s.get(bucket, self._gap_all or 0.0) > self.config.max_batch_delay_s
                ):
                    if head < best_t:
                        best, best_t = bucket, head
                else:
                    wake = min(wake, due)
            if best is not None:
                return best, self._take_locked(best, now)
            if self._closing and self._total == 0:
                return None
            self._cond.wait(None if wake == math.inf else max(wake - now, 0.0))

    def calibrate(self, runs: int = 3) -> dict[tuple[int, int], float]:
        """Time every compiled shape (fastest of ``runs``, after warm-up), so the first batches already pick
        sizes well. Only buckets with more than one batch size need it."""
        for batch, seq in self.model.shapes():
            if len(self.model.batch_sizes(seq)) < 2:
                continue
            for _ in range(runs):
                start = self.clock()
                self.model.run_bucket([[1] * seq] * batch, batch, seq)
                self._note_shape(batch, seq, self.clock() - start)
        return dict(self._shape_s)

    def _note_shape(self, batch: int, seq: int, seconds: float) -> None:
        old = self._shape_s.get((batch, seq))
        if old is None or seconds < old:
            self._shape_s[(batch, seq)] = seconds
            self._no_wait.pop(seq, None)  # decided again with the new time

    def _note_arrival(self, bucket: int, now: float) -> None:
        cap = 2.0 * self.config.max_batch_delay_s
        if self._last_any is not None:
            gap_all = min(now - self._last_any, cap)
            self._gap_all = gap_all if self._gap_all is None else 0.8 * self._gap_all + 0.2 * gap_all
        self._last_any = now
        last = self._arrivals.get(bucket)
        self._arrivals[bucket] = now
        if last is not None:  # a sample is capped at 2 delays: after an idle hour a burst is seen within ~5
            gap = min(now - last, cap)
            self._gap_s[bucket] = 0.8 * self._gap_s.get(bucket, gap) + 0.2 * gap

    def _skip_wait(self, bucket: int) -> bool:
        skip = self._no_wait.get(bucket)
        if skip is None:
            skip = self._no_wait[bucket] = not self.waits_for_company(bucket)
        return skip

    def waits_for_company(self, bucket: int) -> bool:
        """Is holding a lone request for company worth it here? Not when the bucket's batch cannot grow (one
        compiled size of 1), nor when the measured times say a full batch is not at least WAIT_GAIN faster per
        request than the smallest size (then the company would mostly cost time). Unknown times: wait."""
        sizes = self.model.batch_sizes(bucket)
        if not sizes or sizes == [1]:
            return False
        small, full = self._shape_s.get((sizes[0], bucket)), self._shape_s.get((sizes[-1], bucket))
        if not small or not full:
            return True
        return full / sizes[-1] <= (1.0 - WAIT_GAIN) * small / sizes[0]

    def choose_batch(self, n: int, bucket: int) -> int:
        """The compiled batch size for ``n`` waiting requests: the one with the most requests per second by
        the measured shape times (ties: the larger); the smallest that holds all ``n`` while a time is
        missing."""
        sizes = self.model.batch_sizes(bucket)
        times = [self._shape_s.get((b, bucket)) for b in sizes]
        if len(sizes) < 2 or any(t is None or t <= 0 for t in times):
            return choose_batch(n, sizes)
        return max(zip(sizes, times, strict=True), key=lambda bt: (min(n, bt[0]) / bt[1], bt[0]))[0]

    def _take_locked(self, bucket: int, now: float) -> list[_Pending]:
        q = self._queues[bucket]
        limit = self._max_batch(bucket)
        taken: list[_Pending] = []
        while q and len(taken) < limit:
            p = q.popleft()
            self._total -= 1
            if p.cancelled or p.future.cancelled():
                continue
            if p.deadline <= now:
                if self.metrics:
                    self.metrics.rejected("timeout")
                _fail(p.future, RequestExpired("deadline passed while queued"))
                continue
            taken.append(p)
        if taken:
            keep = min(len(taken), self.choose_batch(len(taken), bucket))
            for p in reversed(taken[keep:]):  # not in this batch: back to the front, order kept
                q.appendleft(p)
                self._total += 1
            taken = taken[:keep]
        if not q:
            del self._queues[bucket]
        if self.metrics:
            self.metrics.queued(bucket, len(q))
        return taken

    def _run(self, bucket: int, items: list[_Pending]) -> None:
        if not items:
            return
        batch = choose_batch(len(items), self.model.batch_sizes(bucket))  # smallest that holds them
        start = self.clock()
        try:
            results = self.model.run_bucket([p.row for p in items], batch, bucket)
        except BaseException as exc:  # the model failed: every request of the batch gets the error
            for p in items:
                _fail(p.future, exc)
            return
        end = self.clock()
        model_s = end - start
        real = sum(len(p.row) for p in items)
        with self._cond:
            n = len(items)
            if self._last_end is not None:  # busy since the previous batch ended: the real drain rate
                sample = (end - self._last_end) / n
            else:  # the first batch after idle: its model time, shared by the workers
                sample = model_s / n / self.config.workers
            self._per_request_s = (
                sample if not self._per_request_s else 0.8 * self._per_request_s + 0.2 * sample
            )
            self._last_end = end if self._total > 0 else None  # still busy: the next batch measures from here
            self._note_shape(batch, bucket, model_s)
            self.batches_run += 1
            self.requests_run += n
        if self.metrics:
            self.metrics.batch_done(bucket, batch, len(items), real, batch * bucket, model_s)
        for p, out in zip(items, results, strict=True):
            served = Served(out, bucket, batch, len(items), len(p.row), start - p.enqueued, model_s)
            try:
                p.future.set_result(served)
            except InvalidStateError:  # the caller cancelled its future while the batch ran
                pass


def _fail(future: Future[Served], exc: BaseException) -> None:
    try:
        future.set_exception(exc)
    except InvalidStateError:  # already cancelled by the caller
        pass
