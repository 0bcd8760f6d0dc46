"""The records a serving projection returns (figures with bands, per-shape / per-batch / per-bucket
predictions, the ServiceTimes the simulator calls) and the traffic lengths it is computed at. Split out of
chipswap.projection.predict, which re-exports every name here.

Pure: no I/O, no torch, no clock.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from chipswap.errors import ChipswapError
from chipswap.projection.platform import EncoderPoly, LlmPoly
from chipswap.simulation.servicetime import ServingConfig, positions_held

MAX_LENGTH_LIMIT = 1 << 20  # longest prompt + output accepted (bounds every length-sized computation)


@dataclass(frozen=True)
class Projected:
    """A predicted figure: value in `unit`, relative band (0.2 = the truth expected within value/1.2 ..
    value*1.2, from held-out calibration error), source "projected", and a note when it needs one."""

    value: float
    unit: str
    band: float
    source: str = "projected"
    note: str = ""

    @property
    def low(self) -> float:
        return self.value / (1.0 + self.band)

    @property
    def high(self) -> float:
        return self.value * (1.0 + self.band)

    def as_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "value": self.value,
            "unit": self.unit,
            "source": self.source,
            "band": self.band,
            "low": self.low,
            "high": self.high,
        }
        if self.note:
            out["note"] = self.note
        return out


@dataclass(frozen=True)
class ProjectedServiceTimes:
    """ServiceTimes (chipswap.simulation.servicetime) of one replica from precomputed polynomials: each call
    is a
    few multiply-adds. LLM projections answer prefill/decode (and encoder_s = a prefill); encoder projections
    answer encoder_s (and prefill_s = an encoder call); an encoder has no decode step."""

    llm: LlmPoly | None
    enc: EncoderPoly | None
    band: float
    source: str = "projected"

    def prefill_s(self, batch: int, length: int) -> float:
        if self.llm is not None:
            return self.llm.prefill_s(batch, length)
        assert self.enc is not None
        return self.enc.encoder_s(batch, length)

    def decode_step_s(self, batch: int, context: int) -> float:
        if self.llm is None:
            raise ChipswapError("an encoder projection has no decode step; project the model in llm mode")
        return self.llm.decode_step_s(batch, context)

    def encoder_s(self, batch: int, length: int) -> float:
        if self.enc is not None:
            return self.enc.encoder_s(batch, length)
        assert self.llm is not None
        return self.llm.prefill_s(batch, length)


@dataclass(frozen=True)
class Shape:
    """A request shape the projection reports: prompt (and output) tokens, with a label (p50, mean, ...)."""

    label: str
    prompt: int
    output: int


@dataclass(frozen=True)
class Lengths:
    """The traffic's lengths as the projection needs them: the shapes to report, the mean shape that sets
    throughput, and the longest prompt + output a configuration must accept."""

    shapes: tuple[Shape, ...]
    mean_prompt: float
    mean_output: float
    max_total: int  # most positions one request holds: prompt + output - 1 (servicetime.positions_held)
    requests: int
    # every request's lengths (a length mix: the capacity averages the simulator's charges over them)
    prompts: np.ndarray | None = field(default=None, repr=False, compare=False)
    outputs: np.ndarray | None = field(default=None, repr=False, compare=False)

    @staticmethod
    def of(
        prompt: int | Sequence[int] | np.ndarray, output: int | Sequence[int] | np.ndarray | None
    ) -> Lengths:
        p = np.atleast_1d(np.asarray(prompt, dtype=np.int64))
        o = np.zeros_like(p) if output is None else np.atleast_1d(np.asarray(output, dtype=np.int64))
        if p.size == 0:
            raise ChipswapError(
                "no request lengths given: []; pass prompt tokens (and output tokens) or a trace"
            )
        if o.size == 1 and p.size > 1:
            o = np.full_like(p, int(o[0]))
        if o.size != p.size:
            raise ChipswapError(
                f"prompt and output lengths differ in count: {p.size} vs {o.size}; give one output per prompt"
            )
        if int(p.min()) < 1 or int(o.min()) < 0:
            raise ChipswapError(
                f"lengths must be >= 1 (prompt) and >= 0 (output), got min {int(p.min())} / {int(o.min())}; "
                "fix the lengths"
            )
        total = int(positions_held(p, o).max())  # the last output token is sampled, never fed back
        if total > MAX_LENGTH_LIMIT:
            raise ChipswapError(
                f"longest request is {total:,} tokens, over the {MAX_LENGTH_LIMIT:,} chipswap projects; "
                "check the trace's length columns"
            )
        if p.size == 1:
            shapes: tuple[Shape, ...] = (Shape("given", int(p[0]), int(o[0])),)
        else:
            qs = (("p50", 50), ("p90", 90), ("p99", 99))
            shapes = (
                (Shape("mean", round(float(p.mean())), round(float(o.mean()))),)
                + tuple(
                    Shape(
                        lbl,
                        int(np.percentile(p, q, method="higher")),
                        int(np.percentile(o, q, method="higher")),
                    )
                    for lbl, q in qs
                )
                + (Shape("max", int(p.max()), int(o.max())),)
            )
        return Lengths(shapes, float(p.mean()), float(o.mean()), total, int(p.size), p, o)


def _pad(length: int, buckets: Sequence[int] | None, padded: bool) -> int:
    """The compiled length a request of `length` tokens runs at: the smallest bucket >= length on a padded
    platform (powers of two from 128 when no buckets are given), the length itself on a GPU."""
    if not padded:
        return length
    if buckets:
        for b in sorted(buckets):
            if b >= length:
                return int(b)
        return int(length)  # over the largest bucket: the caller's plan rejects it; compute it unpadded
    return max(128, 1 << max(0, (length - 1).bit_length()))


@dataclass(frozen=True)
class ShapePrediction:
    shape: Shape
    padded_prompt: int
    ttft: Projected  # batch-1 prefill of the (padded) prompt
    tpot: Projected  # one decode step at the configuration's batch, context prompt + output/2
    e2e: Projected  # ttft + output x tpot (no queueing)

    def as_dict(self) -> dict[str, Any]:
        return {
            "label": self.shape.label,
            "prompt_tokens": self.shape.prompt,
            "output_tokens": self.shape.output,
            "padded_prompt_tokens": self.padded_prompt,
        } | _figures(self, {"ttft_s": "ttft", "tpot_s": "tpot", "e2e_s": "e2e"})


def _figures(obj: Any, names: dict[str, str]) -> dict[str, Any]:
    """{json key: figure.as_dict()} for the Projected attributes of a prediction record."""
    return {key: getattr(obj, attr).as_dict() for key, attr in names.items()}


@dataclass(frozen=True)
class BatchPrediction:
    """Steady state at one batch size and the mean request shape, for the whole instance."""

    batch: int
    tpot: Projected
    e2e: Projected
    requests_per_s: Projected
    output_tokens_per_s: Projected

    def as_dict(self) -> dict[str, Any]:
        return {"batch": self.batch} | _figures(
            self,
            {
                "tpot_s": "tpot",
                "e2e_s": "e2e",
                "requests_per_s": "requests_per_s",
                "output_tokens_per_s": "output_tokens_per_s",
            },
        )


@dataclass(frozen=True)
class BucketPrediction:
    """Encoder: one compiled length at one batch size, for the whole instance."""

    length: int
    batch: int
    latency: Projected
    inferences_per_s: Projected

    def as_dict(self) -> dict[str, Any]:
        return {"length": self.length, "batch": self.batch} | _figures(
            self, {"latency_s": "latency", "inferences_per_s": "inferences_per_s"}
        )


@dataclass(frozen=True)
class ServingProjection:
    """The answer for one model on one instance. `config` / `times` are None when nothing fits; `reason`
    then says why. `rejected` lists every configuration that lost and why; `notes` the assumptions."""

    model: str
    instance: str
    family: str
    mode: str
    config: ServingConfig | None
    times: ProjectedServiceTimes | None
    band: float
    bands: tuple[tuple[str, float], ...]
    requests_per_s: Projected | None
    output_tokens_per_s: Projected | None
    shapes: tuple[ShapePrediction, ...] = ()
    batches: tuple[BatchPrediction, ...] = ()
    buckets: tuple[BucketPrediction, ...] = ()
    rejected: tuple[tuple[str, str], ...] = ()
    reason: str = ""
    notes: tuple[str, ...] = ()
    stacks: tuple[str, ...] = ()
    stack: str = ""  # serving stack assumed (chipswap.projection.stacks id); "" = the family's own one
    layouts: tuple[dict[str, Any], ...] = ()  # every layout evaluated, best slow edge first
    # outside what the calibration covers: the layout a trial measures (picked by memory fit or pinned),
    # with no projected figure; None otherwise
    to_measure: ServingConfig | None = None

    @property
    def fits(self) -> bool:
        return self.config is not None

    def as_dict(self) -> dict[str, Any]:
        cfg = self.config
        return {
            "model": self.model,
            "instance": self.instance,
            "family": self.family,
            "mode": self.mode,
            "fits": self.fits,
            "reason": self.reason or None,
            "config": None
            if cfg is None
            else {
                "tp_degree": cfg.tp_degree,
                "replicas": cfg.replicas,
                "max_batch": cfg.max_batch,
                "weight_dtype": cfg.weight_dtype,
                "max_length": cfg.max_length,
                "batch_sizes": list(cfg.batch_sizes),
                "padded": cfg.padded,
                "why": cfg.why,
                "stack": cfg.stack or None,
            },
            "band": self.band,
            "bands": dict(self.bands),
            "requests_per_s": self.requests_per_s.as_dict() if self.requests_per_s else None,
            "output_tokens_per_s": self.output_tokens_per_s.as_dict() if self.output_tokens_per_s else None,
            "shapes": [s.as_dict() for s in self.shapes],
            "batches": [b.as_dict() for b in self.batches],
            "buckets": [b.as_dict() for b in self.buckets],
            "rejected": [{"config": c, "why": w} for c, w in self.rejected],
            "notes": list(self.notes),
            "calibrated_on": list(self.stacks),
            "stack": self.stack or None,
            "layouts": list(self.layouts),
            "to_measure": None
            if self.to_measure is None
            else {
                "tp_degree": self.to_measure.tp_degree,
                "replicas": self.to_measure.replicas,
                "max_batch": self.to_measure.max_batch,
                "weight_dtype": self.to_measure.weight_dtype,
                "max_length": self.to_measure.max_length,
                "why": self.to_measure.why,
                "figure": "unknown: to be measured (chipswap trial)",
            },
        }
