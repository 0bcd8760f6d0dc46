"""Service times: the seam between where a speed comes from (projection, measurement) and the simulator.

Pure: no I/O, no torch, no clock. The projection engine (`chipswap.projection.predict`) builds objects that
satisfy `ServiceTimes` from a model's work and a calibrated platform model; a user's measurement can build one
too; the fleet simulator (`chipswap.simulation.simulate`) only ever calls these methods. Nothing here knows
about
instances, prices or traces.

Conventions (both sides rely on them):
- times are seconds of wall clock for ONE replica (one tensor-parallel group) doing one call;
- `length`/`context` are the token counts the call actually computes on: on Neuron that is the padded bucket
  length, on a GPU the real (unpadded) length; callers do the padding, implementations never round up;
- `band` is the relative half-width of the error band (0.15 means the true value is expected within x/1.15 ..
  x*1.15), taken from held-out calibration error; a measured figure has its own (usually small) band;
- `source` is one of "measured", "projected", "published", "stated", "assumption" (see DESIGN.md, Figures).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, Protocol, runtime_checkable

import numpy as np


def positions_held(prompt: Any, output: Any) -> Any:
    """The positions a request's sequence holds at its longest (ints or numpy arrays): the prompt plus every
    generated token but the last, which is sampled and never fed back (the simulator's last decode step
    attends over prompt + output - 1 positions). The one length rule a max sequence length, a decode bucket
    or a KV cache is checked against: a 2,048-token prompt with one output token fits 2,048 positions."""
    return prompt + np.maximum(output - 1, 0)


def charged_context(prompt: float, output: float, decode_buckets: Any = ()) -> int:
    """The context a steady-state decode step of the mean request (prompt, output) is charged at: with
    compiled decode buckets (Neuron), the bucket that holds its longest position, prompt + output - 1 (the
    simulator charges the bucket of the longest live context, and at saturation the oldest request in the
    batch is near its end); without (GPU, paged KV), the batch's mean live context, prompt + output / 2.
    The one rule `project`'s capacity and the simulator share (past the largest bucket: the position
    itself)."""
    if len(decode_buckets):
        last = int(math.ceil(positions_held(prompt, output)))
        for b in sorted(int(x) for x in decode_buckets):
            if b >= last:
                return b
        return last
    return int(prompt + output / 2)


MIX_PREFILLS = 256  # most distinct prefill lengths a LoadMix keeps (equal-count groups beyond: GPU prompts)


@dataclass(frozen=True)
class LoadMix:
    """What a saturated replica's calls are charged at over a length mix (issue 40: one capacity at any
    length mix): `project` averages its step and its prefill over this, the simulator charges each step and
    prefill as it comes, by the same rules. At saturation a live slot is at a random decode step of a random
    request, the request weighted by its decode steps (output - 1) and the step's context uniform over
    prompt + 1 .. prompt + output - 1. Padded platforms charge a step at the decode bucket of the longest of
    the `live` slots' contexts (independent slots: P(charged <= bucket) = F(bucket) ** live, F the share of
    decode steps whose context fits the bucket); GPUs at the batch's mean context, the step-weighted mean.
    Requests no decode bucket holds are left out (the simulator rejects them)."""

    buckets: tuple[int, ...]  # decode buckets (padded platforms); () on GPUs
    slot_share: tuple[float, ...]  # per bucket: share of decode steps whose context fits it (ascending)
    mean_context: int  # GPUs: the step-weighted mean live context
    prefills: tuple[tuple[float, int], ...]  # (share of requests, prefill length computed: padded on Neuron)

    def contexts(self, live: int) -> tuple[tuple[float, int], ...]:
        """(share of decode steps, charged context) at `live` sequences in flight."""
        if not self.buckets:
            return ((1.0, self.mean_context),)
        out, below = [], 0.0
        for b, f in zip(self.buckets, self.slot_share, strict=True):
            at = min(1.0, f) ** max(1, live)
            if at > below:
                out.append((at - below, b))
            below = max(below, at)
        return tuple(out)

    def mean_of(self, fn: Any, pairs: tuple[tuple[float, int], ...]) -> float:
        """The share-weighted mean of fn over (share, value) pairs."""
        total = sum(w for w, _ in pairs)
        return sum(w * fn(v) for w, v in pairs) / total


def load_mix(prompt: Any, output: Any, decode_buckets: Any, prefill_length: Any) -> LoadMix | None:
    """The LoadMix of requests (prompt, output arrays; `prefill_length`: each request's computed prefill
    length, its bucket on Neuron); None when every request is the same (the mean request's rule holds)."""
    p = np.asarray(prompt, dtype=np.float64).ravel()
    o = np.asarray(output, dtype=np.float64).ravel()
    pre = np.asarray(prefill_length, dtype=np.int64).ravel()
    if p.size < 2 or (np.all(p == p[0]) and np.all(o == o[0])):
        return None
    buckets = tuple(sorted(int(b) for b in decode_buckets))
    steps = np.maximum(o - 1, 0)
    keep = positions_held(p, o) <= buckets[-1] if buckets else np.ones(p.size, dtype=bool)
    if not keep.any() or steps[keep].sum() <= 0:
        return None
    p, o, steps, pre = p[keep], o[keep], steps[keep], pre[keep]
    total = float(steps.sum())
    share = tuple(float(np.clip(b - p, 0, steps).sum()) / total for b in buckets)
    mean_ctx = int(float((steps * (p + o / 2)).sum()) / total)
    lengths, counts = np.unique(pre, return_counts=True)
    if lengths.size > MIX_PREFILLS:  # equal-count groups at their mean length (a GPU prefill is smooth in L)
        srt = np.sort(pre)
        groups = np.array_split(srt, MIX_PREFILLS)
        prefills = tuple((g.size / srt.size, int(round(float(g.mean())))) for g in groups if g.size)
    else:
        pairs = zip(lengths.tolist(), counts.tolist(), strict=True)
        prefills = tuple((c / pre.size, int(x)) for x, c in pairs)
    return LoadMix(buckets, share, mean_ctx, prefills)


def decode_steps(output: float) -> float:
    """Decode steps of a request of `output` tokens (its first token comes from its prefill)."""
    return max(0.0, float(output) - 1.0)


def live_slots(compiled_batch: int, occupancy: float) -> int:
    """Sequences a replica with `compiled_batch` compiled slots keeps running when the stack fills
    `occupancy` of them (the one rule the projection's steady throughput and the simulator share)."""
    return max(1, min(compiled_batch, round(compiled_batch * occupancy)))


@runtime_checkable
class ServiceTimes(Protocol):
    """How long one replica takes for each kind of call. Implementations must be cheap to call (the simulator
    may call them millions of times; cache or precompute inside if needed) and monotone non-decreasing in each
    argument."""

    @property
    def band(self) -> float: ...

    @property
    def source(self) -> str: ...

    def prefill_s(self, batch: int, length: int) -> float:
        """One prefill (context-encoding) call: `batch` sequences of `length` tokens each."""
        ...

    def decode_step_s(self, batch: int, context: int) -> float:
        """One decode step: one token for each of `batch` sequences whose KV context is `context`."""
        ...

    def encoder_s(self, batch: int, length: int) -> float:
        """One encoder forward of `batch` sequences of `length` tokens."""
        ...


@dataclass(frozen=True)
class ServingConfig:
    """How a model is laid out on one instance, as chosen by the configuration search (or stated).

    `replicas` x `tp_degree` devices (NeuronCores or GPUs) are used; every number the simulator produces for
    this instance is for this layout, and reports print it next to the figures."""

    instance: str
    tp_degree: int  # devices per replica (NeuronCores on Neuron, GPUs on NVIDIA)
    replicas: int  # replicas per instance
    max_batch: int  # largest batch one replica runs (continuous batching slots, or largest compiled batch)
    weight_dtype: str  # "bf16", "fp16", "int8", "fp8", ...
    max_length: int  # most positions a sequence may hold on one replica (positions_held: prompt + output - 1)
    batch_sizes: tuple[int, ...] = ()  # compiled batch sizes (Neuron encoders); () = any 1..max_batch
    padded: bool = False  # True on Neuron: requests are padded to buckets; False on GPUs
    why: str = ""  # one line: why this configuration won
    rejected: tuple[tuple[str, str], ...] = field(default=())  # (configuration, why it lost)
    stack: str = ""  # serving stack id the figures assume (chipswap.projection.stacks); "" = not stated
    kv_tokens: int = 0  # KV-cache capacity of one replica in tokens (memory left after weights); 0 = unknown
    # share of the compiled batch slots a saturated replica of this stack keeps busy (the stack's fitted
    # slot_occupancy, Neuron static batching; 1 = every slot): the simulator runs live_slots() sequences
    slot_occupancy: float = 1.0
    # seconds each decode step grows per live sequence (the stack's fitted term, issue 40; ReplicaSetup)
    live_step_s: float = 0.0


@dataclass(frozen=True)
class ScaledServiceTimes:
    """Another ServiceTimes slowed down (factor > 1) or sped up (factor < 1): the edges of an error band,
    and sensitivity ("a 1.3x slower Neuron would flip it")."""

    inner: ServiceTimes
    factor: float

    @property
    def band(self) -> float:
        return self.inner.band

    @property
    def source(self) -> str:
        return self.inner.source

    def prefill_s(self, batch: int, length: int) -> float:
        return self.inner.prefill_s(batch, length) * self.factor

    def decode_step_s(self, batch: int, context: int) -> float:
        return self.inner.decode_step_s(batch, context) * self.factor

    def encoder_s(self, batch: int, length: int) -> float:
        return self.inner.encoder_s(batch, length) * self.factor
