"""Identity by evidence, not by name: what a bench file shows about the model it measured, and the checks that
tell whether it can be the workload's model on the declared instance.

Three kinds of evidence, each from the bench file (``identity.evidence``, written by `chipswap bench`; or by
`chipswap bench import` from a peer's file):

- **server metadata**: what the server says it serves -- vLLM's /v1/models ``root`` and ``max_model_len``,
  TGI's /info ``model_id``, ``model_sha``, ``model_dtype``, ``max_total_tokens``; a context longer than the
  model's positions contradicts it, one within them agrees;
- **tokenizer**: the bench's token counts (``--tokenizer``: exact prompts) against the server's own
  ``usage.prompt_tokens`` on the same prompts, and that tokenizer's vocabulary against the model config's;
- **physics**: a decode step reads every weight once, so TPOT cannot be below weight bytes / (devices x HBM
  bandwidth) of the declared instance; a prefill does 2 x parameters x prompt tokens FLOPs, so TTFT cannot
  be below that over (devices x peak FLOPS). A measurement under either floor is not that model there.

Pure: numbers and dicts in, findings out. May not read files, open sockets, import torch or the catalog
(plan.bench_check passes the figures in).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import Any

from chipswap.datafile import strict_int
from chipswap.errors import ChipswapError
from chipswap.textsafe import one_line

TOKEN_SLACK = 2  # a server may add BOS/EOS or template tokens to the count of the same prompt
TOKENIZER_AGREE = 0.9  # share of compared prompts whose counts agree for the tokenizer to agree
VOCAB_PAD = 1.05  # configs pad the embedding table past the tokenizer's vocabulary (to a multiple of 64...)
PHYSICS_MARGIN = 0.9  # a measurement under 90 % of a floor is refused (timer noise stays above it)

LABEL_BOTH = "identity: tokenizer and server metadata agree"
LABEL_METADATA = "identity: server metadata agree"
LABEL_TOKENIZER = "identity: tokenizer agrees"
LABEL_NAME = "identity by name only"
LABEL_DIGEST = "identity: the server's model config digest agrees"
LABEL_PARAMETERS = "identity: the server's parameter count agrees"
# what a "measured" figure's identity rests on when the run's own evidence does not carry it (the source
# reads "measured; <label>"): the server's self-description alone (it can say anything), a peer tool's file
# (chipswap saw none of the run), nothing but the model's name
LABEL_CLAIM = "identity by server claim"
LABEL_FILE = "identity as the file states"


@dataclass(frozen=True)
class Evidence:
    """What a bench file shows beyond the model's name (every field None when it could not tell)."""

    tpot_p50_ms: float | None = None
    ttft_p50_ms: float | None = None
    prompt: tuple[float | None, float | None, float | None] = (None, None, None)  # sent: p50, p99, max
    output: tuple[float | None, float | None, float | None] = (None, None, None)
    server_model: str | None = None  # TGI model_id / vLLM root: the checkpoint behind the served name
    model_sha: str | None = None
    max_context: int | None = None  # vLLM max_model_len / TGI max_total_tokens
    tokenizer_vocab: int | None = None  # vocabulary of the tokenizer the bench counted with (--tokenizer)
    tokens_compared: int = 0  # prompts whose server-side count the bench compared with its own
    tokens_agree: int = 0


def _num(v: Any, where: str) -> float | None:
    if v is None:
        return None
    if isinstance(v, bool) or not isinstance(v, (int, float)) or not 0 <= v <= 1e9:
        raise ChipswapError(
            f"{where} must be a number >= 0, got {one_line(repr(v), 60)}; rerun chipswap bench"
        )
    return float(v)


def _dist(block: Any, where: str) -> tuple[float | None, float | None, float | None]:
    b = block if isinstance(block, Mapping) else {}
    return (_num(b.get("p50"), where), _num(b.get("p99"), where), _num(b.get("max"), where))


