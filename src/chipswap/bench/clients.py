"""The two protocols `chipswap bench` speaks, one small client each (httpx, asyncio).

- ``PredictClient``: chipswap's own ``POST /v1/predict`` with token ids of the planned length; reads the
  bucket, batch fill and server timings from each answer.
- ``OpenAIClient``: the OpenAI-compatible ``/v1/completions`` or ``/v1/chat/completions`` with
  ``stream: true`` (what vLLM, TGI, TensorRT-LLM and NIM serve): a prompt of the planned token length,
  ``max_tokens`` = the planned output length; time to first token, the gap between streamed chunks
  (inter-token latency), end to end, and the token counts from ``usage`` when the server reports them.

Each ``send`` returns the request's Record filled in; transport failures are left to the runner, which turns
them into statuses. ``probe`` asks the server what it serves before the run and fails with one line when the
URL is not such a server. May not: decide when to send (the runner does), or retry.
"""

from __future__ import annotations

import json
import random
import time
from dataclasses import dataclass, field
from typing import Any

import httpx

from chipswap.bench.stats import Record
from chipswap.errors import ChipswapError
from chipswap.serve.tokenizer import TextTokenizer
from chipswap.textsafe import one_line

PROTOCOLS = ("predict", "completions", "chat")
PROTOCOL_NAMES = {"predict": "chipswap-predict", "completions": "openai-completions", "chat": "openai-chat"}
MAX_STREAM_BYTES = 64 * 1024 * 1024  # one answer; far above any real completion, bounds a hostile server
MAX_ERROR_SNIPPET = 200
# Words that are one token each (with their leading space) in the GPT-2, Llama and Mistral BPE vocabularies:
# a prompt of N of them is about N tokens when the server's tokenizer is not at hand.
COMMON_WORDS = (
    "the of and to in is that for it as with was on be at by this had not are but from or have an they which "
    "one you were all we her she there would their will when who him been has more if no out do so can "
    "what up said about other into than its time only could new them man some these then two first any like "
    "now my over"
).split()


class ProtocolError(Exception):
    """The server answered, but not in the protocol asked for."""


class RejectedError(Exception):
    """HTTP 429: the server shed the request."""

    def __init__(self, message: str, retry_after: float | None) -> None:
        super().__init__(message)
        self.retry_after = retry_after


class HttpStatusError(Exception):
    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status


def _snippet(data: bytes | str) -> str:
    text = data.decode("utf-8", "replace") if isinstance(data, bytes) else data
    return one_line(text.strip(), MAX_ERROR_SNIPPET)


def _error_message(status: int, body: bytes) -> str:
    """The server's own error text when it sent JSON ({"error": {"message"}} or {"detail"}); any other body
    is described, never shown (an HTML page is not a message)."""
    try:
        obj = json.loads(body)
    except ValueError:
        return f"HTTP {status} ({_body_kind(body)}, not shown)"
    msg: Any = obj
    if isinstance(obj, dict):
        err = obj.get("error", obj.get("detail", obj.get("message", obj)))
        msg = err.get("message", err) if isinstance(err, dict) else err
    return f"HTTP {status}: {_snippet(str(msg))}"


def _retry_after(headers: httpx.Headers) -> float | None:
    value = headers.get("retry-after")
    try:
        return float(value) if value is not None else None
    except ValueError:
        return None


def _body_kind(body: bytes) -> str:
    try:
        json.loads(body)
        return "a JSON answer of another shape"
    except ValueError:
        pass
    head = body[:512].lstrip().lower()
    if head.startswith((b"<!doctype html", b"<html")) or b"<body" in head:
        return "an HTML page"
    return f"a {len(body):,}-byte non-JSON body" if body else "an empty body"


# response headers that name the server software (recorded in the results' identity, bounded)
IDENTITY_HEADERS = ("server", "x-powered-by", "x-compute-type", "x-served-by")


