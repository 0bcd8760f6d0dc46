"""Dynamic batcher: batches fill to the compiled size, the delay bounds waiting, FIFO across buckets, bounded
queues reject with Retry-After, deadlines drop stale requests, close drains (or refuses) queued work.

The model here records each call and answers with the sum of each row, so every request's answer can be
checked against its own input (the batcher must never mix rows up)."""

from __future__ import annotations

import threading
import time

import pytest

from chipswap.compile.padding import InputTooLong
from chipswap.errors import ChipswapError
from chipswap.serve.batcher import BatcherConfig, Draining, DynamicBatcher, QueueFull, RequestExpired
from chipswap.serve.metrics import ServeMetrics


class RecordingModel:
    """Sequence buckets 8 and 16, batch sizes 1, 2, 4; sleeps ``delay`` per call; can be held on a gate."""

    name = "rec"
    kind = "compiled"
    max_length = 16
    vocab_size = None
    output_names = ("sum",)

    def __init__(self, delay: float = 0.0) -> None:
        self.calls: list[tuple[int, int, int]] = []  # (batch, seq, real rows)
        self.delay = delay
        self.gate = threading.Event()
        self.gate.set()

    def bucket_for(self, length: int) -> int:
        if length > 16:
            raise InputTooLong(length, 16)
        return 8 if length <= 8 else 16

    def batch_sizes(self, bucket: int) -> list[int]:
        return [1, 2, 4]

    def shapes(self) -> list[tuple[int, int]]:
        return [(b, s) for s in (8, 16) for b in (1, 2, 4)]

    def run_bucket(self, rows, batch, bucket):
        assert len(rows) <= batch and all(len(r) <= bucket for r in rows)
        self.gate.wait(10)
        if self.delay:
            time.sleep(self.delay)
        self.calls.append((batch, bucket, len(rows)))
        return [(sum(r),) for r in rows]

    def warm(self) -> None:
        pass


def _batcher(model, **kw) -> DynamicBatcher:
    b = DynamicBatcher(model, BatcherConfig(**kw), ServeMetrics())
    b.start()
    return b


def test_requests_gathered_into_compiled_batches_and_answered_per_row():
    model = RecordingModel()
    model.gate.clear()  # hold the worker: the first request blocks it, the next ones queue up
    b = _batcher(model, max_batch_delay_s=0.0)
    first, _ = b.submit([1])
    time.sleep(0.05)
    rows = [[i, i] for i in range(2, 9)]  # 7 requests of bucket 8
    futures = [b.submit(r)[0] for r in rows]
    model.gate.set()
    assert first.result(5).outputs == (1,)
    for r, f in zip(rows, futures, strict=True):
        served = f.result(5)
        assert served.outputs == (sum(r),) and served.bucket == 8 and served.tokens == 2
    # after the held call: 7 waiting -> one batch of 4, then 3 padded up to 4
    assert model.calls[1:] == [(4, 8, 4), (4, 8, 3)]
    fills = sorted(f.result().fill for f in futures)
    assert fills == [3, 3, 3, 4, 4, 4, 4]
    b.close()


def test_delay_waits_for_company_then_runs_a_partial_batch():
    model = RecordingModel()
    b = _batcher(model, max_batch_delay_s=0.3)
    t0 = time.monotonic()
    f1, _ = b.submit([1, 1])
    f2, _ = b.submit([2, 2])
    s1, s2 = f1.result(5), f2.result(5)
    waited = time.monotonic() - t0
    assert s1.batch == s2.batch == 2 and s1.fill == 2  # both rode one batch of 2
    assert waited >= 0.25  # the batch was held for company up to the delay
    assert s1.queue_s >= 0.25
    assert model.calls == [(2, 8, 2)]
    b.close()


def test_full_batch_does_not_wait_for_the_delay():
    model = RecordingModel()
    b = _batcher(model, max_batch_delay_s=10.0)  # the longest delay a batcher allows
    t0 = time.monotonic()
    fs = [b.submit([k])[0] for k in range(4)]
    assert [f.result(60).outputs for f in fs] == [(0,), (1,), (2,), (3,)]
    assert time.monotonic() - t0 < 8  # under the 10 s wait for company (holds at load 20)
    b.close()


def test_oldest_bucket_first():
    model = RecordingModel()
    model.gate.clear()
    b = _batcher(model, max_batch_delay_s=0.0)
    b.submit([0])  # occupies the worker
    time.sleep(0.05)
    long_f, _ = b.submit([1] * 12)  # bucket 16 arrives first
    short_f, _ = b.submit([1])  # bucket 8 second
    model.gate.set()
    long_f.result(5), short_f.result(5)
    assert [c[1] for c in model.calls] == [8, 16, 8]
    b.close()


