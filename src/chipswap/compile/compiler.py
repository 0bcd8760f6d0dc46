"""Compile every bucket of a shape plan (sequence buckets x batch sizes), cache the artifacts, check them.

For each bucket: build padded inputs exactly as the runtime router will (ids right-padded with
``pad_token_id``, mask 0), compile through the artifact cache (one compile per key across processes), load the
artifact back, run it and eager PyTorch on the same padded input, and report the max abs difference against
``atol``.

The result is a *compiled set* (JSON, schema ``chipswap.compiled/1``): the bucket -> cache key table plus what
the runtime needs (input names, pad token id, the weights entry for AOTInductor); chipswap.serve.served's
``load_router(set, cache)`` rebuilds a Router from it in any process, without the original model. A
compiled set may come from someone else: ``parse_compiled_set`` checks every field (keys are cache keys,
shapes strict integers within the plan bounds) before the cache is touched, so no name in
it becomes a path unchecked.
"""

from __future__ import annotations

import json
import os
import sys
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from chipswap import __version__
from chipswap.compile.identity import model_identity
from chipswap.datafile import read_json, strict_int
from chipswap.errors import ChipswapError
from chipswap.shapes.planfile import (
    MAX_BATCH_BUCKET,
    MAX_BUCKET_TOKENS,
    MAX_SEQUENCE_BUCKET,
    MAX_SHAPES,
    BucketPlan,
    _int_list,
    check_shapes,
)
from chipswap.shapes.planfile import PLAN_SCHEMA as PLAN_SCHEMA
from chipswap.shapes.planfile import load_plan as load_plan
from chipswap.shapes.planfile import parse_plan as parse_plan

if TYPE_CHECKING:  # pragma: no cover
    import torch

    from chipswap.compile.cache import ArtifactCache

SET_SCHEMA = "chipswap.compiled/1"
DEFAULT_ATOL = 1e-3
TOKEN_INPUTS = ("input_ids", "attention_mask", "token_type_ids")
MAX_SET_BYTES = 16 * 2**20  # a compiled set is a few KB: one line per bucket
MAX_INPUT_NAMES = 64
MAX_NAME_CHARS = 256
MAX_TOKEN_ID = 2**31 - 1


# Plans are read by chipswap.shapes.planfile (shared with `chipswap check`); re-exported here for callers.


def plan_from_args(seq_lens: Sequence[int], batch_sizes: Sequence[int] = (1,)) -> BucketPlan:
    seq = _int_list(list(seq_lens), "--seq-len", "arguments")
    batch = _int_list(list(batch_sizes), "--batch-sizes", "arguments")
    check_shapes(seq, batch, "arguments")
    return BucketPlan(seq, batch, seq[-1])


def check_out_path(path: str | Path) -> Path:
    """Fail before any compile when the compiled-set file cannot be written: not a folder, parent writable;
    a FIFO, /dev/null or standard output (``-``) is written directly, a device or socket refused."""
    from chipswap.atomic import check_target

    p = Path(path)
    if p.is_dir():
        raise ChipswapError(
            f"--out {p} is a directory; pass a file path for the compiled set,"
            f" e.g. --out {p / 'compiled.json'}"
        )
    if check_target(p, "--out") in ("fd", "stream"):
        return p
    parent = p.parent if str(p.parent) else Path(".")
    if not parent.is_dir():
        raise ChipswapError(f"--out {p}: folder {parent} does not exist; create it or pick another path")
    if not os.access(parent, os.W_OK | os.X_OK):
        raise ChipswapError(f"--out {p}: folder {parent} is not writable; pick a writable path")
    if p.exists() and not os.access(p, os.W_OK):
        raise ChipswapError(f"--out {p} exists and is not writable; pick another path or fix its permissions")
    return p


