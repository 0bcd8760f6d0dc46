"""`chipswap bench` against real servers on loopback: chipswap serve (compiled tiny-distilbert), servers that
fail, stall or speak something else, nothing listening, and a short overload. Every run is bounded in count
and time and only 127.0.0.1 is targeted."""

from __future__ import annotations

import asyncio
import json
import threading
import time

import httpx
import pytest
from fastapi import FastAPI
from fastapi.responses import HTMLResponse, JSONResponse

from chipswap.bench import read_bench_results
from chipswap.bench.job import BenchOptions, run_bench
from chipswap.bench.stats import Slo
from chipswap.serve.batcher import BatcherConfig
from chipswap.serve.served import load_compiled_model, read_compiled_set
from chipswap.serve.server import ServeConfig, ServingEngine, start_background
from tests.cli_helpers import run_inproc
from tests.serve_helpers import cli_server, compiled_tiny, free_port, ort_threads, rss_bytes, run_app

pytestmark = pytest.mark.slow  # real servers, real compiled buckets


@pytest.fixture(scope="module")
def compiled(tmp_path_factory):
    return compiled_tiny(tmp_path_factory.getbasetemp())


def _compiled_engine(compiled, **batch) -> ServingEngine:
    from chipswap.compile.cache import ArtifactCache

    path, cache_dir = compiled
    cset = read_compiled_set(path)

    def loader():
        with ort_threads(1):
            return load_compiled_model(cset, ArtifactCache(cache_dir))

    cfg = ServeConfig(port=0, batcher=BatcherConfig(**{"max_batch_delay_s": 0.01, **batch}))
    return ServingEngine(str(cset["model"]), loader, cfg)


def test_bench_predict_measures_what_the_server_did(compiled):
    with start_background(_compiled_engine(compiled)) as srv:
        doc = run_bench(
            BenchOptions(
                url=srv.url,
                max_requests=40,
                duration_s=20,
                rate=20.0,
                slo=Slo(e2e_ms=5000),
                instance="inf2.xlarge",
                term="on-demand",
            )
        )
        m = srv.engine.metrics
        assert doc["complete"], doc["stop_reason"]
        assert doc["counts"]["sent"] == doc["counts"]["ok"] == 40
        assert doc["target"]["protocol"] == "chipswap-predict" and doc["target"]["model"] == "tiny-distilbert"
        assert doc["load"]["max_length"] == 32  # learnt from the server: trace lengths mapped into 1..32
        assert m.value("chipswap_requests_total", status=200) == 40
        # padding measured from the answers equals the server's own counters
        real = sum(m.value("chipswap_real_tokens_total", bucket=b) for b in (16, 32))
        computed = sum(m.value("chipswap_computed_tokens_total", bucket=b) for b in (16, 32))
        assert doc["padding"]["real_tokens"] == real
        assert doc["padding"]["computed_tokens"] == pytest.approx(computed)
        assert doc["padding"]["waste_fraction"] == pytest.approx(1 - real / computed, abs=1e-5)
        per_bucket = {b["seq_len"]: b["requests"] for b in doc["buckets"]}
        assert sum(per_bucket.values()) == 40 and set(per_bucket) <= {16, 32}
        # cost per 1M at the catalog's on-demand price
        from decimal import Decimal

        rate = Decimal(doc["instance"]["usd_per_hour"])
        want = Decimal(1_000_000) / Decimal(str(doc["goodput"]["requests_per_s"])) * rate / 3600
        assert Decimal(doc["cost"]["per_million_requests_usd"]) == want.quantize(Decimal("0.0001"))


def test_bench_cli_writes_results_plan_can_read(compiled, tmp_path, capsys):
    out = tmp_path / "bench.json"
    with start_background(_compiled_engine(compiled)) as srv:
        code, stdout, err = run_inproc(
            capsys,
            "bench",
            srv.url,
            "--requests",
            "15",
            "--rate",
            "15",
            "--duration",
            "10",
            "--slo-ms",
            "2000",
            "--instance",
            "inf2.xlarge",
            "--out",
            str(out),
        )
    assert code == 0, err
    assert "chipswap-predict" in stdout and "results written to" in stdout and "per bucket" in stdout
    res = read_bench_results(out)
    assert res.ok == 15 and res.instance == "inf2.xlarge" and res.complete
    assert "--instance inf2.xlarge" in json.loads(out.read_text())["tool"]["command"]


def test_bench_cli_bad_input_is_one_line_exit_2(tmp_path, capsys):
    cases = [
        (["bench", "localhost:8000"], "URL must be"),
        (["bench", "http://127.0.0.1:9", "--protocol", "grpc"], "--protocol"),
        (["bench", "http://127.0.0.1:9", "--instance", "p9.huge"], "unknown instance"),
        (["bench", "http://127.0.0.1:9", "--rate", "0"], "--rate"),
        (["bench", "http://127.0.0.1:9", "--trace", str(tmp_path / "none.csv")], "trace file not found"),
        (["bench", "http://127.0.0.1:9", "--out", str(tmp_path)], "is a folder"),
        (["bench", "http://127.0.0.1:9", "--extra-body", "[1]"], "--extra-body"),
    ]
    for args, words in cases:
        code, _, err = run_inproc(capsys, *args)
        assert code == 2 and words in err, (args, err)
        assert err.startswith("chipswap: error:") and err.count("\n") == 1