def _json_or_kind(r: httpx.Response) -> Any:
    """The answer's JSON (bounded), or a _NotJson saying what it looked like."""
    body = r.content[:MAX_STREAM_BYTES]
    try:
        return json.loads(body)
    except ValueError:
        return _NotJson(_body_kind(body), r.headers.get("content-type", ""))


async def _get_json(http: httpx.AsyncClient, path: str) -> tuple[int, Any]:
    r = await http.get(path)
    return r.status_code, _json_or_kind(r)


def _peer(r: httpx.Response) -> str | None:
    """The address the answer came from (the connected socket's peer), or None when the transport hides it."""
    stream = r.extensions.get("network_stream")
    addr = stream.get_extra_info("server_addr") if stream is not None else None
    return str(addr[0]) if isinstance(addr, tuple) and addr else None


async def _probe_models(http: httpx.AsyncClient) -> tuple[int, Any, dict[str, str], str | None]:
    """GET /v1/models: status, parsed JSON (or _NotJson), the identity headers of the answer and the address
    it came from (read while the connection is open: whether the server is on this machine)."""
    async with http.stream("GET", "/v1/models") as r:
        peer = _peer(r)
        await r.aread()
    heads = {k: one_line(r.headers[k], 120) for k in IDENTITY_HEADERS if k in r.headers}
    return r.status_code, _json_or_kind(r), heads, peer


@dataclass(frozen=True)
class _NotJson:
    """An answer that was not JSON: what it looked like, never its text."""

    kind: str
    content_type: str


def _not_a_model_server(base: Any, status: int, obj: Any) -> str | None:
    """A one-line hint when GET /v1/models was answered by something that serves no models."""
    if isinstance(obj, _NotJson):
        return (
            f"{base} answered GET /v1/models with {obj.kind} (HTTP {status}), not a model list: that is a "
            "web "
            "server, not a model server; check the URL and port"
        )
    return None


def _openai_listing(obj: Any) -> list[dict[str, Any]]:
    """The entries of an OpenAI-style model list that are not chipswap serve's (no max_length/vocab_size)."""
    data = obj.get("data") if isinstance(obj, dict) else None
    if not isinstance(data, list):
        return []
    return [
        m
        for m in data[:100]
        if isinstance(m, dict) and m.get("id") and "vocab_size" not in m and "max_length" not in m
    ]


def _ids_for(index: int, length: int, vocab: int, seed: int) -> list[int]:
    """Deterministic token ids for one request (ids from 5 up when the vocabulary allows: no special
    tokens)."""
    rng = random.Random(seed * 1_000_003 + index)
    low = 5 if vocab > 10 else 0
    return [rng.randrange(low, vocab) for _ in range(length)]