def check_model_against_plan(
    config: Mapping[str, Any], plan: BucketPlan, model_name: str = "model", *, seq_flag: bool = False
) -> None:
    """Model/plan mismatches that would make a bucket wrong or uncompilable: one-line ChipswapError.

    seq_flag: the buckets came from --seq-len (name the flag, not a plan, in the message)."""
    largest = plan.sequence_buckets[-1]
    mpe = config.get("max_position_embeddings") or config.get("n_positions")
    if mpe is not None and int(mpe) < largest and seq_flag:
        raise ChipswapError(
            f"--seq-len {largest} is longer than the model's max_position_embeddings {int(mpe)}"
            f" ({model_name}); pass --seq-len {int(mpe)} or less"
        )
    if mpe is not None and int(mpe) < largest:
        raise ChipswapError(
            f"plan's largest sequence bucket {largest} is longer than {model_name}'s max_position_embeddings"
            f" {int(mpe)}; drop the buckets above {int(mpe)} or re-plan with --max-length {int(mpe)}"
        )
    vocab = config.get("vocab_size")
    pv = plan.extra.get("vocab_size")
    if pv is not None and vocab is not None and int(pv) != int(vocab):
        raise ChipswapError(
            f"plan was made for vocab_size {int(pv)} but {model_name} has vocab_size {int(vocab)};"
            " re-plan with this model's tokenizer or pass the matching model"
        )
    pad = config.get("pad_token_id")
    if pad is not None and vocab is not None and not 0 <= int(pad) < int(vocab):
        raise ChipswapError(
            f"{model_name}'s pad_token_id {pad} is outside its vocabulary (0..{int(vocab) - 1});"
            " set pad_token_id in the model config"
        )


