"""`chipswap serve` over HTTP on loopback: real compiled tiny-distilbert buckets (ONNX Runtime), real uvicorn.

Answers equal eager PyTorch on the unpadded input; every client mistake is a 4xx JSON error naming the problem
and the server keeps serving; backpressure is 429 with Retry-After; timeouts are 504; readiness waits for the
warm-up; metrics count what happened; a bearer token is enforced."""

from __future__ import annotations

import json
import threading

import httpx
import pytest
import torch

from chipswap.serve.batcher import BatcherConfig
from chipswap.serve.served import load_compiled_model, read_compiled_set
from chipswap.serve.server import ServeConfig, ServingEngine, start_background
from chipswap.serve.tokenizer import load_tokenizer
from tests.serve_helpers import compiled_tiny, ort_threads

pytestmark = pytest.mark.slow  # compiles tiny-distilbert buckets once per session (~10-25 s here)

TOKEN = "s3cret-token"


@pytest.fixture(scope="module")
def compiled(tmp_path_factory):
    return compiled_tiny(tmp_path_factory.getbasetemp())


def _engine(compiled, *, gate: threading.Event | None = None, **cfg) -> ServingEngine:
    path, cache_dir = compiled
    cset = read_compiled_set(path)
    batcher = cfg.pop("batcher", BatcherConfig(max_batch_delay_s=0.002))

    def loader():
        if gate is not None:
            gate.wait(30)
        from chipswap.compile.cache import ArtifactCache

        with ort_threads(1):
            return load_compiled_model(cset, ArtifactCache(cache_dir))

    config = ServeConfig(port=0, batcher=batcher, **cfg)
    return ServingEngine(str(cset["model"]), loader, config, tokenizer=load_tokenizer("example"))


@pytest.fixture(scope="module")
def server(compiled):
    with start_background(_engine(compiled)) as srv:
        assert srv.engine.state == "ready", srv.engine.error
        yield srv


@pytest.fixture(scope="module")
def eager():
    from chipswap import models

    ref = models.resolve_model("tiny-distilbert")
    return models.build_model(ref)


def _eager_logits(module, ids):
    with torch.no_grad():
        t = torch.tensor([ids])
        return module(input_ids=t, attention_mask=torch.ones_like(t))[0][0]


def test_predict_matches_eager_pytorch_on_the_unpadded_input(server, eager):
    c = httpx.Client(base_url=server.url, timeout=30)
    for ids, bucket in (([2, 17, 400, 3], 16), (list(range(5, 25)), 32)):
        r = c.post("/v1/predict", json={"input_ids": ids})
        assert r.status_code == 200, r.text
        body = r.json()
        assert body["model"] == "tiny-distilbert"
        assert body["bucket"]["seq_len"] == bucket and body["tokens"] == len(ids)
        assert body["bucket"]["batch"] in (1, 4) and 1 <= body["bucket"]["fill"] <= body["bucket"]["batch"]
        ((name, values),) = body["outputs"].items()
        got = torch.tensor(values)
        assert torch.allclose(got, _eager_logits(eager, ids), atol=1e-4), (name, got)
        assert body["timing_ms"]["server"] >= body["timing_ms"]["model"] > 0


def test_text_goes_through_the_shipped_tokenizer(server, eager):
    tok = load_tokenizer("example")
    text = "serve the compiled buckets"
    r = httpx.post(f"{server.url}/v1/predict", json={"text": text}, timeout=30)
    assert r.status_code == 200, r.text
    ids = tok.encode(text)
    assert ids[0] == tok.token_id("[CLS]") and ids[-1] == tok.token_id("[SEP]")
    assert r.json()["tokens"] == len(ids)
    got = torch.tensor(next(iter(r.json()["outputs"].values())))
    assert torch.allclose(got, _eager_logits(eager, ids), atol=1e-4)


