"""The seed's example end to end: a DistilBERT sequence classifier (distilbert-base dimensions from config,
random weights) compiled at sequence length 128 by `chipswap compile`, loaded in a FRESH process from the
cache, answering with the same logits as eager PyTorch; a 129-token input gets the clear InputTooLong
error."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
import torch

pytestmark = pytest.mark.slow
ROOT = Path(__file__).resolve().parents[1]

SERVE = r"""
import json, sys
from chipswap.compile.cache import ArtifactCache
from chipswap.serve.served import load_router
from chipswap.errors import ChipswapError
cset, cache_dir, reqs = sys.argv[1], sys.argv[2], json.loads(sys.argv[3])
router = load_router(cset, ArtifactCache(cache_dir))
logits = [out[0].tolist() for out in router(reqs)]
try:
    router([[101] * 129])
    too_long = None
except ChipswapError as exc:
    too_long = [type(exc).__name__, str(exc)]
print(json.dumps({"logits": logits, "too_long": too_long, "stats": router.stats.to_json()}))
"""


def test_distilbert_seq128_fresh_process_same_logits(tmp_path):
    from chipswap.compile.keys import weights_digest
    from chipswap.models import build_model, resolve_model

    cache, cset = tmp_path / "cache", tmp_path / "distilbert-128.json"
    r = subprocess.run(
        [
            sys.executable,
            "-m",
            "chipswap",
            "compile",
            "distilbert-base",
            "--seq-len",
            "128",
            "--cache-dir",
            str(cache),
            "--out",
            str(cset),
            "--json",
        ],
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=600,
    )
    assert r.returncode == 0, r.stderr[-3000:]
    report = json.loads(r.stdout)
    assert report["ok"] and [(b["batch"], b["seq_len"]) for b in report["buckets"]] == [(1, 128)]
    compile_diff = report["buckets"][0]["max_abs_diff"]
    assert compile_diff < 1e-4

    ref = resolve_model("distilbert-base")
    model = build_model(ref)
    # the compiled set was made from exactly these weights (same preset, same seed)
    assert json.loads(cset.read_text())["weights_digest"] == weights_digest(model)
    vocab = int(ref.config["vocab_size"])
    g = torch.Generator().manual_seed(7)
    reqs = [torch.randint(1, vocab, (n,), generator=g).tolist() for n in (128, 37, 5)]

    s = subprocess.run(
        [sys.executable, "-c", SERVE, str(cset), str(cache), json.dumps(reqs)],
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=300,
    )
    assert s.returncode == 0, s.stderr[-3000:]
    served = json.loads(s.stdout.strip().splitlines()[-1])

    worst_unpadded = 0.0
    worst_padded = 0.0
    pad = int(ref.config.get("pad_token_id") or 0)
    with torch.no_grad():
        for req, got in zip(reqs, served["logits"], strict=True):
            got_t = torch.tensor(got)
            ids = torch.tensor([req])
            eager = model(input_ids=ids, attention_mask=torch.ones_like(ids))[0][0]
            worst_unpadded = max(worst_unpadded, float((got_t - eager).abs().max()))
            padded = torch.full((1, 128), pad)
            padded[0, : len(req)] = ids[0]
            mask = torch.zeros(1, 128, dtype=torch.long)
            mask[0, : len(req)] = 1
            eager_p = model(input_ids=padded, attention_mask=mask)[0][0]
            worst_padded = max(worst_padded, float((got_t - eager_p).abs().max()))
    assert worst_padded < 1e-4, worst_padded
    assert worst_unpadded < 1e-4, worst_unpadded  # padding to the bucket does not change the answer
    name, msg = served["too_long"]
    assert name == "InputTooLong"
    assert "129 tokens" in msg and "largest compiled bucket (128 tokens)" in msg
    assert served["stats"]["requests"] == 3 and served["stats"]["real_tokens"] == 170
    print(
        f"\ndistilbert-base seq 128: compile check max abs diff {compile_diff:.2e}; fresh process vs eager:"
        f" padded {worst_padded:.2e}, unpadded {worst_unpadded:.2e}; 129 tokens -> {msg}"
    )
