"""Benchmarks a team already has, as chipswap.bench/2: `vllm bench serve` result JSON, guidellm's benchmarks
JSON, GenAI-Perf's profile export (``profile_export_genai_perf.json``) and LLMPerf's summary
(``*_summary.json``). `chipswap bench import FILE` writes the converted file; `chipswap plan --bench FILE`
converts on the fly.

Each reader follows the tool's own writer (docs/serve.md names the source read): the figures it has become
the file's throughput, latency percentiles and lengths; the identity is what the file says (the model name
it was run against, nothing more: a plan labels its figures "identity as the file states"), and the instance
is the one the file names (vLLM ``--metadata instance=NAME``, guidellm ``--label instance=NAME``) or the one
given.

Pure: a parsed document in, a chipswap.bench/2 dict out; every problem one ChipswapError line. May not read
files (the caller reads them with chipswap.datafile), open sockets or price anything.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from chipswap.errors import ChipswapError
from chipswap.textsafe import one_line

FORMATS = ("vllm bench serve", "guidellm", "GenAI-Perf", "LLMPerf")
FIGURES_ROUTE = '[figures."INSTANCE"] source = "measured" with your own requests/s and p99 in the workload'


def _num(d: Mapping[str, Any], *path: str, scale: float = 1.0) -> float | None:
    """d[path...] as a finite number >= 0 times scale, else None."""
    v: Any = d
    for k in path:
        if not isinstance(v, Mapping):
            return None
        v = v.get(k)
    if isinstance(v, bool) or not isinstance(v, (int, float)) or v != v or v < 0 or v == float("inf"):
        return None
    return float(v) * scale


def _text(v: Any) -> str | None:
    if isinstance(v, list) and v and isinstance(v[0], str):
        v = v[0]  # GenAI-Perf keeps the model names as a list
    return one_line(v, 200) if isinstance(v, str) and v else None


def _ms(d: Mapping[str, Any], *path: str, scale: float = 1.0) -> float | None:
    """A latency figure: None when the file leaves it out, else a finite number >= 0 times scale; anything
    else there (negative, NaN, text) is one error line naming the field, never silently dropped."""
    v: Any = d
    for k in path:
        if not isinstance(v, Mapping) or v.get(k) is None:
            return None
        v = v[k]
    if isinstance(v, bool) or not isinstance(v, (int, float)) or v != v or v < 0 or v == float("inf"):
        raise ChipswapError(
            f"field {'.'.join(path)} is {one_line(repr(v), 40)}, not a latency (a finite number >= 0); "
            "pass the file the tool wrote, unedited"
        )
    return float(v) * scale


def _lat(
    p50: float | None, p90: float | None, p99: float | None, n: int, mean: float | None = None, *,
    name: str = "latency", positive: bool = False,
) -> Any:  # fmt: skip
    """One latency distribution; its percentiles must rise (p50 <= p90 <= p99) and, for a whole-request or
    first-token latency (`positive`), the median be above 0: one error line naming the metric otherwise."""
    if p50 is None and p99 is None:
        return None
    given = [(k, v) for k, v in (("p50", p50), ("p90", p90), ("p99", p99)) if v is not None]
    for (ka, a), (kb, b) in zip(given, given[1:], strict=False):
        if b < a * (1 - 1e-9):
            raise ChipswapError(
                f"{name} {kb} ({b:g} ms) is below its {ka} ({a:g} ms); percentiles rise (p99 >= p90 >= "
                "p50 >= 0): pass the file the tool wrote, unedited"
            )
    if positive and any(v <= 0 for _, v in given):
        raise ChipswapError(
            f"{name} {given[0][0]} is 0 ms; a request takes time: pass the file the tool wrote"
        )
    return {"n": n, "p50": p50, "p90": p90, "p99": p99, "mean": mean, "max": None}


def _dist(values: Any) -> dict[str, float | None]:
    vals = sorted(float(v) for v in values if isinstance(v, (int, float)) and not isinstance(v, bool))
    if not vals:
        return {"p50": None, "p99": None, "max": None}

    def at(q: float) -> float:
        return vals[min(len(vals) - 1, int(q * (len(vals) - 1) + 0.5))]

    return {"p50": at(0.5), "p99": at(0.99), "max": vals[-1]}


def _figures(
    *,
    tool: str,
    model: str | None,
    url: str | None,
    protocol: str,
    instance: str | None,
    sent: int,
    ok: int,
    duration_s: float,
    rps: float,
    out_tps: float | None,
    in_tps: float | None,
    e2e: Any,
    ttft: Any,
    itl: Any,
    tpot: Any,
    prompt: Mapping[str, Any],
    output: Mapping[str, Any],
    measured_at: str,
    offered_rps: float | None = None,
) -> dict[str, Any]:
    """The chipswap.bench/2 document of an imported run (no SLO, so no goodput: throughput is the figure)."""
    errors = max(sent - ok, 0)

    def whole(
        dist: Mapping[str, Any],
    ) -> dict[str, Any]:  # token counts are whole numbers in chipswap.bench/2
        return {k: (round(v) if k == "max" and v is not None else v) for k, v in dist.items()}

    return {
        "schema": "chipswap.bench/2",
        "tool": {"name": f"{tool} (imported by chipswap bench import)", "version": None, "command": None},
        "measured_at": measured_at,
        "machine": None,
        "target": {"url": url or "", "protocol": protocol, "model": model, "server": None},
        "instance": None if instance is None else {"name": instance, "term": None, "region": None},
        "load": {"trace": f"{tool}'s own load", "imported_from": tool, "offered_rps": offered_rps},
        "slo": {"e2e_ms": None, "ttft_ms": None, "itl_ms": None},
        "complete": True,
        "stop_reason": "",
        "counts": {"planned": sent, "sent": sent, "ok": ok, "rejected": 0, "errors": errors, "timeouts": 0,
                   "not_sent": 0},
        "duration_s": duration_s,
        "throughput": {"requests_per_s": rps, "input_tokens_per_s": in_tps, "output_tokens_per_s": out_tps},
        "latency_ms": {"e2e": e2e, "ttft": ttft, "itl": itl, "tpot": tpot},
        "rates": {"error": errors / sent if sent else 0.0, "reject": 0.0, "timeout": 0.0},
        "goodput": None,
        "padding": None,
        "buckets": [],
        "send_lag_ms": None,
        "errors": [],
        "cost": None,
        "identity": {
            "model": {"name": model, "source": f"the {tool} file's model name"},
            "shapes": {"prompt_tokens": whole(prompt), "output_tokens": whole(output)},
            "host": {"declared_instance": instance, "beside_server": False},
        },
    }  # fmt: skip


# ------------------------------------------------------------------------------------------------ readers
def _vllm(d: Mapping[str, Any], instance: str | None) -> dict[str, Any]:
    """vllm/benchmarks/serve.py's result JSON (--save-result): top-level figures in ms, lists of lengths."""
    ok = int(_num(d, "completed") or 0)
    failed = _num(d, "failed")
    sent = ok + int(failed) if failed is not None else int(_num(d, "num_prompts") or ok)
    n = ok

    def ms(metric: str) -> Any:
        return _lat(
            _ms(d, f"median_{metric}_ms"), _ms(d, f"p90_{metric}_ms"), _ms(d, f"p99_{metric}_ms"), n,
            _ms(d, f"mean_{metric}_ms"), name=metric, positive=metric in ("e2el", "ttft"),
        )  # fmt: skip

    backend = str(d.get("endpoint_type") or d.get("backend") or "")
    return _figures(
        tool="vllm bench serve",
        model=_text(d.get("model_id")),
        url=None,
        protocol="openai-chat" if "chat" in backend else "openai-completions",
        instance=_text(d.get("instance")) or instance,
        sent=sent,
        ok=ok,
        duration_s=_num(d, "duration") or 0.0,
        rps=_num(d, "request_throughput") or 0.0,
        out_tps=_num(d, "output_throughput"),
        in_tps=None,
        e2e=ms("e2el"),
        ttft=ms("ttft"),
        itl=ms("itl"),
        tpot=ms("tpot"),
        prompt=_dist(d.get("input_lens") or []),
        output=_dist(d.get("output_lens") or []),
        measured_at=_text(d.get("date")) or "",
        offered_rps=_num(d, "request_rate"),  # "inf" (all at once) is no offered rate: None
    )