def test_concurrent_requests_share_batches(compiled, eager):
    engine = _engine(compiled, batcher=BatcherConfig(max_batch_delay_s=0.2))
    with start_background(engine) as srv:
        rows = [[5 + i, 6 + i, 7 + i] for i in range(4)]
        results: list = [None] * 4

        def call(i):
            results[i] = httpx.post(f"{srv.url}/v1/predict", json={"input_ids": rows[i]}, timeout=30).json()

        threads = [threading.Thread(target=call, args=(i,)) for i in range(4)]
        [t.start() for t in threads]
        [t.join(30) for t in threads]
        fills = [r["bucket"]["fill"] for r in results]
        assert max(fills) >= 2, fills  # the delay let requests ride together
        for ids, res in zip(rows, results, strict=True):
            got = torch.tensor(next(iter(res["outputs"].values())))
            assert torch.allclose(got, _eager_logits(eager, ids), atol=1e-4)  # no rows mixed up


BAD = [
    (b"{", 400, "invalid_json", "not valid JSON"),
    (b"", 400, "invalid_json", "empty"),
    (b"\xff\xfe", 400, "invalid_json", "UTF-8"),
    (b"[1, 2]", 422, "invalid_body", "JSON object"),
    (b'{"input_ids": "1 2 3"}', 422, "invalid_field", "list of integers"),
    (b'{"input_ids": [1, "2"]}', 422, "invalid_field", "input_ids[1]"),
    (b'{"input_ids": [1, 2.5]}', 422, "invalid_field", "input_ids[1]"),
    (b'{"input_ids": [true]}', 422, "invalid_field", "input_ids[0]"),
    (b'{"input_ids": []}', 422, "empty_input", "empty"),
    (b'{"text": ""}', 422, "empty_input", "empty"),
    (b'{"text": 5}', 422, "invalid_field", "'text' must be a string"),
    (b'{"text": "a", "input_ids": [1]}', 422, "invalid_body", "exactly one"),
    (b"{}", 422, "invalid_body", "exactly one"),
    (b'{"input_ids": [1], "temperature": 1}', 422, "unknown_field", "temperature"),
    (json.dumps({"input_ids": [7] * 33}).encode(), 422, "input_too_long", "33 tokens"),
    (json.dumps({"text": "word " * 40}).encode(), 422, "input_too_long", "largest compiled bucket"),
    (b'{"input_ids": [1000]}', 422, "token_out_of_range", "0..999"),
    (b'{"input_ids": [-1]}', 422, "token_out_of_range", "input_ids[0]"),
    (b'{"input_ids": [1], "model": "gpt-4"}', 404, "model_not_found", '"gpt-4"'),
    (b'{"input_ids": [1], "model": 3}', 422, "invalid_field", "'model' must be a string"),
    (b'{"input_ids": [NaN]}', 400, "invalid_json", "NaN"),
]


@pytest.mark.parametrize("body,status,code,words", BAD, ids=[b[2] + ":" + b[3] for b in BAD])
def test_client_mistakes_are_4xx_json_naming_the_problem(server, body, status, code, words):
    r = httpx.post(
        f"{server.url}/v1/predict", content=body, headers={"content-type": "application/json"}, timeout=30
    )
    assert r.status_code == status, r.text
    err = r.json()["error"]
    assert err["code"] == code and words in err["message"], err
    assert "\n" not in err["message"]
    # and the server keeps serving
    assert httpx.post(f"{server.url}/v1/predict", json={"input_ids": [2, 3]}, timeout=30).status_code == 200


def test_oversized_body_is_413_without_reading_it(compiled):
    with start_background(_engine(compiled, max_body_bytes=1000)) as srv:
        big = b'{"input_ids": [' + b"1," * 2000 + b"1]}"
        r = httpx.post(f"{srv.url}/v1/predict", content=big, headers={"content-type": "application/json"})
        assert r.status_code == 413 and r.json()["error"]["code"] == "body_too_large"
        assert "1,000 bytes" in r.json()["error"]["message"]

        def chunks():  # no Content-Length: the limit holds on the streamed body too
            for _ in range(100):
                yield b"1," * 50

        r = httpx.post(f"{srv.url}/v1/predict", content=chunks())
        assert r.status_code == 413
        assert httpx.post(f"{srv.url}/v1/predict", json={"input_ids": [4]}).status_code == 200


