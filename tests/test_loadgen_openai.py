"""`chipswap bench --protocol completions|chat` against a real OpenAI-compatible streaming server on loopback.

The server is written for this test: a tiny GPT-2 built from the shipped tiny-gpt2 config (random weights,
real transformers code, KV cache, greedy decoding) behind FastAPI, streaming Server-Sent Events in the OpenAI
format (vLLM's wire format: one token per chunk, a final usage chunk, ``data: [DONE]``). It records, per
request id, when the request arrived and when each token chunk left. The load generator's TTFT, inter-token
gaps, token counts and prompt lengths are checked against those server-side timings and counts. Then the ways
an endpoint can be wrong: an HTML reply, a JSON reply without streaming, an error status, a broken stream."""

from __future__ import annotations

import asyncio
import json
import statistics
import threading
import time

import numpy as np
import pytest
from fastapi import FastAPI, Request
from fastapi.responses import HTMLResponse, JSONResponse, StreamingResponse

from chipswap.bench.clients import OpenAIClient
from chipswap.bench.job import BenchOptions, run_bench
from chipswap.bench.runner import RunLimits, run_load
from chipswap.bench.schedule import build_schedule
from chipswap.bench.stats import Slo
from chipswap.serve.tokenizer import load_tokenizer
from tests.serve_helpers import run_app

pytestmark = pytest.mark.slow  # a real model generating tokens

MODEL_ID = "tiny-gpt2-test"
N_SPECIAL = 5  # [PAD] [UNK] [CLS] [SEP] [MASK] of the shipped tokenizer: never generated


class TinyGPT2:
    """Greedy decoding with a KV cache on a GPT-2 built from the shipped tiny-gpt2 preset config."""

    def __init__(self, **overrides: int) -> None:
        import torch
        from transformers import AutoConfig, AutoModelForCausalLM

        from chipswap.models import load_preset

        cfg = dict(load_preset("tiny-gpt2")["config"])
        cfg.pop("model_type")
        cfg.update(overrides)  # e.g. a wider random model (tests/test_bench_evidence.py)
        torch.manual_seed(0)
        self.model = AutoModelForCausalLM.from_config(AutoConfig.for_model("gpt2", **cfg)).eval()
        self.lock = threading.Lock()

    def step(self, ids: list[int], past):
        import torch

        with torch.inference_mode(), self.lock:
            out = self.model(input_ids=torch.tensor([ids]), cache=past, use_cache=True)
            logits = out.logits[0, -1]
            logits[:N_SPECIAL] = -float("inf")
            return int(logits.argmax()), out.cache


def make_openai_app(
    gpt: TinyGPT2, tokenizer, log: dict, model_id: str = MODEL_ID, entry: dict | None = None,
    info: dict | None = None,
) -> FastAPI:  # fmt: skip
    """entry: more fields of the /v1/models entry (vLLM's root, max_model_len); info: a TGI-style /info."""
    app = FastAPI()
    MODEL_ID = model_id  # noqa: N806 - the name every chunk carries

    @app.get("/v1/models")
    async def models():
        return {"object": "list", "data": [{"id": MODEL_ID, "object": "model", **(entry or {})}]}

    @app.get("/health")
    async def health():  # vLLM's liveness route (guidellm checks it before a run)
        return {}

    if info is not None:

        @app.get("/info")
        async def tgi_info():
            return info

    async def generate(request: Request, chat: bool):
        received = time.monotonic()
        body = await request.json()
        rid = request.headers.get("x-request-id", "?")
        prompt = body["messages"][-1]["content"] if chat else body["prompt"]
        if isinstance(prompt, list):  # OpenAI content parts (guidellm sends [{"type": "text", ...}])
            prompt = " ".join(p.get("text", "") for p in prompt if isinstance(p, dict))
        ids = tokenizer.encode(prompt, special=False)
        n = int(body.get("max_tokens") or body["max_completion_tokens"])  # the newer OpenAI name
        entry = log[rid] = {
            "received": received,
            "prompt_tokens": len(ids),
            "token_times": [],
            "max_tokens": n,
        }

        def chunk(piece: str | None, usage=None) -> str:
            if chat:
                choices = (
                    []
                    if piece is None
                    else [{"index": 0, "delta": {"content": piece}, "finish_reason": None}]
                )
                obj = {"id": rid, "object": "chat.completion.chunk", "model": MODEL_ID, "choices": choices}
            else:
                choices = [] if piece is None else [{"index": 0, "text": piece, "finish_reason": None}]
                obj = {"id": rid, "object": "text_completion", "model": MODEL_ID, "choices": choices}
            if usage:
                obj["usage"] = usage
            return f"data: {json.dumps(obj)}\n\n"

        async def stream():
            past, cur = None, ids
            for _ in range(n):
                tok, past = await asyncio.to_thread(gpt.step, cur, past)
                cur = [tok]
                entry["token_times"].append(time.monotonic())
                yield chunk(" " + tokenizer.impl.id_to_token(tok))
            yield chunk(
                None, {"prompt_tokens": len(ids), "completion_tokens": n, "total_tokens": len(ids) + n}
            )
            yield "data: [DONE]\n\n"

        return StreamingResponse(stream(), media_type="text/event-stream")

    @app.post("/v1/completions")
    async def completions(request: Request):
        return await generate(request, chat=False)

    @app.post("/v1/chat/completions")
    async def chat(request: Request):
        return await generate(request, chat=True)

    return app


@pytest.fixture(scope="module")
def gpt():
    return TinyGPT2()


@pytest.fixture(scope="module")
def tokenizer():
    return load_tokenizer("example")


