"""Per-request records of a benchmark run and the figures computed from them. Pure: no clock, no I/O.

A record says what was planned (lengths), what happened (status, HTTP code, error text) and what was measured
(end to end, time to first token, gaps between streamed chunks, tokens received, the bucket a chipswap server
used). ``summarize`` turns records into the measured figures of the results file: throughput, percentiles,
error/reject rates, goodput at the SLO, padding waste and per-bucket figures.
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

# what happened to one request
STATUSES = ("ok", "rejected", "http_error", "timeout", "connect_error", "protocol_error", "not_sent")
FAILED = ("http_error", "timeout", "connect_error", "protocol_error")


@dataclass
class Record:
    index: int
    scheduled_s: float  # planned send time (s from the run start)
    prompt_tokens: int  # length asked for
    max_tokens: int = 1  # output tokens asked for (LLM endpoints)
    status: str = "not_sent"
    sent_s: float | None = None  # when the request really left (>= scheduled_s)
    http_status: int | None = None
    error: str | None = None
    e2e_s: float | None = None
    ttft_s: float | None = None
    itl_s: list[float] = field(default_factory=list)  # gaps between streamed chunks after the first
    output_tokens: int | None = None  # received (usage.completion_tokens when given, else chunks)
    prompt_tokens_server: int | None = None  # usage.prompt_tokens, when the server reports it
    bucket: int | None = None  # chipswap predict: sequence bucket used
    batch: int | None = None
    fill: int | None = None
    server_queue_ms: float | None = None
    server_model_ms: float | None = None
    retry_after_s: float | None = None

    @property
    def done_s(self) -> float | None:
        if self.sent_s is None or self.e2e_s is None:
            return None
        return self.sent_s + self.e2e_s


@dataclass(frozen=True)
class Slo:
    """Latency targets a request must meet to count toward goodput (None = not checked)."""

    e2e_ms: float | None = None
    ttft_ms: float | None = None
    itl_ms: float | None = None  # checked against the request's own p99 chunk gap

    @property
    def given(self) -> bool:
        return any(v is not None for v in (self.e2e_ms, self.ttft_ms, self.itl_ms))

    def met(self, r: Record) -> bool:
        if r.status != "ok" or r.e2e_s is None:
            return False
        if self.e2e_ms is not None and r.e2e_s * 1000 > self.e2e_ms:
            return False
        if self.ttft_ms is not None and (r.ttft_s is None or r.ttft_s * 1000 > self.ttft_ms):
            return False
        if self.itl_ms is not None and r.itl_s and float(np.percentile(r.itl_s, 99)) * 1000 > self.itl_ms:
            return False
        return True

    def to_json(self) -> dict[str, float | None]:
        return {"e2e_ms": self.e2e_ms, "ttft_ms": self.ttft_ms, "itl_ms": self.itl_ms}


def percentiles_ms(values_s: Iterable[float]) -> dict[str, Any]:
    """n, p50, p90, p99, mean, max in milliseconds (None when there are no values)."""
    arr = np.asarray(list(values_s), dtype=np.float64) * 1000.0
    if arr.size == 0:
        return {"n": 0, "p50": None, "p90": None, "p99": None, "mean": None, "max": None}
    p50, p90, p99 = np.percentile(arr, [50, 90, 99])
    return {
        "n": int(arr.size),
        "p50": round(float(p50), 3),
        "p90": round(float(p90), 3),
        "p99": round(float(p99), 3),
        "mean": round(float(arr.mean()), 3),
        "max": round(float(arr.max()), 3),
    }


def run_duration_s(records: Sequence[Record]) -> float:
    """First planned send to the last answer (or last send when nothing was answered)."""
    ends = [r.done_s for r in records if r.done_s is not None]
    sends = [r.sent_s for r in records if r.sent_s is not None]
    last = max(ends + sends, default=0.0)
    return float(last)


def _row_cost(r: Record) -> tuple[float, float]:
    """(real tokens, computed token slots) this request accounts for in its batch (padding rows shared)."""
    assert r.bucket is not None and r.batch is not None and r.fill
    return float(r.prompt_tokens), r.bucket * r.batch / r.fill


def summarize(
    records: Sequence[Record], slo: Slo | None = None, duration_s: float | None = None
) -> dict[str, Any]:
    """The measured figures of a run (the "result" part of a chipswap.bench/1 file)."""
    slo = slo or Slo()
    dur = duration_s if duration_s is not None else run_duration_s(records)
    by = Counter(r.status for r in records)
    ok = [r for r in records if r.status == "ok"]
    sent = sum(1 for r in records if r.status != "not_sent")
    failed = sum(by[s] for s in FAILED)
    in_tokens = sum(r.prompt_tokens_server or r.prompt_tokens for r in ok)
    out_tokens = sum(r.output_tokens or 0 for r in ok)
    per_s = (lambda x: round(x / dur, 4)) if dur > 0 else (lambda x: 0.0)
    streamed = [r for r in ok if r.ttft_s is not None]
    tpot = [
        (r.e2e_s - r.ttft_s) / (r.output_tokens - 1)
        for r in streamed
        if r.e2e_s is not None and r.ttft_s is not None and (r.output_tokens or 0) > 1
    ]
    result: dict[str, Any] = {
        "counts": {
            "planned": len(records),
            "sent": sent,
            "ok": by["ok"],
            "rejected": by["rejected"],
            "errors": failed,
            "timeouts": by["timeout"],
            "not_sent": by["not_sent"],
        },
        "duration_s": round(dur, 4),
        "throughput": {
            "requests_per_s": per_s(len(ok)),
            "input_tokens_per_s": per_s(in_tokens),
            "output_tokens_per_s": per_s(out_tokens) if streamed else None,
        },
        "latency_ms": {
            "e2e": percentiles_ms(r.e2e_s for r in ok if r.e2e_s is not None),
            "ttft": percentiles_ms(r.ttft_s for r in streamed) if streamed else None,
            "itl": percentiles_ms(g for r in streamed for g in r.itl_s) if streamed else None,
            "tpot": percentiles_ms(tpot) if streamed else None,
        },
        "rates": {
            "error": round(failed / sent, 6) if sent else 0.0,
            "reject": round(by["rejected"] / sent, 6) if sent else 0.0,
            "timeout": round(by["timeout"] / sent, 6) if sent else 0.0,
        },
        "goodput": None,
        "padding": None,
        "buckets": [],
        "send_lag_ms": percentiles_ms(r.sent_s - r.scheduled_s for r in records if r.sent_s is not None),
        "errors": [
            {"kind": kind, "message": msg, "count": n}
            for (kind, msg), n in Counter(
                (r.status, r.error or r.status)
                for r in records
                if r.status in FAILED or r.status == "rejected"
            ).most_common(10)
        ],
    }
    if slo.given:
        good = sum(1 for r in ok if slo.met(r))
        result["goodput"] = {
            "requests_per_s": per_s(good),
            "fraction_of_sent": round(good / sent, 6) if sent else 0.0,
        }
    bucketed = [r for r in ok if r.bucket is not None and r.batch and r.fill]
    if bucketed:
        real = sum(_row_cost(r)[0] for r in bucketed)
        computed = sum(_row_cost(r)[1] for r in bucketed)
        result["padding"] = {
            "real_tokens": int(real),
            "computed_tokens": round(computed, 1),
            "waste_fraction": round(1 - real / computed, 6) if computed else 0.0,
        }
        result["buckets"] = _buckets(bucketed)
    return result


def _top_errors(records: Sequence[Record], n: int = 10) -> list[dict[str, Any]]:
    """The most common failures, grouped with their numbers blanked (queue depths, ports, byte counts vary);
    each group shows its first message."""
    groups: Counter[tuple[str, str]] = Counter()
    first: dict[tuple[str, str], str] = {}
    for r in records:
        if r.status in FAILED or r.status == "rejected":
            msg = r.error or r.status
            key = (r.status, re.sub(r"\d+(\.\d+)?", "#", msg))
            groups[key] += 1
            first.setdefault(key, msg)
    return [{"kind": k[0], "message": first[k], "count": c} for k, c in groups.most_common(n)]


def _buckets(records: Sequence[Record]) -> list[dict[str, Any]]:
    groups: dict[int, list[Record]] = {}
    for r in records:
        assert r.bucket is not None
        groups.setdefault(r.bucket, []).append(r)
    total = len(records)
    out = []
    for seq in sorted(groups):
        rs = groups[seq]
        model_ms = [r.server_model_ms for r in rs if r.server_model_ms is not None]
        slot_ms = [r.server_model_ms / r.batch for r in rs if r.server_model_ms is not None and r.batch]
        real = sum(_row_cost(r)[0] for r in rs)
        computed = sum(_row_cost(r)[1] for r in rs)
        out.append(
            {
                "seq_len": seq,
                "requests": len(rs),
                "share": round(len(rs) / total, 6),
                "e2e_ms": percentiles_ms(r.e2e_s for r in rs if r.e2e_s is not None),
                "batch_model_ms_p50": round(float(np.median(model_ms)), 4) if model_ms else None,
                "slot_model_ms_p50": round(float(np.median(slot_ms)), 4) if slot_ms else None,
                "mean_fill": round(float(np.mean([r.fill / r.batch for r in rs if r.batch and r.fill])), 4),
                "padding_waste": round(1 - real / computed, 6) if computed else 0.0,
            }
        )
    return out