# ----------------------------------------------------------------------------------------------- inputs
def padded_inputs(
    input_names: Sequence[str], batch: int, seq: int, vocab_size: int, pad_token_id: int, seed: int = 0
) -> dict[str, torch.Tensor]:
    """Inputs as the router builds them: row i holds a random prefix (full length for row 0, shorter after)
    right-padded with pad_token_id (mask 0); token_type_ids zeros."""
    import torch

    from chipswap.compile.padding import pad_batch

    gen = torch.Generator().manual_seed(seed + 1000 * batch + seq)
    rows = []
    for i in range(batch):
        n = max(1, seq - (i * seq) // (2 * batch)) if i else seq
        low = 1 if vocab_size > 1 else 0
        rows.append(torch.randint(low, max(vocab_size, 1), (n,), generator=gen).tolist())
    feed = pad_batch(rows, seq, batch, pad_token_id)
    out = {}
    for name in input_names:
        if name in feed:
            out[name] = feed[name]
        elif name == "token_type_ids":
            out[name] = torch.zeros(batch, seq, dtype=torch.long)
        else:
            raise ChipswapError(f"cannot build a padded {name!r} input; this model needs example inputs")
    return out


# ---------------------------------------------------------------------------------------------- compiling
@dataclass
class CompileTarget:
    """A model to compile: module (forward(**inputs) -> tuple), its config, and how to make bucket inputs."""

    name: str
    model: torch.nn.Module
    config: dict[str, Any]
    input_names: tuple[str, ...] = ("input_ids", "attention_mask")
    make_inputs: Callable[[int, int], dict[str, torch.Tensor]] | None = None

    @property
    def pad_token_id(self) -> int:
        pad = self.config.get("pad_token_id")
        return int(pad) if pad is not None else 0

    def inputs_for(self, batch: int, seq: int) -> dict[str, torch.Tensor]:
        if all(n in TOKEN_INPUTS for n in self.input_names):
            vocab = int(self.config.get("vocab_size") or 1000)
            return padded_inputs(self.input_names, batch, seq, vocab, self.pad_token_id)
        if self.make_inputs is None:
            raise ChipswapError(f"{self.name} takes {list(self.input_names)}; give example inputs for it")
        return self.make_inputs(batch, seq)


def target_from_spec(spec: str, task: str | None = None, *, trust_native: bool = False) -> CompileTarget:
    """Resolve a model spec (preset, config.json, pkg.mod:factory, .pt2) through chipswap.models (a .pt2 with
    native code is refused unless trust_native)."""
    from chipswap import models

    ref = models.resolve_model(spec, task=task, trust_native=trust_native)
    module = models.build_model(ref, task=task)
    names = tuple(models.input_names(ref, task=task))
    return CompileTarget(
        name=ref.name,
        model=module,
        config=dict(ref.config),
        input_names=names,
        make_inputs=lambda b, s: models.example_inputs(ref, b, s, task=task),
    )


@dataclass
class BucketResult:
    batch: int
    seq: int
    key: str
    cached: bool
    compile_s: float
    max_abs_diff: float
    ok: bool
    size_bytes: int

    def to_json(self) -> dict[str, Any]:
        fields = {("seq_len" if k == "seq" else k): v for k, v in asdict(self).items()}
        return {**fields, "compile_s": round(self.compile_s, 3)}


@dataclass
class CompileReport:
    model: str
    backend: str
    atol: float
    cache_dir: str
    buckets: list[BucketResult]
    compiled_set: dict[str, Any]

    @property
    def ok(self) -> bool:
        return all(b.ok for b in self.buckets)

    def to_json(self) -> dict[str, Any]:
        return {
            "schema": "chipswap.compile-report/1",
            "model": self.model,
            "backend": self.backend,
            "atol": self.atol,
            "cache_dir": self.cache_dir,
            "ok": self.ok,
            "buckets": [b.to_json() for b in self.buckets],
            "compiled_set": self.compiled_set,
        }


def max_abs_diff(a: Sequence[torch.Tensor], b: Sequence[torch.Tensor]) -> float:
    if len(a) != len(b):
        return float("inf")
    worst = 0.0
    for x, y in zip(a, b, strict=True):
        if tuple(x.shape) != tuple(y.shape):
            return float("inf")
        if x.numel():
            worst = max(worst, float((x.detach().double() - y.detach().double()).abs().max()))
    return worst


class _Progress:
    """rich progress bar on a TTY, plain lines on stderr otherwise, nothing when quiet."""

    def __init__(self, total: int, enabled: bool) -> None:
        self.enabled = enabled
        self.bar = None
        self.task = None
        if enabled and sys.stderr.isatty():
            from rich.console import Console
            from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

            self.bar = Progress(
                TextColumn("[bold]compile[/] {task.description}"),
                BarColumn(),
                MofNCompleteColumn(),
                TimeElapsedColumn(),
                console=Console(stderr=True),
                transient=False,
            )
            self.bar.start()
            self.task = self.bar.add_task("", total=total)

    def start(self, what: str) -> None:
        if self.bar is not None:
            self.bar.update(self.task, description=what)
        elif self.enabled:
            sys.stderr.write(f"compile: {what} ...\n")
            sys.stderr.flush()

    def done(self, line: str) -> None:
        if self.bar is not None:
            self.bar.advance(self.task)
        elif self.enabled:
            sys.stderr.write(f"compile: {line}\n")
            sys.stderr.flush()

    def close(self) -> None:
        if self.bar is not None:
            self.bar.stop()


def _weights_entry(cache: ArtifactCache, target: CompileTarget, gd: str, wd: str) -> str:
    import torch

    from chipswap.compile.backends.aoti import WEIGHTS_FILE, save_weights
    from chipswap.compile.keys import KeyParts

    parts = KeyParts.make(
        graph=gd,
        weights=wd,
        inputs=(),
        backend="weights",
        backend_version=f"torch-{torch.__version__}",
        kind="weights",
    )
    entry, _ = cache.get_or_build(
        parts, lambda d: save_weights(target.model, d / WEIGHTS_FILE), meta={"model": target.name}
    )
    return entry.key


def compile_plan(
    target: CompileTarget,
    plan: BucketPlan,
    *,
    backend: str = "onnxruntime",
    cache: ArtifactCache | None = None,
    atol: float = DEFAULT_ATOL,
    flags: Mapping[str, str] | None = None,
    retry_failed: bool = False,
    progress: bool = True,
) -> CompileReport:
    """Compile (or fetch from the cache) every bucket of ``plan`` and check each against eager PyTorch."""
    import torch

    from chipswap.compile.backends import get_backend
    from chipswap.compile.backends.aoti import WEIGHTS_FILE, load_weights
    from chipswap.compile.cache import ArtifactCache
    from chipswap.compile.keys import KeyParts, graph_digest, weights_digest

    be = get_backend(backend)
    be.check_available()
    check_model_against_plan(target.config, plan, target.name)
    cache = cache if cache is not None else ArtifactCache()
    cache.ensure_writable()
    all_flags = {**be.default_flags(), **(flags or {})}
    model = target.model.eval()
    gd = graph_digest(model)
    wd = weights_digest(model)
    weights_key = None
    weights = None
    if be.needs_weights and all_flags.get("embed_weights", "0") != "1":
        weights_key = _weights_entry(cache, target, gd, wd)
        weights = load_weights(cache.entry_dir(weights_key) / WEIGHTS_FILE)
    shapes = plan.shapes
    bar = _Progress(len(shapes), progress)
    results: list[BucketResult] = []
    version = be.version()
    try:
        for batch, seq in shapes:
            what = f"{target.name} {backend} batch {batch} x seq {seq}"
            bar.start(what)
            inputs = target.inputs_for(batch, seq)
            parts = KeyParts.make(
                graph=gd, weights=wd, inputs=inputs, backend=backend, backend_version=version, flags=all_flags
            )
            t0 = time.monotonic()
            entry, built = cache.get_or_build(
                parts,
                lambda d, inputs=inputs: be.compile(model, inputs, d, flags=all_flags),
                meta={
                    "model": target.name,
                    "backend": backend,
                    "batch": batch,
                    "seq_len": seq,
                    "input_names": list(inputs),
                    "weights_key": weights_key,
                },
                retry_failed=retry_failed,
            )
            took = time.monotonic() - t0
            art = be.load(entry.path, weights=weights)
            with torch.no_grad():
                ref = model(**inputs)
                got = art(inputs)
            ref_t = tuple(ref) if isinstance(ref, (tuple, list)) else (ref,)
            diff = max_abs_diff(got, ref_t)
            results.append(
                BucketResult(
                    batch, seq, entry.key, not built, took if built else 0.0, diff, diff <= atol, entry.size
                )
            )
            bar.done(f"{what}: {'compiled' if built else 'cached'} {entry.key[:12]} max abs diff {diff:.2e}")
    finally:
        bar.close()
    cset = {
        "schema": SET_SCHEMA,
        "chipswap": __version__,
        "model": target.name,
        "backend": backend,
        "graph_digest": gd,
        "weights_digest": wd,
        "weights_key": weights_key,
        "input_names": list(target.input_names),
        "pad_token_id": target.pad_token_id,
        "vocab_size": target.config.get("vocab_size"),  # chipswap serve refuses ids outside it (422, not 500)
        "buckets": [{"batch": r.batch, "seq_len": r.seq, "key": r.key} for r in results],
        # what `chipswap serve` lists and `chipswap bench` records: parameters, config digest, dtype
        "identity": model_identity(target.model, target.config),
    }
    return CompileReport(target.name, backend, atol, str(cache.root), results, cset)


def save_compiled_set(report_or_set: CompileReport | Mapping[str, Any], path: str | Path) -> Path:
    from chipswap.atomic import atomic_write_text

    cset = report_or_set.compiled_set if isinstance(report_or_set, CompileReport) else dict(report_or_set)
    return atomic_write_text(path, json.dumps(cset, indent=1, sort_keys=True) + "\n")


def _set_error(source: str, what: str) -> ChipswapError:
    return ChipswapError(f"compiled set {source}: {what}; rerun chipswap compile --out to write a fresh one")


def parse_compiled_set(data: Any, source: str = "<compiled set>") -> dict[str, Any]:
    """A validated copy of a ``chipswap.compiled/1`` document: every name and number checked (cache keys are
    hex digests, shapes strict integers within the plan bounds, no duplicate shapes) before it is used."""
    from chipswap.compile.backends import BACKEND_NAMES
    from chipswap.compile.cache import check_key
    from chipswap.textsafe import one_line

    if not isinstance(data, Mapping):
        raise _set_error(source, "not a JSON object")
    if data.get("schema") != SET_SCHEMA:
        raise ChipswapError(
            f"not a compiled set (schema {one_line(repr(data.get('schema')), 80)}); write one with"
            " chipswap compile --out"
        )
    backend = data.get("backend")
    if backend not in BACKEND_NAMES:
        raise _set_error(
            source, f"backend {one_line(repr(backend), 80)} is not one of {', '.join(BACKEND_NAMES)}"
        )
    raw = data.get("buckets")
    if not isinstance(raw, list) or not raw:
        raise _set_error(source, "'buckets' must be a non-empty list")
    if len(raw) > MAX_SHAPES:
        raise _set_error(source, f"'buckets' lists {len(raw):,} shapes, over the limit of {MAX_SHAPES:,}")
    buckets: list[dict[str, Any]] = []
    seen: set[tuple[int, int]] = set()
    for i, b in enumerate(raw):
        where = f"compiled set {source}: buckets[{i}]"
        if not isinstance(b, Mapping):
            raise _set_error(source, f"buckets[{i}] is not an object with batch, seq_len and key")
        batch = strict_int(b.get("batch"), f"{where}.batch", lo=1, hi=MAX_BATCH_BUCKET)
        seq = strict_int(b.get("seq_len"), f"{where}.seq_len", lo=1, hi=MAX_SEQUENCE_BUCKET)
        if batch * seq > MAX_BUCKET_TOKENS:
            raise _set_error(
                source, f"buckets[{i}] is {batch * seq:,} tokens, over the limit of {MAX_BUCKET_TOKENS:,}"
            )
        if (batch, seq) in seen:
            raise _set_error(source, f"buckets[{i}] repeats the shape batch {batch} x seq {seq}")
        seen.add((batch, seq))
        buckets.append({"batch": batch, "seq_len": seq, "key": check_key(b.get("key"), f"{where}.key")})
    weights_key = data.get("weights_key")
    if weights_key is not None:
        check_key(weights_key, f"compiled set {source}: weights_key")
    names = data.get("input_names", ["input_ids", "attention_mask"])
    if (
        not isinstance(names, list)
        or not names
        or len(names) > MAX_INPUT_NAMES
        or not all(isinstance(n, str) and 0 < len(n) <= MAX_NAME_CHARS for n in names)
    ):
        raise _set_error(source, f"'input_names' must be a list of up to {MAX_INPUT_NAMES} input names")
    pad = data.get("pad_token_id")
    pad = 0 if pad is None else strict_int(pad, f"compiled set {source}: pad_token_id", hi=MAX_TOKEN_ID)
    model = data.get("model", "")
    checked = {
        "model": one_line(model, MAX_NAME_CHARS) if isinstance(model, str) else "",
        "backend": backend,
        "buckets": buckets,
        "weights_key": weights_key,
        "input_names": list(names),
        "pad_token_id": pad,
    }
    return {**data, **checked}


def read_compiled_set(compiled_set: str | Path | Mapping[str, Any]) -> dict[str, Any]:
    """A compiled set from a file (through chipswap.datafile) or a mapping, validated."""
    if isinstance(compiled_set, Mapping):
        return parse_compiled_set(compiled_set)
    data = read_json(compiled_set, "compiled set", max_bytes=MAX_SET_BYTES)
    return parse_compiled_set(data, str(compiled_set))
