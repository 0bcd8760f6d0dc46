"""The /v1/predict request path of `chipswap serve`: body validation, and the request handled as plain ASGI.

Profiled under load (issue 33, docs/serve.md "Where the time goes"), the web framework's route machinery --
routing, the request object, the endpoint wrapper, response serialization through its generic encoder --
was about a third of the event loop's busy time per request while adding nothing the route needs. So a
POST /v1/predict that passed the connection gate, the token check and load shedding (server.ShedLoad) is
answered here, straight on ASGI: the body read within ``--max-body-bytes``, validated (``parse_predict``),
queued on the batcher, awaited without a thread of its own, and answered with one ``json.dumps``. Every
answer, error code and metric is the route's as documented; other methods on the path still reach the
framework (405).

May not: run the model on the event loop, or block it.
"""

from __future__ import annotations

import asyncio
import hmac
import json
import logging
import time
from typing import Any

from chipswap.compile.padding import InputTooLong
from chipswap.serve.batcher import Draining, QueueFull, RequestExpired
from chipswap.serve.served import ServedModel
from chipswap.serve.shedding import DRAINING_MESSAGE
from chipswap.serve.tokenizer import TextTokenizer

log = logging.getLogger("chipswap.serve")

DEFAULT_MAX_TEXT_CHARS = 100_000
PREDICT_FIELDS = ("input_ids", "text", "model")
_INT = {int}


class ClientError(Exception):
    """A request the client got wrong: HTTP status, a stable code and a message naming the problem."""

    def __init__(self, status: int, code: str, message: str, headers: dict[str, str] | None = None) -> None:
        super().__init__(message)
        self.status = status
        self.code = code
        self.message = message
        self.headers = headers or {}


# ------------------------------------------------------------------------------------------- validation
def _no_constant(name: str) -> Any:
    raise ValueError(f"{name} is not valid JSON")


def parse_predict(
    body: bytes,
    model: ServedModel,
    *,
    tokenizer: TextTokenizer | None,
    max_text_chars: int = DEFAULT_MAX_TEXT_CHARS,
    truncate: bool = False,
) -> list[int]:
    """The token ids of one /v1/predict body for `model` (its name, longest bucket and vocabulary), or
    ClientError naming what is wrong. No I/O."""
    model_name, max_length, vocab_size = model.name, model.max_length, model.vocab_size
    try:
        text = body.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise ClientError(
            400, "invalid_json", f"body is not UTF-8 (byte {exc.start}); send UTF-8 JSON"
        ) from None
    if not text.strip():
        raise ClientError(
            400, "invalid_json", 'body is empty; send a JSON object like {"input_ids": [101, 102]}'
        )
    try:
        payload = json.loads(text, parse_constant=_no_constant)
    except (ValueError, RecursionError) as exc:
        msg = (
            f"{exc.msg} at line {exc.lineno} column {exc.colno}"
            if isinstance(exc, json.JSONDecodeError)
            else exc
        )
        raise ClientError(400, "invalid_json", f"body is not valid JSON ({msg})") from None
    if not isinstance(payload, dict):
        raise ClientError(
            422,
            "invalid_body",
            f"body must be a JSON object, got {type(payload).__name__};"
            ' send {"input_ids": [...]} or {"text": "..."}',
        )
    unknown = [k for k in payload if k not in PREDICT_FIELDS]
    if unknown:
        raise ClientError(
            422, "unknown_field", f"unknown field {unknown[0]!r}; fields are {', '.join(PREDICT_FIELDS)}"
        )
    if "model" in payload and payload["model"] is not None:
        name = payload["model"]
        if not isinstance(name, str):
            raise ClientError(422, "invalid_field", f"'model' must be a string, got {type(name).__name__}")
        if name != model_name:
            shown = json.dumps(name[:100])
            raise ClientError(
                404, "model_not_found", f"unknown model {shown}; this server serves {json.dumps(model_name)}"
            )
    has_ids, has_text = "input_ids" in payload, "text" in payload
    if has_ids == has_text:
        raise ClientError(
            422, "invalid_body", 'give exactly one of "input_ids" (a list of token ids) or "text" (a string)'
        )
    if has_text:
        value = payload["text"]
        if not isinstance(value, str):
            raise ClientError(422, "invalid_field", f"'text' must be a string, got {type(value).__name__}")
        if tokenizer is None:
            raise ClientError(
                422,
                "no_tokenizer",
                "this server has no tokenizer; send 'input_ids' or start it with --tokenizer",
            )
        if not value.strip():
            raise ClientError(422, "empty_input", "'text' is empty; send at least one word")
        if len(value) > max_text_chars:
            raise ClientError(
                413,
                "input_too_long",
                f"'text' has {len(value):,} characters, over the limit of {max_text_chars:,}",
            )
        ids = tokenizer.encode(value)
    else:
        value = payload["input_ids"]
        if not isinstance(value, list):
            raise ClientError(
                422, "invalid_field", f"'input_ids' must be a list of integers, got {type(value).__name__}"
            )
        if not value:
            raise ClientError(422, "empty_input", "'input_ids' is empty; send at least one token id")
        if not set(map(type, value)) <= _INT:  # C speed; the loop below only names the first culprit
            for i, v in enumerate(value):
                if isinstance(v, bool) or not isinstance(v, int):
                    raise ClientError(
                        422,
                        "invalid_field",
                        f"input_ids[{i}] must be an integer token id, got {json.dumps(v)[:40]}",
                    )
        ids = value
    if len(ids) > max_length and not truncate:
        raise ClientError(
            422,
            "input_too_long",
            f"input of {len(ids):,} tokens is longer than the largest compiled bucket ({max_length} tokens);"
            " shorten it or serve a plan with a longer bucket",
        )
    top = vocab_size if vocab_size is not None else None
    if ids and min(ids) >= 0 and (top is None or max(ids) < top):
        return ids
    for i, v in enumerate(ids):
        if v < 0 or (top is not None and v >= top):
            limit = f"0..{top - 1}" if top is not None else ">= 0"
            raise ClientError(
                422, "token_out_of_range", f"input_ids[{i}] = {v} is outside the model's vocabulary ({limit})"
            )
    return ids


