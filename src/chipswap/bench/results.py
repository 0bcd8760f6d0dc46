"""The measured-results file of `chipswap bench` (schema ``chipswap.bench/2``): build it, read it strictly.

Writers: ``build_results`` (a plain dict; the command writes it with chipswap.atomic).
Readers (for `chipswap plan` and the shape planner):
- ``read_bench_results(path) -> BenchResults`` / ``parse_bench_results(data, source)``: every field checked
  (chipswap.datafile), one error line naming the file and field;
- ``measured_serving(results) -> MeasuredServing``: the instance's figures as ``measured`` (requests/s one
  instance sustains -- goodput at the SLO when one was given, else throughput -- and its p99);
- ``bucket_latency_table(results) -> {seq_len: seconds}``: model seconds per compiled row at each sequence
  bucket, the latency table of the planner's ``measured`` cost model.

File layout (numbers are measured; money is a decimal string; absent figures are null)::

  schema            "chipswap.bench/2" (/1 files carry no identity and are refused with the generic command
                    that regenerates them, never the file's own recorded command)
  tool              {name, version, command}
  measured_at       ISO 8601 UTC
  machine           {platform, cpus, load_avg_1m}           where the load generator ran
  target            {url, protocol, model, server}
                    protocol: chipswap-predict | openai-completions | openai-chat
  instance          {name, term, region, usd_per_hour, price_source, price_as_of} or null
  load              {trace, requests_in_trace, arrivals, time_scale, offered_rps, length_map, max_length,
                     max_requests, duration_limit_s, timeout_s, max_inflight, seed}
  slo               {e2e_ms, ttft_ms, itl_ms}
  complete          false when the run stopped early (stop_reason says why); figures are then partial
  stop_reason
  counts            {planned, sent, ok, rejected, errors, timeouts, not_sent}
  duration_s        first send to last answer
  throughput        {requests_per_s, input_tokens_per_s, output_tokens_per_s}
  latency_ms        {e2e, ttft, itl, tpot}: each {n, p50, p90, p99, mean, max} or null (ttft/itl/tpot:
                    streams only)
  rates             {error, reject, timeout}   fractions of sent requests
  goodput           {requests_per_s, fraction_of_sent} or null without an SLO
  padding           {real_tokens, computed_tokens, waste_fraction} or null (chipswap predict only)
  buckets           [{seq_len, requests, share, e2e_ms, batch_model_ms_p50, slot_model_ms_p50, mean_fill,
                      padding_waste}]
  send_lag_ms       how late requests left against the plan (load generator health)
  errors            [{kind, message, count}]  the most common failures
  cost              {per_million_requests_usd, basis, per_million_output_tokens_usd}, null without --instance
  identity          {model, shapes, server, host}: what was measured and where (chipswap.bench.identity)
"""

from __future__ import annotations

import math
import os
import platform
from dataclasses import dataclass, field
from datetime import UTC, datetime
from decimal import Decimal, InvalidOperation
from pathlib import Path
from typing import Any

from chipswap import ranges
from chipswap.bench.evidence import Evidence, parse_evidence
from chipswap.bench.identity import BenchIdentity, parse_identity
from chipswap.datafile import read_json, strict_int
from chipswap.datafile import strict_number as _strict_number
from chipswap.errors import ChipswapError

SCHEMA = "chipswap.bench/2"
OLD_SCHEMAS = ("chipswap.bench/1",)
# what a refused old file is told to run: always this text, never the command recorded in the file
REGENERATE = "chipswap bench URL --instance TYPE --out FILE"
PROTOCOLS = ("chipswap-predict", "openai-completions", "openai-chat")
MAX_BUCKETS = 100_000
MAX_COUNT = 10**9
# physical ranges of measured figures (issue 19: 1e308 req/s gave a verdict): far above any real bench
MAX_RPS = 10_000_000.0  # requests per second
MAX_MS = 86_400_000.0  # any latency: one day
MAX_DURATION_S = 31 * 86_400.0  # one bench run: a month


