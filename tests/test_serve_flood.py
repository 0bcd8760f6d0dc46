"""A bounded connection flood against `chipswap serve` (issue 32: 20,400 half-open sockets left /healthz
answering 1 probe in 137): a few hundred half-open sockets from two loopback addresses, probes while they are
held, the gate's read deadlines (header, trickled header, body, keep-alive) and caps. Loopback only; every
socket is closed by the test; the full-size run is bench/bench_flood.py."""

from __future__ import annotations

import contextlib
import selectors
import socket
import time
from collections.abc import Iterator
from dataclasses import replace

import httpx
import pytest

from chipswap.errors import ChipswapError
from chipswap.serve.gate import ConnectionLimits, fd_budget, fit_fd_limit
from chipswap.serve.server import ServeConfig, ServingEngine, start_background
from tests.test_serve_batcher import RecordingModel

HALF_OPEN = b"GET /v1/models HTTP/1.1\r\nHost: flood\r\nX-Never: finished"  # no blank line: never ends


def _server(limits: ConnectionLimits):
    cfg = ServeConfig(port=0, connections=limits, drain_timeout_s=5.0)
    return start_background(ServingEngine("rec", lambda: RecordingModel(), cfg))


def _addr(url: str) -> tuple[str, int]:
    host, port = url.removeprefix("http://").rsplit(":", 1)
    return host, int(port)


@contextlib.contextmanager
def _sockets() -> Iterator[list[socket.socket]]:
    held: list[socket.socket] = []
    try:
        yield held
    finally:
        for s in held:
            s.close()


def _open(url: str, source: str, payload: bytes = HALF_OPEN) -> socket.socket:
    s = socket.socket()
    try:
        s.bind((source, 0))
    except OSError:
        s.close()
        pytest.skip(f"cannot bind the loopback address {source}")
    s.settimeout(10)
    s.connect(_addr(url))
    if payload:
        s.sendall(payload)
    return s


def _until_closed(socks: list[socket.socket], started: dict[int, float], limit_s: float) -> dict[int, tuple]:
    """fileno -> (seconds from its connect to the server's close, first bytes the server sent)."""
    sel = selectors.DefaultSelector()
    for s in socks:
        s.setblocking(False)
        sel.register(s, selectors.EVENT_READ)
    got: dict[int, list] = {s.fileno(): [None, b""] for s in socks}
    deadline = time.monotonic() + limit_s
    while len([1 for v in got.values() if v[0] is None]) and time.monotonic() < deadline:
        for key, _ in sel.select(0.2):
            s = key.fileobj
            try:
                data = s.recv(4096)
            except ConnectionResetError:
                data = b""
            fd = s.fileno()
            if data:
                got[fd][1] += data
            else:
                got[fd][0] = time.monotonic() - started[fd]
                sel.unregister(s)
    sel.close()
    return {fd: tuple(v) for fd, v in got.items()}


def _status(raw: bytes) -> int | None:
    return int(raw.split(b" ", 2)[1]) if raw.startswith(b"HTTP/1.1 ") else None