def _guidellm_best(d: Mapping[str, Any]) -> Mapping[str, Any]:
    runs = [b for b in d.get("benchmarks") or [] if isinstance(b, Mapping)]
    if not runs:
        raise ChipswapError("the guidellm file has no benchmarks; rerun guidellm with --output kind=json")
    return max(runs, key=lambda b: _num(b, "metrics", "requests_per_second", "successful", "mean") or 0.0)


def _guidellm(d: Mapping[str, Any], instance: str | None) -> dict[str, Any]:
    """guidellm's benchmarks JSON (guidellm run --output kind=json, metadata.version 2): one entry per
    strategy; the one with the highest successful request rate is the capacity (as the trial kit picks)."""
    b = _guidellm_best(d)
    m = b.get("metrics") or {}
    totals = m.get("request_totals") or {}
    ok = int(_num(totals, "successful") or 0)
    sent = int(_num(totals, "total") or ok)

    def stat(name: str, scale: float = 1.0) -> Any:
        s = (m.get(name) or {}).get("successful") or {}
        pct = s.get("percentiles") or {}
        where = ("metrics", name, "successful", "percentiles")
        return _lat(
            _ms({"metrics": m}, *where, "p50", scale=scale), _ms({"metrics": m}, *where, "p90", scale=scale),
            _ms({"metrics": m}, *where, "p99", scale=scale), int(_num(s, "count") or 0),
            _ms({"metrics": m}, "metrics", name, "successful", "mean", scale=scale),
            name=name, positive=name in ("request_latency", "time_to_first_token_ms"),
        ) if isinstance(pct, Mapping) else None  # fmt: skip

    def lengths(name: str) -> dict[str, float | None]:
        s = (m.get(name) or {}).get("successful") or {}
        return {
            "p50": _num(s, "percentiles", "p50"),
            "p99": _num(s, "percentiles", "p99"),
            "max": _num(s, "max"),
        }

    spec = (d.get("config") or {}).get("spec") or {}
    backend = spec.get("backend") or {}
    labels = ((d.get("config") or {}).get("metadata") or {}).get("labels") or {}
    return _figures(
        tool="guidellm",
        model=_text(backend.get("model")),
        url=_text(backend.get("target")),
        protocol="openai-chat"
        if "chat" in str(backend.get("request_format") or "chat")
        else "openai-completions",
        instance=_text(labels.get("instance")) or instance,
        sent=sent,
        ok=ok,
        duration_s=_num(b, "duration") or 0.0,
        rps=_num(m, "requests_per_second", "successful", "mean") or 0.0,
        out_tps=_num(m, "output_tokens_per_second", "successful", "mean"),
        in_tps=_num(m, "prompt_tokens_per_second", "successful", "mean"),
        e2e=stat("request_latency", 1000.0),  # seconds in guidellm
        ttft=stat("time_to_first_token_ms"),
        itl=stat("inter_token_latency_ms"),
        tpot=stat("time_per_output_token_ms"),
        prompt=lengths("prompt_token_count"),
        output=lengths("output_token_count"),
        measured_at="",
    )