def test_unknown_route_and_method_are_json(server):
    r = httpx.get(f"{server.url}/v2/predict")
    assert r.status_code == 404 and r.json()["error"]["code"] == "not_found"
    r = httpx.get(f"{server.url}/v1/predict")
    assert r.status_code == 405 and r.json()["error"]["code"] == "method_not_allowed"


def test_models_endpoint_describes_the_buckets(server):
    m = httpx.get(f"{server.url}/v1/models").json()["data"][0]
    assert m["id"] == "tiny-distilbert" and m["max_length"] == 32 and m["vocab_size"] == 1000
    assert sorted(map(tuple, m["shapes"])) == sorted((b, s) for s in (16, 32) for b in (1, 4))


def test_bearer_token(compiled):
    with start_background(_engine(compiled, token=TOKEN)) as srv:
        body = {"input_ids": [2, 3]}
        r = httpx.post(f"{srv.url}/v1/predict", json=body)
        assert r.status_code == 401 and r.json()["error"]["code"] == "missing_token"
        assert r.headers["www-authenticate"] == "Bearer"
        r = httpx.post(f"{srv.url}/v1/predict", json=body, headers={"authorization": "Bearer nope"})
        assert r.status_code == 401 and r.json()["error"]["code"] == "invalid_token"
        r = httpx.post(f"{srv.url}/v1/predict", json=body, headers={"authorization": f"Basic {TOKEN}"})
        assert r.status_code == 401
        ok = httpx.post(f"{srv.url}/v1/predict", json=body, headers={"authorization": f"Bearer {TOKEN}"})
        assert ok.status_code == 200
        assert httpx.get(f"{srv.url}/metrics").status_code == 401
        assert httpx.get(f"{srv.url}/healthz").status_code == 200  # probes stay open
        assert httpx.get(f"{srv.url}/readyz").status_code == 200


def test_ready_only_after_load_and_warm(compiled):
    gate = threading.Event()
    engine = _engine(compiled, gate=gate)
    srv = start_background(engine, ready_timeout=0.5)  # returns while the loader waits on the gate
    try:
        assert httpx.get(f"{srv.url}/healthz").status_code == 200
        r = httpx.get(f"{srv.url}/readyz")
        assert r.status_code == 503 and r.json()["status"] == "loading"
        r = httpx.post(f"{srv.url}/v1/predict", json={"input_ids": [1]})
        assert r.status_code == 503 and r.json()["error"]["code"] == "not_ready" and r.headers["retry-after"]
        gate.set()
        assert engine.loaded.wait(60)
        assert httpx.get(f"{srv.url}/readyz").status_code == 200
        assert httpx.post(f"{srv.url}/v1/predict", json={"input_ids": [1]}, timeout=30).status_code == 200
    finally:
        gate.set()
        srv.stop()


def test_failed_load_is_reported_not_ready(tmp_path):
    def broken():
        raise RuntimeError("cache entry vanished")

    engine = ServingEngine("m", broken, ServeConfig(port=0))
    with start_background(engine) as srv:
        r = httpx.get(f"{srv.url}/readyz")
        assert r.status_code == 503 and "cache entry vanished" in r.json()["error"]
        r = httpx.post(f"{srv.url}/v1/predict", json={"input_ids": [1]})
        assert r.status_code == 503 and r.json()["error"]["code"] == "load_failed"