def test_half_open_flood_probes_answer_and_sockets_close_after_the_header_timeout():
    limits = ConnectionLimits(max_connections=120, max_per_client=80, header_timeout_s=1.5)
    with _server(limits) as srv, _sockets() as held:
        started: dict[int, float] = {}
        for source in ("127.0.0.1", "127.0.0.2"):
            for _ in range(150):
                t0 = time.monotonic()
                s = _open(srv.url, source)
                held.append(s)
                started[s.fileno()] = t0
        opened = time.monotonic()
        # the over-cap sockets are decided from their first line; on a loaded machine the server may still be
        # reading them, and an undecided lane at its cap aborts a new connection (by design): let it catch up
        dropped = srv.engine.metrics.value
        deadline = time.monotonic() + 20
        while dropped("chipswap_connections_dropped_total", reason="over_cap") < 300 - limits.max_connections:
            assert time.monotonic() < deadline, "the over-cap sockets were not refused within 20 s"
            time.sleep(0.02)
        # while the flood is held: probes from the flooding address itself are answered
        with httpx.Client(timeout=5.0) as client:
            probes = [client.get(f"{srv.url}/healthz", headers={"Connection": "close"}) for _ in range(10)]
            ready = client.get(f"{srv.url}/readyz")
            other = client.get(f"{srv.url}/v1/models")
        held_now = srv.engine.metrics.value("chipswap_connections_open")
        assert [r.status_code for r in probes] == [200] * 10 and ready.status_code == 200
        assert ready.headers["connection"] == "close"  # a lane probe is one request: said, so no reuse races
        assert other.status_code == 503 and other.json()["error"]["code"] == "over_capacity"
        assert "80 connections, the limit per client" in other.json()["error"]["message"]
        if time.monotonic() - opened < limits.header_timeout_s:  # (a very slow machine: already expiring)
            assert held_now == limits.max_connections
        ends = _until_closed(held, started, limits.header_timeout_s + 30)
        statuses = [_status(raw) for _, raw in ends.values()]
        assert all(t is not None for t, _ in ends.values())  # the server closed every one of them
        assert statuses.count(408) == limits.max_connections  # admitted: 80 from .1, 40 from .2
        assert statuses.count(503) == 300 - limits.max_connections  # over a cap: refused at once
        timed_out = [t for t, raw in ends.values() if _status(raw) == 408]
        refused = [t for t, raw in ends.values() if _status(raw) == 503]
        assert min(timed_out) >= limits.header_timeout_s  # not before the deadline...
        assert max(refused) < min(timed_out)  # ...and the refusals did not wait for it
        assert srv.engine.metrics.value("chipswap_connections_open") == 0
        assert srv.engine.metrics.value(
            "chipswap_connections_dropped_total", reason="header_timeout"
        ) == statuses.count(408)
        assert srv.engine.metrics.value("chipswap_probe_lane_total") >= 11  # the probes came via the lane
        assert httpx.get(f"{srv.url}/v1/models", timeout=10).status_code == 200  # serving as before


def test_a_trickled_head_gets_no_more_time_than_a_silent_one():
    """The header deadline is a total: one byte every 0.2 s (slowloris) does not extend it."""
    limits = ConnectionLimits(header_timeout_s=1.0)
    with _server(limits) as srv, _sockets() as held:
        t0 = time.monotonic()
        s = _open(srv.url, "127.0.0.1", b"GET /healthz HTTP/1.1\r\n")
        held.append(s)
        closed_after = None
        for i in range(100):  # at most 20 s
            time.sleep(0.2)
            try:
                s.sendall(b"X-a: b\r\n"[i % 8 : i % 8 + 1])
            except OSError:
                closed_after = time.monotonic() - t0
                break
            s.setblocking(False)
            try:
                if s.recv(4096) is not None:
                    closed_after = time.monotonic() - t0
                    break
            except BlockingIOError:
                pass
            finally:
                s.setblocking(True)
        assert closed_after is not None and closed_after >= limits.header_timeout_s
        assert srv.engine.metrics.value("chipswap_connections_dropped_total", reason="header_timeout") == 1


def test_a_body_that_stops_arriving_gets_408_after_the_body_timeout():
    limits = ConnectionLimits(header_timeout_s=5.0, body_timeout_s=1.0)
    with _server(limits) as srv, _sockets() as held:
        head = b"POST /v1/predict HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
        head += b"Content-Length: 100\r\n\r\n"
        t0 = time.monotonic()
        s = _open(srv.url, "127.0.0.1", head + b'{"input_id')
        held.append(s)
        ((took, raw),) = _until_closed([s], {s.fileno(): t0}, 30).values()
        assert _status(raw) == 408 and b"request body did not arrive within 1 s" in raw
        assert took is not None and limits.body_timeout_s <= took < limits.header_timeout_s + 25
        assert srv.engine.metrics.value("chipswap_connections_dropped_total", reason="body_timeout") == 1


