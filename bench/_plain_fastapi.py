"""The plain baseline for bench_serve.py: the eager FastAPI server a user writes by hand in ~60 lines.

python bench/_plain_fastapi.py MODEL_SPEC PORT [--threads N] [--max-length N]

A pydantic body, the model run eagerly at the request's exact length in FastAPI's thread pool (a plain
`def` route), the answer as a dict. It speaks chipswap serve's /v1/predict and /v1/models shapes (batch 1, no
padding) so that `chipswap bench` can drive it. No batching, no queue bound, no connection gate, no metrics:
what a team would otherwise run, not a production server.
"""

from __future__ import annotations

import sys

import torch
import uvicorn
from fastapi import FastAPI, HTTPException
from pydantic import BaseModel

import _results  # noqa: F401  (puts src/ on the path)
from chipswap import models

spec, port = sys.argv[1], int(sys.argv[2])
threads = int(sys.argv[sys.argv.index("--threads") + 1]) if "--threads" in sys.argv else 1
torch.set_num_threads(threads)
ref = models.resolve_model(spec)
model = models.build_model(ref).eval()
max_len = int(sys.argv[sys.argv.index("--max-length") + 1]) if "--max-length" in sys.argv else 512
vocab = int(ref.config["vocab_size"])
names = models.input_names(ref)
app = FastAPI()


class Predict(BaseModel):
    input_ids: list[int]


@app.get("/v1/models")
def list_models() -> dict:
    return {"data": [{"id": ref.name, "max_length": max_len, "vocab_size": vocab}]}


@app.get("/healthz")
def healthz() -> dict:
    return {"status": "ok"}


@app.post("/v1/predict")
def predict(req: Predict) -> dict:
    if not req.input_ids or len(req.input_ids) > max_len:
        raise HTTPException(422, "input empty or too long")
    ids = torch.tensor([req.input_ids])
    feed = {"input_ids": ids, "attention_mask": torch.ones_like(ids), "token_type_ids": torch.zeros_like(ids)}
    with torch.inference_mode():
        out = model(**{k: v for k, v in feed.items() if k in names})
    logits = out[0] if isinstance(out, (tuple, list)) else out
    return {
        "outputs": {"logits": logits[0].tolist()},
        "bucket": {"seq_len": len(req.input_ids), "batch": 1, "fill": 1},
    }


if __name__ == "__main__":
    with torch.inference_mode():  # warm up once at the longest length
        model(**{k: torch.ones(1, max_len, dtype=torch.long) for k in names if k != "token_type_ids"})
    uvicorn.run(app, host="127.0.0.1", port=port, log_level="warning")