class ClientGone(Exception):
    """The client disconnected before its body was read: counted, never logged as a server error."""


def auth_error(token: str | None, header: str | None) -> ClientError | None:
    """None when no token is configured or the Authorization header carries it (constant-time compare)."""
    if token is None:
        return None
    if not header:
        return ClientError(
            401,
            "missing_token",
            "this server needs 'Authorization: Bearer <token>'",
            {"WWW-Authenticate": "Bearer"},
        )
    scheme, _, value = header.partition(" ")
    if scheme.lower() != "bearer" or not hmac.compare_digest(value.strip().encode(), token.encode()):
        return ClientError(401, "invalid_token", "the bearer token is wrong", {"WWW-Authenticate": "Bearer"})
    return None


def not_ready(engine: Any) -> ClientError:
    """503 while loading, after a failed load, and while draining (with Connection: close)."""
    if engine.state == "draining":
        return ClientError(503, "draining", DRAINING_MESSAGE, {"Retry-After": "1", "Connection": "close"})
    if engine.state == "failed":
        return ClientError(503, "load_failed", f"the model failed to load: {engine.error}")
    return ClientError(503, "not_ready", "the model is still loading and warming up", {"Retry-After": "1"})


def check_length(declared: str | None, limit: int) -> None:
    """A Content-Length that is not a number, or over the limit, is refused before the body is read."""
    if declared is None:
        return
    if not declared.strip().isdigit():
        raise ClientError(400, "invalid_header", f"Content-Length {declared[:20]!r} is not a number")
    if int(declared) > limit:
        raise ClientError(
            413, "body_too_large", f"body of {int(declared):,} bytes is over the limit of {limit:,} bytes"
        )


def over_limit(limit: int) -> ClientError:
    return ClientError(413, "body_too_large", f"body is over the limit of {limit:,} bytes")


async def read_body(scope: Any, receive: Any, limit: int) -> bytes:
    """The request body from ASGI messages, at most ``limit`` bytes (ClientError 413), ClientGone when the
    client leaves first."""
    for name, value in scope["headers"]:
        if name == b"content-length":
            check_length(value.decode("latin-1"), limit)
            break
    chunks: list[bytes] = []
    size = 0
    while True:
        message = await receive()
        if message["type"] == "http.disconnect":
            raise ClientGone
        chunk = message.get("body", b"")
        if chunk:
            size += len(chunk)
            if size > limit:
                raise over_limit(limit)
            chunks.append(chunk)
        if not message.get("more_body", False):
            return chunks[0] if len(chunks) == 1 else b"".join(chunks)


async def _send(send: Any, status: int, body: bytes, headers: dict[str, str] | None = None) -> None:
    raw = [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())]
    raw += [(k.lower().encode("latin-1"), v.encode("latin-1")) for k, v in (headers or {}).items()]
    await send({"type": "http.response.start", "status": status, "headers": raw})
    await send({"type": "http.response.body", "body": body})


