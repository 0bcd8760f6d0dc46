"""What a trial measures: the Neuron candidate (and the GPU baseline) chosen from a plan, as plain data.

Pure core: from a PlanResult and the workload's few trial-relevant values to a frozen TrialSpec, or a
NothingToTrial error (one line: why there is nothing to trial). No I/O, no torch; may not render files (that
is chipswap.trial.kit) or touch the plan's stages.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field
from decimal import Decimal
from typing import Any

from chipswap.errors import ChipswapError

# The Neuron serving stacks of projection/stacks.py a trial can launch today.
NEURON_STACKS = ("nxdi-vllm", "nxdi-tgi")
HISTORICAL_STACKS = ("tnx-2.18",)  # the SDK 2.18 published tables: not a stack to start a trial on today
NEURON_KINDS = ("inferentia", "trainium")


class NothingToTrial(ChipswapError):
    """The plan has no Neuron candidate a trial could measure (exit 2, one line)."""


@dataclass(frozen=True)
class Target:
    """One side of the trial: the instance, its serving layout and the load it must carry."""

    instance: str
    side: str  # "neuron" or "gpu"
    count: int  # instances the plan sized for the busiest window
    count_high: int  # the band's upper count (the autoscaler's max)
    tp: int  # devices per replica (NeuronCores on Neuron)
    replicas: int  # replicas per instance
    max_batch: int
    batch_sizes: tuple[int, ...]  # compiled batch sizes (encoders); () = continuous batching slots
    dtype: str
    max_length: int  # longest prompt + output one replica accepts
    projected_rps: float | None  # requests/s one instance carries at the SLO (projected or measured)
    throughput_label: str  # e.g. "projected ± 19%"
    rate_usd_h: Decimal | None
    rate_source: str
    term: str
    region: str
    neuron_cores: int = 0  # per instance (0 for GPUs)
    devices: int = 0  # accelerator devices per instance
    vcpus: int = 0
    endpoint: str | None = None  # GPU: today's endpoint (the workload names it)
    # False: no projected figure (outside what the calibration covers): the layout is the projection's pick
    # by memory fit, count 1 (the fleet is sized from the measurement), the bench sweeps a ladder of rates
    figure_known: bool = True

    @property
    def cores_per_device(self) -> int:
        return max(1, self.neuron_cores // max(self.devices, 1)) if self.neuron_cores else 0


@dataclass(frozen=True)
class TrafficPlan:
    """The traffic the bench replays: where the lengths come from, the busiest-window rate (whole fleet)."""

    source: str  # "bundled", "file", "steady", "histogram"
    trace: str | None  # path of the trace file (source "file") as given, resolved by the shell
    busiest_rps: float  # after scale, the window both fleets are sized for
    window_s: float
    prompt_tokens: int | None = None  # steady: the fixed prompt length
    output_tokens: int | None = None


@dataclass(frozen=True)
class TrialSpec:
    title: str
    workload_label: str  # what the user passes to `chipswap plan` to re-run it
    workload_arg: str | None  # the workload file path (None for a bundled example)
    example: str | None
    mode: str  # "llm" or "encoder"
    stack: str
    model_name: str  # preset name or file stem
    model_id: str  # default for MODEL_ID: the Hugging Face id of the preset, else a placeholder
    model_spec: str  # what `chipswap compile` takes (preset name or config path)
    task: str | None
    weights_gib: float | None
    verdict: str
    verdict_why: str
    neuron: Target
    gpu: Target | None
    traffic: TrafficPlan
    sequence_buckets: tuple[int, ...]
    decode_buckets: tuple[int, ...]
    slo_ms: dict[str, float] = field(default_factory=dict)
    why_this_candidate: str = ""
    notes: tuple[str, ...] = ()
    gpu_stack: str = "vllm"  # the GPU endpoint's stack (notes/stacks.md): vLLM takes ignore_eos

    @property
    def verdict_is_move(self) -> bool:
        return self.verdict.startswith("move")

    @property
    def max_prompt(self) -> int:
        return max(self.sequence_buckets) if self.sequence_buckets else self.neuron.max_length


_HF_ID = re.compile(r"huggingface\.co/([A-Za-z0-9_.-]+/[A-Za-z0-9_.-]+)")


def hub_id_from_source(source: str | None) -> str | None:
    """The Hugging Face repo id a preset's `source` URL names, if any."""
    m = _HF_ID.search(source or "")
    return m.group(1) if m else None


def _label(fig: Any) -> str:
    return str(getattr(fig, "label", "") or getattr(fig, "source", "") or "unknown")


def _rps(fig: Any) -> float | None:
    if fig is None or getattr(fig, "value", None) is None:
        return None
    v = float(fig.value)
    return v if math.isfinite(v) and v > 0 else None


UNKNOWN_FIGURE = "unknown: outside what the calibration covers — to be measured by this trial"


