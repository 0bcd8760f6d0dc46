"""Keeping `chipswap serve` answerable under overload (issue 19): the pieces the HTTP front uses before any
request reaches a route.

* ``LoopLag``: an asyncio task that measures how late the event loop wakes up. When the loop itself is the
  bottleneck (thousands of connections a second, each parsed in Python), requests wait in the loop before the
  batcher ever sees them, so the batcher's own queue estimate cannot shed them; a lagging loop sheds
  /v1/predict with 429 at once instead.
* ``fast_answer``: /healthz (and /metrics) answered from the ASGI entry, before routing and before any
  request body is touched, so a liveness probe is never queued behind the model or the request path.
* ``draining_answer``: after SIGTERM, a request already on an open connection gets 503 + ``Connection: close``
  (a clean end of that connection) instead of a reset.

May not: run the model, parse request bodies, or block the event loop.
"""

from __future__ import annotations

import asyncio
import json
import time
from typing import Any

LAG_PERIOD_S = 0.02  # how often the loop is asked to wake up
LAG_SHED_S = (
    0.2  # smoothed lateness above which /v1/predict is shed (a probe then still answers well under 1 s)
)
# what a request gets while draining, from the middleware here and from the routes alike
DRAINING_MESSAGE = "server is shutting down; retry on another replica"


class LoopLag:
    """Smoothed event-loop lateness in seconds (rises at once, decays over ~10 periods)."""

    def __init__(self) -> None:
        self.lag = 0.0
        self.peak = 0.0
        self._task: asyncio.Task[None] | None = None

    def start(self, on_sample: Any = None) -> None:
        self._task = asyncio.get_running_loop().create_task(self._run(on_sample))

    def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()

    async def _run(self, on_sample: Any) -> None:
        while True:
            t0 = time.monotonic()
            await asyncio.sleep(LAG_PERIOD_S)
            late = max(time.monotonic() - t0 - LAG_PERIOD_S, 0.0)
            self.lag = late if late > self.lag else 0.9 * self.lag + 0.1 * late
            self.peak = max(self.peak, late)
            if on_sample is not None:
                on_sample(self.lag)

    @property
    def busy(self) -> bool:
        return self.lag > LAG_SHED_S


async def send_json(
    send: Any, status: int, payload: dict[str, Any], extra: list[tuple[bytes, bytes]]
) -> None:
    body = json.dumps(payload).encode()
    headers = [
        (b"content-type", b"application/json"),
        (b"content-length", str(len(body)).encode()),
        *extra,
    ]
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": body})


async def discard_body(receive: Any, limit: int) -> bool:
    """Read (and drop) the request body, bounded; False when the client went away meanwhile."""
    seen = 0
    while True:
        message = await receive()
        if message.get("type") == "http.disconnect":
            return False
        seen += len(message.get("body", b""))
        if not message.get("more_body") or seen > limit:
            return True


async def fast_answer(scope: Any, send: Any, engine: Any, authorized: bool) -> bool:
    """Answer /healthz (always) and /metrics (when authorized) right here; True when answered."""
    path = scope["path"]
    if scope.get("method") != "GET":
        return False
    if path == "/healthz":
        await send_json(send, 200, {"status": "ok"}, [])
        return True
    if path == "/metrics" and authorized:
        data, ctype = engine.metrics.render()
        await send(
            {
                "type": "http.response.start",
                "status": 200,
                "headers": [(b"content-type", ctype.encode()), (b"content-length", str(len(data)).encode())],
            }
        )
        await send({"type": "http.response.body", "body": data})
        return True
    return False


async def draining_answer(receive: Any, send: Any, engine: Any) -> None:
    """503 + Connection: close for a request that arrives (or was already sent) while draining."""
    if not await discard_body(receive, engine.config.max_body_bytes):
        engine.metrics.disconnects.inc()
        return
    engine.metrics.rejected("draining")
    engine.metrics.answered(503, None, None, None)
    await send_json(
        send,
        503,
        {"error": {"code": "draining", "message": DRAINING_MESSAGE}},
        [(b"retry-after", b"1"), (b"connection", b"close")],
    )
