"""How long the trial takes and what it costs: instance hours x the catalog price, compile time included.

Pure core: TrialSpec in, labelled figures out (each `published` with its source, `stated` by this kit, or an
`assumption`). No I/O; may not price anything the catalog did not. A candidate priced as a Capacity Block (its
term "capacity-block") costs the shortest block that covers the trial, paid up front: whole days, every hour
billed.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from decimal import ROUND_HALF_UP, Decimal

from chipswap.economics.capacity import sold_as_capacity_blocks
from chipswap.economics.catalog import CAPACITY_BLOCK, HOURS_PER_DAY, block_days_covering
from chipswap.trial.benchscript import bench_seconds
from chipswap.trial.spec import TrialSpec

LLM_SMALL_GIB = 16.0  # up to here: the published ~15 min for a ~15 GB LLM applies
LLM_LARGE_GIB = 130.0  # from here (70B parameters in bf16): the published 30-60 min for 70B+ models, 60 taken
SETUP_H = 0.5  # launch the instance, pull the image, download the weights
MIN_PER_ENCODER_SHAPE = 3.0  # "a few minutes" per compile, taken as 3


@dataclass(frozen=True)
class Part:
    what: str
    hours: float
    label: str  # "published: ...", "stated: ...", "assumption: ..."


@dataclass(frozen=True)
class TrialCost:
    parts: tuple[Part, ...]
    hours: float
    usd: Decimal | None  # on-demand (or the plan's term) for the Neuron instance, None without a price
    rate_usd_h: Decimal | None
    rate_source: str
    capacity_block: bool
    compile_minutes: float
    block_days: int | None = None  # priced as a Capacity Block: the shortest block covering the trial
    per_hour_usd: Decimal | None = None  # the same hours at the block's hourly rate, for comparison

    def line(self, instance: str, term: str) -> str:
        if self.block_days is not None and self.usd is not None:
            price = (
                f"one {self.block_days}-day Capacity Block, ${self.usd:,.2f} paid up front "
                f"({self.block_days * HOURS_PER_DAY} h x ${self.rate_usd_h}/h, {self.rate_source}; booked "
                f"ahead, every hour of the block billed: the trial's {self.hours:.2f} h per hour would be "
                f"${self.per_hour_usd:,.2f})"
            )
        else:
            price = (
                f"${self.usd:,.2f} {term} (${self.rate_usd_h}/h, {self.rate_source})"
                if self.usd is not None
                else f"no {term} price in the catalog for {instance}"
            )
        block = (
            f"; or one Capacity Block (whole days, 24 h minimum; price from `chipswap capacity {instance} "
            "--count 1 --block-days 1` with AWS credentials)"
            if self.capacity_block and self.block_days is None
            else ""
        )
        parts = ", ".join(f"{p.what} {p.hours:.2f} h ({p.label.split(':')[0]})" for p in self.parts)
        return f"Trial: {self.hours:.2f} h on 1 x {instance} = {price} -- {parts}{block}"


def compile_estimate(spec: TrialSpec) -> tuple[float, str]:
    """(minutes, label) of the expected compile time on the Neuron host."""
    if spec.mode == "encoder":
        shapes = max(len(spec.sequence_buckets), 1) * max(
            len(spec.neuron.batch_sizes or (1, spec.neuron.max_batch)), 1
        )
        return (
            shapes * MIN_PER_ENCODER_SHAPE,
            f"assumption: {shapes} compiled shapes x {MIN_PER_ENCODER_SHAPE:g} min (published 'a few "
            "minutes' "
            "per compile: neuronx-cc FAQ, aws-neuron-sdk@81ce03ae compiler/neuronx-cc/faq.rst)",
        )
    gib = spec.weights_gib or 0.0
    if gib <= LLM_SMALL_GIB:
        return (
            15.0,
            "published: ~15 minutes for a ~15 GB LLM, trace + compile at server start (NxDI vLLM user guide "
            "v1, aws-neuron-sdk@81ce03ae vllm-user-guide-v1.rst)",
        )
    if gib >= LLM_LARGE_GIB:
        return (
            60.0,
            "published: 30-60 minutes for 70B+ models, upper end taken (aws-neuron-sdk@81ce03ae "
            "autoport-tutorial.rst)",
        )
    share = (gib - LLM_SMALL_GIB) / (LLM_LARGE_GIB - LLM_SMALL_GIB)
    minutes = 15.0 + share * 45.0
    return (
        round(minutes, 1),
        f"assumption: {gib:,.0f} GiB of weights, between the published ~15 minutes for a ~15 GB LLM (NxDI "
        "vLLM user guide v1) and 30-60 minutes for 70B+ models (autoport tutorial, upper end): "
        "interpolated by weight size",
    )


def trial_cost(spec: TrialSpec) -> TrialCost:
    n = spec.neuron
    minutes, clabel = compile_estimate(spec)
    bench_h = bench_seconds(spec, n) / 3600.0
    parts = (
        Part("setup", SETUP_H, "assumption: launch, pull the image, download the weights"),
        Part("compile", minutes / 60.0, clabel),
        Part("bench", bench_h, "stated: this kit's bench.sh, every sweep step run (upper bound)"),
    )
    hours = sum(p.hours for p in parts)
    usd = per_hour = None
    days = block_days_covering(Decimal(str(round(hours, 4)))) if n.term == CAPACITY_BLOCK else None
    if n.rate_usd_h is not None:
        per_hour = (Decimal(str(round(hours, 4))) * Decimal(n.rate_usd_h)).quantize(
            Decimal("0.01"), rounding=ROUND_HALF_UP
        )
        usd = per_hour
        if days is not None:
            usd = (Decimal(days * HOURS_PER_DAY) * Decimal(n.rate_usd_h)).quantize(
                Decimal("0.01"), rounding=ROUND_HALF_UP
            )
    return TrialCost(
        block_days=days if n.rate_usd_h is not None else None,
        per_hour_usd=per_hour,
        parts=parts,
        hours=hours,
        usd=usd,
        rate_usd_h=n.rate_usd_h,
        rate_source=n.rate_source,
        capacity_block=sold_as_capacity_blocks(n.instance),
        compile_minutes=minutes,
    )


def gpu_bench_hours(spec: TrialSpec) -> float | None:
    return None if spec.gpu is None else math.ceil(bench_seconds(spec, spec.gpu) / 36.0) / 100.0