def parse_evidence(doc: Mapping[str, Any], source: str) -> Evidence:
    """The evidence of a chipswap.bench/2 document (its latency and identity blocks); one error line."""
    where = f"bench results {source}"
    lat = doc.get("latency_ms") if isinstance(doc.get("latency_ms"), Mapping) else {}
    ident = doc.get("identity") if isinstance(doc.get("identity"), Mapping) else {}
    shapes = ident.get("shapes") if isinstance(ident.get("shapes"), Mapping) else {}
    ev = ident.get("evidence") if isinstance(ident.get("evidence"), Mapping) else {}
    tok = ev.get("tokenizer") if isinstance(ev.get("tokenizer"), Mapping) else {}

    def p50(name: str) -> float | None:
        block = lat.get(name)
        return (
            _num(block.get("p50"), f"{where}: latency_ms.{name}.p50") if isinstance(block, Mapping) else None
        )

    def text(v: Any) -> str | None:
        return one_line(v, 200) if isinstance(v, str) and v else None

    compared = strict_int(
        tok.get("compared", 0), f"{where}: identity.evidence.tokenizer.compared", lo=0, hi=10**9
    )
    agree = strict_int(tok.get("agree", 0), f"{where}: identity.evidence.tokenizer.agree", lo=0, hi=compared)
    vocab = tok.get("vocab_size")
    ctx = ev.get("max_context")
    return Evidence(
        tpot_p50_ms=p50("tpot"),
        ttft_p50_ms=p50("ttft"),
        prompt=_dist(shapes.get("prompt_tokens"), f"{where}: identity.shapes.prompt_tokens"),
        output=_dist(shapes.get("output_tokens"), f"{where}: identity.shapes.output_tokens"),
        server_model=text(ev.get("server_model")),
        model_sha=text(ev.get("model_sha")),
        max_context=None
        if ctx is None
        else strict_int(ctx, f"{where}: identity.evidence.max_context", lo=1, hi=10**9),
        tokenizer_vocab=None
        if vocab is None
        else strict_int(vocab, f"{where}: identity.evidence.tokenizer.vocab_size", lo=1, hi=10**8),
        tokens_compared=compared,
        tokens_agree=agree,
    )


# ------------------------------------------------------------------------------------------------ recording
def evidence_block(info: Mapping[str, Any] | None, records: Any, tokenizer: Any) -> dict[str, Any]:
    """``identity.evidence`` of a run: the server's metadata (the probe's ``info``) and, with the server's
    tokenizer given (exact prompts), the bench's counts against the server's ``usage.prompt_tokens``."""
    info = dict(info or {})

    def pos(k: str) -> int | None:
        v = info.get(k)
        return v if isinstance(v, int) and not isinstance(v, bool) and v > 0 else None

    def text(k: str) -> str | None:
        v = info.get(k)
        return one_line(v, 200) if isinstance(v, str) and v else None

    pairs = [
        (int(r.prompt_tokens), int(r.prompt_tokens_server))
        for r in records
        if getattr(r, "status", None) == "ok" and getattr(r, "prompt_tokens_server", None) is not None
    ]
    vocab = getattr(tokenizer, "vocab_size", None) if tokenizer is not None else None
    return {
        "server_model": text("model_id") or text("root"),
        "model_sha": text("model_sha"),
        "max_context": pos("max_model_len") or pos("max_total_tokens"),
        "tokenizer": {
            "vocab_size": vocab if isinstance(vocab, int) and vocab > 0 else None,
            "compared": len(pairs) if tokenizer is not None else 0,
            "agree": sum(1 for a, b in pairs if 0 <= b - a <= TOKEN_SLACK) if tokenizer is not None else 0,
        },
        "source": "the server's /v1/models and /info; usage.prompt_tokens of the answered requests",
    }


# ------------------------------------------------------------------------------------------------ judging
@dataclass(frozen=True)
class Declared:
    """The workload's model on the declared instance, in the numbers the floors need (None: unknown)."""

    model: str
    instance: str
    weight_bytes: float | None  # at the dtype the bench file states, else the smallest (the refusal floor)
    weight_dtype: str
    parameters: float | None  # for the prefill FLOPs
    devices: int
    device_name: str
    hbm_bytes_s: float | None  # one device
    peak_flops: float | None  # one device, at the weight dtype
    max_positions: int | None
    vocab_size: int | None
    # no dtype stated: the weights at the most demanding dtype (the largest); a run under that floor but
    # over the smallest one is not refused, but its physics is no evidence for the label
    demanding_weight_bytes: float | None = None
    demanding_dtype: str = "fp32"


@dataclass(frozen=True)
class Judgement:
    problems: tuple[str, ...]  # each one refuses the file (physics, contradicting metadata, tokenizer)
    label: str  # LABEL_* : what the identity rests on
    notes: tuple[str, ...]  # the figures behind the label
    floor_ok: bool = True  # the TPOT is over the floor at the stated, else the most demanding, dtype


