"""The health port of `chipswap serve` (`--health-port`): a listener of its own for Kubernetes probes.

Round 3 served the health port through the serving port's event loop and gate: 300 connections from one
address that reconnect as soon as they are closed held its 64 slots and reset most probes. Here the port has
its own thread, event loop, socket and limits, so nothing on the serving port (a flood, a busy model, a full
accept queue) reaches it:

* immediate answer: ``GET``/``HEAD`` ``/healthz`` (200 while the process runs) and ``/readyz`` (200 when
  ready, else 503 + the state) are answered from the request head alone, without a framework, then the
  connection is closed (``Connection: close``, no keep-alive); anything else is 404/405 at once;
* limits: at most ``PER_CLIENT`` connections open from one client address and ``MAX_OPEN`` in all (over
  either: 503 + close at once, never held); a request head must arrive within ``HEAD_TIMEOUT_S`` and fit in
  ``HEAD_MAX`` bytes, else the connection is closed. A client can hold at most PER_CLIENT slots for at most
  HEAD_TIMEOUT_S, so a flood from one address never starves probes from another (the kubelet's);
* binds 127.0.0.1 unless told (``--health-host``; in a pod the kubelet probes the pod IP: ``0.0.0.0``).

May not: call the model or the app, read a request body, or block its loop. `state` is a callable the
serving engine provides ("ready", "loading", "draining", "failed"); reading it is the only shared state.
"""

from __future__ import annotations

import asyncio
import json
import socket
import threading
import time
from collections.abc import Callable
from typing import Any

from chipswap.serve.gate import release

PER_CLIENT = 8  # open connections from one client address
MAX_OPEN = 512  # open connections in all
HEAD_TIMEOUT_S = 1.0  # connect -> end of request head
HEAD_MAX = 4096  # bytes of request head read before it is refused
SWEEP_S = 0.1
BACKLOG = 1024


def _response(status: str, body: dict[str, Any], head: bool = False, extra: str = "") -> bytes:
    data = json.dumps(body).encode()
    lines = (
        f"HTTP/1.1 {status}\r\ncontent-type: application/json\r\ncontent-length: {len(data)}\r\n"
        f"cache-control: no-store\r\nconnection: close\r\n{extra}\r\n"
    )
    return lines.encode() + (b"" if head else data)


def answer(request_line: bytes, state: str, model: str) -> bytes:
    """The whole response to one request line (pure: tests call it directly)."""
    parts = request_line.split()
    method = parts[0] if parts else b""
    path = parts[1].split(b"?", 1)[0] if len(parts) >= 2 else b""
    head = method == b"HEAD"
    if path not in (b"/healthz", b"/readyz"):
        msg = "this port serves only GET /healthz and GET /readyz (probes); the API is on the serving port"
        return _response("404 Not Found", {"error": {"code": "not_found", "message": msg}}, head)
    if method not in (b"GET", b"HEAD"):
        msg = f"{path.decode()} answers GET and HEAD only"
        return _response("405 Method Not Allowed", {"error": {"code": "method_not_allowed", "message": msg}},
                         extra="allow: GET, HEAD\r\n")  # fmt: skip
    if path == b"/healthz":
        return _response("200 OK", {"status": "ok"}, head)
    if state == "ready":
        return _response("200 OK", {"status": "ready", "model": model}, head)
    return _response("503 Service Unavailable", {"status": state}, head, "retry-after: 1\r\n")


class _Conn(asyncio.Protocol):
    def __init__(self, port: HealthPort) -> None:
        self.port = port
        self.transport: Any = None
        self.client = ""
        self.buf = b""
        self.opened = 0.0
        self.counted = False
        self.done = False

    def connection_made(self, transport: Any) -> None:
        self.transport = transport
        self.opened = time.monotonic()
        peer = transport.get_extra_info("peername")
        self.client = str(peer[0]) if isinstance(peer, tuple) and peer else "local"
        hp = self.port
        if hp.per_client.get(self.client, 0) >= PER_CLIENT or len(hp.open) >= MAX_OPEN:
            hp.refused += 1
            self._finish(_response("503 Service Unavailable", {"error": {
                "code": "too_many_connections",
                "message": f"at most {PER_CLIENT} open connections per client address on the health port",
            }}, extra="retry-after: 1\r\n"))  # fmt: skip
            return
        self.counted = True
        hp.open.add(self)
        hp.per_client[self.client] = hp.per_client.get(self.client, 0) + 1

    def data_received(self, data: bytes) -> None:
        if self.done:
            return
        self.buf += data
        end = self.buf.find(b"\r\n\r\n")
        if end < 0 and b"\n\n" in self.buf:
            end = self.buf.find(b"\n\n")
        if end < 0:
            if len(self.buf) > HEAD_MAX:
                self._finish(
                    _response(
                        "431 Request Header Fields Too Large",
                        {"error": {"code": "head_too_large", "message": "probe heads are small"}},
                    )
                )
            return  # fmt: skip
        line = self.buf.split(b"\n", 1)[0]
        self.port.answered += 1
        self._finish(answer(line, self.port.state(), self.port.model))

    def eof_received(self) -> bool | None:
        if not self.done:  # the head never ended: nothing to answer
            self._finish(b"")
        return None

    def connection_lost(self, exc: Exception | None) -> None:
        self.done = True
        self._forget()

    def _forget(self) -> None:
        if self.counted:
            self.counted = False
            self.port.open.discard(self)
            release(self.port.per_client, self.client)

    def _finish(self, data: bytes) -> None:
        self.done = True
        if data:
            self.transport.write(data)
        self.transport.close()  # flushes the answer, then FIN: no keep-alive
        self._forget()

    def expire(self) -> None:
        if not self.done:
            self.port.expired += 1
            self._finish(b"")


class HealthPort:
    """The probes-only listener on its own thread: `start()`, then `stop()` when the server has exited."""

    def __init__(self, sock: socket.socket, state: Callable[[], str], model: str) -> None:
        self.sock = sock
        self.state = state
        self.model = model
        self.open: set[_Conn] = set()
        self.per_client: dict[str, int] = {}
        self.answered = self.refused = self.expired = 0
        self.loop: asyncio.AbstractEventLoop | None = None
        self._started = threading.Event()
        self.thread = threading.Thread(target=self._run, name="chipswap-health", daemon=True)

    @property
    def port(self) -> int:
        return int(self.sock.getsockname()[1])

    def start(self) -> HealthPort:
        self.thread.start()
        self._started.wait(10.0)
        return self

    def _run(self) -> None:
        loop = self.loop = asyncio.new_event_loop()
        try:
            server = loop.run_until_complete(
                loop.create_server(lambda: _Conn(self), sock=self.sock, backlog=BACKLOG)
            )
            loop.call_later(SWEEP_S, self._sweep)
            self._started.set()
            loop.run_forever()
            server.close()
            for c in list(self.open):
                c.transport.abort()
            loop.run_until_complete(server.wait_closed())
        finally:
            self._started.set()
            loop.close()

    def _sweep(self) -> None:
        now = time.monotonic()
        for c in [c for c in self.open if now - c.opened > HEAD_TIMEOUT_S]:
            c.expire()
        assert self.loop is not None
        self.loop.call_later(SWEEP_S, self._sweep)

    def stop(self, timeout: float = 5.0) -> None:
        if self.loop is not None and self.thread.is_alive():
            self.loop.call_soon_threadsafe(self.loop.stop)
            self.thread.join(timeout)
