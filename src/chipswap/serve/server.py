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

from chipswap.errors import ChipswapError
from chipswap.serve.batcher import BatcherConfig, DynamicBatcher
from chipswap.serve.gate import ConnectionLimits, Gate, fit_fd_limit
from chipswap.serve.health import HealthPort
from chipswap.serve.metrics import ServeMetrics
from chipswap.serve.predict import (  # parse_predict and the constants: re-exported, their old home
    DEFAULT_MAX_TEXT_CHARS,
    PREDICT_FIELDS,
    ClientError,
    answer_predict,
    auth_error,
    not_ready,
    parse_predict,
    send_error,
)

__all__ = ["DEFAULT_MAX_TEXT_CHARS", "PREDICT_FIELDS", "ClientError", "parse_predict"]  # re-exported
from chipswap.serve.served import ServedModel
from chipswap.serve.shedding import (
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
DRAIN_GRACE_S = 1.0  # after SIGTERM: answer what is already on open connections before closing them


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
    health_host: str = DEFAULT_HOST  # where that listener binds (a pod's kubelet probes the pod IP: 0.0.0.0)

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
    err = auth_error(engine.config.token, request.headers.get("authorization"))
    if err is not None:
        raise err


class ShedLoad:
    """ASGI wrapper in front of the framework: /healthz and /metrics answered at once; while the batcher would
    refuse any new request, /v1/predict answered 429 before its body is parsed (under overload most requests
    are refused, so refusing must be the cheapest thing the server does); otherwise POST /v1/predict answered
    by chipswap.serve.predict without the framework's routing (issue 33). The token check comes first when a
    token is set."""

    def __init__(self, app: Any, engine: ServingEngine) -> None:
        self.app = app
        self.engine = engine

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        engine = self.engine
        denied = self._denied(scope)
        if await fast_answer(scope, send, engine, denied is None):  # /healthz, /metrics: off the request path
            return None
        if scope["path"] != "/v1/predict":
            return await self.app(scope, receive, send)
        if scope["method"] != "POST":
            msg = f"{scope['method']} /v1/predict: Method Not Allowed"
            return await send_error(send, ClientError(405, "method_not_allowed", msg, {"Allow": "POST"}))
        if denied is not None:
            engine.metrics.answered(denied.status, None, None, None)
            return await send_error(send, denied)
        batcher = engine.batcher
        if batcher is not None and engine.state == "draining":
            return await draining_answer(receive, send, engine)
        retry, reason = (batcher.overloaded() if batcher is not None else None), "queue_full"
        if retry is None and engine.lag.busy and engine.inflight > 0:  # a lag, nothing waiting: no overload
            retry, reason = 1, "loop_busy"
        if retry is None:
            return await answer_predict(engine, scope, receive, send)
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

    def _denied(self, scope: Any) -> ClientError | None:
        token = self.engine.config.token
        if token is None:
            return None
        header = next((v for k, v in scope.get("headers", ()) if k == b"authorization"), None)
        return auth_error(token, header.decode("latin-1") if header is not None else None)


def create_app(engine: ServingEngine) -> ShedLoad:
    @contextlib.asynccontextmanager
    async def lifespan(_app: Any) -> Any:
        engine.start_loading()
        engine.lag.start(engine.metrics.loop_lag.set)
        yield
        engine.lag.stop()
        await asyncio.to_thread(engine.close)

    app = FastAPI(title="chipswap serve", lifespan=lifespan, docs_url=None, redoc_url=None, openapi_url=None)

    @app.exception_handler(ClientError)
    async def _client_error(_request: Request, exc: ClientError) -> Any:
        return _error(exc.status, exc.code, exc.message, exc.headers)

    @app.exception_handler(StarletteHTTPException)
    async def _http_error(_request: Request, exc: StarletteHTTPException) -> Any:
        code = {404: "not_found", 405: "method_not_allowed"}.get(exc.status_code, "http_error")
        msg = f"{_request.method} {_request.url.path}: {exc.detail}"
        return _error(exc.status_code, code, msg, getattr(exc, "headers", None))

    @app.exception_handler(Exception)
    async def _internal(_request: Request, exc: Exception) -> Any:  # pragma: no cover - a server bug
        log.exception("internal error")
        return _error(500, "internal", f"internal server error ({type(exc).__name__})")

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
            raise not_ready(engine)
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

    return ShedLoad(app, engine)


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


def _shown(sock: socket.socket) -> tuple[str, int]:
    host, port = sock.getsockname()[:2]
    return (f"[{host}]" if ":" in str(host) else str(host)), int(port)


def _listeners(engine: ServingEngine) -> tuple[list[socket.socket], str, int, HealthPort | None]:
    """The serving socket, the shown host, the serving port, and the health port's own listener (not yet
    started) when --health-port is given (chipswap.serve.health)."""
    cfg = engine.config
    sock = bind_socket(cfg.host, cfg.port)
    health = None
    if cfg.health_port is not None:
        hsock = bind_socket(cfg.health_host, cfg.health_port)
        health = HealthPort(hsock, lambda: engine.state, engine.name)
    shown, port = _shown(sock)
    return [sock], shown, port, health


def _uvicorn_server(engine: ServingEngine, *, install_signals: bool) -> Any:
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
    gate = Gate(limits, engine.metrics.connection_event) if limits is not None else None
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
    socks, shown, port, health = _listeners(engine)
    say(
        f"chipswap serve: listening on http://{shown}:{port}"
        f" (model {engine.name}; /readyz turns 200 when warm)"
    )
    if health is not None:
        hshown, hport = _shown(health.sock)
        say(f"chipswap serve: /healthz and /readyz also on http://{hshown}:{hport} (probes only)")
    if cfg.host not in ("127.0.0.1", "localhost", "::1") and cfg.token is None:
        say(
            f"chipswap serve: warning: listening on {cfg.host} without a bearer token;"
            " anyone who can reach it can use it"
        )
    server = _uvicorn_server(engine, install_signals=True)
    if health is not None:
        health.start()
    try:
        server.run(sockets=socks)
    finally:
        if health is not None:
            health.stop()
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
    health: HealthPort | None = None

    def stop(self, timeout: float = 30.0) -> None:
        self.server.should_exit = True
        self.thread.join(timeout)
        if self.health is not None:
            self.health.stop()

    def __enter__(self) -> BackgroundServer:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.stop()


def start_background(engine: ServingEngine, *, ready_timeout: float = 120.0) -> BackgroundServer:
    """Start ``engine`` on 127.0.0.1 (or its configured host) in a thread; waits until it listens and
    has loaded (or ``ready_timeout`` passes)."""
    socks, shown, port, health = _listeners(engine)
    server = _uvicorn_server(engine, install_signals=False)
    if health is not None:
        health.start()
    t = threading.Thread(target=server.run, kwargs={"sockets": socks}, name="chipswap-serve", daemon=True)
    t.start()
    deadline = time.monotonic() + ready_timeout
    while not server.started and t.is_alive() and time.monotonic() < deadline:
        time.sleep(0.01)
    engine.loaded.wait(max(deadline - time.monotonic(), 0.0))
    health_url = "http://{}:{}".format(*_shown(health.sock)) if health is not None else None
    return BackgroundServer(engine, server, t, f"http://{shown}:{port}", health_url, health)