def _dumps(payload: Any) -> bytes:  # what the framework's JSONResponse writes
    return json.dumps(payload, ensure_ascii=False, allow_nan=False, separators=(",", ":")).encode()


async def send_error(send: Any, exc: ClientError) -> None:
    await _send(send, exc.status, _dumps({"error": {"code": exc.code, "message": exc.message}}), exc.headers)


async def answer_predict(engine: Any, scope: Any, receive: Any, send: Any) -> None:
    """POST /v1/predict, authorized and not shed: validate, queue, await the batch, answer."""
    try:
        status, payload, headers = await _predict(engine, scope, receive)
    except ClientError as exc:
        status, headers = exc.status, exc.headers
        payload = {"error": {"code": exc.code, "message": exc.message}}
        engine.metrics.answered(status, None, None, None)
    except ClientGone:
        engine.metrics.disconnects.inc()  # nobody reads this answer; no log line: not a server error
        await send({"type": "http.response.start", "status": 400, "headers": [(b"content-length", b"0")]})
        await send({"type": "http.response.body", "body": b""})
        return
    except Exception as exc:  # pragma: no cover - a server bug: one JSON 500, logged
        log.exception("internal error")
        status, headers = 500, {}
        payload = {"error": {"code": "internal", "message": f"internal server error ({type(exc).__name__})"}}
    await _send(send, status, _dumps(payload), headers)


async def _predict(engine: Any, scope: Any, receive: Any) -> tuple[int, dict[str, Any], dict[str, str]]:
    received = time.monotonic()
    cfg = engine.config
    model, batcher = engine.model, engine.batcher
    if engine.state != "ready" or model is None or batcher is None:
        engine.metrics.rejected("draining" if engine.state == "draining" else "not_ready")
        raise not_ready(engine)
    body = await read_body(scope, receive, cfg.max_body_bytes)
    ids = parse_predict(
        body, model, tokenizer=engine.tokenizer, max_text_chars=cfg.max_text_chars, truncate=engine.truncate
    )
    try:
        future, pending = batcher.submit(ids)
    except InputTooLong as exc:
        raise ClientError(422, "input_too_long", str(exc)) from None
    except QueueFull as exc:
        raise ClientError(
            429,
            "queue_full",
            f"server is at capacity ({exc.depth} requests waiting for bucket {exc.bucket});"
            f" retry after {exc.retry_after_s} s",
            {"Retry-After": str(exc.retry_after_s)},
        ) from None
    except Draining:
        engine.metrics.rejected("draining")
        raise not_ready(engine) from None
    engine.inflight += 1
    engine.metrics.inflight.inc()
    timeout_s = cfg.batcher.request_timeout_s
    try:
        async with asyncio.timeout(max(timeout_s - (time.monotonic() - received), 0.001)):
            served = await asyncio.wrap_future(future)
    except (TimeoutError, RequestExpired) as exc:
        batcher.cancel(pending)
        if isinstance(exc, TimeoutError):  # (an expiry in the queue is counted by the batcher)
            engine.metrics.rejected("timeout")
        raise ClientError(
            504, "timeout", f"no answer within the request timeout of {timeout_s:g} s"
        ) from None
    except Draining:
        raise not_ready(engine) from None
    except Exception as exc:
        log.error("model failed on a batch: %s: %s", type(exc).__name__, str(exc).splitlines()[0:1])
        engine.metrics.answered(500, None, None, None)
        message = f"the model failed on this batch ({type(exc).__name__})"
        return 500, {"error": {"code": "model_error", "message": message}}, {}
    finally:
        engine.inflight -= 1
        engine.metrics.inflight.dec()
    names = model.output_names or ()
    if len(names) != len(served.outputs):
        names = tuple(f"output_{i}" for i in range(len(served.outputs)))
    server_s = time.monotonic() - received
    engine.metrics.answered(200, served.bucket, server_s, served.queue_s)
    return (
        200,
        {
            "model": model.name,
            "outputs": {n: _jsonable(v) for n, v in zip(names, served.outputs, strict=True)},
            "tokens": served.tokens,
            "bucket": {"seq_len": served.bucket, "batch": served.batch, "fill": served.fill},
            "timing_ms": {
                "queue": round(served.queue_s * 1000, 3),
                "model": round(served.model_s * 1000, 3),
                "server": round(server_s * 1000, 3),
            },
        },
        {},
    )


def _jsonable(value: Any) -> Any:
    return value.tolist() if hasattr(value, "tolist") else value