@dataclass
class PredictClient:
    """chipswap serve's /v1/predict."""

    seed: int = 0
    model: str | None = None
    vocab_size: int = 1000
    max_length: int | None = None
    info: dict[str, Any] | None = None
    name: str = "predict"
    headers: dict[str, str] = field(default_factory=dict)
    peer: str | None = None  # the address the probe's answer came from

    async def probe(self, http: httpx.AsyncClient) -> dict[str, Any]:
        status, obj, self.headers, self.peer = await _probe_models(http)
        if status == 401:
            raise ChipswapError(f"{http.base_url} needs a bearer token (HTTP 401); set CHIPSWAP_BENCH_TOKEN")
        if status == 503:
            raise ChipswapError(
                f"{http.base_url} is not ready yet (HTTP 503 on /v1/models); wait for /readyz"
            )
        hint = _not_a_model_server(http.base_url, status, obj)
        if hint:
            raise ChipswapError(hint)
        openai = _openai_listing(obj)
        if status == 200 and openai:
            owner = openai[0].get("owned_by")
            raise ChipswapError(
                f"{http.base_url} is an OpenAI-compatible server (serves {one_line(openai[0]['id'], 80)}"
                + (f", owned_by {one_line(owner, 40)}" if isinstance(owner, str) else "")
                + "), not chipswap serve; rerun with --protocol chat (or --protocol completions)"
            )
        data = obj.get("data") if isinstance(obj, dict) else None
        if status != 200 or not isinstance(data, list) or not data or not isinstance(data[0], dict):
            raise ChipswapError(
                f"{http.base_url} does not look like chipswap serve (GET /v1/models answered HTTP {status});"
                " check the URL, or use --protocol completions|chat for an OpenAI-compatible server"
            )
        m = data[0]
        self.model = str(m.get("id"))
        vocab = m.get("vocab_size")
        if isinstance(vocab, int) and not isinstance(vocab, bool) and vocab > 0:
            self.vocab_size = vocab
        ml = m.get("max_length")
        if isinstance(ml, int) and not isinstance(ml, bool) and ml > 0:
            self.max_length = ml
        self.info = {
            k: m.get(k)
            for k in (
                "id",
                "kind",
                "max_length",
                "vocab_size",
                "shapes",
                "parameters",
                "config_sha256",
                "dtype",
                "backend",
                "device",
                "software",
            )
        }
        return self.info

    async def send(self, http: httpx.AsyncClient, rec: Record, clock: Any) -> Record:
        body = json.dumps({"input_ids": _ids_for(rec.index, rec.prompt_tokens, self.vocab_size, self.seed)})
        start = clock()
        rec.sent_s = start
        r = await http.post(
            "/v1/predict",
            content=body,
            headers={"content-type": "application/json", "x-request-id": str(rec.index)},
        )
        raw = r.content
        rec.e2e_s = clock() - start
        rec.http_status = r.status_code
        if r.status_code == 429:
            raise RejectedError(_error_message(429, raw), _retry_after(r.headers))
        if r.status_code >= 400:
            raise HttpStatusError(r.status_code, _error_message(r.status_code, raw))
        try:
            obj = json.loads(raw)
            b = obj["bucket"]
            rec.bucket, rec.batch, rec.fill = int(b["seq_len"]), int(b["batch"]), int(b["fill"])
            t = obj.get("timing_ms") or {}
            rec.server_queue_ms = float(t["queue"]) if "queue" in t else None
            rec.server_model_ms = float(t["model"]) if "model" in t else None
        except (ValueError, KeyError, TypeError) as exc:
            raise ProtocolError(
                f"reply is not a chipswap /v1/predict answer ({type(exc).__name__}, {_body_kind(raw)})"
            ) from None
        return rec