def _genai_perf(d: Mapping[str, Any], instance: str | None) -> dict[str, Any]:
    """GenAI-Perf's profile_export_genai_perf.json (export_data/json_exporter.py): each metric an object
    {unit, avg, p50, p90, p99, min, max, ...} in ms / per s, and the run's arguments under input_config."""
    cfg = d.get("input_config") or {}
    n = int(_num(d, "request_count", "avg") or 0)

    def stat(name: str) -> Any:
        return _lat(
            _ms(d, name, "p50"), _ms(d, name, "p90"), _ms(d, name, "p99"), n, _ms(d, name, "avg"), name=name,
            positive=name in ("request_latency", "time_to_first_token"),
        ) if isinstance(d.get(name), Mapping) else None  # fmt: skip

    def lengths(name: str) -> dict[str, float | None]:
        return {"p50": _num(d, name, "p50"), "p99": _num(d, name, "p99"), "max": _num(d, name, "max")}

    models = cfg.get("model")
    if isinstance(cfg.get("models"), Mapping):  # AIPerf, GenAI-Perf's successor: models.items[].name
        items = cfg["models"].get("items") or []
        models = [i.get("name") for i in items if isinstance(i, Mapping)]
    return _figures(
        tool="GenAI-Perf",
        model=_text(models),
        url=_text(cfg.get("url")),
        protocol="openai-completions" if str(cfg.get("endpoint_type")) == "completions" else "openai-chat",
        instance=instance,
        sent=n,
        ok=n,
        duration_s=(n / (_num(d, "request_throughput", "avg") or 1.0)) if n else 0.0,
        rps=_num(d, "request_throughput", "avg") or 0.0,
        out_tps=_num(d, "output_token_throughput", "avg"),
        in_tps=None,
        e2e=stat("request_latency"),
        ttft=stat("time_to_first_token"),
        itl=stat("inter_token_latency"),
        tpot=None,
        prompt=lengths("input_sequence_length"),
        output=lengths("output_sequence_length"),
        measured_at="",
    )


