"""The workload's `[slo]` table: latency objectives as users state them (TTFT, TPOT and end-to-end at p50, p90
and p99, any subset; the first spellings p99_ms / p50_ms still read) and goodput. The plan turns it into the
simulator's objectives (chipswap.plan.simulation.slo_of)."""

from __future__ import annotations

from typing import Annotated, Any

from pydantic import Field, model_validator

from chipswap.plan.workload_types import MAX_MS, In, Real, _Model

_METRIC_WORDS = {
    "ttft": "time-to-first-token (arrival to the first token; an encoder's result)",
    "tpot": "time-per-output-token (after the first: (end-to-end - TTFT) / (output tokens - 1), per request, "
    "vLLM's TPOT; the mean inter-token latency a streaming client sees)",
    "e2e": "end-to-end latency (arrival to the last token)",
}
OBJECTIVE_KEYS = tuple(f"{m}_p{p}" for m in _METRIC_WORDS for p in (50, 90, 99))  # slo.<key>_ms
_OLD_KEYS = {"p99_ms": "e2e_p99", "p50_ms": "e2e_p50"}  # the first spellings, still read


def _objective(metric: str, pct: int) -> Any:
    return Field(
        None, gt=0, le=MAX_MS, description=f"{pct}th-percentile {_METRIC_WORDS[metric]} objective, ms."
    )


class Slo(_Model):
    """Latency objectives the serving fleet must meet, as users state them: TTFT, TPOT and end-to-end, each at
    p50, p90 and p99, any subset; and optionally goodput, the share of requests meeting every stated metric at
    once (vLLM's and guidellm's SLO modes). Both fleets (GPU and every candidate) are sized by simulation so
    that the busiest traffic window meets every objective given here."""

    ttft_p50_ms: Annotated[Real, In("ms")] | None = _objective("ttft", 50)
    ttft_p90_ms: Annotated[Real, In("ms")] | None = _objective("ttft", 90)
    ttft_p99_ms: Annotated[Real, In("ms")] | None = _objective("ttft", 99)
    tpot_p50_ms: Annotated[Real, In("ms")] | None = _objective("tpot", 50)
    tpot_p90_ms: Annotated[Real, In("ms")] | None = _objective("tpot", 90)
    tpot_p99_ms: Annotated[Real, In("ms")] | None = _objective("tpot", 99)
    e2e_p50_ms: Annotated[Real, In("ms")] | None = _objective("e2e", 50)
    e2e_p90_ms: Annotated[Real, In("ms")] | None = _objective("e2e", 90)
    e2e_p99_ms: Annotated[Real, In("ms")] | None = _objective("e2e", 99)
    p99_ms: Annotated[Real, In("ms")] | None = Field(
        None, gt=0, le=MAX_MS, description="The first spelling of e2e_p99_ms (still read; give one of them)."
    )
    p50_ms: Annotated[Real, In("ms")] | None = Field(
        None, gt=0, le=MAX_MS, description="The first spelling of e2e_p50_ms (still read; give one of them)."
    )
    goodput_pct: Annotated[Real, In("percent")] | None = Field(
        None,
        gt=0,
        le=100,
        description="Goodput objective: at least this percent of requests meet every stated metric at once "
        "(per request: TTFT, TPOT and end-to-end each within the target of its highest stated percentile).",
    )

    @model_validator(mode="after")
    def _consistent(self) -> Slo:
        for old, key in _OLD_KEYS.items():
            if getattr(self, old) is not None and getattr(self, f"{key}_ms") is not None:
                raise ValueError(f"expected {old} or {key}_ms, not both (the same objective)")
        got = self.objectives()
        spelled = {k: o for o, k in _OLD_KEYS.items() if getattr(self, o) is not None}
        for m in _METRIC_WORDS:
            vals = [(spelled.get(k, f"{k}_ms"), v) for k, v in got.items() if _split(k)[0] == m]
            for (k1, v1), (k2, v2) in zip(vals, vals[1:], strict=False):
                if v1 > v2:
                    raise ValueError(
                        f"expected {k1} <= {k2} (a lower percentile above a higher one is impossible)"
                    )
        if self.goodput_pct is not None and not got:
            raise ValueError("expected goodput_pct with at least one latency objective (what requests meet)")
        return self

    def objectives(self) -> dict[str, float]:
        """Every objective given, key ("ttft_p99") -> milliseconds, in OBJECTIVE_KEYS order."""
        out = {}
        for key in OBJECTIVE_KEYS:
            v = getattr(self, f"{key}_ms")
            old = next((o for o, k in _OLD_KEYS.items() if k == key), None)
            v = v if v is not None or old is None else getattr(self, old)
            if v is not None:
                out[key] = float(v)
        return out

    def with_objective(self, key: str, ms: float | None) -> Slo:
        """A copy with objective `key` ("ttft_p99") set to `ms` (None: dropped), whichever spelling had it."""
        old = {k: o for o, k in _OLD_KEYS.items()}.get(key)
        upd: dict[str, Any] = {f"{key}_ms": ms}
        if old is not None:
            upd[old] = None
        return type(self).model_validate({**self.model_dump(), **upd})

    @property
    def any(self) -> bool:
        return bool(self.objectives())


def _split(key: str) -> tuple[str, int]:
    """Split an objective key: "ttft_p99" -> ("ttft", 99)."""
    m, p = key.rsplit("_p", 1)
    return m, int(p)
