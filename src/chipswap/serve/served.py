"""What the server serves: a model that runs gathered requests in fixed (batch, sequence) buckets.

``ServedModel`` is the one interface the dynamic batcher needs. Two kinds implement it:

- ``RouterModel``: the product. The compiled buckets of a compiled set (``chipswap compile --out``), loaded
  from the artifact cache through ``load_router`` (below) after the set file has been
  validated by
  ``chipswap.compile.compiler.read_compiled_set`` (cache keys are hex digests, shapes bounded) and checked
  here for
  what serving needs (token inputs, a vocabulary bound).
- ``EagerExactModel``: a benchmark reference, not for production. Eager PyTorch at each request's exact
  length, one request per call: what a GPU user writes first.

May not: open sockets, read the clock, or import torch at module import.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

from chipswap.compile.padding import InputTooLong
from chipswap.datafile import strict_int
from chipswap.errors import ChipswapError

if TYPE_CHECKING:  # pragma: no cover
    import torch

    from chipswap.compile.cache import ArtifactCache
    from chipswap.serve.router import Router

# A compiled set this server can feed: token inputs only (ids, mask, segment ids).
TOKEN_INPUT_NAMES = ("input_ids", "attention_mask", "token_type_ids")
MAX_VOCAB = 100_000_000


class ServedModel(Protocol):
    """A model the dynamic batcher can serve: requests grouped by bucket, run in compiled batch sizes."""

    name: str
    kind: str  # "compiled" or "eager-exact"
    max_length: int
    vocab_size: int | None
    output_names: tuple[str, ...]

    def bucket_for(self, length: int) -> int:
        """The sequence bucket a request of ``length`` tokens runs in; InputTooLong past the largest."""
        ...

    def batch_sizes(self, bucket: int) -> list[int]:
        """Compiled batch sizes of a bucket, ascending."""
        ...

    def shapes(self) -> list[tuple[int, int]]:
        """Every (batch, seq_len) the model runs; each is warmed before the server reports ready."""
        ...

    def run_bucket(self, rows: Sequence[Sequence[int]], batch: int, bucket: int) -> list[tuple[Any, ...]]:
        """Run up to ``batch`` requests in one call of the bucket; outputs per request, padding removed."""
        ...

    def warm(self) -> None:
        """Run every shape once (first runs allocate and page in; they must not hit a user's request)."""
        ...


@dataclass
class RouterModel:
    """The compiled buckets of a compiled set behind a Router."""

    router: Router
    name: str
    vocab_size: int | None = None
    output_names: tuple[str, ...] = ()
    kind: str = "compiled"
    backend: str = ""

    @property
    def max_length(self) -> int:
        return self.router.max_length

    def bucket_for(self, length: int) -> int:
        return self.router.bucket_for(length)

    def batch_sizes(self, bucket: int) -> list[int]:
        return self.router.batch_sizes_for(bucket)

    def shapes(self) -> list[tuple[int, int]]:
        return sorted(self.router.buckets, key=lambda k: (k[1], k[0]))

    def run_bucket(self, rows: Sequence[Sequence[int]], batch: int, bucket: int) -> list[tuple[Any, ...]]:
        return self.router.run_bucket(rows, batch, bucket)

    def warm(self) -> None:
        for batch, seq in self.shapes():
            self.router.run_bucket([[1] * seq] * batch, batch, seq)


@dataclass
class EagerExactModel:
    """Reference: eager PyTorch at each request's exact length, batch 1 (no padding, no batching)."""

    module: torch.nn.Module
    name: str
    max_length: int
    vocab_size: int | None = None
    input_names: tuple[str, ...] = ("input_ids", "attention_mask")
    output_names: tuple[str, ...] = ()
    kind: str = "eager-exact"
    _warm_lengths: tuple[int, ...] = field(default=(), repr=False)

    def bucket_for(self, length: int) -> int:
        if length > self.max_length:
            raise InputTooLong(length, self.max_length)
        return max(int(length), 1)

    def batch_sizes(self, bucket: int) -> list[int]:
        return [1]

    def shapes(self) -> list[tuple[int, int]]:
        return [(1, n) for n in self._warm_lengths or (1, self.max_length)]

    def run_bucket(self, rows: Sequence[Sequence[int]], batch: int, bucket: int) -> list[tuple[Any, ...]]:
        import torch

        out = []
        for row in rows:
            ids = torch.tensor([list(row)], dtype=torch.long)
            feed = {"input_ids": ids, "attention_mask": torch.ones_like(ids)}
            if "token_type_ids" in self.input_names:
                feed["token_type_ids"] = torch.zeros_like(ids)
            with torch.inference_mode():
                res = self.module(**{k: v for k, v in feed.items() if k in self.input_names})
            res_t = tuple(res) if isinstance(res, (tuple, list)) else (res,)
            out.append(tuple(t[0] for t in res_t))
        return out

    def warm(self) -> None:
        for _, n in self.shapes():
            self.run_bucket([[1] * n], 1, n)


# ------------------------------------------------------------------------------------------ compiled sets
def check_servable(cset: Mapping[str, Any], source: str) -> dict[str, Any]:
    """A compiled set (already validated by chipswap.compile.compiler.parse_compiled_set) that this server
    can feed:
    token inputs only, a model name, an optional vocab_size bound. One error line naming the problem."""
    where = f"compiled set {source}"
    names = list(cset["input_names"])
    other = [n for n in names if n not in TOKEN_INPUT_NAMES]
    if other or "input_ids" not in names:
        raise ChipswapError(
            f"{where}: the model takes {names}; chipswap serve feeds token ids only"
            f" ({', '.join(TOKEN_INPUT_NAMES)}); serve a text model"
        )
    if not str(cset.get("model") or "").strip():
        raise ChipswapError(f"{where}: 'model' names no model; recompile with chipswap compile --out")
    vocab = cset.get("vocab_size")
    vocab = None if vocab is None else strict_int(vocab, f"{where}: vocab_size", lo=1, hi=MAX_VOCAB)
    return {**cset, "vocab_size": vocab}


def validate_compiled_set(data: Any, source: str) -> dict[str, Any]:
    """Parsed JSON of a compiled set -> checked (shapes, hex cache keys, ...) and servable."""
    from chipswap.compile.compiler import parse_compiled_set

    return check_servable(parse_compiled_set(data, source), source)


def read_compiled_set(path: str | Path) -> dict[str, Any]:
    from chipswap.compile.compiler import read_compiled_set as read_set

    return check_servable(read_set(path), str(path))


def preset_vocab_size(name: str) -> int | None:
    """vocab_size of a shipped preset of that name (a name from a file is only ever looked up, never run)."""
    from chipswap import models

    if name not in models.preset_names():
        return None
    vocab = models.load_preset(name).get("config", {}).get("vocab_size")
    return int(vocab) if isinstance(vocab, int) and not isinstance(vocab, bool) and vocab > 0 else None


def load_router(
    compiled_set: str | Path | Mapping[str, Any],
    cache: ArtifactCache | None = None,
    *,
    policy: str = "first_fit",
    truncate: bool = False,
) -> Router:
    """A Router over every bucket of a compiled set, loaded from the cache (verified) in this process."""
    from chipswap.compile.backends import get_backend
    from chipswap.compile.backends.aoti import WEIGHTS_FILE, load_weights
    from chipswap.compile.cache import ArtifactCache
    from chipswap.compile.compiler import read_compiled_set as read_set
    from chipswap.serve.router import Router

    cset = read_set(compiled_set)  # every key and shape checked before the cache is touched
    cache = cache if cache is not None else ArtifactCache()
    be = get_backend(cset["backend"])

    def fetch(key: str) -> Path:
        e = cache.get(key)
        if e is None or e.state != "ready":
            raise ChipswapError(
                f"cache entry {key[:12]} is missing or corrupt in {cache.root}; rerun chipswap compile"
            )
        return e.path

    weights = None
    if cset.get("weights_key"):
        weights = load_weights(fetch(cset["weights_key"]) / WEIGHTS_FILE)
    buckets = {}
    for b in cset["buckets"]:
        buckets[(b["batch"], b["seq_len"])] = be.load(fetch(b["key"]), weights=weights)
    return Router(
        buckets,
        pad_token_id=cset["pad_token_id"],
        policy=policy,
        truncate=truncate,
        input_names=tuple(cset["input_names"]),
    )


def load_compiled_model(
    cset: Mapping[str, Any],
    cache: ArtifactCache | None = None,
    *,
    policy: str = "first_fit",
    truncate: bool = False,
) -> RouterModel:
    """Every bucket of a validated compiled set, loaded (and checksum-verified) from the artifact cache."""
    router = load_router(dict(cset), cache, policy=policy, truncate=truncate)
    outputs: tuple[str, ...] = ()
    for art in router.buckets.values():
        outputs = tuple(getattr(art, "output_names", ()) or ())
        break
    vocab = cset.get("vocab_size") or preset_vocab_size(str(cset["model"]))
    return RouterModel(router, str(cset["model"]), vocab, outputs, backend=str(cset["backend"]))


def eager_exact_model(
    spec: str, *, max_length: int | None = None, task: str | None = None
) -> EagerExactModel:
    """The eager reference for a model spec (preset, config.json, ...), random weights from its config."""
    from chipswap import models

    ref = models.resolve_model(spec, task=task)
    module = models.build_model(ref, task=task)
    names = tuple(models.input_names(ref, task=task))
    if any(n not in TOKEN_INPUT_NAMES for n in names):
        raise ChipswapError(f"{ref.name} takes {list(names)}; the eager reference feeds token ids only")
    mpe = ref.config.get("max_position_embeddings")
    limit = int(max_length or mpe or 512)
    if mpe is not None and limit > int(mpe):
        raise ChipswapError(
            f"--max-length {limit} is longer than {ref.name}'s max_position_embeddings {int(mpe)};"
            f" pass --max-length {int(mpe)} or less"
        )
    vocab = ref.config.get("vocab_size")
    warm = tuple(sorted({1, max(1, limit // 4), max(1, limit // 2), limit}))
    return EagerExactModel(module, ref.name, limit, int(vocab) if vocab else None, names, _warm_lengths=warm)