def _target(
    side: str,
    fleet: Any,
    rate: Any,
    catalog_inst: Any,
    term: str,
    region: str,
    count: int,
    endpoint: str | None = None,
) -> Target:
    cfg = getattr(fleet, "config", None)
    lo_hi = getattr(fleet, "count_range", (None, None)) or (None, None)
    high = lo_hi[1] if len(lo_hi) > 1 and lo_hi[1] is not None else count
    unknown = cfg is None and getattr(fleet, "to_measure", None) is not None
    if unknown:  # no figure the calibration covers: the layout to measure, one instance
        cfg, high = fleet.to_measure, count
    return Target(
        instance=str(getattr(fleet, "instance", "")),
        side=side,
        count=count,
        count_high=max(int(high), count),
        tp=int(getattr(cfg, "tp_degree", 1) or 1),
        replicas=int(getattr(cfg, "replicas", 1) or 1),
        max_batch=int(getattr(cfg, "max_batch", 1) or 1),
        batch_sizes=tuple(int(b) for b in (getattr(cfg, "batch_sizes", ()) or ())),
        dtype=str(getattr(cfg, "weight_dtype", "bf16") or "bf16"),
        max_length=int(getattr(cfg, "max_length", 0) or 0),
        projected_rps=None if unknown else _rps(getattr(fleet, "throughput", None)),
        throughput_label=UNKNOWN_FIGURE if unknown else _label(getattr(fleet, "throughput", None)),
        rate_usd_h=getattr(rate, "value", None) if rate is not None else None,
        rate_source=_label(rate) if rate is not None else "no published price",
        term=term,
        region=region,
        neuron_cores=int(getattr(catalog_inst, "neuron_cores", 0) or 0),
        devices=int(getattr(catalog_inst, "accelerator_count", 0) or 0),
        vcpus=int(getattr(catalog_inst, "vcpus", 0) or 0),
        endpoint=endpoint,
        figure_known=not unknown,
    )


def check_stack(stack: str) -> str:
    """The stack id if a trial can launch it, else one line naming the ones it can."""
    if stack in HISTORICAL_STACKS:
        raise ChipswapError(
            f"stack {stack!r} is the SDK 2.18 published-tables stack, not one to launch today; pass --stack "
            f"{' or '.join(NEURON_STACKS)}"
        )
    if stack not in NEURON_STACKS:
        raise ChipswapError(f"unknown Neuron stack {stack!r}; use one of {', '.join(NEURON_STACKS)}")
    return stack


def pick_candidate(result: Any, candidate: str | None = None) -> Any:
    """The Neuron candidate to trial: `candidate` when named (--candidate); the one a "measure first" verdict
    names; the plan's pick when it is a sized Neuron fleet; else the cheapest Neuron candidate that meets the
    SLO. Raises NothingToTrial with every candidate's reason."""
    neuron = [c for c in result.candidates if c.kind in NEURON_KINDS]
    if not neuron:
        raise NothingToTrial(
            "nothing to trial: the workload lists no Neuron candidate; add inf2/trn1/trn2 instance types to "
            "[targets].candidates"
        )
    measure = getattr(getattr(result, "verdict", None), "measure", None)
    name = candidate or (measure.target if measure is not None else None)
    if name is not None:
        named = [c for c in neuron if c.instance == name]
        if not named:
            raise ChipswapError(
                f"--candidate {name} is not a Neuron candidate of this workload; use one of "
                + ", ".join(c.instance for c in neuron)
            )
        if named[0].fleet is not None and (
            named[0].fleet.config is not None or _to_measure(named[0]) is not None
        ):
            return named[0]
        raise NothingToTrial(f"nothing to trial on {name}: {named[0].excluded or 'no serving layout fits'}")
    ok = [
        c
        for c in neuron
        if c.excluded is None
        and c.count is not None
        and c.meets_slo is not False
        and c.fleet is not None
        and getattr(c.fleet, "config", None) is not None
    ]
    if not ok:
        unknown = [c for c in neuron if _to_measure(c) is not None]
        if unknown:  # no figure the calibration covers: measure the cheapest by the hour on its own
            return min(unknown, key=lambda c: (_hourly(c) is None, _hourly(c) or Decimal(0), c.instance))
        why = "; ".join(
            f"{c.instance}: {c.excluded or 'not sized (no projected serving layout)'}" for c in neuron
        )
        raise NothingToTrial(
            f"nothing to trial: no Neuron candidate meets the SLO ({why}); relax [slo] or add larger "
            "candidates "
            "in [targets].candidates"
        )
    best = result.best
    if best is not None and any(c.instance == best.instance for c in ok):
        return next(c for c in ok if c.instance == best.instance)
    return min(ok, key=lambda c: (c.monthly_usd is None, c.monthly_usd or Decimal(0), c.instance))