def test_queue_full_rejects_with_retry_after_and_counts():
    model = RecordingModel(delay=0.05)
    model.gate.clear()
    metrics = ServeMetrics()
    b = DynamicBatcher(model, BatcherConfig(max_batch_delay_s=0.0, max_queue=3, max_queue_total=5), metrics)
    b.start()
    b.submit([0])
    time.sleep(0.05)  # the worker holds the first one
    for _ in range(3):
        b.submit([1])
    with pytest.raises(QueueFull) as ei:
        b.submit([1])
    assert ei.value.bucket == 8 and ei.value.depth == 3 and ei.value.retry_after_s >= 1
    b.submit([1] * 12)  # another bucket still has room ...
    b.submit([1] * 12)
    with pytest.raises(QueueFull):  # ... until the total limit (5 waiting)
        b.submit([1] * 12)
    assert metrics.value("chipswap_rejects_total", reason="queue_full") == 2
    model.gate.set()
    b.close()


def test_too_long_is_refused_before_queueing():
    b = _batcher(RecordingModel())
    with pytest.raises(InputTooLong, match=r"\(16 tokens\)"):
        b.submit([1] * 17)
    assert b.depth() == {}
    b.close()


def test_expired_requests_are_dropped_not_run():
    model = RecordingModel()
    model.gate.clear()
    b = _batcher(model, max_batch_delay_s=0.0, request_timeout_s=0.2)
    b.submit([5])  # holds the worker past the others' deadline
    time.sleep(0.05)
    stale = [b.submit([7])[0] for _ in range(3)]
    time.sleep(0.3)
    model.gate.set()
    for f in stale:
        with pytest.raises(RequestExpired):
            f.result(5)
    assert model.calls == [(1, 8, 1)]  # only the first request ever ran
    b.close()


def test_cancelled_requests_are_skipped():
    model = RecordingModel()
    model.gate.clear()
    b = _batcher(model, max_batch_delay_s=0.0)
    b.submit([5])
    time.sleep(0.05)
    keep, _ = b.submit([1])
    gone, pending = b.submit([2])
    b.cancel(pending)
    model.gate.set()
    assert keep.result(5).fill == 1
    assert model.calls[1] == (1, 8, 1)
    assert not gone.done()
    b.close()


def test_close_drains_queued_work_and_then_refuses():
    model = RecordingModel(delay=0.02)
    b = _batcher(model, max_batch_delay_s=2.0)  # long delay: the requests are still queued at close
    fs = [b.submit([k])[0] for k in range(3)]
    waiting = b.close(drain=True, timeout=10)
    assert waiting == 3
    assert [f.result(0).outputs for f in fs] == [(0,), (1,), (2,)]
    with pytest.raises(Draining):
        b.submit([1])


def test_close_without_drain_fails_queued_work():
    model = RecordingModel()
    b = _batcher(model, max_batch_delay_s=5.0)
    f, _ = b.submit([1])
    b.close(drain=False, timeout=5)
    with pytest.raises(Draining):
        f.result(1)
    assert model.calls == []


def test_model_failure_reaches_every_request_of_the_batch():
    class Broken(RecordingModel):
        def run_bucket(self, rows, batch, bucket):
            raise RuntimeError("kernel exploded")

    b = _batcher(Broken(), max_batch_delay_s=0.1)
    fs = [b.submit([1])[0] for _ in range(2)]
    for f in fs:
        with pytest.raises(RuntimeError, match="kernel exploded"):
            f.result(5)
    b.submit([1])[0].exception(5)  # the worker survives and keeps serving
    b.close()


def test_metrics_padding_and_fill():
    model = RecordingModel()
    metrics = ServeMetrics()
    b = DynamicBatcher(model, BatcherConfig(max_batch_delay_s=0.2), metrics)
    b.start()
    fs = [b.submit(r)[0] for r in ([1, 2, 3], [4])]
    [f.result(5) for f in fs]
    b.close()
    # one batch of 2 at bucket 8: 4 real tokens of 16 computed slots
    assert metrics.value("chipswap_real_tokens_total", bucket=8) == 4
    assert metrics.value("chipswap_computed_tokens_total", bucket=8) == 16
    assert metrics.value("chipswap_padding_waste_ratio", bucket=8) == pytest.approx(0.75)
    assert metrics.value("chipswap_batches_total", bucket=8, batch=2) == 1
    assert metrics.value("chipswap_batch_fill_ratio_sum", bucket=8) == pytest.approx(1.0)


