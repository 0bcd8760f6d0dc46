"""The connection gate in front of `chipswap serve`'s HTTP parser (issue 32): what a client may hold open.

uvicorn times out only idle keep-alive connections: a socket that never finishes its request head is held
forever, and a flood of them exhausts the process's file descriptors (then nothing, not even /healthz, is
accepted). The gate is an asyncio Protocol wrapped around uvicorn's h11 protocol, one per connection:

* caps: at most ``max_connections`` admitted connections, at most ``max_per_client`` from one client address;
* read timeouts: a request head must be complete within ``header_timeout_s`` of the connection (or of its
  first byte after a keep-alive pause), a body within ``body_timeout_s`` of its head; an idle keep-alive
  connection is closed after ``keep_alive_s`` (uvicorn's own timer). Deadlines are totals, not idle timers,
  so trickling one byte at a time does not extend them;
* the probe lane: a connection over a cap is never handed to the parser. Its request line alone decides:
  ``GET``/``HEAD`` of ``/healthz`` or ``/readyz`` is served (that one request, then closed); anything else
  gets 503 + ``Connection: close`` at once. The lane holds at most ``max_connections`` undecided connections,
  each for at most ``LANE_TIMEOUT_S``; a newcomer beyond that is reset;
* the health port (``--health-port``) is not behind this gate: it has its own listener, thread and limits
  (chipswap.serve.health).

One sweep every ``SWEEP_S`` closes what is past its deadline (no timer per connection).

May not: parse HTTP beyond a request line, call the app or the model, or block the event loop.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import h11

from chipswap.errors import ChipswapError

SWEEP_S = 0.25  # deadline resolution
LINGER_S = 1.0  # draining: how long a half-closed idle connection reads and drops before it is closed
LANE_TIMEOUT_S = 2.0  # an over-cap connection must show a probe's request head within this
LANE_LINE_MAX = 256  # bytes of request line the lane waits for before it decides
PROBE_METHODS = (b"GET", b"HEAD")
PROBE_PATHS = (b"/healthz", b"/readyz")
FD_SPARE = 256  # descriptors besides connections: listeners, the health port, model files, threads, logs
MIN_FITTED = 64  # the default cap is lowered to fit ulimit -n, but not below this

_REQUEST_TIMEOUT = (
    b"HTTP/1.1 408 Request Timeout\r\ncontent-type: application/json\r\nconnection: close\r\n"
    b"content-length: %d\r\n\r\n%s"
)
_OVER_CAP = (
    b"HTTP/1.1 503 Service Unavailable\r\ncontent-type: application/json\r\nretry-after: 1\r\n"
    b"connection: close\r\ncontent-length: %d\r\n\r\n%s"
)


@dataclass(frozen=True)
class ConnectionLimits:
    """What one client and all clients may hold open, and how long a request may take to arrive."""

    max_connections: int = 2048  # admitted connections in all (--max-connections)
    max_per_client: int = 1024  # from one client address (--max-connections-per-client)
    header_timeout_s: float = 10.0  # connect (or first byte after keep-alive) -> end of request head
    body_timeout_s: float = 30.0  # end of head -> end of body (1 MiB at >= 35 KB/s)
    keep_alive_s: float = 5.0  # idle between requests on one connection

    def __post_init__(self) -> None:
        for flag, value, lo, hi, default in (
            ("--max-connections", self.max_connections, 1, 1_000_000, "2048"),
            ("--max-connections-per-client", self.max_per_client, 1, self.max_connections, "1024"),
            ("--header-timeout", self.header_timeout_s, 0.1, 3600, "10 s"),
            ("--body-timeout", self.body_timeout_s, 0.1, 3600, "30 s"),
            ("--keep-alive-timeout", self.keep_alive_s, 0.1, 3600, "5 s"),
        ):
            if isinstance(value, bool) or not lo <= value <= hi:
                top = " (--max-connections)" if flag == "--max-connections-per-client" else ""
                raise ChipswapError(
                    f"{flag} must be {lo:,}..{hi:,}{top}, got {value}; the default is {default}"
                )


def fd_budget(limits: ConnectionLimits) -> int:
    """File descriptors the gate may use at its caps: admitted connections, the lane, and spares."""
    return 2 * limits.max_connections + FD_SPARE


def fit_fd_limit(limits: ConnectionLimits) -> ConnectionLimits:
    """The caps this process can hold: raises the soft descriptor limit to what they need; where the hard
    limit is lower, the default --max-connections is lowered to fit and an explicit one is refused (else
    accept fails before the cap is ever reached)."""
    import dataclasses
    import resource

    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    need = fd_budget(limits)
    if soft == resource.RLIM_INFINITY or need <= soft:
        return limits
    if hard == resource.RLIM_INFINITY or need <= hard:
        resource.setrlimit(resource.RLIMIT_NOFILE, (need, hard))
        return limits
    fits = (hard - FD_SPARE) // 2
    if limits.max_connections == ConnectionLimits.max_connections and fits >= MIN_FITTED:
        resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
        per_client = min(limits.max_per_client, fits)
        return dataclasses.replace(limits, max_connections=fits, max_per_client=per_client)
    raise ChipswapError(
        f"--max-connections {limits.max_connections:,} needs {need:,} file descriptors (the connections,"
        f" as many in the probe lane, {FD_SPARE} spare) but ulimit -n allows {hard:,};"
        f" use --max-connections {max(fits, 1):,} or less, or raise ulimit -n"
    )


def _unread(transport: Any) -> int:
    """Bytes waiting in the connection's receive buffer (FIONREAD), 0 when unknown."""
    import fcntl
    import struct
    import termios

    sock = transport.get_extra_info("socket")
    try:
        return int(struct.unpack("i", fcntl.ioctl(sock.fileno(), termios.FIONREAD, b"\0\0\0\0"))[0])
    except (AttributeError, OSError, ValueError):
        return 0


