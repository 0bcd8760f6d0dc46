"""`chipswap serve` as a command: bad input is one line and exit 2 before anything listens; a set whose
artifacts are gone fails its load with one line; in a real child process, SIGTERM drains admitted work and the
process exits 0."""

from __future__ import annotations

import json
import signal
import socket
import threading
import time

import httpx
import pytest

from tests.cli_helpers import run_inproc
from tests.serve_helpers import cli_server, compiled_tiny

_n = iter(range(10**6))


def _set(tmp_path, **over):
    doc = {
        "schema": "chipswap.compiled/1",
        "backend": "onnxruntime",
        "model": "tiny-distilbert",
        "input_names": ["input_ids", "attention_mask"],
        "pad_token_id": 0,
        "weights_key": None,
        "buckets": [{"batch": 1, "seq_len": 16, "key": "ab" * 16}],
    }
    doc.update(over)
    p = tmp_path / f"compiled-{next(_n)}.json"
    p.write_text(json.dumps(doc))
    return p


def test_bad_input_is_one_line_exit_2(tmp_path, capsys):
    token = tmp_path / "token"
    token.write_text("\n")
    notok = tmp_path / "tok.json"
    notok.write_text('{"not": "a tokenizer"}')
    good = str(_set(tmp_path))
    cases = [
        (["serve", str(tmp_path / "none.json")], "not a compiled set file"),
        (["serve", str(_set(tmp_path, schema="chipswap.shapeplan/1"))], "schema"),
        (
            ["serve", str(_set(tmp_path, buckets=[{"batch": 1, "seq_len": 16, "key": "../../etc"}]))],
            "not a cache key",
        ),
        (["serve", str(_set(tmp_path, buckets=[{"batch": "1", "seq_len": 16, "key": "ab" * 16}]))], "batch"),
        (["serve", str(_set(tmp_path, buckets=[]))], "'buckets'"),
        (["serve", str(_set(tmp_path, input_names=["pixel_values"]))], "token ids only"),
        (["serve", str(_set(tmp_path, backend="tpu"))], "backend"),
        (["serve", good, "--policy", "best_fit"], "--policy"),
        (["serve", good, "--port", "70000"], "--port"),
        (["serve", good, "--max-batch-delay-ms", "-5"], "max batch delay"),
        (["serve", good, "--max-queue", "0"], "queue limits"),
        (["serve", good, "--token-file", str(token)], "token file"),
        (["serve", good, "--tokenizer", str(notok)], "not a tokenizers JSON file"),
        (["serve", good, "--host", "no-such-host.invalid"], "cannot resolve --host"),
        (["serve", "tiny-distilbert", "--eager", "--seq-len", "16"], "--eager"),
        (["serve", "tiny-distilbert", "--eager", "--max-length", "4096"], "--max-length 4096"),
        (["serve", "no-such-model", "--eager"], "unknown model preset"),
        (["serve", "tiny-distilbert", "--seq-len", "16,abc"], "--seq-len"),
    ]
    for args, words in cases:
        code, _, err = run_inproc(capsys, *args)
        assert code == 2 and words in err, (args, err)
        assert err.startswith("chipswap: error:") and err.count("\n") == 1, err


def test_port_in_use_is_one_line(tmp_path, capsys):
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen()
        port = s.getsockname()[1]
        code, _, err = run_inproc(capsys, "serve", str(_set(tmp_path)), "--port", str(port))
    assert code == 2 and f"cannot listen on 127.0.0.1:{port}" in err and "--port" in err


def test_missing_artifacts_fail_the_load_with_one_line(tmp_path, capsys):
    # a well-formed set whose cache entries do not exist: the server starts, the load fails, the command stops
    code, _, err = run_inproc(
        capsys, "serve", str(_set(tmp_path)), "--port", "0", "--cache-dir", str(tmp_path / "empty-cache")
    )
    assert code == 2, err
    assert "listening on http://127.0.0.1:" in err
    assert "chipswap: error: the model failed to load: cache entry abababababab is missing" in err


@pytest.mark.slow
def test_sigterm_drains_admitted_requests_then_exits_0(tmp_path_factory):
    path, cache_dir = compiled_tiny(tmp_path_factory.getbasetemp())
    # a long batch delay keeps the admitted requests queued when SIGTERM arrives
    args = (str(path), "--cache-dir", str(cache_dir), "--max-batch-delay-ms", "1500", "--threads", "1")
    with cli_server(*args) as (proc, url):
        results: list = []

        def call(i: int) -> None:
            try:
                r = httpx.post(f"{url}/v1/predict", json={"input_ids": [5 + i, 6, 7]}, timeout=60)
                results.append((r.status_code, r.json()))
            except httpx.HTTPError as exc:  # recorded, so the assertion names it
                results.append((None, repr(exc)))

        threads = [threading.Thread(target=call, args=(i,)) for i in range(3)]
        [t.start() for t in threads]
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline:  # wait until all three are admitted (queued in the batcher)
            text = httpx.get(f"{url}/metrics").text
            if 'chipswap_queue_depth{bucket="16"} 3.0' in text:
                break
            time.sleep(0.05)
        t0 = time.monotonic()
        proc.send_signal(signal.SIGTERM)
        [t.join(60) for t in threads]
        code = proc.wait(60)
        took = time.monotonic() - t0
        assert [s for s, _ in results] == [200, 200, 200], results
        assert all(body["bucket"]["seq_len"] == 16 for _, body in results)
        assert code == 0, "".join(proc.log)
        assert took < 30
        log = "".join(proc.log)
        assert "stopped after draining 3 in-flight request(s)" in log, log
        with pytest.raises(httpx.ConnectError):  # nothing listens any more
            httpx.get(f"{url}/healthz", timeout=5)


@pytest.mark.slow
def test_serve_compiles_a_model_first_through_the_cache(tmp_path):
    cache = tmp_path / "cache"
    args = (
        "tiny-distilbert",
        "--seq-len",
        "16",
        "--batch-sizes",
        "1",
        "--cache-dir",
        str(cache),
        "--threads",
        "1",
    )
    with cli_server(*args) as (_proc, url):
        models = httpx.get(f"{url}/v1/models").json()["data"][0]
        assert models["shapes"] == [[1, 16]] and models["vocab_size"] == 1000
        r = httpx.post(f"{url}/v1/predict", json={"input_ids": [2, 5, 3]}, timeout=60)
        assert r.status_code == 200 and r.json()["bucket"] == {"seq_len": 16, "batch": 1, "fill": 1}
    assert len(list((cache / "entries").iterdir())) == 1  # one bucket compiled into the cache