def _trace(tmp_path, n=10):
    rows = ["TIMESTAMP,ContextTokens,GeneratedTokens"]
    rng = np.random.default_rng(7)
    for i in range(n):
        rows.append(f"{i * 0.15:.3f},{int(rng.integers(8, 60))},{int(rng.integers(6, 16))}")
    path = tmp_path / "llm.csv"
    path.write_text("\n".join(rows) + "\n")
    return path


def test_ttft_itl_and_counts_match_the_servers_own_timings(gpt, tokenizer, tmp_path):
    from chipswap.traffic import read_trace

    trace = read_trace(_trace(tmp_path))
    sched = build_schedule(
        trace.prompt_tokens,
        trace.output_tokens,
        trace.timestamps_s,
        max_requests=10,
        duration_s=30,
        length_map="none",
    )
    log: dict = {}
    client = OpenAIClient(kind="completions", tokenizer=tokenizer, seed=1)
    with run_app(make_openai_app(gpt, tokenizer, log)) as url:
        outcome = asyncio.run(run_load(url, sched, client, limits=RunLimits(timeout_s=30)))
    assert outcome.complete and outcome.server["id"] == MODEL_ID and client.model == MODEL_ID
    assert [r.status for r in outcome.records] == ["ok"] * 10
    ttft_gap, itl_client, itl_server = [], [], []
    for r in outcome.records:
        s = log[str(r.index)]
        # the prompt the load generator built has exactly the trace's token length in this tokenizer
        assert s["prompt_tokens"] == r.prompt_tokens == r.prompt_tokens_server
        assert s["max_tokens"] == r.max_tokens == r.output_tokens == len(r.itl_s) + 1
        server_ttft = s["token_times"][0] - s["received"]
        # the client's clock starts before the request leaves and stops after the chunk arrives
        assert r.ttft_s >= server_ttft - 0.002
        ttft_gap.append(r.ttft_s - server_ttft)
        gaps = np.diff(s["token_times"])
        itl_client.append(float(np.mean(r.itl_s)))
        itl_server.append(float(np.mean(gaps)))
        # streaming time from first to last token agrees with the server's within scheduling noise
        assert abs(sum(r.itl_s) - float(gaps.sum())) <= 0.05 + 0.1 * float(gaps.sum())
        assert r.e2e_s >= s["token_times"][-1] - s["received"] - 0.002
    # transport overhead on loopback is small against the server's own TTFT
    assert statistics.median(ttft_gap) < 0.1, ttft_gap
    assert statistics.median(itl_client) == pytest.approx(statistics.median(itl_server), rel=0.1, abs=0.003)


def test_bench_openai_chat_results_file(gpt, tokenizer, tmp_path):
    log: dict = {}
    with run_app(make_openai_app(gpt, tokenizer, log)) as url:
        doc = run_bench(
            BenchOptions(
                url=url + "/v1",
                protocol="chat",
                trace=str(_trace(tmp_path, 8)),
                max_requests=8,
                duration_s=30,
                timeout_s=30,
                slo=Slo(ttft_ms=5000, itl_ms=5000),
                instance="g6e.12xlarge",
            )
        )
    assert doc["complete"] and doc["counts"]["ok"] == 8
    assert doc["target"]["protocol"] == "openai-chat" and doc["target"]["model"] == MODEL_ID
    lat = doc["latency_ms"]
    assert lat["ttft"]["n"] == 8 and lat["itl"]["n"] == sum(e["max_tokens"] - 1 for e in log.values())
    assert lat["ttft"]["p50"] <= lat["e2e"]["p50"] and lat["tpot"]["p50"] > 0
    out_tokens = sum(e["max_tokens"] for e in log.values())
    assert doc["throughput"]["output_tokens_per_s"] == pytest.approx(out_tokens / doc["duration_s"], rel=1e-3)
    assert doc["goodput"]["fraction_of_sent"] == 1.0
    assert doc["cost"]["per_million_output_tokens_usd"] is not None
    assert doc["padding"] is None and doc["buckets"] == []


def _bad_app(kind: str) -> FastAPI:
    app = FastAPI()

    @app.get("/v1/models")
    async def models():
        return {"data": [{"id": "m"}]}

    @app.post("/v1/completions")
    async def completions():
        if kind == "html":
            return HTMLResponse("<html><body>Welcome to nginx!</body></html>")
        if kind == "json":  # ignores stream: true
            return {"choices": [{"text": "hello"}], "usage": {"completion_tokens": 1}}
        if kind == "status":
            return JSONResponse({"object": "error", "message": "model overloaded"}, status_code=503)

        async def broken():
            yield "data: {not json\n\n"

        return StreamingResponse(broken(), media_type="text/event-stream")

    return app


@pytest.mark.parametrize(
    "kind,words",
    [
        ("html", "not an OpenAI stream"),
        ("json", "content-type 'application/json'"),
        ("status", "HTTP 503: model overloaded"),
        ("broken", "stream event is not JSON"),
    ],
)
def test_non_openai_replies_stop_the_run_with_a_clear_message(tmp_path, kind, words):
    with run_app(_bad_app(kind)) as url:
        doc = run_bench(
            BenchOptions(
                url=url,
                protocol="completions",
                trace=str(_trace(tmp_path, 40)),
                max_requests=40,
                duration_s=30,
                timeout_s=5,
                rate=20.0,
            )
        )
    assert doc["complete"] is False and words in doc["stop_reason"], doc["stop_reason"]
    assert doc["counts"]["ok"] == 0 and doc["counts"]["not_sent"] > 0  # stopped early, partial results
    assert doc["errors"] and words in doc["errors"][0]["message"]