@dataclass
class OpenAIClient:
    """An OpenAI-compatible streaming endpoint: kind "completions" or "chat"."""

    kind: str = "completions"
    model: str | None = None
    tokenizer: TextTokenizer | None = None
    seed: int = 0
    extra_body: dict[str, Any] | None = None
    info: dict[str, Any] | None = None
    headers: dict[str, str] = field(default_factory=dict)
    peer: str | None = None  # the address the probe's answer came from

    @property
    def name(self) -> str:
        return self.kind

    @property
    def path(self) -> str:
        return "/v1/completions" if self.kind == "completions" else "/v1/chat/completions"

    async def probe(self, http: httpx.AsyncClient) -> dict[str, Any]:
        status, obj, self.headers, self.peer = await _probe_models(http)
        if status == 401:
            raise ChipswapError(f"{http.base_url} needs a bearer token (HTTP 401); set CHIPSWAP_BENCH_TOKEN")
        hint = _not_a_model_server(http.base_url, status, obj)
        if hint:
            raise ChipswapError(hint)
        data = obj.get("data") if isinstance(obj, dict) else None
        if isinstance(data, list) and data and isinstance(data[0], dict) and "vocab_size" in data[0]:
            raise ChipswapError(
                f"{http.base_url} is chipswap serve (it lists {one_line(str(data[0].get('id')), 80)} with a "
                "vocabulary), not an OpenAI-compatible server; rerun with --protocol predict"
            )
        ids = (
            [str(m.get("id")) for m in data if isinstance(m, dict) and m.get("id")]
            if isinstance(data, list)
            else []
        )
        if self.model is None:
            if not ids:
                raise ChipswapError(
                    f"cannot tell which model {http.base_url} serves (GET /v1/models answered HTTP {status});"
                    " pass --model NAME"
                )
            self.model = ids[0]
        listed = data if isinstance(data, list) else []
        entry = next((m for m in listed if isinstance(m, dict) and m.get("id") == self.model), {})
        self.info = {
            "id": self.model,
            "listed_models": ids[:20],
            "owned_by": entry.get("owned_by") if isinstance(entry.get("owned_by"), str) else None,
            "max_model_len": entry.get("max_model_len"),
            "root": entry.get("root") if isinstance(entry.get("root"), str) else None,
        }
        self.info.update(await _server_info(http))
        return self.info

    def prompt(self, index: int, n_tokens: int) -> str:
        """A prompt of about ``n_tokens`` tokens (exactly, with the server's tokenizer given), random words so
        no two requests share a cacheable prefix."""
        rng = random.Random(self.seed * 1_000_003 + index)
        if self.tokenizer is None:
            return " ".join(rng.choice(COMMON_WORDS) for _ in range(n_tokens))
        pool = self.tokenizer.plain_ids()
        ids = [rng.choice(pool) for _ in range(n_tokens)]
        text = self.tokenizer.decode(ids)
        for _ in range(4):  # words may merge or split on re-encoding: trim or pad to the exact count
            got = self.tokenizer.encode(text, special=False)
            if len(got) == n_tokens:
                break
            got = (
                got[:n_tokens]
                if len(got) > n_tokens
                else got + [rng.choice(pool) for _ in range(n_tokens - len(got))]
            )
            text = self.tokenizer.decode(got)
        return text

    def body(self, rec: Record) -> dict[str, Any]:
        prompt = self.prompt(rec.index, rec.prompt_tokens)
        body: dict[str, Any] = {
            "model": self.model,
            "max_tokens": int(rec.max_tokens),
            "stream": True,
            "stream_options": {"include_usage": True},
            "temperature": 0.0,
        }
        if self.kind == "completions":
            body["prompt"] = prompt
        else:
            body["messages"] = [{"role": "user", "content": prompt}]
        body.update(self.extra_body or {})
        return body

    async def send(self, http: httpx.AsyncClient, rec: Record, clock: Any) -> Record:
        payload = json.dumps(self.body(rec))
        headers = {
            "content-type": "application/json",
            "accept": "text/event-stream",
            "x-request-id": str(rec.index),
        }
        start = clock()
        rec.sent_s = start
        async with http.stream("POST", self.path, content=payload, headers=headers) as r:
            rec.http_status = r.status_code
            if r.status_code >= 400:
                raw = await _read_capped(r, 4096)
                rec.e2e_s = clock() - start
                if r.status_code == 429:
                    raise RejectedError(_error_message(429, raw), _retry_after(r.headers))
                raise HttpStatusError(r.status_code, _error_message(r.status_code, raw))
            ctype = r.headers.get("content-type", "")
            if "text/event-stream" not in ctype:
                raw = await _read_capped(r, 2048)
                raise ProtocolError(
                    f"reply is not an OpenAI stream ({_body_kind(raw)},"
                    f" content-type {one_line(ctype, 60)!r});"
                    f" is {http.base_url} an OpenAI-compatible server?"
                )
            await self._read_stream(r, rec, start, clock)
        rec.e2e_s = clock() - start
        return rec

    async def _read_stream(self, r: httpx.Response, rec: Record, start: float, clock: Any) -> None:
        first: float | None = None
        last = 0.0
        chunks = 0
        seen = 0
        done = False
        usage: dict[str, Any] | None = None
        async for line in r.aiter_lines():
            seen += len(line) + 1
            if seen > MAX_STREAM_BYTES:
                raise ProtocolError(f"stream is over {MAX_STREAM_BYTES:,} bytes; the server does not stop")
            if not line.startswith("data:"):
                continue  # blank separators, comments (":"), event:/id: fields
            data = line[5:].strip()
            if data == "[DONE]":
                done = True
                break
            try:
                obj = json.loads(data)
            except ValueError:
                raise ProtocolError(f"stream event is not JSON: {_snippet(data[:80])!r}") from None
            if not isinstance(obj, dict):
                raise ProtocolError(f"stream event is not a JSON object: {_snippet(data[:80])!r}")
            if obj.get("error"):
                err = obj["error"]
                msg = err.get("message", err) if isinstance(err, dict) else err
                raise HttpStatusError(rec.http_status or 200, f"error in stream: {_snippet(str(msg))}")
            if isinstance(obj.get("usage"), dict):
                usage = obj["usage"]
            choices = obj.get("choices")
            if choices is None and usage is None:
                raise ProtocolError(f"stream event has no 'choices': {_snippet(data[:80])!r}")
            piece = _piece(choices[0]) if isinstance(choices, list) and choices else ""
            if piece:
                now = clock()
                if first is None:
                    first = now
                    rec.ttft_s = now - start
                else:
                    rec.itl_s.append(now - last)
                last = now
                chunks += 1
        if first is None:
            raise ProtocolError(
                "the stream ended without any token" + ("" if done else " and without [DONE]")
            )
        rec.output_tokens = chunks
        if usage:
            ct, pt = usage.get("completion_tokens"), usage.get("prompt_tokens")
            if isinstance(ct, int) and not isinstance(ct, bool) and ct >= 0:
                rec.output_tokens = ct
            if isinstance(pt, int) and not isinstance(pt, bool) and pt >= 0:
                rec.prompt_tokens_server = pt