def test_unreachable_url_stops_with_a_message_and_partial_results(tmp_path, capsys):
    out = tmp_path / "b.json"
    port = free_port()  # nothing listens there
    t0 = time.monotonic()
    code, _, err = run_inproc(
        capsys, "bench", f"http://127.0.0.1:{port}", "--requests", "50", "--out", str(out)
    )
    assert time.monotonic() - t0 < 120  # a bound, not a speed: it stops instead of retrying (load 20 safe)
    assert code == 1
    assert f"cannot connect to http://127.0.0.1:{port}" in err and "partial results in" in err
    doc = json.loads(out.read_text())
    assert doc["complete"] is False and "cannot connect" in doc["stop_reason"]
    assert doc["counts"]["ok"] == 0


def _predict_app(predict) -> FastAPI:
    """A server that lists a model like chipswap serve and answers /v1/predict with ``predict``."""
    app = FastAPI()

    @app.get("/v1/models")
    async def models():
        return {"data": [{"id": "m", "max_length": 64, "vocab_size": 100}]}

    app.post("/v1/predict")(predict)
    return app


async def _out_of_memory():
    return JSONResponse({"error": {"message": "CUDA out of memory"}}, status_code=500)


async def _stall():
    await asyncio.sleep(30)
    return {}


def test_server_that_errors_stops_early_naming_the_error():
    with run_app(_predict_app(_out_of_memory)) as url:
        doc = run_bench(BenchOptions(url=url, max_requests=200, duration_s=20, rate=20.0, timeout_s=5))
    assert doc["counts"]["sent"] < 200, doc["counts"]  # stopped after the first answers, not after 200
    assert doc["complete"] is False
    assert "all failed" in doc["stop_reason"] and "HTTP 500: CUDA out of memory" in doc["stop_reason"]
    assert doc["counts"]["errors"] >= 5 and doc["counts"]["ok"] == 0
    assert doc["errors"][0]["message"] == "HTTP 500: CUDA out of memory"


def test_server_that_stalls_times_out_and_the_run_ends():
    with run_app(_predict_app(_stall)) as url:
        t0 = time.monotonic()
        doc = run_bench(BenchOptions(url=url, max_requests=6, duration_s=10, rate=10.0, timeout_s=1.0))
        took = time.monotonic() - t0
    assert took < 25, took  # ended on its own 1 s timeouts, not on the server's 30 s stall (holds at load 20)
    assert doc["counts"]["timeouts"] == 6 and doc["counts"]["ok"] == 0
    assert doc["rates"]["timeout"] == 1.0


def test_not_a_chipswap_server():
    app = FastAPI()

    @app.get("/v1/models")
    async def models():
        return HTMLResponse("<html>hello</html>")

    with run_app(app) as url:
        doc = run_bench(BenchOptions(url=url, max_requests=5, duration_s=5, rate=10.0))
    assert doc["complete"] is False and "does not look like chipswap serve" in doc["stop_reason"]


def test_overload_rejects_and_keeps_serving():
    """Short version of the benchmark's overload run (bench/bench_serve.py runs 10x for 60 s): `chipswap
    serve` in its own process, a real model (eager distilbert-base dimensions, random weights) with a small
    queue, sent a burst of 200 requests at once.

    No timing enters the assertions: a request costs the server tens of times the CPU it costs the client to
    send, so however busy the machine (load 20 slows both alike), a burst of 200 against a queue of 8 finds it
    full for most of the burst; the requests it admitted are served, because the client's timeout (120 s) is
    far above what 8 queued requests take even at load 20."""
    args = (
        "distilbert-base",
        "--eager",
        "--max-length",
        "256",  # trace lengths mapped into 1..256: ~20-100 ms a request, 150 req/s is several times too many
        "--threads",
        "1",
        "--max-queue",
        "4",
        "--max-queue-total",
        "8",
        "--timeout",
        "120",
    )
    with cli_server(*args) as (proc, url):
        rss0 = rss_bytes(proc.pid)
        rss: list[int] = []
        stop = threading.Event()

        def sample():
            while not stop.is_set():
                rss.append(rss_bytes(proc.pid))
                time.sleep(0.05)

        t = threading.Thread(target=sample, daemon=True)
        t.start()
        doc = run_bench(BenchOptions(url=url, max_requests=200, duration_s=60.0, rate=5000.0, timeout_s=120))
        stop.set()
        t.join(5)
        assert proc.poll() is None  # no crash
        assert httpx.get(f"{url}/healthz").status_code == 200
        after = httpx.post(f"{url}/v1/predict", json={"input_ids": [101, 2023, 102]}, timeout=120)
        assert after.status_code == 200
        metrics = httpx.get(f"{url}/metrics").text
    c = doc["counts"]
    assert c["rejected"] > 0 and c["ok"] > 0, c  # shed load, still served
    assert c["ok"] + c["rejected"] + c["errors"] == c["sent"]
    assert c["rejected"] > 0.3 * c["sent"], c  # far over what a queue of 8 holds: many are turned away ...
    assert doc["latency_ms"]["e2e"]["p99"] is not None  # admitted requests' p99 is reported
    assert f'chipswap_rejects_total{{reason="queue_full"}} {float(c["rejected"])}' in metrics
    assert max(rss) < rss0 + 200 * 2**20, (rss0, max(rss))  # bounded queue, bounded memory