def _llmperf(d: Mapping[str, Any], instance: str | None) -> dict[str, Any]:
    """LLMPerf's summary (token_benchmark_ray.py, *_summary.json): flat ``results_<metric>_quantiles_pNN``
    keys in seconds, lengths as results_number_{input,output}_tokens_*."""
    ok = int(_num(d, "results_num_completed_requests") or 0)
    sent = int(_num(d, "results_num_requests_started") or ok)

    def stat(metric: str) -> Any:
        k = f"results_{metric}_s_quantiles_"
        return _lat(
            _ms(d, k + "p50", scale=1000), _ms(d, k + "p90", scale=1000),
            _ms(d, k + "p99", scale=1000), ok,
            _ms(d, f"results_{metric}_s_mean", scale=1000),
            name=metric, positive=metric in ("end_to_end_latency", "ttft"),
        )  # fmt: skip

    def lengths(which: str) -> dict[str, float | None]:
        k = f"results_number_{which}_tokens_"
        return {
            "p50": _num(d, k + "quantiles_p50"),
            "p99": _num(d, k + "quantiles_p99"),
            "max": _num(d, k + "max"),
        }

    rpm = _num(d, "results_num_completed_requests_per_min") or 0.0
    return _figures(
        tool="LLMPerf",
        model=_text(d.get("model")),
        url=None,
        protocol="openai-chat",
        instance=instance,
        sent=sent,
        ok=ok,
        duration_s=ok / (rpm / 60.0) if rpm else 0.0,
        rps=rpm / 60.0,
        out_tps=_num(d, "results_mean_output_throughput_token_per_s"),
        in_tps=None,
        e2e=stat("end_to_end_latency"),
        ttft=stat("ttft"),
        itl=stat("inter_token_latency"),
        tpot=None,
        prompt=lengths("input"),
        output=lengths("output"),
        measured_at="",
    )


# the first format whose test holds reads the file
READERS: tuple[tuple[str, Callable[[Mapping[str, Any]], bool], Any], ...] = (
    ("guidellm", lambda d: isinstance(d.get("benchmarks"), list), _guidellm),
    ("GenAI-Perf", lambda d: isinstance(d.get("request_throughput"), Mapping), _genai_perf),
    ("LLMPerf", lambda d: "results_num_completed_requests" in d, _llmperf),
    ("vllm bench serve", lambda d: "request_throughput" in d and "completed" in d, _vllm),
)


def detect(doc: Any) -> str | None:
    """The peer format of a parsed document, or None."""
    if not isinstance(doc, Mapping):
        return None
    return next((name for name, test, _ in READERS if test(doc)), None)


def convert(doc: Any, source: str, instance: str | None = None) -> dict[str, Any]:
    """A peer's results as a chipswap.bench/2 document; one error line for an unknown schema, a run without a
    successful request, or (``instance`` None) a file that does not say which instance it ran on."""
    fmt = detect(doc)
    if fmt is None:
        schema = doc.get("schema") if isinstance(doc, Mapping) else None
        raise ChipswapError(
            f"bench results {source} have schema {schema!r}, not chipswap.bench/2 nor a format chipswap "
            "reads "
            f"({', '.join(FORMATS)}); write them with chipswap bench --out, convert them with chipswap bench "
            f"import, or state the figures in the workload: {FIGURES_ROUTE}"
        )
    reader = next(r for name, _, r in READERS if name == fmt)
    try:
        out = reader(doc, instance)
    except ChipswapError as exc:
        raise ChipswapError(f"bench results {source}: {exc}") from None
    except (
        AttributeError,
        TypeError,
        ValueError,
        KeyError,
        OverflowError,
    ) as exc:  # a field of another shape
        raise ChipswapError(
            f"bench results {source} look like {fmt} results but a field has another shape "
            f"({type(exc).__name__}); pass the file {fmt} wrote, unedited"
        ) from None
    if out["counts"]["ok"] == 0 or out["throughput"]["requests_per_s"] <= 0:
        raise ChipswapError(f"bench results {source} ({fmt}) have no successful request; rerun {fmt}")
    if out["instance"] is None:
        raise ChipswapError(
            f"bench results {source} ({fmt}) do not say which instance they ran on; convert them with: "
            f"chipswap bench import {source} --instance NAME --out FILE.json, then pass that file"
        )
    return out