def test_an_idle_keep_alive_connection_is_closed_after_the_keep_alive_timeout():
    limits = ConnectionLimits(keep_alive_s=0.5, header_timeout_s=30.0)
    with _server(limits) as srv, _sockets() as held:
        s = _open(srv.url, "127.0.0.1", b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")
        held.append(s)
        t0 = time.monotonic()
        ((took, raw),) = _until_closed([s], {s.fileno(): t0}, 30).values()
        # the server's keep-alive clock starts when it has written the answer, a little before the client's t0
        # can be taken on a busy machine: a 10 % allowance below, a generous one above
        assert _status(raw) == 200 and took is not None and 0.9 * limits.keep_alive_s <= took < 20


def test_limits_out_of_range_are_one_line_errors():
    for kw, flag in (
        ({"max_connections": 0}, "--max-connections must be"),
        ({"max_connections": 10, "max_per_client": 11}, "--max-connections-per-client must be 1..10"),
        ({"header_timeout_s": float("nan")}, "--header-timeout must be"),
        ({"body_timeout_s": 0.0}, "--body-timeout must be"),
        ({"keep_alive_s": 1e9}, "--keep-alive-timeout must be"),
    ):
        with pytest.raises(ChipswapError) as ei:
            ConnectionLimits(**kw)
        assert str(ei.value).startswith(flag) and "\n" not in str(ei.value)


def test_caps_the_descriptor_limit_cannot_hold_are_refused_and_the_default_is_fitted(monkeypatch):
    import resource

    hard = 1024  # as in many containers: the default caps (4,352 descriptors) do not fit
    calls: list[tuple[int, int]] = []
    monkeypatch.setattr(resource, "getrlimit", lambda _what: (hard, hard))
    monkeypatch.setattr(resource, "setrlimit", lambda _what, lim: calls.append(lim))
    with pytest.raises(ChipswapError, match=r"needs 2,256 file descriptors .* ulimit -n allows 1,024"):
        fit_fd_limit(ConnectionLimits(max_connections=1000, max_per_client=10))  # explicit: refused
    fitted = fit_fd_limit(ConnectionLimits())  # the default: lowered to what fits
    assert fd_budget(fitted) <= hard < fd_budget(replace(fitted, max_connections=fitted.max_connections + 1))
    assert fitted.max_per_client == fitted.max_connections and calls == [(hard, hard)]
    monkeypatch.setattr(resource, "getrlimit", lambda _what: (256, 100_000))
    assert fit_fd_limit(ConnectionLimits()) == ConnectionLimits()  # the soft limit is raised instead
    assert calls[-1] == (fd_budget(ConnectionLimits()), 100_000)


def test_the_health_port_answers_probes_while_the_main_port_and_its_lane_are_full():
    limits = ConnectionLimits(max_connections=20, max_per_client=20, header_timeout_s=10.0)
    cfg = ServeConfig(port=0, connections=limits, health_port=0, drain_timeout_s=5.0)
    with start_background(ServingEngine("rec", lambda: RecordingModel(), cfg)) as srv, _sockets() as held:
        assert srv.health_url is not None and srv.health_url != srv.url
        for _ in range(45):  # silent sockets: 20 admitted, 20 undecided in the lane, 5 reset
            held.append(_open(srv.url, "127.0.0.1", b""))
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline:
            if srv.engine.metrics.value("chipswap_connections_dropped_total", reason="lane_full") >= 5:
                break
            time.sleep(0.05)
        assert srv.engine.metrics.value("chipswap_connections_dropped_total", reason="lane_full") == 5
        with httpx.Client(timeout=5.0) as client:
            assert client.get(f"{srv.health_url}/healthz").status_code == 200
            assert client.get(f"{srv.health_url}/readyz").json() == {"status": "ready", "model": "rec"}
            other = client.get(f"{srv.health_url}/v1/models")
        assert other.status_code == 404 and "serves only GET /healthz and GET /readyz" in other.text


def test_a_health_port_equal_to_the_serving_port_is_refused():
    with pytest.raises(ChipswapError, match="--health-port 8000 is the serving --port"):
        ServeConfig(port=8000, health_port=8000)