class TimedModel(RecordingModel):
    """A call of batch b costs fixed + per_row * b seconds (CPU: time grows with the batch; an accelerator:
    about flat)."""

    def __init__(self, fixed: float, per_row: float) -> None:
        super().__init__()
        self.fixed, self.per_row = fixed, per_row

    def run_bucket(self, rows, batch, bucket):
        self.gate.wait(10)
        time.sleep(self.fixed + self.per_row * batch)
        self.calls.append((batch, bucket, len(rows)))
        return [(sum(r),) for r in rows]


@pytest.mark.parametrize(
    "fixed,per_row,padded", [(0.0, 0.03, False), (0.08, 0.0, True)], ids=["cpu", "accel"]
)
def test_batch_size_follows_the_measured_cost(fixed, per_row, padded):
    model = TimedModel(fixed, per_row)
    b = DynamicBatcher(model, BatcherConfig(max_batch_delay_s=0.0), ServeMetrics())
    times = b.calibrate()
    assert set(times) == {(bs, s) for s in (8, 16) for bs in (1, 2, 4)}
    model.calls.clear()
    model.gate.clear()
    b.start()
    held, _ = b.submit([1] * 12)  # bucket 16 holds the worker while three bucket-8 requests queue up
    time.sleep(0.05)
    fs = [b.submit([k])[0] for k in (3, 4, 5)]
    model.gate.set()
    assert [f.result(10).outputs for f in fs] == [(3,), (4,), (5,)]
    held.result(10)
    calls = model.calls[1:]
    if padded:  # a batch of 4 costs what a batch of 1 does: one call, padded with a whole row
        assert calls == [(4, 8, 3)]
    else:  # time grows with the batch: never a padding row, all three served
        assert all(batch == rows for batch, _, rows in calls) and sum(c[2] for c in calls) == 3
        assert len(calls) >= 2
    b.close()


def test_estimated_wait_over_the_limit_is_refused():
    model = TimedModel(0.0, 0.1)  # 100 ms per request once measured
    model.gate.clear()
    b = DynamicBatcher(model, BatcherConfig(max_batch_delay_s=0.0, max_queue_wait_s=0.35), ServeMetrics())
    b._per_request_s = 0.1  # what the batcher measured on earlier batches
    b.start()
    b.submit([1])  # running (held)
    time.sleep(0.05)
    for _ in range(4):  # 4 queued x 0.1 s = 0.4 s > 0.35 s for the next one
        b.submit([1])
    with pytest.raises(QueueFull) as ei:
        b.submit([1])
    assert ei.value.retry_after_s == 1
    model.gate.set()
    b.close()


@pytest.mark.parametrize(
    "kw",
    [
        {"max_batch_delay_s": -1},
        {"max_queue": 0},
        {"request_timeout_s": 0},
        {"workers": 0},
        {"max_queue_wait_s": 0},
    ],
)
def test_config_checks(kw):
    with pytest.raises(ChipswapError):
        BatcherConfig(**kw)


# --- issue 33: waiting for company only where it can pay; workers from the cores ---------------------------
class PerRowModel(RecordingModel):
    """A CPU-like model: a call costs ``delay`` per row, so a batch of 4 serves a request no faster than 1."""

    def run_bucket(self, rows, batch, bucket):
        time.sleep(self.delay * batch)
        self.calls.append((batch, bucket, len(rows)))
        return [(sum(r),) for r in rows]


@pytest.mark.parametrize("model_cls, waits", [(PerRowModel, False), (RecordingModel, True)])
def test_lone_request_waits_for_company_only_where_a_full_batch_is_cheaper(model_cls, waits):
    model = model_cls(delay=0.01)
    b = DynamicBatcher(model, BatcherConfig(max_batch_delay_s=1.5), ServeMetrics())
    b.calibrate()  # per-row cost: 4 rows take 4x one row; constant cost: 4 rows take what one takes
    assert b.waits_for_company(8) is waits
    b.start()
    served = b.submit([1, 2])[0].result(30)
    assert (served.queue_s >= 1.4) is waits, served.queue_s  # held for the delay only where batching pays
    b.close()


def test_requests_further_apart_than_the_delay_start_at_once():
    model = RecordingModel()  # no measured times: company is worth waiting for, by shape
    b = _batcher(model, max_batch_delay_s=1.0)
    first = b.submit([1])[0].result(30)
    assert first.queue_s >= 0.9  # the first request waited for company
    time.sleep(1.5)  # the next one comes 2.5 s after it: no company is coming at this rate
    second = b.submit([1])[0].result(30)
    assert second.queue_s < 0.5, second.queue_s
    b.close()


def test_default_workers_fill_the_cores_without_oversubscribing():
    from chipswap.serve.batcher import default_workers

    assert default_workers(2, 1) == 2  # two one-thread calls at once on 2 cores
    assert default_workers(16, 4) == 4
    assert default_workers(2, 4) == 1
    assert default_workers(8, None) == 1  # the library's own thread count uses every core already