def build_results(
    *,
    outcome_result: dict[str, Any],
    target: dict[str, Any],
    load: dict[str, Any],
    slo: dict[str, Any],
    complete: bool,
    stop_reason: str,
    command: str,
    instance: dict[str, Any] | None = None,
    cost: dict[str, Any] | None = None,
    now: datetime | None = None,
    identity: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """A chipswap.bench/2 document from a summarized run (chipswap.bench.stats.summarize)."""
    from chipswap import __version__

    try:
        load_avg = round(os.getloadavg()[0], 2)
    except OSError:  # pragma: no cover - platforms without getloadavg
        load_avg = None
    stamp = (now or datetime.now(UTC)).strftime("%Y-%m-%dT%H:%M:%SZ")
    return {
        "schema": SCHEMA,
        "tool": {"name": "chipswap bench", "version": __version__, "command": command},
        "measured_at": stamp,
        "machine": {"platform": platform.platform(), "cpus": os.cpu_count(), "load_avg_1m": load_avg},
        "target": target,
        "instance": instance,
        "load": load,
        "slo": slo,
        "complete": complete,
        "stop_reason": stop_reason,
        **outcome_result,
        "cost": cost,
        "identity": identity
        or {  # a caller without a probe (tests, tools): the target's model name and the declared instance
            "model": {"name": target.get("model")},
            "host": {"declared_instance": (instance or {}).get("name"), "beside_server": False},
        },
    }


# ------------------------------------------------------------------------------------------------ reading
@dataclass(frozen=True)
class BucketFigures:
    seq_len: int
    requests: int
    e2e_p99_ms: float | None
    batch_model_ms_p50: float | None
    slot_model_ms_p50: float | None  # model time of one compiled row (batch time / compiled batch size)
    padding_waste: float | None


@dataclass(frozen=True)
class BenchResults:
    """The figures of one bench file that other stages use, validated."""

    source: str
    protocol: str
    model: str | None
    url: str
    instance: str | None
    term: str | None
    region: str | None
    measured_at: str
    complete: bool
    stop_reason: str
    sent: int
    ok: int
    duration_s: float
    requests_per_s: float
    goodput_rps: float | None
    slo_e2e_ms: float | None
    slo_ttft_ms: float | None
    e2e_p50_ms: float | None
    e2e_p90_ms: float | None
    e2e_p99_ms: float | None
    ttft_p99_ms: float | None
    itl_p99_ms: float | None
    error_rate: float
    reject_rate: float
    padding_waste: float | None
    cost_per_million_usd: Decimal | None
    buckets: tuple[BucketFigures, ...]
    identity: BenchIdentity = field(default_factory=BenchIdentity)
    imported_from: str | None = None  # the peer tool whose file `chipswap bench import` converted
    evidence: Evidence = field(default_factory=Evidence)  # chipswap.bench.evidence: beyond the name
    offered_rps: float | None = None  # the rate offered (load.offered_rps), when one was set


@dataclass(frozen=True)
class MeasuredServing:
    """One instance's measured serving figures, as the plan's throughput table takes them."""

    instance: str
    term: str | None
    region: str | None
    requests_per_s: float
    p99_ms: float | None  # end-to-end p99 of the admitted requests
    ttft_p99_ms: float | None  # streaming endpoints only
    basis: str  # "goodput at the SLO" or "throughput (no SLO given)"
    source: str = "measured"
    note: str = ""
    evidence: Evidence | None = None  # what the file showed (lengths sent, latencies), for later notes
    # the run did not saturate (it completed what was offered, latency flat): a lower bound on capacity
    lower_bound: bool = False


# a run whose completed rate is within this share of the offered rate kept up with it: not saturated
KEPT_UP = 0.9  # the trial sweep's own saturation line (trial/benchscript SATURATED_GOODPUT)
FLAT_P99_OVER_P50 = 3.0  # end-to-end p99 over p50 at most this: latency flat, no queue building


def did_not_saturate(results: BenchResults) -> str | None:
    """Why a run is a lower bound on capacity (completed rate = offered rate, latency flat), in words; None
    when it saturated or cannot tell (no offered rate: a sweep, or all requests at once)."""
    offered = results.offered_rps
    if offered is None or offered <= 0 or results.requests_per_s < KEPT_UP * offered:
        return None
    p50, p99 = results.e2e_p50_ms, results.e2e_p99_ms
    if p50 is not None and p99 is not None and p50 > 0 and p99 > FLAT_P99_OVER_P50 * p50:
        return None
    flat = f", latency flat (p99 {p99:,.0f} ms / p50 {p50:,.0f} ms)" if p50 and p99 else ""
    return (
        f"lower bound: the run completed {results.requests_per_s:,.3g} of {offered:,.3g} requests/s offered"
        f"{flat}, so it never reached capacity"
    )


def _where(source: str, field: str) -> str:
    return f"bench results {source}: {field}"


def _obj(value: Any, source: str, field: str) -> dict[str, Any]:
    if not isinstance(value, dict):
        raise ChipswapError(
            f"{_where(source, field)} must be an object, got {type(value).__name__}; rerun chipswap bench"
        )
    return value


# The unit (chipswap.ranges) of each number read here, by the last part of its field name: a measured 0 is a
# real outcome (no goodput, no errors), a nonzero value below the unit's smallest (5e-324) never is.
FIELD_UNITS = {"duration_s": "seconds", "requests_per_s": "rate", "error": "share", "reject": "share",
               "waste_fraction": "share", "padding_waste": "share"}


def strict_number(value: Any, field: str, *, lo: float = 0.0, hi: float | None = None) -> float:
    """datafile.strict_number, then the field's physical range (ms unless FIELD_UNITS names its unit)."""
    v = _strict_number(value, field, lo=lo, hi=hi)
    unit = FIELD_UNITS.get(field.rsplit(".", 1)[-1].rsplit(" ", 1)[-1], "ms")
    return float(ranges.check(v, ranges.Spec(unit, zero=True), field, "rerun chipswap bench"))


def _opt_num(value: Any, source: str, field: str, lo: float = 0.0, hi: float = MAX_MS) -> float | None:
    return None if value is None else strict_number(value, _where(source, field), lo=lo, hi=hi)


def _opt_str(value: Any, source: str, field: str) -> str | None:
    if value is None:
        return None
    if not isinstance(value, str) or len(value) > 500:
        raise ChipswapError(
            f"{_where(source, field)} must be a short string, got {value!r:.60}; rerun chipswap bench"
        )
    return value


def _nullable_block_number(
    doc: dict[str, Any], block: str, key: str, source: str, hi: float | None = None
) -> float | None:
    """doc[block][key] as a number >= 0 (<= hi), or None when the whole block is null (not measured)."""
    value = doc.get(block)
    if value is None:
        return None
    got = _obj(value, source, block).get(key)
    return strict_number(got, _where(source, f"{block}.{key}"), lo=0, hi=hi)


def _pct(block: Any, source: str, field: str) -> dict[str, float | None]:
    if block is None:
        return {"p50": None, "p90": None, "p99": None}
    b = _obj(block, source, field)
    strict_int(b.get("n"), _where(source, f"{field}.n"), lo=0, hi=MAX_COUNT)
    return {k: _opt_num(b.get(k), source, f"{field}.{k}") for k in ("p50", "p90", "p99")}


def parse_bench_results(data: Any, source: str = "<data>") -> BenchResults:
    """Validate a parsed chipswap.bench/2 document (pure: no I/O)."""
    doc = _obj(data, source, "the file")
    if doc.get("schema") in OLD_SCHEMAS:
        # the file's own recorded command is never echoed: it is the file's text, and a refusal that prints
        # it as "regenerate with: ..." would hand a crafted file's shell line to the user (issue 32)
        raise ChipswapError(
            f"bench results {source} are {doc.get('schema')}: they do not say which model, server and machine"
            f" were measured; regenerate them with: {REGENERATE}"
        )
    if doc.get("schema") != SCHEMA:  # a peer's results (vllm bench serve, guidellm, ...), or one line
        from chipswap.bench.importers import convert

        doc = convert(doc, source)
    target = _obj(doc.get("target"), source, "target")
    protocol = target.get("protocol")
    if protocol not in PROTOCOLS:
        raise ChipswapError(
            f"{_where(source, 'target.protocol')} is {protocol!r}, not one of {', '.join(PROTOCOLS)}"
        )
    inst = doc.get("instance")
    name = term = region = None
    if inst is not None:
        inst = _obj(inst, source, "instance")
        name = _opt_str(inst.get("name"), source, "instance.name")
        if not name:
            raise ChipswapError(
                f"{_where(source, 'instance.name')} is missing; rerun chipswap bench --instance NAME"
            )
        term = _opt_str(inst.get("term"), source, "instance.term")
        region = _opt_str(inst.get("region"), source, "instance.region")
    complete = doc.get("complete")
    if not isinstance(complete, bool):
        raise ChipswapError(f"{_where(source, 'complete')} must be true or false, got {complete!r}")
    counts = _obj(doc.get("counts"), source, "counts")
    n = {
        k: strict_int(counts.get(k), _where(source, f"counts.{k}"), lo=0, hi=MAX_COUNT)
        for k in ("sent", "ok")
    }
    if n["ok"] > n["sent"]:
        raise ChipswapError(
            f"{_where(source, 'counts')} has ok {n['ok']} > sent {n['sent']}; the file was edited"
        )
    thr = _obj(doc.get("throughput"), source, "throughput")
    lat = _obj(doc.get("latency_ms"), source, "latency_ms")
    e2e = _pct(lat.get("e2e"), source, "latency_ms.e2e")
    rates = _obj(doc.get("rates"), source, "rates")
    slo = doc.get("slo") or {}
    slo = _obj(slo, source, "slo")
    goodput = _nullable_block_number(doc, "goodput", "requests_per_s", source, hi=MAX_RPS)
    waste = _nullable_block_number(doc, "padding", "waste_fraction", source, hi=1.0)
    cost = doc.get("cost")
    per_million = None
    if cost is not None:
        raw = _obj(cost, source, "cost").get("per_million_requests_usd")
        if raw is not None:
            try:
                per_million = Decimal(str(raw)) if isinstance(raw, str) else None
            except InvalidOperation:
                per_million = None
            if per_million is None or not per_million.is_finite() or per_million < 0:
                raise ChipswapError(
                    f"{_where(source, 'cost.per_million_requests_usd')} must be a decimal string, got {raw!r}"
                )
            where = _where(source, "cost.per_million_requests_usd")
            ranges.check(per_million, ranges.Spec("usd", zero=True), where, "rerun chipswap bench")
    buckets_raw = doc.get("buckets") or []
    if not isinstance(buckets_raw, list) or len(buckets_raw) > MAX_BUCKETS:
        raise ChipswapError(f"{_where(source, 'buckets')} must be a list of at most {MAX_BUCKETS:,} buckets")
    buckets = []
    for i, b in enumerate(buckets_raw):
        f = f"buckets[{i}]"
        b = _obj(b, source, f)
        buckets.append(
            BucketFigures(
                seq_len=strict_int(b.get("seq_len"), _where(source, f"{f}.seq_len"), lo=1, hi=10_000_000),
                requests=strict_int(b.get("requests"), _where(source, f"{f}.requests"), lo=0, hi=MAX_COUNT),
                e2e_p99_ms=_pct(b.get("e2e_ms"), source, f"{f}.e2e_ms")["p99"],
                batch_model_ms_p50=_opt_num(b.get("batch_model_ms_p50"), source, f"{f}.batch_model_ms_p50"),
                slot_model_ms_p50=_opt_num(b.get("slot_model_ms_p50"), source, f"{f}.slot_model_ms_p50"),
                padding_waste=_opt_num(b.get("padding_waste"), source, f"{f}.padding_waste", hi=1.0),
            )
        )
    ttft = _pct(lat.get("ttft"), source, "latency_ms.ttft")
    itl = _pct(lat.get("itl"), source, "latency_ms.itl")
    load = doc.get("load")
    offered_raw = load.get("offered_rps") if isinstance(load, dict) else None
    offered = (
        strict_number(offered_raw, _where(source, "load.offered_rps"), lo=0, hi=MAX_RPS)
        if isinstance(offered_raw, int | float)
        and not isinstance(offered_raw, bool)
        and 0 < offered_raw < float("inf")
        else None
    )
    return BenchResults(
        source=source,
        protocol=protocol,
        model=_opt_str(target.get("model"), source, "target.model"),
        url=_opt_str(target.get("url"), source, "target.url") or "",
        instance=name,
        term=term,
        region=region,
        measured_at=_opt_str(doc.get("measured_at"), source, "measured_at") or "",
        complete=complete,
        stop_reason=_opt_str(doc.get("stop_reason"), source, "stop_reason") or "",
        sent=n["sent"],
        ok=n["ok"],
        duration_s=strict_number(
            doc.get("duration_s"), _where(source, "duration_s"), lo=0, hi=MAX_DURATION_S
        ),
        requests_per_s=strict_number(
            thr.get("requests_per_s"), _where(source, "throughput.requests_per_s"), lo=0, hi=MAX_RPS
        ),
        goodput_rps=goodput,
        slo_e2e_ms=_opt_num(slo.get("e2e_ms"), source, "slo.e2e_ms"),
        slo_ttft_ms=_opt_num(slo.get("ttft_ms"), source, "slo.ttft_ms"),
        e2e_p50_ms=e2e["p50"],
        e2e_p90_ms=e2e["p90"],
        e2e_p99_ms=e2e["p99"],
        ttft_p99_ms=ttft["p99"],
        itl_p99_ms=itl["p99"],
        error_rate=strict_number(rates.get("error"), _where(source, "rates.error"), lo=0, hi=1),
        reject_rate=strict_number(rates.get("reject"), _where(source, "rates.reject"), lo=0, hi=1),
        padding_waste=waste,
        cost_per_million_usd=per_million,
        buckets=tuple(buckets),
        identity=parse_identity(doc.get("identity"), source),
        evidence=parse_evidence(doc, source),
        imported_from=_imported(doc),
        offered_rps=offered,
    )


def _imported(doc: dict[str, Any]) -> str | None:
    """The peer tool a converted file came from (load.imported_from, or the tool's name says so)."""
    load, tool = doc.get("load"), doc.get("tool")
    named = load.get("imported_from") if isinstance(load, dict) else None
    if isinstance(named, str) and named:
        return named[:80]
    name = tool.get("name") if isinstance(tool, dict) else None
    return name[:80] if isinstance(name, str) and "imported" in name else None


def read_bench_results(path: str | Path) -> BenchResults:
    """Read and validate a chipswap.bench/2 file; every problem is one ChipswapError line."""
    return parse_bench_results(read_json(path, "bench results"), str(path))


def measured_serving(results: BenchResults) -> MeasuredServing:
    """The instance's serving figures as ``measured``: goodput at the SLO when one was set (else throughput)
    and the end-to-end p99. Refuses files without an instance or without a successful request."""
    if results.instance is None:
        raise ChipswapError(
            f"bench results {results.source} name no instance; rerun chipswap bench with --instance NAME"
            " (the instance type the server ran on)"
        )
    if results.ok == 0 or results.requests_per_s <= 0:
        raise ChipswapError(
            f"bench results {results.source} have no successful request"
            f" ({results.stop_reason or 'no answers'});"
            " fix the server and rerun chipswap bench"
        )
    rps, basis = results.requests_per_s, "throughput (no SLO given)"
    if results.goodput_rps is not None:
        rps, basis = results.goodput_rps, "goodput at the SLO"
        if rps <= 0:
            raise ChipswapError(
                f"bench results {results.source}: no request met the SLO;"
                " rerun at a lower --rate or relax --slo-ms"
            )
    notes = [f"chipswap bench {results.protocol} {results.measured_at}, {results.ok:,} requests, {basis}"]
    if not results.complete:
        notes.append(f"partial run: {results.stop_reason}")
    bound = did_not_saturate(results)
    if bound:
        notes.append(bound)
    if results.error_rate > 0 or results.reject_rate > 0:
        notes.append(f"errors {results.error_rate:.1%}, rejects {results.reject_rate:.1%}")
    return MeasuredServing(
        instance=results.instance,
        term=results.term,
        region=results.region,
        requests_per_s=rps,
        p99_ms=results.e2e_p99_ms,
        ttft_p99_ms=results.ttft_p99_ms,
        basis=basis,
        note="; ".join(notes),
        evidence=results.evidence,
        lower_bound=bound is not None,
    )


def bucket_latency_table(results: BenchResults) -> dict[int, float]:
    """Seconds of model time per compiled row at each measured sequence bucket, for the planner's
    ``measured`` cost model. Latency must not fall with length there; a bucket measured faster than a shorter
    one (noise) takes the shorter one's time."""
    rows = sorted(
        (b.seq_len, b.slot_model_ms_p50) for b in results.buckets if b.slot_model_ms_p50 is not None
    )
    if not rows:
        raise ChipswapError(
            f"bench results {results.source} have no per-bucket model times; bench a chipswap serve endpoint"
            " (--protocol predict) to measure them"
        )
    table: dict[int, float] = {}
    floor = 0.0
    for seq, ms in rows:
        floor = max(floor, ms / 1000.0)
        table[seq] = floor
    if not all(math.isfinite(v) for v in table.values()):  # pragma: no cover - strict_number already refuses
        raise ChipswapError(
            f"bench results {results.source} have non-finite bucket times; rerun chipswap bench"
        )
    return table
