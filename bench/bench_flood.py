"""Connection-flood benchmark for `chipswap serve` (issue 32): 20,000 half-open connections from two loopback
addresses while /healthz is probed, against the server with its connection gate and, side by side in the same
run, the same server without it (uvicorn alone, as before issue 32).

1. A server in its own process (`--serve guarded|plain`): ServingEngine over a stand-in model (the tests'
   RecordingModel: the model plays no part in a flood, and no torch import keeps the run short), default
   ServeConfig, i.e. the gate's defaults (2,048 connections, 1,024 per client, 10 s header timeout) plus a
   `--health-port`, or `connections=None` (no gate, no health port).
2. Two flood clients, one process per source address (127.0.0.1 and 127.0.0.2, so each stays under the
   20,000-descriptor limit of this machine): each opens --connections / 2 sockets at up to --rate per second,
   sends a request head that never ends, holds every socket the server keeps, and reopens (at the same rate)
   every socket the server closes: a slowloris that keeps trying to hold its share for the whole run.
3. Once the flood is open, a prober in this process GETs /healthz from 127.0.0.1 (a flooding address) every
   --probe-interval seconds on a fresh connection with a 1 s budget for connect + answer, for --seconds, on
   the serving port (through the probe lane) and then on the health port; the server's RSS and open
   descriptors are sampled. Every flood client stops by itself at its deadline (ramp + --seconds + 2 s).

Writes its section of docs/benchmarks.md (`flood`) unless --no-docs. Targets only 127.0.0.1 / 127.0.0.2.

Run: python bench/bench_flood.py [--connections 20000] [--seconds 20] [--rate 2500] [--no-baseline]
"""

from __future__ import annotations

import argparse
import errno
import json
import os
import re
import selectors
import socket
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import _results  # noqa: F401  (puts src/ and the repository root on sys.path)

HERE = Path(__file__).resolve()
SOURCES = ("127.0.0.1", "127.0.0.2")
TARGET = "127.0.0.1"
HALF_OPEN = b"GET /v1/models HTTP/1.1\r\nHost: flood\r\nUser-Agent: bench_flood\r\nX-Never: finished"
FAILED: dict[str, dict[str, int]] = {}  # port -> why probes failed there, while the flood was held
IP_BIND_ADDRESS_NO_PORT = getattr(socket, "IP_BIND_ADDRESS_NO_PORT", 24)  # Linux: port chosen at connect


# ------------------------------------------------------------------------------------ the server process
def serve(mode: str) -> None:
    from tests.test_serve_batcher import RecordingModel

    from chipswap.serve.server import ServeConfig, ServingEngine, run_server

    guarded = ServeConfig(port=0, health_port=0)  # the gate's defaults, and a probes-only second port
    cfg = guarded if mode == "guarded" else ServeConfig(port=0, connections=None)
    sys.exit(run_server(ServingEngine("rec", lambda: RecordingModel(), cfg)))


# ------------------------------------------------------------------------------------ a flood client
def flood(source: str, port: int, count: int, rate: float, seconds: float, out: str) -> None:
    """Keep `count` half-open sockets from `source` to TARGET:port for `seconds`; (re)open at <= `rate`/s."""
    sel = selectors.DefaultSelector()
    stats = {"opened": 0, "connect_failed": 0, "closed_by_server": 0, "answers": {}, "held": []}
    to_open, budget = count, 0.0
    t0 = last = last_sample = time.monotonic()
    end = t0 + seconds
    held = 0
    while (now := time.monotonic()) < end:
        budget = min(budget + (now - last) * rate, rate / 10)  # smooth: at most 0.1 s worth at once
        last = now
        while to_open and budget >= 1:
            s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            try:
                s.setsockopt(socket.IPPROTO_IP, IP_BIND_ADDRESS_NO_PORT, 1)
                s.bind((source, 0))
                s.setblocking(False)
                err = s.connect_ex((TARGET, port))
            except OSError as exc:
                err = exc.errno or errno.EIO
            if err not in (0, errno.EINPROGRESS):
                s.close()
                stats["connect_failed"] += 1
                budget = 0.0  # back off until the next tick
                break
            sel.register(s, selectors.EVENT_WRITE, "connecting")
            stats["opened"] += 1
            to_open -= 1
            budget -= 1
        for key, _ in sel.select(0.02):
            s = key.fileobj
            if key.data == "connecting":
                if s.getsockopt(socket.SOL_SOCKET, socket.SO_ERROR):
                    sel.unregister(s)
                    s.close()
                    stats["connect_failed"] += 1
                    to_open += 1
                    continue
                try:
                    s.send(HALF_OPEN)
                except OSError:
                    pass
                sel.modify(s, selectors.EVENT_READ, "open")
                held += 1
                continue
            try:
                data = s.recv(4096)
            except OSError:
                data = b""
            if data:
                if data.startswith(b"HTTP/1.1 "):
                    code = data[9:12].decode("ascii", "replace")
                    stats["answers"][code] = stats["answers"].get(code, 0) + 1
                continue
            sel.unregister(s)
            s.close()
            held -= 1
            stats["closed_by_server"] += 1
            to_open += 1
        if now - last_sample >= 0.5:
            stats["held"].append([round(now - t0, 2), held])
            last_sample = now
    for key in list(sel.get_map().values()):
        key.fileobj.close()
    Path(out).write_text(json.dumps(stats))