def test_backpressure_429_with_retry_after_then_recovers(compiled):
    # one request may wait per bucket, and the batch delay keeps it waiting: the next one is shed
    cfg = BatcherConfig(max_batch_delay_s=1.5, max_queue=1, max_queue_total=4)
    with start_background(_engine(compiled, batcher=cfg)) as srv:
        first: dict = {}
        t = threading.Thread(
            target=lambda: first.update(
                r=httpx.post(f"{srv.url}/v1/predict", json={"input_ids": [9]}, timeout=30)
            )
        )
        t.start()
        deadline = 50
        while srv.engine.batcher.depth().get(16, 0) < 1 and deadline:
            threading.Event().wait(0.02)
            deadline -= 1
        r = httpx.post(f"{srv.url}/v1/predict", json={"input_ids": [9]}, timeout=30)
        assert r.status_code == 429, r.text
        assert r.json()["error"]["code"] == "queue_full"
        assert int(r.headers["retry-after"]) >= 1
        t.join(30)
        assert first["r"].status_code == 200  # the admitted one is served
        assert srv.engine.metrics.value("chipswap_rejects_total", reason="queue_full") == 1
        assert srv.engine.metrics.value("chipswap_requests_total", status=429) == 1
        r = httpx.post(f"{srv.url}/v1/predict", json={"input_ids": [9]}, timeout=30)
        assert r.status_code == 200


@pytest.mark.parametrize("token", [None, TOKEN])
def test_overload_is_shed_before_the_body_is_parsed(compiled, token):
    cfg = BatcherConfig(max_batch_delay_s=1.5, max_queue_wait_s=0.05)
    with start_background(_engine(compiled, batcher=cfg, token=token)) as srv:
        auth = {"authorization": f"Bearer {TOKEN}"} if token else {}
        srv.engine.batcher._per_request_s = 1.0  # as if each request had been taking a second
        first: dict = {}
        t = threading.Thread(
            target=lambda: first.update(
                r=httpx.post(f"{srv.url}/v1/predict", json={"input_ids": [9]}, headers=auth, timeout=30)
            )
        )
        t.start()
        for _ in range(100):  # until the first one waits in the queue (its wait estimate: 1 s)
            if srv.engine.batcher.depth():
                break
            threading.Event().wait(0.02)
        r = httpx.post(f"{srv.url}/v1/predict", content=b"{not json", headers=auth, timeout=30)
        assert r.status_code == 429 and r.json()["error"]["code"] == "queue_full"  # refused unparsed
        assert int(r.headers["retry-after"]) >= 1
        if token:  # shedding never answers a caller without the token
            assert httpx.post(f"{srv.url}/v1/predict", json={"input_ids": [9]}).status_code == 401
        t.join(30)
        assert first["r"].status_code == 200
        assert srv.engine.metrics.value("chipswap_requests_total", status=429) == 1


def test_request_timeout_is_504(compiled):
    cfg = BatcherConfig(max_batch_delay_s=2.0, request_timeout_s=0.3)
    with start_background(_engine(compiled, batcher=cfg)) as srv:
        r = httpx.post(f"{srv.url}/v1/predict", json={"input_ids": [9]}, timeout=30)
        assert r.status_code == 504 and r.json()["error"]["code"] == "timeout"
        assert "0.3 s" in r.json()["error"]["message"]


def test_metrics_exposes_buckets_queue_fill_padding_and_rejects(server):
    for ids in ([5, 6], [5] * 20):
        assert httpx.post(f"{server.url}/v1/predict", json={"input_ids": ids}, timeout=30).status_code == 200
    text = httpx.get(f"{server.url}/metrics").text
    for name in (
        'chipswap_request_seconds_bucket{bucket="16"',
        'chipswap_request_seconds_bucket{bucket="32"',
        "chipswap_queue_depth",
        "chipswap_batch_fill_ratio_bucket",
        'chipswap_padding_waste_ratio{bucket="16"}',
        'chipswap_rejects_total{reason="queue_full"}',
        'chipswap_requests_total{status="200"}',
        "chipswap_ready 1.0",
    ):
        assert name in text, name
    m = server.engine.metrics
    real = m.value("chipswap_real_tokens_total", bucket=16)
    computed = m.value("chipswap_computed_tokens_total", bucket=16)
    assert 0 < real < computed
    assert m.value("chipswap_padding_waste_ratio", bucket=16) == pytest.approx(1 - real / computed)
