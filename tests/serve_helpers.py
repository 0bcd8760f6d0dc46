"""Shared pieces of the serve / bench tests: a real compiled set of tiny-distilbert, and any ASGI app on a
loopback port in a background thread. Only 127.0.0.1 is ever bound or targeted."""

from __future__ import annotations

import contextlib
import os
import socket
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

LOOPBACK = "127.0.0.1"
SEQ_BUCKETS = (16, 32)
BATCH_SIZES = (1, 4)


@contextlib.contextmanager
def ort_threads(n: int = 1) -> Iterator[None]:
    """ONNX Runtime sessions created inside use n threads (the test machine is small and shared)."""
    old = os.environ.get("CHIPSWAP_ORT_THREADS")
    os.environ["CHIPSWAP_ORT_THREADS"] = str(n)
    try:
        yield
    finally:
        if old is None:
            os.environ.pop("CHIPSWAP_ORT_THREADS", None)
        else:
            os.environ["CHIPSWAP_ORT_THREADS"] = old


def compiled_tiny(root: Path) -> tuple[Path, Path]:
    """(compiled set file, cache dir) of tiny-distilbert at SEQ_BUCKETS x BATCH_SIZES, ONNX Runtime.

    Compiled once per test session: a second call finds every bucket in the cache (checksums only)."""
    from chipswap.compile.cache import ArtifactCache
    from chipswap.compile.compiler import compile_plan, plan_from_args, save_compiled_set, target_from_spec

    cache_dir = root / "serve-cache"
    out = root / "serve-compiled.json"
    if out.exists():
        return out, cache_dir
    target = target_from_spec("tiny-distilbert")
    report = compile_plan(
        target,
        plan_from_args(list(SEQ_BUCKETS), list(BATCH_SIZES)),
        cache=ArtifactCache(cache_dir),
        flags={"exporter": "legacy"},  # the TorchScript exporter: same artifacts' semantics, 4x faster here
        progress=False,
    )
    assert report.ok, report.to_json()
    assert report.compiled_set["vocab_size"] == 1000  # serve checks token ids against it
    save_compiled_set(report, out)
    return out, cache_dir


@contextlib.contextmanager
def cli_server(*args: str, ready_timeout: float = 180.0) -> Iterator[tuple[Any, str]]:
    """`python -m chipswap serve ARGS --port 0` in a child process; yields (process, base URL) once /readyz is
    200; terminates it on exit if it still runs. The URL comes from the server's own "listening on" line."""
    import re
    import subprocess
    import sys

    import httpx

    proc = subprocess.Popen(
        [sys.executable, "-m", "chipswap", "serve", *args, "--port", "0"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    url = None
    lines: list[str] = []
    try:
        assert proc.stderr is not None
        deadline = time.monotonic() + ready_timeout
        while url is None and time.monotonic() < deadline:
            line = proc.stderr.readline()
            if not line:
                break
            lines.append(line)
            m = re.search(r"listening on (http://127\.0\.0\.1:\d+)", line)
            if m:
                url = m.group(1)
        assert url, f"server did not start: {''.join(lines)}"
        drain = threading.Thread(target=lambda: lines.extend(proc.stderr), daemon=True)
        drain.start()  # keeps the pipe from filling up; the lines stay readable as proc.log
        while time.monotonic() < deadline:
            try:
                if httpx.get(f"{url}/readyz", timeout=5).status_code == 200:
                    break
            except httpx.TransportError:
                pass
            assert proc.poll() is None, f"server exited: {''.join(lines)}"
            time.sleep(0.2)
        else:
            raise AssertionError(f"server not ready in {ready_timeout} s: {''.join(lines)}")
        proc.log = lines  # type: ignore[attr-defined]
        yield proc, url
    finally:
        if proc.poll() is None:
            proc.terminate()
            try:
                proc.wait(30)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(10)


def rss_bytes(pid: int) -> int:
    """Resident memory of a process (Linux /proc)."""
    with open(f"/proc/{pid}/status") as fh:
        for line in fh:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
    return 0


def free_port() -> int:
    with socket.socket() as s:
        s.bind((LOOPBACK, 0))
        return int(s.getsockname()[1])


@contextlib.contextmanager
def run_app(app: Any, *, graceful_s: int = 1) -> Iterator[str]:
    """Serve an ASGI app on 127.0.0.1:<free port> in a thread; yields its base URL; stops it on exit."""
    import uvicorn

    sock = socket.socket()
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind((LOOPBACK, 0))
    port = sock.getsockname()[1]
    config = uvicorn.Config(app, log_level="error", access_log=False, timeout_graceful_shutdown=graceful_s)
    server = uvicorn.Server(config)
    t = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True)
    t.start()
    deadline = time.monotonic() + 120  # a bound that holds at load 20, not a speed
    while not server.started and time.monotonic() < deadline:
        time.sleep(0.01)
    assert server.started, "test server did not start within 120 s"
    try:
        yield f"http://{LOOPBACK}:{port}"
    finally:
        server.should_exit = True
        t.join(15)
        if t.is_alive():
            server.force_exit = True
            t.join(5)