# ------------------------------------------------------------------------------------ the orchestrator
def _probe(port: int, budget_s: float = 1.0, tag: str = "") -> float | None:
    """Seconds for one GET /healthz on a fresh connection, or None: not 200 within budget_s."""
    t0 = time.monotonic()
    s = socket.socket()
    stage = "connect"
    try:
        s.bind((SOURCES[0], 0))
        s.settimeout(budget_s)
        s.connect((TARGET, port))
        stage = "answer"
        s.sendall(b"GET /healthz HTTP/1.1\r\nHost: probe\r\nConnection: close\r\n\r\n")
        buf = b""
        while b"\r\n\r\n" not in buf:
            left = budget_s - (time.monotonic() - t0)
            if left <= 0:
                _failed(tag, "answer timeout")
                return None
            s.settimeout(left)
            chunk = s.recv(4096)
            if not chunk:
                break
            buf += chunk
        took = time.monotonic() - t0
        if buf.startswith(b"HTTP/1.1 200") and took <= budget_s:
            return took
        what = f"answered {buf[9:12].decode('ascii', 'replace') or 'nothing'}"
        _failed(tag, what)
        return None
    except OSError as exc:
        what = f"{stage} {'timeout' if isinstance(exc, TimeoutError) else 'error'}"
        _failed(tag, what)
        return None
    finally:
        s.close()


def _failed(tag: str, what: str) -> None:
    if tag:
        FAILED.setdefault(tag, {})[what] = FAILED.setdefault(tag, {}).get(what, 0) + 1