async def _server_info(http: httpx.AsyncClient) -> dict[str, Any]:
    """What vLLM (/version) and TGI (/info) say about themselves: software version, dtype, device. Best
    effort: a server without these routes gives nothing."""
    out: dict[str, Any] = {}
    for path in ("/version", "/info"):
        try:
            status, obj = await _get_json(http, path)
        except httpx.HTTPError:
            continue
        if status != 200 or not isinstance(obj, dict):
            continue
        if path == "/version" and isinstance(obj.get("version"), str):
            out["software"] = f"vllm {one_line(obj['version'], 40)}"
        if path == "/info":
            if isinstance(obj.get("version"), str):
                out["software"] = f"text-generation-inference {one_line(obj['version'], 40)}"
            if isinstance(obj.get("model_dtype"), str):
                out["dtype"] = one_line(obj["model_dtype"], 40).removeprefix("torch.")
            for key in ("model_id", "model_sha"):  # the checkpoint behind the served name
                if isinstance(obj.get(key), str) and obj[key]:
                    out[key] = one_line(obj[key], 200)
            mtt = obj.get("max_total_tokens")
            if isinstance(mtt, int) and not isinstance(mtt, bool) and mtt > 0:
                out["max_total_tokens"] = mtt
            device = obj.get("model_device_type")
            if isinstance(device, str):
                out["device"] = {"cuda": "gpu", "neuron": "neuron", "cpu": "cpu"}.get(device.lower())
    return out


def _piece(choice: Any) -> str:
    if not isinstance(choice, dict):
        return ""
    if isinstance(choice.get("text"), str):
        return choice["text"]
    delta = choice.get("delta")
    if isinstance(delta, dict):
        for key in ("content", "reasoning_content"):
            if isinstance(delta.get(key), str) and delta[key]:
                return delta[key]
    return ""


async def _read_capped(r: httpx.Response, limit: int) -> bytes:
    buf = bytearray()
    async for chunk in r.aiter_bytes():
        buf += chunk
        if len(buf) >= limit:
            break
    return bytes(buf[:limit])


def monotonic() -> float:
    return time.monotonic()