_H11: list[Any] = []


def _drain_aware_h11() -> Any:
    """uvicorn's h11 protocol whose shutdown() asks the gate first (GatedConnection.drain)."""
    if not _H11:
        from uvicorn.protocols.http.h11_impl import H11Protocol

        class DrainAwareH11(H11Protocol):  # type: ignore[misc]
            gated: Any = None

            def shutdown(self) -> None:
                if self.gated is None or not self.gated.drain():
                    super().shutdown()

        _H11.append(DrainAwareH11)
    return _H11[0]


def release(per_client: dict[str, int], client: str) -> None:
    """One connection of `client` closed: its count down by one, the entry gone at zero."""
    left = per_client.get(client, 1) - 1
    if left > 0:
        per_client[client] = left
    else:
        per_client.pop(client, None)


def _json_body(code: str, message: str) -> bytes:
    return json.dumps({"error": {"code": code, "message": message}}).encode()


class Gate:
    """The shared state of one listener's connections: counts per client, the lane, the sweep."""

    def __init__(
        self,
        limits: ConnectionLimits,
        on_event: Callable[[str], None] | None = None,
    ) -> None:
        self.limits = limits
        self.on_event = on_event or (lambda _reason: None)  # serve.metrics.DROP_REASONS, or "lane_probe"
        self.admitted: set[GatedConnection] = set()
        self.lane: set[GatedConnection] = set()  # over a cap, request line not seen yet
        self.probes: set[GatedConnection] = set()  # over a cap, serving one /healthz or /readyz
        self.per_client: dict[str, int] = {}
        self.accepted = 0  # connections this listener accepted, in all (the drain test's count)
        self.closed = False
        self._sweeper: asyncio.TimerHandle | None = None

    # uvicorn calls this once per connection (it is passed as uvicorn.Config(http=...))
    def factory(
        self, *, config: Any, server_state: Any, app_state: Any, _loop: Any = None
    ) -> GatedConnection:
        protocol = _drain_aware_h11()
        conn: GatedConnection

        def inner() -> asyncio.Protocol:
            made = protocol(config=config, server_state=server_state, app_state=app_state, _loop=_loop)
            made.gated = conn
            return made

        conn = GatedConnection(self, inner)
        return conn

    def over_cap(self, client: str) -> str | None:
        if self.per_client.get(client, 0) >= self.limits.max_per_client:
            return (
                f"this client holds {self.limits.max_per_client:,} connections, the limit per client;"
                " reuse or close one, or retry after 1 s"
            )
        if len(self.admitted) >= self.limits.max_connections:
            return f"the server holds {self.limits.max_connections:,} connections, its limit; retry after 1 s"
        return None

    def admit(self, c: GatedConnection) -> None:
        self.admitted.add(c)
        self.per_client[c.client] = self.per_client.get(c.client, 0) + 1

    def forget(self, c: GatedConnection) -> None:
        if c in self.admitted:
            self.admitted.discard(c)
            release(self.per_client, c.client)
        else:
            self.lane.discard(c)
            self.probes.discard(c)

    def start_sweeping(self) -> None:
        if self._sweeper is None and not self.closed:
            self._sweeper = asyncio.get_running_loop().call_later(SWEEP_S, self._sweep)

    def _sweep(self) -> None:
        now = time.monotonic()
        for c in [c for c in self.lane if now - c.opened > LANE_TIMEOUT_S]:
            c.expire("header_timeout")
        for group, head_s in ((self.admitted, self.limits.header_timeout_s), (self.probes, LANE_TIMEOUT_S)):
            late = [(c, why) for c in group if (why := c.overdue(now, head_s, self.limits.body_timeout_s))]
            for c, why in late:
                c.expire(why)
        self._sweeper = None if self.closed else asyncio.get_running_loop().call_later(SWEEP_S, self._sweep)

    def close(self) -> None:
        """At shutdown: stop sweeping and reset the lane (admitted connections are uvicorn's to close)."""
        self.closed = True
        if self._sweeper is not None:
            self._sweeper.cancel()
            self._sweeper = None
        for c in self.lane:
            c.transport.abort()