def trust(j: Judgement, *, imported: bool, host_checked: bool) -> str:
    """What a measured figure's identity rests on, as the words after "measured; " ("" when the run's own
    evidence carries it: the tokenizer agreeing or the host checked beside the server, and the physics floor
    met at the stated or most demanding dtype). A peer file: LABEL_FILE; the server's own metadata, digest
    or parameter count: LABEL_CLAIM; nothing but the name: LABEL_NAME."""
    if imported:
        return LABEL_FILE
    if (j.label in (LABEL_BOTH, LABEL_TOKENIZER) or host_checked) and j.floor_ok:
        return ""
    return LABEL_NAME if j.label == LABEL_NAME else LABEL_CLAIM


def tpot_floor_ms(d: Declared) -> float | None:
    if not d.weight_bytes or not d.hbm_bytes_s or d.devices < 1:
        return None
    return d.weight_bytes / (d.devices * d.hbm_bytes_s) * 1000.0


def ttft_floor_ms(d: Declared, prompt_tokens: float | None) -> float | None:
    if not d.parameters or not d.peak_flops or not prompt_tokens or d.devices < 1:
        return None
    return 2.0 * d.parameters * prompt_tokens / (d.devices * d.peak_flops) * 1000.0


def _physics(ev: Evidence, d: Declared) -> list[str]:
    out = []
    floor = tpot_floor_ms(d)
    if floor is not None and ev.tpot_p50_ms is not None and ev.tpot_p50_ms < PHYSICS_MARGIN * floor:
        out.append(
            f"physics: the measured TPOT p50 {ev.tpot_p50_ms:.3g} ms is below the memory-bandwidth floor "
            f"{floor:.3g} ms of {d.model} on {d.instance} ({d.weight_bytes / 1e9:,.2f} GB of "
            f"{d.weight_dtype} "
            f"weights / ({d.devices} x {d.device_name} at {d.hbm_bytes_s / 1e9:,.0f} GB/s)), so it cannot be "
            "that model on that instance"
        )
    prompt = ev.prompt[0]
    tfloor = ttft_floor_ms(d, prompt)
    if tfloor is not None and ev.ttft_p50_ms is not None and ev.ttft_p50_ms < PHYSICS_MARGIN * tfloor:
        out.append(
            f"physics: the measured TTFT p50 {ev.ttft_p50_ms:.3g} ms is below the FLOPs floor "
            f"{tfloor:.3g} ms "
            f"of a {prompt:,.0f}-token prefill of {d.model} on {d.instance} (2 x {d.parameters / 1e9:,.2f} B "
            f"parameters x tokens / ({d.devices} x {d.peak_flops / 1e12:,.0f} TFLOPS)), so it cannot be "
            "that model on that instance"
        )
    return out


def _tokenizer(ev: Evidence, d: Declared) -> tuple[bool, list[str], list[str]]:
    """(agrees, problems, notes)."""
    if ev.tokens_compared == 0:
        return False, [], []
    share = ev.tokens_agree / ev.tokens_compared
    notes = [
        f"server token counts agree with the bench's on {ev.tokens_agree:,}/{ev.tokens_compared:,} prompts"
    ]
    problems = []
    if share < TOKENIZER_AGREE:
        problems.append(
            f"tokenizer: the server counts the bench's prompts differently on "
            f"{ev.tokens_compared - ev.tokens_agree:,} of {ev.tokens_compared:,} (another tokenizer, so "
            "another "
            "model)"
        )
    vocab_ok = True
    if ev.tokenizer_vocab and d.vocab_size:
        vocab_ok = ev.tokenizer_vocab <= d.vocab_size <= ev.tokenizer_vocab * VOCAB_PAD + 256
        if not vocab_ok:
            problems.append(
                f"tokenizer: the bench's tokenizer has {ev.tokenizer_vocab:,} tokens, {d.model}'s vocabulary "
                f"{d.vocab_size:,}"
            )
    return share >= TOKENIZER_AGREE and vocab_ok and bool(ev.tokenizer_vocab), problems, notes


def _metadata(ev: Evidence, d: Declared) -> tuple[bool, list[str], list[str]]:
    """(agrees, problems, notes)."""
    notes = []
    if ev.server_model:
        notes.append(f"server model {ev.server_model}" + (f" @ {ev.model_sha[:12]}" if ev.model_sha else ""))
    if ev.max_context is None:
        return False, [], notes
    notes.append(f"server max context {ev.max_context:,}")
    if d.max_positions and ev.max_context > d.max_positions:
        return (
            False,
            [
                f"server metadata: the server serves {ev.max_context:,} tokens of context, over {d.model}'s "
                f"{d.max_positions:,} positions"
            ],
            notes,
        )
    return bool(d.max_positions), [], notes


