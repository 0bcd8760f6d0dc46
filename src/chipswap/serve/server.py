"""The HTTP front of `chipswap serve`: FastAPI routes over the dynamic batcher, run by uvicorn.

Routes:
  POST /v1/predict   {"input_ids": [101, 7, 102]} or {"text": "..."} (needs a tokenizer), optional "model"
                     -> {"model", "outputs": {name: values}, "tokens", "bucket": {"seq_len", "batch", "fill"},
                         "timing_ms": {"queue", "model", "server"}}
  GET  /v1/models    the served model: name, max length, vocabulary size, compiled shapes
  GET  /healthz      200 while the process runs (liveness)
  GET  /readyz       200 only after every bucket is loaded and warmed; 503 while loading, after a failed
                     load, and while draining
  GET  /metrics      Prometheus text (chipswap.serve.metrics)

Connections pass the gate first (chipswap.serve.gate): caps per client and in all, header/body read timeouts,
and /healthz, /readyz still served to a connection over a cap (the probe lane).

Every client mistake is a 4xx JSON error ``{"error": {"code", "message"}}`` naming the problem (malformed
JSON, wrong types, empty or over-long input, token ids outside the vocabulary, oversized body, unknown model,
missing or wrong bearer token); the server keeps serving. 429 (queue full) and 503 (loading, draining) carry
Retry-After. A 500 means the model itself failed. SIGTERM/SIGINT: stop accepting, finish every admitted
request (up to the drain timeout), exit 0.

May not: load models itself (the engine gets a loader), or bind anything but the host it is given
(127.0.0.1 unless told otherwise). Imports FastAPI: import this module only when serving.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import hmac
import json
import logging
import socket
import sys
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse, Response
from starlette.exceptions import HTTPException as StarletteHTTPException

from chipswap.compile.padding import InputTooLong
from chipswap.errors import ChipswapError
from chipswap.serve.batcher import BatcherConfig, Draining, DynamicBatcher, QueueFull, RequestExpired
from chipswap.serve.gate import ConnectionLimits, Gate, fit_fd_limit
from chipswap.serve.metrics import ServeMetrics
from chipswap.serve.served import ServedModel
from chipswap.serve.shedding import (
    DRAINING_MESSAGE,
    LoopLag,
    discard_body,
    draining_answer,
    fast_answer,
    send_json,
)
from chipswap.serve.tokenizer import TextTokenizer

log = logging.getLogger("chipswap.serve")

DEFAULT_HOST = "127.0.0.1"
DEFAULT_MAX_BODY_BYTES = 1024 * 1024
DEFAULT_MAX_TEXT_CHARS = 100_000
DRAIN_GRACE_S = 1.0  # after SIGTERM: answer what is already on open connections before closing them
PREDICT_FIELDS = ("input_ids", "text", "model")


@dataclass(frozen=True)
class ServeConfig:
    """Everything `chipswap serve` can be told, besides the model."""

    host: str = DEFAULT_HOST  # interface to bind; 127.0.0.1 keeps the server on this machine
    port: int = 8000  # 0 picks a free port (printed on start)
    token: str | None = None  # when set, /v1/* and /metrics need "Authorization: Bearer <token>"
    max_body_bytes: int = DEFAULT_MAX_BODY_BYTES  # larger request bodies get 413 without being read
    max_text_chars: int = DEFAULT_MAX_TEXT_CHARS  # longer "text" gets 413 before tokenizing
    drain_timeout_s: float = 30.0  # on SIGTERM, how long admitted requests may take to finish
    batcher: BatcherConfig = field(default_factory=BatcherConfig)
    # caps and read timeouts per connection (serve/gate.py); None = uvicorn alone, as before issue 32 (only
    # the flood benchmark's baseline: no header or body timeout, no cap)
    connections: ConnectionLimits | None = field(default_factory=ConnectionLimits)
    health_port: int | None = None  # a second listener for /healthz and /readyz only (0 = a free port)

    def __post_init__(self) -> None:
        if not 0 <= self.port <= 65535:
            raise ChipswapError(f"--port must be 0..65535, got {self.port}; 0 picks a free port")
        if self.health_port is not None:
            if not 0 <= self.health_port <= 65535:
                raise ChipswapError(
                    f"--health-port must be 0..65535, got {self.health_port}; 0 picks a free port"
                )
            if self.health_port == self.port != 0:
                raise ChipswapError(
                    f"--health-port {self.health_port} is the serving --port; pick another port for probes"
                )
        if not 64 <= self.max_body_bytes <= 1 << 30:
            raise ChipswapError(f"--max-body-bytes must be 64..1 GiB, got {self.max_body_bytes:,}")
        if not 1 <= self.max_text_chars <= 1 << 30:
            raise ChipswapError(f"max text chars must be 1..2^30, got {self.max_text_chars:,}")
        if self.token is not None and not self.token.strip():
            raise ChipswapError("the bearer token is empty; set a non-empty token or none")


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
    for i, v in enumerate(ids):
        if v < 0 or (top is not None and v >= top):
            limit = f"0..{top - 1}" if top is not None else ">= 0"
            raise ClientError(
                422, "token_out_of_range", f"input_ids[{i}] = {v} is outside the model's vocabulary ({limit})"
            )
    return ids


# ---------------------------------------------------------------------------------------------- engine
class ServingEngine:
    """The model, its batcher and metrics, and the load -> ready -> draining states the probes report."""

    def __init__(
        self,
        name: str,
        loader: Callable[[], ServedModel],
        config: ServeConfig | None = None,
        *,
        tokenizer: TextTokenizer | None = None,
        truncate: bool = False,
    ) -> None:
        self.name = name
        self.loader = loader
        self.config = config or ServeConfig()
        self.tokenizer = tokenizer
        self.truncate = truncate
        self.metrics = ServeMetrics()
        self.model: ServedModel | None = None
        self.batcher: DynamicBatcher | None = None
        self.state = "loading"
        self.error: str | None = None
        self.on_failure: Callable[[str], None] | None = None
        self.loaded = threading.Event()
        self.inflight = 0
        self.drained = 0
        self.lag = LoopLag()  # event-loop lateness: shed /v1/predict while the loop itself is behind

    def load(self) -> None:
        """Load, check against the tokenizer, warm and time every shape, start the batcher; then ready."""
        try:
            model = self.loader()
            if self.tokenizer is not None and model.vocab_size is not None:
                if self.tokenizer.vocab_size > model.vocab_size:
                    raise ChipswapError(
                        f"tokenizer {self.tokenizer.source} has {self.tokenizer.vocab_size:,} tokens but"
                        f" {model.name} has a vocabulary of {model.vocab_size:,};"
                        " use the model's own tokenizer"
                    )
            model.warm()
            batcher = DynamicBatcher(model, self.config.batcher, self.metrics)
            batcher.calibrate()  # one timed run per shape: which batch size serves fastest here
            batcher.start()
        except Exception as exc:  # a failed load is reported by /readyz and stops the CLI with one line
            self.error = str(exc) if isinstance(exc, ChipswapError) else f"{type(exc).__name__}: {exc}"
            self.state = "failed"
            self.loaded.set()
            if self.on_failure:
                self.on_failure(self.error)
            return
        self.model, self.batcher = model, batcher
        if self.state == "loading":
            self.state = "ready"
            self.metrics.ready.set(1)
        self.loaded.set()

    def start_loading(self) -> threading.Thread:
        t = threading.Thread(target=self.load, name="chipswap-load", daemon=True)
        t.start()
        return t

    def begin_drain(self) -> None:
        """The first SIGTERM/SIGINT: /readyz turns 503, queued batches run now, admitted requests finish."""
        if self.state in ("ready", "loading"):
            self.state = "draining"
            self.drained = self.inflight
        self.metrics.ready.set(0)
        if self.batcher is not None:
            self.batcher.flush_now()

    def close(self) -> int:
        """After uvicorn has finished the admitted requests: stop the batcher (running anything left)."""
        self.begin_drain()
        if self.batcher is not None:
            left = self.batcher.close(drain=True, timeout=self.config.drain_timeout_s)
            self.drained = max(self.drained, left)
        return self.drained


# ------------------------------------------------------------------------------------------------- app
def _error(status: int, code: str, message: str, headers: dict[str, str] | None = None) -> JSONResponse:
    return JSONResponse({"error": {"code": code, "message": message}}, status_code=status, headers=headers)


def _auth(engine: ServingEngine, request: Request) -> None:
    token = engine.config.token
    if token is None:
        return
    got = request.headers.get("authorization")
    if not got:
        raise ClientError(
            401,
            "missing_token",
            "this server needs 'Authorization: Bearer <token>'",
            {"WWW-Authenticate": "Bearer"},
        )
    scheme, _, value = got.partition(" ")
    if scheme.lower() != "bearer" or not hmac.compare_digest(value.strip().encode(), token.encode()):
        raise ClientError(401, "invalid_token", "the bearer token is wrong", {"WWW-Authenticate": "Bearer"})


class ClientGone(Exception):
    """The client disconnected before its body was read: counted, never logged as a server error."""


async def _read_body(request: Request, limit: int) -> bytes:
    declared = request.headers.get("content-length")
    if declared is not None:
        if not declared.strip().isdigit():
            raise ClientError(400, "invalid_header", f"Content-Length {declared[:20]!r} is not a number")
        if int(declared) > limit:
            raise ClientError(
                413, "body_too_large", f"body of {int(declared):,} bytes is over the limit of {limit:,} bytes"
            )
    from starlette.requests import ClientDisconnect

    buf = bytearray()
    try:
        async for chunk in request.stream():
            buf += chunk
            if len(buf) > limit:
                raise ClientError(413, "body_too_large", f"body is over the limit of {limit:,} bytes")
    except ClientDisconnect:  # fewer bytes than announced, then gone (issue 19: logged "internal error")
        raise ClientGone from None
    return bytes(buf)


def _jsonable(value: Any) -> Any:
    return value.tolist() if hasattr(value, "tolist") else value


class ShedLoad:
    """ASGI middleware: while the batcher would refuse any new request, answer /v1/predict with 429 before
    routing, body parsing or validation -- under overload most requests are refused, so refusing must be the
    cheapest thing the server does. Authentication still comes first when a token is set."""

    def __init__(self, app: Any, engine: ServingEngine) -> None:
        self.app = app
        self.engine = engine

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        engine = self.engine
        authorized = self._authorized(scope)
        if await fast_answer(scope, send, engine, authorized):  # /healthz, /metrics: off the request path
            return None
        batcher = engine.batcher
        if scope["path"] != "/v1/predict" or batcher is None or not authorized:
            return await self.app(scope, receive, send)  # the route answers (and checks the token)
        if engine.state == "draining":
            return await draining_answer(receive, send, engine)
        retry, reason = batcher.overloaded(), "queue_full"
        if retry is None and engine.lag.busy and engine.inflight > 0:  # a lag, nothing waiting: no overload
            retry, reason = 1, "loop_busy"
        if retry is None:
            return await self.app(scope, receive, send)
        if not await discard_body(receive, engine.config.max_body_bytes):  # keeps the connection usable
            engine.metrics.disconnects.inc()
            return None
        engine.metrics.rejected(reason)
        engine.metrics.answered(429, None, None, None)
        await send_json(
            send,
            429,
            {"error": {"code": "queue_full", "message": f"server is at capacity; retry after {retry} s"}},
            [(b"retry-after", str(retry).encode())],
        )
        return None

    def _authorized(self, scope: Any) -> bool:
        token = self.engine.config.token
        if token is None:
            return True
        for name, value in scope.get("headers", ()):
            if name == b"authorization":
                scheme, _, given = value.decode("latin-1").partition(" ")
                return scheme.lower() == "bearer" and hmac.compare_digest(
                    given.strip().encode(), token.encode()
                )
        return False


def create_app(engine: ServingEngine) -> FastAPI:
    @contextlib.asynccontextmanager
    async def lifespan(_app: Any) -> Any:
        engine.start_loading()
        engine.lag.start(engine.metrics.loop_lag.set)
        yield
        engine.lag.stop()
        await asyncio.to_thread(engine.close)

    app = FastAPI(title="chipswap serve", lifespan=lifespan, docs_url=None, redoc_url=None, openapi_url=None)
    app.add_middleware(ShedLoad, engine=engine)
    cfg = engine.config

    @app.exception_handler(ClientError)
    async def _client_error(_request: Request, exc: ClientError) -> Any:
        if _request.url.path == "/v1/predict":
            engine.metrics.answered(exc.status, None, None, None)
        return _error(exc.status, exc.code, exc.message, exc.headers)

    @app.exception_handler(ClientGone)
    async def _client_gone(_request: Request, _exc: ClientGone) -> Any:
        engine.metrics.disconnects.inc()  # nobody reads this answer; no log line: not a server error
        return Response(status_code=400)

    @app.exception_handler(StarletteHTTPException)
    async def _http_error(_request: Request, exc: StarletteHTTPException) -> Any:
        code = {404: "not_found", 405: "method_not_allowed"}.get(exc.status_code, "http_error")
        msg = f"{_request.method} {_request.url.path}: {exc.detail}"
        return _error(exc.status_code, code, msg, getattr(exc, "headers", None))

    @app.exception_handler(Exception)
    async def _internal(_request: Request, exc: Exception) -> Any:  # pragma: no cover - a server bug
        log.exception("internal error")
        return _error(500, "internal", f"internal server error ({type(exc).__name__})")

    def _not_ready() -> ClientError:
        if engine.state == "draining":
            return ClientError(
                503,
                "draining",
                DRAINING_MESSAGE,
                {"Retry-After": "1", "Connection": "close"},
            )
        if engine.state == "failed":
            return ClientError(503, "load_failed", f"the model failed to load: {engine.error}")
        return ClientError(
            503, "not_ready", "the model is still loading and warming up", {"Retry-After": "1"}
        )

    @app.get("/healthz")
    async def healthz() -> Any:
        return {"status": "ok"}

    @app.get("/readyz")
    async def readyz() -> Any:
        if engine.state == "ready":
            return {"status": "ready", "model": engine.name}
        body: dict[str, Any] = {"status": engine.state}
        if engine.error:
            body["error"] = engine.error
        return JSONResponse(body, status_code=503, headers={"Retry-After": "1"})

    @app.get("/metrics")
    async def metrics(request: Request) -> Any:
        _auth(engine, request)
        data, ctype = engine.metrics.render()
        return Response(data, media_type=ctype)

    @app.get("/v1/models")
    async def models(request: Request) -> Any:
        _auth(engine, request)
        model = engine.model
        if model is None:
            raise _not_ready()
        return {
            "object": "list",
            "data": [
                {
                    "id": model.name,
                    "object": "model",
                    "kind": model.kind,
                    "max_length": model.max_length,
                    "vocab_size": model.vocab_size,
                    "shapes": [list(s) for s in model.shapes()] if model.kind == "compiled" else [],
                    "tokenizer": engine.tokenizer is not None,
                    **_identity(model),
                }
            ],
        }

    @app.post("/v1/predict")
    async def predict(request: Request) -> Any:
        received = time.monotonic()
        _auth(engine, request)
        model, batcher = engine.model, engine.batcher
        if engine.state != "ready" or model is None or batcher is None:
            err = _not_ready()
            engine.metrics.rejected("draining" if engine.state == "draining" else "not_ready")
            raise err
        body = await _read_body(request, cfg.max_body_bytes)
        text_limits = {"max_text_chars": cfg.max_text_chars, "truncate": engine.truncate}
        ids = parse_predict(body, model, tokenizer=engine.tokenizer, **text_limits)
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
            raise _not_ready() from None
        engine.inflight += 1
        engine.metrics.inflight.inc()
        remaining = max(cfg.batcher.request_timeout_s - (time.monotonic() - received), 0.001)
        try:
            served = await asyncio.wait_for(asyncio.wrap_future(future), timeout=remaining)
        except (TimeoutError, RequestExpired) as exc:
            batcher.cancel(pending)
            if isinstance(exc, TimeoutError):  # (an expiry in the queue is counted by the batcher)
                engine.metrics.rejected("timeout")
            raise ClientError(
                504, "timeout", f"no answer within the request timeout of {cfg.batcher.request_timeout_s:g} s"
            ) from None
        except Draining:
            raise _not_ready() from None
        except Exception as exc:
            log.error("model failed on a batch: %s: %s", type(exc).__name__, str(exc).splitlines()[0:1])
            engine.metrics.answered(500, None, None, None)
            return _error(500, "model_error", f"the model failed on this batch ({type(exc).__name__})")
        finally:
            engine.inflight -= 1
            engine.metrics.inflight.dec()
        names = model.output_names or tuple(f"output_{i}" for i in range(len(served.outputs)))
        if len(names) != len(served.outputs):
            names = tuple(f"output_{i}" for i in range(len(served.outputs)))
        server_s = time.monotonic() - received
        engine.metrics.answered(200, served.bucket, server_s, served.queue_s)
        return {
            "model": model.name,
            "outputs": {n: _jsonable(v) for n, v in zip(names, served.outputs, strict=True)},
            "tokens": served.tokens,
            "bucket": {"seq_len": served.bucket, "batch": served.batch, "fill": served.fill},
            "timing_ms": {
                "queue": round(served.queue_s * 1000, 3),
                "model": round(served.model_s * 1000, 3),
                "server": round(server_s * 1000, 3),
            },
        }

    return app


# ------------------------------------------------------------------------------------------- running it
def bind_socket(host: str, port: int) -> socket.socket:
    """A listening-ready socket on host:port (port 0 = a free one), or one error line naming the fix."""
    try:
        infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)
    except socket.gaierror as exc:
        raise ChipswapError(
            f"cannot resolve --host {host!r}: {exc.strerror}; pass an address like 127.0.0.1"
        ) from None
    family, _, _, _, addr = infos[0]
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind(addr)
    except OSError as exc:
        sock.close()
        raise ChipswapError(
            f"cannot listen on {host}:{port}: {exc.strerror or exc}; pick another --port (0 picks a free one)"
        ) from None
    return sock


def _identity(model: Any) -> dict[str, Any]:
    """What `chipswap bench` records as the server's identity: the model's parameter count, config digest
    and dtype, the backend and the device it computes on, and this software."""
    from chipswap import __version__
    from chipswap.compile.identity import BACKEND_DEVICE

    ident = dict(getattr(model, "identity", None) or {})
    backend = getattr(model, "backend", "") or ("torch-eager" if model.kind == "eager-exact" else "")
    out = {k: ident.get(k) for k in ("parameters", "config_sha256", "dtype")}
    out["backend"] = backend or None
    out["device"] = BACKEND_DEVICE.get(backend, "cpu" if backend == "torch-eager" else None)
    out["software"] = f"chipswap serve {__version__}"
    return out


def _listeners(cfg: ServeConfig) -> tuple[list[socket.socket], str, int, int | None]:
    """The bound sockets (serving, then health if any), the shown host, the serving and health ports."""
    sock = bind_socket(cfg.host, cfg.port)
    socks = [sock]
    if cfg.health_port is not None and cfg.connections is not None:
        socks.append(bind_socket(cfg.host, cfg.health_port))
    host, port = sock.getsockname()[:2]
    shown = f"[{host}]" if ":" in str(host) else str(host)
    health = int(socks[1].getsockname()[1]) if len(socks) > 1 else None
    return socks, shown, int(port), health


def _uvicorn_server(engine: ServingEngine, *, install_signals: bool, health_port: int | None = None) -> Any:
    import uvicorn

    class DrainingServer(uvicorn.Server):
        """uvicorn's graceful shutdown, plus: /readyz turns 503 at the first signal, and the process exits 0
        after draining instead of re-raising the signal."""

        def handle_exit(self, sig: int, frame: Any) -> None:
            first = engine.state != "draining"
            engine.begin_drain()
            grace = min(DRAIN_GRACE_S, engine.config.drain_timeout_s)
            if first and grace > 0 and not self.should_exit:
                # keep the listener and open connections a moment: what clients already sent is answered
                # (503 + Connection: close, or the admitted answer) instead of reset by the close
                exit_later = super().handle_exit
                threading.Timer(grace, exit_later, (sig, frame)).start()
                return
            super().handle_exit(sig, frame)

        @contextlib.contextmanager
        def capture_signals(self) -> Iterator[None]:
            if not install_signals or threading.current_thread() is not threading.main_thread():
                yield
                return
            import signal

            old = {s: signal.signal(s, self.handle_exit) for s in (signal.SIGINT, signal.SIGTERM)}
            try:
                yield
            finally:
                for s, h in old.items():
                    signal.signal(s, h)

        async def shutdown(self, sockets: Any = None) -> None:
            if gate is not None:
                gate.close()
            await super().shutdown(sockets)

    limits = engine.config.connections
    gate = Gate(limits, engine.metrics.connection_event, health_port) if limits is not None else None
    gated: dict[str, Any] = {}
    if gate is not None:
        engine.metrics.connections_open.set_function(lambda: len(gate.admitted))
        gated = {"http": gate.factory, "timeout_keep_alive": limits.keep_alive_s}  # type: ignore[union-attr]
    config = uvicorn.Config(
        create_app(engine),
        log_level="warning",
        access_log=False,
        timeout_graceful_shutdown=int(max(1, engine.config.drain_timeout_s)),
        lifespan="on",
        **gated,
    )
    server = DrainingServer(config)
    server.gate = gate  # type: ignore[attr-defined]

    def failed(message: str) -> None:
        server.should_exit = True

    if install_signals:  # the CLI stops on a failed load; a background server stays up to report it
        engine.on_failure = failed
    return server


def run_server(engine: ServingEngine, *, announce: Callable[[str], None] | None = None) -> int:
    """Serve until SIGTERM/SIGINT; 0 after a clean drain, 2 when the model failed to load."""
    cfg = engine.config
    say = announce or (lambda line: (sys.stderr.write(line + "\n"), sys.stderr.flush()))
    if cfg.connections is not None:  # before listening: a cap the fd limit cannot hold is one error line
        fitted = fit_fd_limit(cfg.connections)
        if fitted != cfg.connections:
            say(
                f"chipswap serve: --max-connections lowered to {fitted.max_connections:,}"
                " to fit ulimit -n (raise it to keep the default 2,048)"
            )
            cfg = engine.config = dataclasses.replace(cfg, connections=fitted)
    socks, shown, port, health = _listeners(cfg)
    say(
        f"chipswap serve: listening on http://{shown}:{port}"
        f" (model {engine.name}; /readyz turns 200 when warm)"
    )
    if health is not None:
        say(f"chipswap serve: /healthz and /readyz also on http://{shown}:{health} (probes only)")
    if cfg.host not in ("127.0.0.1", "localhost", "::1") and cfg.token is None:
        say(
            f"chipswap serve: warning: listening on {cfg.host} without a bearer token;"
            " anyone who can reach it can use it"
        )
    server = _uvicorn_server(engine, install_signals=True, health_port=health)
    server.run(sockets=socks)
    if engine.state == "failed":
        raise ChipswapError(f"the model failed to load: {engine.error}")
    say(f"chipswap serve: stopped after draining {engine.drained} in-flight request(s)")
    return 0


@dataclass
class BackgroundServer:
    """A server on a thread of this process (tests, the benchmark): ``url`` once started, ``stop()``."""

    engine: ServingEngine
    server: Any
    thread: threading.Thread
    url: str
    health_url: str | None = None  # the probes-only listener, when ServeConfig.health_port is set

    def stop(self, timeout: float = 30.0) -> None:
        self.server.should_exit = True
        self.thread.join(timeout)

    def __enter__(self) -> BackgroundServer:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.stop()


def start_background(engine: ServingEngine, *, ready_timeout: float = 120.0) -> BackgroundServer:
    """Start ``engine`` on 127.0.0.1 (or its configured host) in a thread; waits until it listens and
    has loaded (or ``ready_timeout`` passes)."""
    socks, shown, port, health = _listeners(engine.config)
    server = _uvicorn_server(engine, install_signals=False, health_port=health)
    t = threading.Thread(target=server.run, kwargs={"sockets": socks}, name="chipswap-serve", daemon=True)
    t.start()
    deadline = time.monotonic() + ready_timeout
    while not server.started and t.is_alive() and time.monotonic() < deadline:
        time.sleep(0.01)
    engine.loaded.wait(max(deadline - time.monotonic(), 0.0))
    health_url = f"http://{shown}:{health}" if health is not None else None
    return BackgroundServer(engine, server, t, f"http://{shown}:{port}", health_url)
