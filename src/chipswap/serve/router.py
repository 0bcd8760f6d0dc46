"""Route variable-length requests onto fixed-shape compiled buckets: choose, pad, run, slice back.

A bucket is one compiled artifact for (batch size, sequence length). For a group of requests the router picks
a sequence bucket by policy, pads token ids with the model's ``pad_token_id`` and the attention mask with 0,
pads the batch up to a compiled batch size with whole padding rows, runs the artifact, and returns each
request's outputs with the padding rows (and, for per-token outputs, the padding positions) sliced off.

Policies (``lengths`` sorted ascending, ``n`` = the longest request):
- ``first_fit``  the smallest bucket >= n (least padding);
- ``second_fit`` the next bucket up from first fit when there is one (head-room when requests grow; mirrors
                 the planner's "second fit" baseline);
- ``max``        always the largest bucket (one shape, most padding: the no-bucketing baseline).

Longer than the largest bucket: ``InputTooLong`` naming the limit, or, with ``truncate=True``, the request is
cut to the largest bucket and counted in ``stats.truncated``.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from typing import TYPE_CHECKING, Any

from chipswap.compile.padding import InputTooLong, pad_batch
from chipswap.errors import ChipswapError

if TYPE_CHECKING:  # pragma: no cover
    import torch

POLICIES = ("first_fit", "second_fit", "max")


def choose_bucket(length: int, buckets: Sequence[int], policy: str = "first_fit") -> int:
    """The sequence bucket for an input of ``length`` tokens. Raises InputTooLong beyond the largest
    bucket."""
    if policy not in POLICIES:
        raise ChipswapError(f"unknown routing policy: {policy!r}; choose one of {', '.join(POLICIES)}")
    if not buckets:
        raise ChipswapError("no compiled buckets to route to; compile at least one with chipswap compile")
    ordered = sorted(set(int(b) for b in buckets))
    if length > ordered[-1]:
        raise InputTooLong(length, ordered[-1])
    if policy == "max":
        return ordered[-1]
    fits = [b for b in ordered if b >= length]
    if policy == "second_fit" and len(fits) > 1:
        return fits[1]
    return fits[0]


def choose_batch(n: int, batch_sizes: Sequence[int]) -> int:
    """The smallest compiled batch size >= n (the largest when n exceeds them all; the caller splits)."""
    ordered = sorted(set(int(b) for b in batch_sizes))
    for b in ordered:
        if b >= n:
            return b
    return ordered[-1]


@dataclass
class RouterStats:
    requests: int = 0
    batches: int = 0
    truncated: int = 0
    real_tokens: int = 0
    padded_tokens: int = 0  # slots computed on padding (sequence + batch padding)
    per_bucket: dict[str, int] = field(default_factory=dict)

    @property
    def padding_fraction(self) -> float:
        total = self.real_tokens + self.padded_tokens
        return self.padded_tokens / total if total else 0.0

    def to_json(self) -> dict[str, Any]:
        return {**asdict(self), "padding_fraction": round(self.padding_fraction, 6)}


Runner = Callable[[Mapping[str, "torch.Tensor"]], Sequence["torch.Tensor"]]


class Router:
    """Serve requests of any length (up to the largest bucket) from fixed-shape compiled artifacts.

    ``buckets`` maps (batch_size, seq_len) -> callable(dict of tensors) -> tuple of tensors (a LoadedArtifact,
    or any function, e.g. eager PyTorch for a reference).
    """

    def __init__(
        self,
        buckets: Mapping[tuple[int, int], Runner],
        *,
        pad_token_id: int = 0,
        policy: str = "first_fit",
        truncate: bool = False,
        input_names: Sequence[str] = ("input_ids", "attention_mask"),
    ) -> None:
        if not buckets:
            raise ChipswapError("a router needs at least one compiled bucket; run chipswap compile first")
        if policy not in POLICIES:
            raise ChipswapError(f"unknown routing policy: {policy!r}; choose one of {', '.join(POLICIES)}")
        self.buckets = dict(buckets)
        self.pad_token_id = int(pad_token_id)
        self.policy = policy
        self.truncate = truncate
        self.input_names = tuple(input_names)
        self.seq_buckets = sorted({s for _, s in self.buckets})
        self.stats = RouterStats()
        self._lock = threading.Lock()

    @property
    def max_length(self) -> int:
        return self.seq_buckets[-1]

    def batch_sizes_for(self, seq_len: int) -> list[int]:
        return sorted(b for b, s in self.buckets if s == seq_len)

    def bucket_for(self, length: int) -> int:
        """The sequence bucket a request of ``length`` tokens runs in (InputTooLong past the largest)."""
        if length > self.max_length and self.truncate:
            return choose_bucket(self.max_length, self.seq_buckets, self.policy)
        return choose_bucket(max(int(length), 1), self.seq_buckets, self.policy)

    def _prepare(self, req: Sequence[int]) -> list[int]:
        row = [int(x) for x in (req.tolist() if hasattr(req, "tolist") else req)]
        if len(row) > self.max_length:
            if not self.truncate:
                raise InputTooLong(len(row), self.max_length)
            with self._lock:
                self.stats.truncated += 1
            row = row[: self.max_length]
        return row

    def bucket_names(self) -> str:
        return ", ".join(f"{b}x{s}" for b, s in sorted(self.buckets, key=lambda k: (k[1], k[0])))

    def __call__(self, requests: Sequence[Sequence[int]]) -> list[tuple[torch.Tensor, ...]]:
        return self.run(requests)

    def run(self, requests: Sequence[Sequence[int]]) -> list[tuple[torch.Tensor, ...]]:
        """Outputs for each request (in order), padding removed. Requests are grouped by their sequence bucket
        and each group is cut into compiled batch sizes (largest first, the tail padded up)."""
        rows = [self._prepare(r) for r in requests]
        groups: dict[int, list[int]] = {}
        for idx, row in enumerate(rows):
            groups.setdefault(self.bucket_for(len(row)), []).append(idx)
        out: dict[int, tuple[torch.Tensor, ...]] = {}
        for seq, idxs in sorted(groups.items()):
            sizes = self.batch_sizes_for(seq)
            if not sizes:  # a full plan compiles every batch size for every sequence bucket
                raise ChipswapError(f"no batch size compiled for sequence bucket {seq}; recompile the plan")
            i = 0
            while i < len(idxs):
                batch = choose_batch(len(idxs) - i, sizes)
                part = idxs[i : i + batch]
                for k, res in zip(part, self.run_bucket([rows[k] for k in part], batch, seq), strict=True):
                    out[k] = res
                i += len(part)
        return [out[k] for k in range(len(rows))]

    def run_bucket(
        self, chunk: Sequence[Sequence[int]], batch: int, seq: int
    ) -> list[tuple[torch.Tensor, ...]]:
        """Run up to ``batch`` requests (each at most ``seq`` tokens) in the compiled (batch, seq) bucket:
        pad, run once, slice back. The dynamic batcher calls this with the requests it gathered."""
        if (batch, seq) not in self.buckets:
            raise ChipswapError(f"no compiled bucket {batch}x{seq}; compiled: {self.bucket_names()}")
        chunk = [self._prepare(r) for r in chunk]
        feed = pad_batch(chunk, seq, batch, self.pad_token_id)
        if "token_type_ids" in self.input_names:  # BERT-style segment ids: one segment, zeros
            feed["token_type_ids"] = feed["input_ids"].new_zeros(feed["input_ids"].shape)
        feed = {k: v for k, v in feed.items() if k in self.input_names}
        result = self.buckets[(batch, seq)](feed)
        real = sum(len(r) for r in chunk)
        with self._lock:
            self.stats.requests += len(chunk)
            self.stats.batches += 1
            self.stats.real_tokens += real
            self.stats.padded_tokens += batch * seq - real
            k = f"{batch}x{seq}"
            self.stats.per_bucket[k] = self.stats.per_bucket.get(k, 0) + 1
        res = []
        for j, row in enumerate(chunk):
            parts = []
            for t in result:
                r = t[j]
                if r.dim() >= 1 and r.shape[0] == seq and t.dim() >= 2:
                    r = r[: len(row)]  # per-token output: drop padding positions
                parts.append(r)
            res.append(tuple(parts))
        return res