def judge(ev: Evidence, d: Declared, *, name_problem: str | None, decided_by: str = "name") -> Judgement:
    """What the evidence says about the bench file as the declared model on the declared instance.

    ``name_problem``: the name check's finding (bench.identity.model_mismatch by name); it is dropped when
    the tokenizer and the server metadata both agree (the same model served under another name).
    ``decided_by``: what the model check compared ("digest", "parameters" or "name")."""
    problems = _physics(ev, d)
    tok_ok, tok_problems, tok_notes = _tokenizer(ev, d)
    meta_ok, meta_problems, meta_notes = _metadata(ev, d)
    problems += tok_problems + meta_problems
    if tok_ok and meta_ok:
        label = LABEL_BOTH
    elif meta_ok:
        label = LABEL_METADATA
    elif tok_ok:
        label = LABEL_TOKENIZER
    else:
        label = {"digest": LABEL_DIGEST, "parameters": LABEL_PARAMETERS}.get(decided_by, LABEL_NAME)
    if name_problem and not (tok_ok and meta_ok and decided_by == "name"):
        problems.insert(0, name_problem)
    floors = []
    tf = tpot_floor_ms(d)
    strict = (
        tpot_floor_ms(replace(d, weight_bytes=d.demanding_weight_bytes)) if d.demanding_weight_bytes else tf
    )
    floor_ok = strict is None or ev.tpot_p50_ms is None or ev.tpot_p50_ms >= PHYSICS_MARGIN * strict
    if tf is not None and ev.tpot_p50_ms is not None and not problems:
        floors.append(f"TPOT p50 {ev.tpot_p50_ms:.3g} ms >= bandwidth floor {tf:.3g} ms")
        if not floor_ok:
            floors.append(
                f"under the {strict:.3g} ms floor of {d.demanding_dtype} weights (no dtype stated), so "
                "physics "
                "is no evidence of the identity"
            )
    return Judgement(tuple(problems), label, tuple(meta_notes + tok_notes + floors), floor_ok)


# ------------------------------------------------------------------------------------------------ lengths
def _pct(values: Any, q: float) -> float:
    vals = sorted(float(v) for v in values)
    return vals[min(len(vals) - 1, int(q * (len(vals) - 1) + 0.5))]


def workload_lengths(values: Any) -> tuple[float | None, float | None]:
    """(p50, p99) of the workload's lengths (a trace's every request, or the stated length)."""
    vals = list(values) if values is not None else []
    if not vals:
        return None, None
    return _pct(vals, 0.5), _pct(vals, 0.99)


GAP = 0.2  # a benched p50 or p99 more than 20 % off the workload's is a gap worth a note


def _gap(
    what: str, sent: tuple[float | None, float | None, float | None], want: tuple[Any, Any]
) -> str | None:
    """The benched distribution against the workload's, each quantile off by more than GAP with its gap."""
    s50, s99, smax = sent
    w50, w99 = want
    if s50 is None or s99 is None or w50 is None or w99 is None:
        return None
    offs = [
        f"{q} {abs(w - v):,.0f} tokens ({abs(w - v) / max(w, 1):.0%}) {'shorter' if v < w else 'longer'}"
        for q, v, w in (("p99", s99, w99), ("p50", s50, w50))
        if abs(w - v) > GAP * max(w, 1)
    ]
    if not offs:
        return None
    return (
        f"the bench sent {what} of p50 {s50:,.0f} / p99 {s99:,.0f} tokens (max {smax or s99:,.0f}), "
        "the workload's "
        f"are p50 {w50:,.0f} / p99 {w99:,.0f}: {', '.join(offs)}"
    )


def length_note(ev: Evidence, prompt: tuple[Any, Any], output: tuple[Any, Any]) -> str | None:
    """The gap between the benched and the workload's prompt and output lengths, or None when they agree
    within GAP: prompts or outputs shorter anywhere make the measured figure optimistic (for the workload's
    longer requests), only longer ones pessimistic."""
    parts = [g for g in (_gap("prompts", ev.prompt, prompt), _gap("outputs", ev.output, output)) if g]
    if not parts:
        return None
    shorter = any("shorter" in p for p in parts)
    verdict = (
        "so the measured figure may be optimistic" if shorter else "so the measured figure may be pessimistic"
    )
    return "; ".join(parts) + f", {verdict}"