class GatedConnection(asyncio.Protocol):
    """One connection: admitted (events go to uvicorn's protocol, deadlines watched) or in the lane."""

    def __init__(self, gate: Gate, make_inner: Callable[[], Any]) -> None:
        self.gate = gate
        self.make_inner = make_inner
        self.inner: Any = None
        self.transport: Any = None
        self.client = ""
        self.opened = 0.0
        self.head_since: float | None = None  # when the current request head began (None: none pending)
        self.body_since: float | None = None
        self.lane_buf = b""
        self.refusal = ""  # why it is over a cap (the 503's message)
        self.draining = False  # uvicorn asked it to shut down: answer what is here, then close
        self.lingering = False  # half-closed while draining: reads are dropped until the close

    # --- asyncio.Protocol --------------------------------------------------------------------------------
    def connection_made(self, transport: Any) -> None:
        gate = self.gate
        gate.accepted += 1
        self.transport = transport
        self.opened = time.monotonic()
        peer = transport.get_extra_info("peername")
        self.client = str(peer[0]) if isinstance(peer, tuple) and peer else "local"
        if gate.closed:
            transport.abort()
            return
        gate.start_sweeping()
        refusal = gate.over_cap(self.client)
        if refusal is None:
            gate.admit(self)
            self.inner = self.make_inner()
            self.inner.connection_made(transport)
        elif len(gate.lane) + len(gate.probes) < gate.limits.max_connections:
            self.refusal = refusal
            gate.lane.add(self)
        else:
            gate.on_event("lane_full")
            transport.abort()

    def data_received(self, data: bytes) -> None:
        inner = self.inner
        if self.lingering:
            return  # half-closed while draining: read and drop, so the close is never a reset
        if inner is None:
            if self in self.gate.lane:
                self._lane_data(data)
            return
        if self.head_since is None and inner.conn.their_state is h11.IDLE:
            # a new request head: the first one's deadline runs from the connection, later ones from the byte
            self.head_since = self.opened if inner.cycle is None else time.monotonic()
        inner.data_received(data)
        self._observe()

    def eof_received(self) -> bool | None:
        if self.lingering:
            self.transport.close()
            return None
        return self.inner.eof_received() if self.inner is not None else None

    def connection_lost(self, exc: Exception | None) -> None:
        self.gate.forget(self)
        if self.inner is not None:
            self.inner.connection_lost(exc)

    def pause_writing(self) -> None:
        if self.inner is not None:
            self.inner.pause_writing()

    def resume_writing(self) -> None:
        if self.inner is not None:
            self.inner.resume_writing()

    # --- deadlines ---------------------------------------------------------------------------------------
    def _observe(self) -> None:
        """After the parser ran: which read, if any, is pending now."""
        inner = self.inner
        state = inner.conn.their_state
        if state is h11.IDLE:
            return
        if state is h11.SEND_BODY:
            self.head_since = None
            if self.body_since is None:
                self.body_since = time.monotonic()
            return
        self.head_since = self.body_since = None  # the request is read; the app's own timeout applies
        if (self in self.gate.probes or self.draining) and inner.cycle is not None:
            inner.cycle.keep_alive = False  # one probe per lane connection; one answer once draining

    # --- drain -------------------------------------------------------------------------------------------
    def drain(self) -> bool:
        """uvicorn's shutdown of this connection (after SIGTERM and the grace): True when handled here.
        uvicorn closes an idle keep-alive connection at once, and a close with a request already in the
        socket resets it, the request unanswered. Instead: a request already here is read and answered
        (503 draining, then close); an idle one is half-closed (FIN, what arrives later is read and dropped,
        so never a reset) and closed after LINGER_S or the client's own close."""
        inner = self.inner
        self.draining = True
        if inner is None or not (inner.cycle is None or inner.cycle.response_complete):
            return False  # mid-request: uvicorn lets it finish and closes after the answer
        if self.lingering or self.transport.is_closing():
            return True
        if _unread(self.transport) > 0:
            return True  # data_received runs next: the request is answered, keep-alive off
        self.lingering = True
        try:
            self.transport.write_eof()
        except (OSError, RuntimeError):
            self.transport.abort()
            return True
        asyncio.get_running_loop().call_later(LINGER_S, self.transport.close)
        return True

    def overdue(self, now: float, head_s: float, body_s: float) -> str | None:
        inner = self.inner
        if inner is None or self.transport.is_closing():
            return None
        state = inner.conn.their_state
        if state is h11.IDLE:
            since = self.head_since
            if since is None and inner.cycle is None:
                since = self.opened  # connected and silent
            return "header_timeout" if since is not None and now - since > head_s else None
        if state is h11.SEND_BODY:
            if self.body_since is None:
                self.body_since = now
            return "body_timeout" if now - self.body_since > body_s else None
        return None

    def expire(self, why: str) -> None:
        """Close a connection past its deadline: 408 when part of a request came and no answer started."""
        if self.transport.is_closing():  # already on its way out (a later sweep, before connection_lost)
            return
        self.gate.on_event(why)
        inner = self.inner
        started = self.head_since is not None or self.body_since is not None or bool(self.lane_buf)
        answering = inner is not None and inner.conn.our_state not in (h11.IDLE, h11.SEND_RESPONSE)
        if started and not answering:
            what = "request head" if why == "header_timeout" else "request body"
            lim = self.gate.limits
            limit = lim.header_timeout_s if why == "header_timeout" else lim.body_timeout_s
            if inner is None or self in self.gate.probes:
                limit = LANE_TIMEOUT_S
            body = _json_body("request_timeout", f"the {what} did not arrive within {limit:g} s")
            self.transport.write(_REQUEST_TIMEOUT % (len(body), body))
            self.transport.close()
        else:
            self.transport.abort()

    # --- the probe lane ----------------------------------------------------------------------------------
    def _lane_data(self, data: bytes) -> None:
        buf = self.lane_buf + data
        end = buf.find(b"\n")
        if end < 0 and len(buf) < LANE_LINE_MAX:
            self.lane_buf = buf
            return
        parts = (buf[:end] if end >= 0 else buf).split()
        gate = self.gate
        gate.lane.discard(self)
        probe = len(parts) >= 2 and parts[0] in PROBE_METHODS and parts[1].split(b"?", 1)[0] in PROBE_PATHS
        if not probe:
            gate.on_event("over_cap")
            body = _json_body("over_capacity", self.refusal)
            self.transport.write(_OVER_CAP % (len(body), body))
            self.transport.close()
            return
        gate.on_event("lane_probe")
        gate.probes.add(self)
        # one probe per lane connection: mark the request close, so the parser answers with
        # `connection: close` and a client never sends a second request on a socket about to close
        if end >= 0:
            buf = buf[: end + 1] + b"Connection: close\r\n" + buf[end + 1 :]
        self.lane_buf = b""
        self.inner = self.make_inner()
        self.inner.connection_made(self.transport)
        self.head_since = self.opened
        self.inner.data_received(buf)
        self._observe()