def _cpu_s(pid: int) -> float:
    """User + system CPU seconds of a process so far (Linux /proc)."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    except (OSError, IndexError, ValueError):
        return 0.0


def _open_fds(pid: int) -> int:
    try:
        return len(os.listdir(f"/proc/{pid}/fd"))
    except OSError:
        return 0


def _start_server(mode: str) -> tuple[subprocess.Popen, int, int | None, list[str]]:
    import httpx

    proc = subprocess.Popen(
        [sys.executable, str(HERE), "--serve", mode],
        stderr=subprocess.PIPE,
        stdout=subprocess.DEVNULL,
        text=True,
    )
    lines: list[str] = []
    assert proc.stderr is not None
    port = health = None
    while port is None or (mode == "guarded" and health is None):
        line = proc.stderr.readline()
        if not line:
            raise SystemExit(f"server ({mode}) did not start: {''.join(lines)}")
        lines.append(line)
        m = re.search(r"listening on http://127\.0\.0\.1:(\d+)", line)
        port = int(m.group(1)) if m else port
        m = re.search(r"also on http://127\.0\.0\.1:(\d+)", line)
        health = int(m.group(1)) if m else health
    threading.Thread(target=lambda: lines.extend(proc.stderr), daemon=True).start()  # type: ignore[arg-type]
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        try:
            if httpx.get(f"http://{TARGET}:{port}/readyz", timeout=5).status_code == 200:
                return proc, port, health, lines
        except httpx.TransportError:
            pass
        time.sleep(0.1)
    raise SystemExit(f"server ({mode}) not ready: {''.join(lines)}")


def run_one(mode: str, args: argparse.Namespace) -> dict:
    from tests.serve_helpers import rss_bytes, stop_process

    proc, port, health, log = _start_server(mode)
    try:
        before = [_probe(port) for _ in range(3)]
        rss0 = rss_bytes(proc.pid)
        per = args.connections // len(SOURCES)
        ramp = per / args.rate + 1.0
        clients, outs = [], []
        tmp = tempfile.mkdtemp(prefix="bench-flood-")
        for src in SOURCES:
            out = os.path.join(tmp, f"{src}.json")
            outs.append(out)
            cmd = [sys.executable, str(HERE), "--flood", src, "--port", str(port), "--count", str(per)]
            cmd += ["--rate", str(args.rate), "--hold", str(ramp + args.seconds + 2.0), "--out", out]
            clients.append(subprocess.Popen(cmd))
        time.sleep(ramp)
        FAILED.clear()
        cpu0, wall0 = _cpu_s(proc.pid), time.monotonic()
        probes: list[float | None] = []
        probes_health: list[float | None] = []
        rss: list[int] = []
        fds: list[int] = []
        t_end = time.monotonic() + args.seconds
        while (now := time.monotonic()) < t_end:
            probes.append(_probe(port, tag="serving"))
            if health is not None:
                probes_health.append(_probe(health, tag="health"))
            rss.append(rss_bytes(proc.pid))
            fds.append(_open_fds(proc.pid))
            time.sleep(max(0.0, args.probe_interval - (time.monotonic() - now)))
        for c in clients:
            try:
                c.wait(30)
            except subprocess.TimeoutExpired:
                c.kill()
                c.wait(5)
        failed = {k: dict(v) for k, v in FAILED.items()}
        cpu = (_cpu_s(proc.pid) - cpu0) / max(time.monotonic() - wall0, 1e-9)
        time.sleep(args.settle)
        rss_after = rss_bytes(proc.pid)
        after = [_probe(port, 5.0) for _ in range(3)]
        metrics = ""
        try:
            import httpx

            metrics = httpx.get(f"http://{TARGET}:{port}/metrics", timeout=10).text
        except Exception:  # noqa: BLE001 - the plain server may not answer at all any more
            pass
        floods = [json.loads(Path(o).read_text()) for o in outs if Path(o).exists()]
    finally:
        stop_process(proc, grace_s=10)
    dropped = {
        m.group(1): int(float(m.group(2)))
        for m in re.finditer(r'chipswap_connections_dropped_total\{reason="(\w+)"\} ([\d.e+]+)', metrics)
    }
    lane = re.search(r"^chipswap_probe_lane_total ([\d.e+]+)", metrics, re.M)
    held_t = {}
    for f in floods:
        for t, n in f["held"]:
            if ramp <= t <= ramp + args.seconds:
                held_t[round(t * 2) / 2] = held_t.get(round(t * 2) / 2, 0) + n
    accept_errors = sum(1 for ln in log if "out of system resource" in ln or "Too many open files" in ln)
    return {
        "mode": mode,
        "probes": probes,
        "probes_health": probes_health,
        "before": before,
        "after": after,
        "rss": (rss0, max(rss or [rss0]), rss_after),
        "fds": max(fds or [0]),
        "failed": failed,
        "cpu": cpu,
        "opened": sum(f["opened"] for f in floods),
        "closed_by_server": sum(f["closed_by_server"] for f in floods),
        "connect_failed": sum(f["connect_failed"] for f in floods),
        "answers": {k: sum(f["answers"].get(k, 0) for f in floods) for k in ("408", "503")},
        "held": sorted(held_t.values()),
        "dropped": dropped,
        "lane": int(float(lane.group(1))) if lane else 0,
        "accept_errors": accept_errors,
        "ramp": ramp,
    }


def _share(probes: list[float | None], failed: dict[str, int]) -> str:
    """'**n / N (x %)**; missed: ...; p50 / max ms' for one port's probes."""
    if not probes:
        return "-"
    ok = sorted(p for p in probes if p is not None)
    out = f"**{len(ok)} / {len(probes)} ({100.0 * len(ok) / len(probes):.1f} %)**"
    if failed:
        out += "; missed: " + ", ".join(f"{n} {k}" for k, n in sorted(failed.items()))
    if ok:
        out += f"; p50 / max {ok[len(ok) // 2] * 1000:.0f} / {ok[-1] * 1000:.0f} ms"
    return out


