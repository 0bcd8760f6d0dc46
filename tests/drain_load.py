"""A bounded keep-alive load client for the drain test (tests/test_serve_drain.py) and its figure in
docs/serve.md: CONNS connections to one loopback server, RATE requests/s in all, for SECONDS; every request
is recorded as 200, 503 (draining), reset (the request was sent on a keep-alive connection that had
answered before, then the connection reset), closed (sent there, then EOF with no answer), reset_new /
closed_new (the same on a connection's first request: a connection still in the listener's accept queue
when it closed, never accepted, so never read) or refused (no connection to send it on). Prints one JSON
line of counts.

Run as: python tests/drain_load.py HOST PORT CONNS RATE SECONDS
"""

from __future__ import annotations

import asyncio
import json
import sys
import time

BODY = b'{"input_ids": [3, 4, 5]}'
REQUEST = (
    b"POST /v1/predict HTTP/1.1\r\nHost: drain\r\nContent-Type: application/json\r\n"
    b"Content-Length: %d\r\n\r\n%s" % (len(BODY), BODY)
)


async def _read_response(reader: asyncio.StreamReader) -> tuple[int, bool]:
    head = await reader.readuntil(b"\r\n\r\n")
    lines = head.decode("latin-1").split("\r\n")
    status = int(lines[0].split()[1])
    headers = {k.strip().lower(): v.strip().lower() for k, _, v in (x.partition(":") for x in lines[1:] if x)}
    await reader.readexactly(int(headers.get("content-length", "0")))
    return status, headers.get("connection") == "close"


async def _conn(host: str, port: int, every: float, end: float, counts: dict[str, int]) -> None:
    writer = None
    reader = None
    used = 0  # answers on the current connection
    next_at = time.monotonic()
    while time.monotonic() < end:
        next_at += every
        if writer is None:
            try:
                reader, writer = await asyncio.open_connection(host, port)
                used = 0
                counts["connections"] += 1
            except OSError:
                counts["refused"] += 1
                await asyncio.sleep(max(next_at - time.monotonic(), 0))
                continue
        assert reader is not None
        try:
            writer.write(REQUEST)
            await writer.drain()
        except OSError:
            counts["refused"] += 1  # never sent
            writer = None
            continue
        counts["sent"] += 1
        try:
            status, close = await _read_response(reader)
        except ConnectionResetError:
            counts["reset" if used else "reset_new"] += 1
            writer = None
            continue
        except (asyncio.IncompleteReadError, OSError):
            counts["closed" if used else "closed_new"] += 1
            writer = None
            continue
        used += 1
        counts[str(status)] = counts.get(str(status), 0) + 1
        if close:
            writer.close()
            writer = None
        await asyncio.sleep(max(next_at - time.monotonic(), 0))
    if writer is not None:
        writer.close()


async def main(host: str, port: int, conns: int, rate: float, seconds: float) -> dict[str, int]:
    counts = {
        "sent": 0,
        "reset": 0,
        "closed": 0,
        "reset_new": 0,
        "closed_new": 0,
        "refused": 0,
        "connections": 0,
    }
    end = time.monotonic() + seconds
    every = conns / rate
    tasks = []
    for _ in range(conns):
        tasks.append(asyncio.create_task(_conn(host, port, every, end, counts)))
        await asyncio.sleep(every / conns)  # spread the connections over one period
    await asyncio.gather(*tasks)
    return counts


if __name__ == "__main__":
    h, p, c, r, s = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), float(sys.argv[4]), float(sys.argv[5])
    print("ready", flush=True)
    print(json.dumps(asyncio.run(main(h, p, c, r, s))), flush=True)
