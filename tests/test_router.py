"""Router: bucket choice per policy, pad values, batch padding, slicing back, InputTooLong / truncation."""

from __future__ import annotations

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from chipswap.compile.padding import InputTooLong, pad_batch
from chipswap.errors import ChipswapError
from chipswap.serve import Router, choose_batch, choose_bucket

PAD = 7


def test_policies_pick_the_right_bucket():
    b = [128, 32, 64]
    assert [choose_bucket(n, b, "first_fit") for n in (1, 32, 33, 64, 65, 128)] == [32, 32, 64, 64, 128, 128]
    second = [choose_bucket(n, b, "second_fit") for n in (1, 32, 33, 64, 65, 128)]
    assert second == [64, 64, 128, 128, 128, 128]
    assert {choose_bucket(n, b, "max") for n in (1, 50, 128)} == {128}
    with pytest.raises(ChipswapError, match="unknown routing policy"):
        choose_bucket(3, b, "best_fit")


def test_too_long_names_the_limit():
    with pytest.raises(InputTooLong) as ei:
        choose_bucket(129, [64, 128])
    msg = str(ei.value)
    assert "129 tokens" in msg and "(128 tokens)" in msg and "\n" not in msg
    assert ei.value.limit == 128 and ei.value.length == 129
    assert isinstance(ei.value, ChipswapError)


def test_choose_batch():
    assert [choose_batch(n, [1, 4, 8]) for n in (1, 2, 4, 5, 8, 9)] == [1, 4, 4, 8, 8, 8]


def test_pad_batch_pad_values():
    feed = pad_batch([[3, 4, 5], [9]], seq_len=6, batch=4, pad_token_id=PAD)
    ids, mask = feed["input_ids"], feed["attention_mask"]
    assert ids.tolist() == [[3, 4, 5, PAD, PAD, PAD], [9] + [PAD] * 5, [PAD] * 6, [PAD] * 6]
    assert mask.tolist() == [[1, 1, 1, 0, 0, 0], [1, 0, 0, 0, 0, 0], [0] * 6, [0] * 6]
    assert ids.dtype == torch.long and mask.dtype == torch.long


def _reference(row: list[int]) -> tuple[torch.Tensor, torch.Tensor]:
    """What a 'model' should answer for one unpadded request: pooled sum and per-token doubles."""
    t = torch.tensor(row, dtype=torch.float32)
    return t.sum().reshape(1), (t * 2)


def _fake_bucket(batch: int, seq: int, calls: list):
    def run(feed):
        ids, mask = feed["input_ids"], feed["attention_mask"]
        assert tuple(ids.shape) == (batch, seq), "router must feed exactly the compiled shape"
        calls.append((batch, seq))
        m = mask.float()
        pooled = (ids.float() * m).sum(dim=1, keepdim=True)  # [B, 1]
        per_token = ids.float() * 2 * m  # [B, S]
        return (pooled, per_token)

    return run


def _router(seqs=(8, 16), batches=(1, 2, 4), **kw):
    calls: list = []
    buckets = {(b, s): _fake_bucket(b, s, calls) for s in seqs for b in batches}
    return Router(buckets, pad_token_id=PAD, **kw), calls


def test_router_slices_back_per_request():
    r, calls = _router()
    reqs = [[1, 2, 3], list(range(1, 15)), [5], [4, 4, 4, 4, 4, 4, 4, 4]]
    out = r(reqs)
    for req, got in zip(reqs, out, strict=True):
        want = _reference(req)
        assert torch.equal(got[0], want[0])
        assert torch.equal(got[1], want[1])  # per-token output sliced to the request length
    # three requests fit bucket 8 (batch padded 3 -> 4), one needs bucket 16 (batch 1)
    assert sorted(calls) == [(1, 16), (4, 8)]
    assert r.stats.requests == 4 and r.stats.batches == 2
    real = sum(len(x) for x in reqs)
    assert r.stats.real_tokens == real
    assert r.stats.padded_tokens == 4 * 8 + 16 - real


def test_router_splits_large_groups():
    r, calls = _router(seqs=(8,), batches=(1, 2))
    out = r([[1]] * 5)
    assert len(out) == 5 and sorted(calls) == [(1, 8), (2, 8), (2, 8)]


def test_router_too_long_and_truncate():
    r, _ = _router()
    with pytest.raises(InputTooLong, match=r"\(16 tokens\)"):
        r([[1] * 17])
    rt, _ = _router(truncate=True)
    out = rt([list(range(1, 21)), [2]])
    assert rt.stats.truncated == 1
    assert torch.equal(out[0][0], _reference(list(range(1, 17)))[0])


def test_router_policy_max_uses_largest():
    r, calls = _router(policy="max")
    r([[1, 2]])
    assert calls == [(1, 16)]


def test_router_needs_buckets():
    with pytest.raises(ChipswapError, match="at least one compiled bucket"):
        Router({})


@settings(max_examples=60, deadline=None)
@given(
    st.lists(st.lists(st.integers(1, 50), min_size=1, max_size=16), min_size=1, max_size=9),
    st.sampled_from(["first_fit", "second_fit", "max"]),
)
def test_router_equals_unpadded_reference(reqs, policy):
    r, calls = _router(policy=policy)
    out = r(reqs)
    assert len(out) == len(reqs)
    for req, got in zip(reqs, out, strict=True):
        want = _reference(req)
        assert torch.equal(got[0], want[0]) and torch.equal(got[1], want[1])
    assert r.stats.requests == len(reqs)
    assert r.stats.real_tokens + r.stats.padded_tokens == sum(b * s for b, s in calls)


def test_bucket_for_and_run_bucket_serve_one_gathered_batch():
    r, calls = _router()
    assert [r.bucket_for(n) for n in (1, 8, 9, 16)] == [8, 8, 16, 16]
    with pytest.raises(InputTooLong):
        r.bucket_for(17)
    rows = [[1, 2], [3, 4, 5]]
    out = r.run_bucket(rows, 4, 8)  # two real rows in a compiled batch of 4 at sequence bucket 8
    assert calls == [(4, 8)]
    for row, got in zip(rows, out, strict=True):
        want = _reference(row)
        assert torch.equal(got[0], want[0]) and torch.equal(got[1], want[1])
    assert r.stats.padded_tokens == 4 * 8 - 5 and r.stats.per_bucket == {"4x8": 1}
    with pytest.raises(ChipswapError, match="no compiled bucket 3x8"):
        r.run_bucket(rows, 3, 8)


def test_bucket_for_with_truncation_uses_the_largest():
    r, _ = _router(truncate=True)
    assert r.bucket_for(40) == 16
    out = r.run_bucket([list(range(1, 30))], 1, 16)
    assert torch.equal(out[0][0], _reference(list(range(1, 17)))[0]) and r.stats.truncated == 1