def _to_measure(c: Any) -> Any:
    """The layout a trial measures for a candidate the calibration does not cover (None otherwise)."""
    return getattr(getattr(c, "fleet", None), "to_measure", None)


def _hourly(c: Any) -> Decimal | None:
    v = getattr(getattr(c, "rate", None), "value", None)
    return Decimal(str(v)) if v is not None else None


def build_spec(
    result: Any,
    *,
    catalog: Any,
    stack: str,
    model_name: str,
    model_spec: str,
    model_source: str | None,
    task: str | None,
    traffic_source: str,
    trace: str | None,
    steady_lengths: tuple[int | None, int | None],
    mode: str,
    pricing_term: str,
    region: str,
    gpu_term: str,
    gpu_endpoint: str | None,
    gpu_stack: str = "vllm",
    workload_label: str,
    workload_arg: str | None,
    example: str | None,
    candidate: str | None = None,
) -> TrialSpec:
    """The TrialSpec for a serving plan. `catalog` answers instance(name) for cores/devices/vCPUs."""
    if result.kind != "serving":
        raise NothingToTrial(
            "nothing to trial: chipswap trial measures a serving workload and this one is kind = "
            f"{result.kind!r}; benchmark training runs with your own job"
        )
    check_stack(stack)
    cand = pick_candidate(result, candidate)
    unknown = cand.count is None and _to_measure(cand) is not None
    neuron = _target(
        "neuron",
        cand.fleet,
        cand.rate,
        catalog.instance(cand.instance),
        getattr(cand, "term", "") or pricing_term,  # "capacity-block" for a type sold only that way
        region,
        1 if unknown or cand.count is None else int(cand.count),
    )
    gpu = None
    gf = getattr(result, "gpu_fleet", None)
    if gpu_endpoint is not None and gf is not None:
        gpu = _target(
            "gpu",
            gf,
            result.fleet_rate,
            catalog.instance(gf.instance),
            gpu_term,
            region,
            int(gf.count or result.fleet_count),
            endpoint=gpu_endpoint,
        )
    t = result.traffic
    busiest = float(t.busiest_rps or t.peak_rps or t.mean_rps or 0.0) if t is not None else 0.0
    if not busiest > 0:
        raise ChipswapError(
            "the plan found no arrival rate to replay; give traffic.steady_rps or a timed trace"
        )
    sh = result.shapes
    seq = tuple(int(x) for x in (sh.sequence_buckets if sh is not None else ()))
    dec = tuple(int(x) for x in (sh.decode_buckets if sh is not None else ()))
    measure = getattr(result.verdict, "measure", None)
    why = (
        "the plan's pick"
        if result.best is not None and result.best.instance == cand.instance
        else "the cheapest Neuron candidate meeting the SLO"
    )
    notes = []
    if candidate is not None:
        why = "named by --candidate"
    elif measure is not None and measure.target == cand.instance:
        why = "the candidate the plan's 'measure first' verdict names"
    elif unknown:
        why = "the cheapest Neuron candidate by the hour; no candidate has a figure the calibration covers"
    if unknown:
        notes.append(
            f"No projected figure for {cand.instance}: {cand.excluded or 'outside the calibration'}. "
            + (f"Measured: {cand.fleet.to_measure.why}. " if "pinned" in cand.fleet.to_measure.why else "")
            + "The "
            "figure is to be measured: the trial is costed on its own, and the follow-up plan sizes the "
            "fleet from the measurement (the deployment files below are for one instance until then)."
        )
    if not result.verdict.verdict.startswith("move") and not unknown:
        notes.append(
            f"The plan's verdict is '{result.verdict.verdict}'; this kit measures the projection behind it "
            f"for {cand.instance} ({why}), so a measured figure can confirm or overturn it."
        )
    weights = getattr(result, "weights", None)
    prompt, output = steady_lengths
    return TrialSpec(
        title=str(result.title),
        workload_label=workload_label,
        workload_arg=workload_arg,
        example=example,
        mode=mode,
        stack=stack,
        model_name=model_name,
        model_id=hub_id_from_source(model_source) or "YOUR-MODEL-ID",
        model_spec=model_spec,
        task=task,
        weights_gib=float(weights.value) if weights is not None else None,
        verdict=str(result.verdict.verdict),
        verdict_why=str(result.verdict.why),
        neuron=neuron,
        gpu=gpu,
        traffic=TrafficPlan(
            source=traffic_source,
            trace=trace,
            busiest_rps=busiest,
            window_s=float(t.window_s) if t is not None else 300.0,
            prompt_tokens=prompt,
            output_tokens=output,
        ),
        sequence_buckets=seq,
        decode_buckets=dec,
        slo_ms=dict(result.slo),
        why_this_candidate=why,
        notes=tuple(notes),
        gpu_stack=gpu_stack,
    )