def _row(r: dict) -> str:
    held = r["held"]
    mib = [x / 2**20 for x in r["rss"]]
    after = sum(1 for p in r["after"] if p is not None)
    held_s = f"{held[len(held) // 2]:,} / {max(held):,}" if held else "-"
    dropped = ", ".join(f"{k} {v:,}" for k, v in r["dropped"].items() if v) or "-"
    label = "gate (defaults)" if r["mode"] == "guarded" else "plain uvicorn (before issue 32)"
    return (
        f"| {label} | {r['opened']:,} ({r['closed_by_server']:,} closed or reset on the server side) |"
        f" {held_s} |"
        f" {_share(r['probes'], r['failed'].get('serving', {}))} |"
        f" {_share(r['probes_health'], r['failed'].get('health', {}))} |"
        f" {mib[0]:.0f} / {mib[1]:.0f} / {mib[2]:.0f} MiB | {r['fds']:,} | {r['cpu']:.2f} |"
        f" {dropped}; probes served by the lane or the health port {r['lane']:,} | {after} / 3 |"
    )


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument(
        "--connections", type=int, default=20_000, help="half-open sockets, split over 2 addresses"
    )
    ap.add_argument("--seconds", type=float, default=20.0, help="probing while the flood is held")
    ap.add_argument("--rate", type=float, default=2500.0, help="opens (and reopens) per second per address")
    ap.add_argument("--probe-interval", type=float, default=0.2)
    ap.add_argument("--settle", type=float, default=3.0, help="after the flood: seconds before RSS 'after'")
    ap.add_argument("--no-baseline", action="store_true")
    ap.add_argument("--no-docs", action="store_true")
    ap.add_argument("--serve", choices=("guarded", "plain"), help=argparse.SUPPRESS)
    ap.add_argument("--flood", help=argparse.SUPPRESS)
    ap.add_argument("--port", type=int, help=argparse.SUPPRESS)
    ap.add_argument("--count", type=int, help=argparse.SUPPRESS)
    ap.add_argument("--hold", type=float, help=argparse.SUPPRESS)
    ap.add_argument("--out", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.serve:
        return serve(args.serve)
    if args.flood:
        if args.flood not in SOURCES:
            raise SystemExit(f"flood source {args.flood} is not one of {SOURCES}")
        return flood(args.flood, args.port, args.count, args.rate, min(args.hold, 120.0), args.out)
    if not 2 <= args.connections <= 30_000 or not 1 <= args.seconds <= 60:
        raise SystemExit("--connections must be 2..30000 and --seconds 1..60 (the flood stays bounded)")

    t0, load0 = time.monotonic(), os.getloadavg()[0]
    results = [run_one("guarded", args)]
    print(_row(results[0]), flush=True)
    if not args.no_baseline:
        results.append(run_one("plain", args))
        print(_row(results[1]), flush=True)
    wall = time.monotonic() - t0
    g = results[0]
    share = 100.0 * sum(p is not None for p in g["probes"]) / max(len(g["probes"]), 1)
    share_h = 100.0 * sum(p is not None for p in g["probes_health"]) / max(len(g["probes_health"]), 1)
    header = (
        "| server | flood sockets opened (incl. reopens) | flood sockets held, client side: median / max |"
        " /healthz within 1 s, serving port | /healthz within 1 s, --health-port |"
        " server RSS before / peak / after | server open descriptors, peak | server CPU (cores) |"
        " closed by the gate | /healthz after |"
        "\n|---|---|---|---|---|---|---|---|---|---|"
    )
    plain = results[1] if len(results) > 1 else None
    tail = ""
    if plain is not None:
        import resource

        soft = resource.getrlimit(resource.RLIMIT_NOFILE)[0]
        tail = (
            f"The plain server's descriptors peaked at {plain['fds']:,} of its limit of {soft:,} (ulimit -n)"
        )
        tail += (
            ": it holds every half-open socket until accept fails; a probe is then reset or never answered."
            if plain["fds"] >= 0.95 * soft
            else "."
        )
        if plain["accept_errors"]:
            tail += f" It logged {plain['accept_errors']:,} accept failures."
    cmd = "PYTHONPATH=src python bench/bench_flood.py" + (
        "" if sys.argv[1:] == [] else " " + " ".join(sys.argv[1:])
    )
    body = f"""
{args.connections:,} half-open connections (a request head that never ends) from 127.0.0.1 and
127.0.0.2, opened at up to {args.rate:,.0f}/s per address and reopened at that rate whenever the server
closes one; after the ramp ({g["ramp"]:.0f} s), /healthz probed from 127.0.0.1 every {args.probe_interval:g} s
for {args.seconds:g} s on a fresh connection, 1 s budget for connect + answer. Server: ServingEngine over the
tests' stand-in model (no torch), in its own process; the gate at its defaults (2,048 connections, 1,024 per
client, 10 s header timeout), and, in the same run, the same server with `connections=None` (uvicorn alone,
as before issue 32). Whole run {wall:.0f} s on this shared 2-core machine.

{header}
{chr(10).join(_row(r) for r in results)}

Target: /healthz answers >= 99 % of probes within 1 s while the flood is held: serving port
**{share:.1f} %** ({"met" if share >= 99.0 else "NOT met"}), `--health-port` **{share_h:.1f} %**
({"met" if share_h >= 99.0 else "NOT met"}). Memory: the gated server holds at most its caps; the flood's
other sockets are answered 503 by the probe lane at once, and those it admitted get 408 at the 10 s header
timeout, so its RSS follows the caps, not the flood. {tail}

Missed probes are listed by kind. A `connect timeout` is a SYN the kernel dropped while the serving port's
accept queue was full, i.e. the server was not scheduled for a moment on this shared machine while the flood
reconnected thousands of times a second (the gate itself used the CPU shown); the health port has its own
accept queue, which is why it exists. Load average at the start of this run: {load0:.1f}.
"""
    print(body)
    if not args.no_docs:
        from _results import write_section

        write_section("flood", "Serving under a connection flood (issue 32)", cmd, body)


if __name__ == "__main__":
    main()
