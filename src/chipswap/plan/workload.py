"""The workload file (TOML) that `chipswap plan` reads, as pydantic v2 models.

Every field carries a description; that text *is* the documentation: `chipswap plan --explain` and `chipswap
workload-help` print it (`schema_help` in chipswap.plan.workload_file). Unknown keys are rejected
(extra="forbid"), and every validation error becomes one line naming the file, the key and the expected form
(`load_workload`, also there).

Figures that drive money carry a `source` so the report can say where each number came from. By default
chipswap
projects throughput and latency from the model (`chipswap.plan.projection`) and sizes both fleets by
simulation;
a figure you give in `[figures."<instance>"]` (value + unit + source) takes part in one precedence rule,
measured > projected > published > stated > assumption (`chipswap.plan.figures.pick`). The older
`[throughput]`
and `[job]` figures map into the same rule; a `speed_factor` is always an "assumption".

Numbers are strict: true/false and quoted numbers are not numbers, NaN/inf are refused, and every number has
an
upper bound (it may size an allocation or a Decimal), each error naming the key. May not read anything but the
workload file (through chipswap.datafile) and the catalog (for did-you-mean).
"""

from __future__ import annotations

import re
from decimal import Decimal
from typing import Annotated, Any, Literal

from pydantic import (
    Field,
    StrictBool,
    field_validator,
    model_validator,
)

from chipswap import ranges
from chipswap.errors import closest
from chipswap.plan.workload_slo import OBJECTIVE_KEYS, Slo
from chipswap.plan.workload_types import (
    MAX_COUNT,
    MAX_JOB_TOKENS,
    MAX_MS,
    MAX_RPS,
    MAX_SCALE,
    MAX_TOKENS,
    MAX_USD,
    TERMS,
    In,
    InRange,
    Money,
    Real,
    Source,
    Term,
    Whole,
    _Model,
)

__all__ = ["OBJECTIVE_KEYS", "TERMS", "In", "InRange", "Money", "Real", "Slo", "Source", "Term", "Whole"]


class ModelSpec(_Model):
    """Which model is being moved. Give exactly one of preset, config, factory."""

    preset: str | None = Field(
        None,
        max_length=200,
        description='A shipped model preset, e.g. "llama-3-8b", "distilbert-base" (see `chipswap check '
        "--help`).",
    )
    config: str | None = Field(
        None,
        max_length=4096,
        description="Path to a Hugging Face config.json (relative to the workload file); checked without "
        "weights.",
    )
    factory: str | None = Field(
        None,
        max_length=500,
        description='A Python factory "package.module:make_model" returning a torch.nn.Module.',
    )
    task: str | None = Field(
        None,
        max_length=100,
        description='The task the model serves, e.g. "causal-lm", "sequence-classification"; preset default.',
    )

    full_check: StrictBool = Field(
        False,
        description="Export every layer in the readiness check. By default a transformer whose layers are "
        "all alike is checked as a 2-layer copy: the same operators and dtypes in a fraction of the time.",
    )

    @model_validator(mode="after")
    def _exactly_one(self) -> ModelSpec:
        given = [k for k in ("preset", "config", "factory") if getattr(self, k)]
        if len(given) != 1:
            raise ValueError("expected exactly one of preset, config, factory")
        return self


class ColumnMap(_Model):
    """Column names in the trace file (default: the Azure LLM trace schema, recognised without this)."""

    timestamp: str | None = Field(None, description="Column holding the arrival time of each request.")
    prompt_tokens: str | None = Field(None, description="Column holding the prompt (input) length in tokens.")
    output_tokens: str | None = Field(
        None, description="Column holding the generated (output) length in tokens."
    )


class Traffic(_Model):
    """What the model serves: a trace of real requests, or a steady rate with fixed lengths."""

    trace: str | None = Field(
        None,
        max_length=4096,
        description='Trace file (CSV, JSONL, Parquet) relative to the workload file, or "bundled" for '
        "the Azure LLM "
        "code trace shipped with chipswap (CC-BY 4.0, Patel et al., Splitwise, ISCA 2024).",
    )
    histogram: str | None = Field(
        None,
        max_length=4096,
        description="Instead of a trace: a pre-aggregated length histogram file (prompt length, output "
        "length "
        "in llm mode, and a count per row; CSV/Parquet/JSONL, relative to the workload file). It has no "
        "arrival times: give steady_rps for the rate.",
    )
    columns: ColumnMap | None = Field(
        None, description="Column mapping when the trace is not in the Azure schema."
    )
    scale: Annotated[Real, In("factor")] = Field(
        1.0,
        gt=0,
        le=MAX_SCALE,
        description="Multiply the trace's arrival rate by this (the trace is a sample of your traffic); "
        "lengths are "
        "kept as they are.",
    )
    scale_method: Literal["superpose", "copy-in-place"] = Field(
        "superpose",
        description="How traffic is scaled: 'superpose' overlays independent time-shifted copies of the "
        "trace (more users of the same kind; bursts are not multiplied); 'copy-in-place' copies each request "
        "next to itself (every burst multiplied by the scale).",
    )
    steady_rps: Annotated[Real, In("rate")] | None = Field(
        None,
        gt=0,
        le=MAX_RPS,
        description="Instead of a trace: a steady arrival rate in requests per second.",
    )
    prompt_tokens: Annotated[Whole, In("tokens")] | None = Field(
        None,
        gt=0,
        le=MAX_TOKENS,
        description="With steady_rps: the prompt length in tokens of every request.",
    )
    output_tokens: Annotated[Whole, In("tokens", zero=True)] | None = Field(
        None,
        ge=0,
        le=MAX_TOKENS,
        description="With steady_rps: the generated length in tokens of every request.",
    )
    mode: Literal["llm", "encoder"] = Field(
        "llm", description='"llm" (prefill + decode buckets) or "encoder" (one length per request).'
    )
    max_buckets: Annotated[Whole, In("count")] = Field(
        6, ge=1, le=64, description="Most fixed shapes to compile (each is one Neuron graph)."
    )
    max_length: Annotated[Whole, In("tokens")] | None = Field(
        None,
        gt=0,
        le=MAX_TOKENS,
        description="Longest sequence the model accepts; longer requests are reported (rejected).",
    )
    burst_window_s: Annotated[Real, In("seconds")] = Field(
        300.0,
        gt=0,
        le=604_800,
        description="Window (seconds) over which arrivals are counted to judge burstiness: peak (95th "
        "percentile "
        "window) over mean. Five minutes is the scale at which an autoscaler reacts. Fleets are sized "
        "for the busiest such window.",
    )

    @model_validator(mode="after")
    def _one_source(self) -> Traffic:
        if (self.trace is None) == (self.steady_rps is None):
            raise ValueError("expected exactly one of trace, steady_rps")
        if self.histogram is not None and self.trace is not None:
            raise ValueError("expected a trace or a histogram, not both (a histogram takes steady_rps)")
        if self.steady_rps is not None and self.prompt_tokens is None and self.histogram is None:
            raise ValueError("expected prompt_tokens (or a histogram of lengths) with steady_rps")
        if self.histogram is not None and self.prompt_tokens is not None:
            raise ValueError("expected prompt_tokens or a histogram, not both")
        return self


class Fleet(_Model):
    """The GPU fleet today: instance type and count (priced from the catalog) or the monthly bill."""

    instance: str = Field(
        max_length=100,
        description='EC2 instance type of the current fleet, e.g. "g6e.12xlarge", "p5.48xlarge".',
    )
    count: Annotated[Whole, In("instances")] = Field(
        1, ge=1, le=MAX_COUNT, description="How many instances run (average over the month)."
    )
    hours_per_month: Annotated[Real, In("hours_per_month")] = Field(
        730.0, gt=0, le=744, description="Hours each instance runs per month (730 = always on)."
    )
    monthly_bill_usd: Annotated[Money, In("usd")] | None = Field(
        None,
        gt=0,
        le=MAX_USD,
        description="What the fleet costs per month, if you know it; overrides count x rate x hours.",
    )
    region: str = Field(
        "us-east-1", max_length=100, description="AWS region the fleet runs in (prices are per region)."
    )
    term: Term = Field(
        "on-demand", description="Pricing term the fleet is bought on today: on-demand, spot, 1yr, 3yr."
    )
    gpu_stack: str = Field(
        "vllm",
        max_length=40,
        description="Serving stack the GPU fleet runs: vllm (default), trtllm or tgi; the projection and the "
        "simulator's scheduling policy follow it.",
    )
    endpoint: str | None = Field(
        None,
        max_length=2048,
        description="Base URL of today's serving endpoint (OpenAI-compatible), e.g. "
        '"http://gpu-llm.internal:8000"; `chipswap trial` then adds a bench of the GPU baseline to the kit.',
    )

    @field_validator("gpu_stack")
    @classmethod
    def _gpu_stack(cls, v: str) -> str:
        return _check_stack(v, "gpu")

    @model_validator(mode="after")
    def _endpoint_url(self) -> Fleet:
        if self.endpoint is not None and not re.fullmatch(r"https?://[^\s/]+\S*", self.endpoint):
            raise ValueError('expected endpoint to be an http(s):// URL, e.g. "http://gpu-llm.internal:8000"')
        return self


def _check_stack(name: str, side: str) -> str:
    """A stack id of `side` (chipswap.projection.stacks), or a ValueError naming the choices."""
    from chipswap.projection.stacks import stack_ids

    ids = stack_ids(side)
    if name in ids:
        return name
    near = closest(name, ids, n=1)
    raise ValueError(
        f"a {side} serving stack ({', '.join(ids)})" + (f"; did you mean {near[0]}?" if near else "")
    )


class Targets(_Model):
    """Which Neuron instances to consider."""

    candidates: list[Annotated[str, Field(max_length=100)]] = Field(
        min_length=1,
        max_length=64,
        description='Candidate instance types, e.g. ["inf2.48xlarge", "trn1.32xlarge"].',
    )
    region: str | None = Field(
        None, max_length=100, description="Region to price candidates in (default: the fleet's region)."
    )
    stack: str = Field(
        "nxdi-vllm",
        max_length=40,
        description="Serving stack the Neuron candidates would run: nxdi-vllm (default), nxdi-tgi or "
        "tnx-2.18; "
        "the projection and the simulator's scheduling policy follow it.",
    )
    min_replicas: Annotated[Whole, In("instances")] = Field(
        2,
        ge=1,
        le=MAX_COUNT,
        description="Fewest instances a serving fleet is sized to, on both sides (like for like), so one "
        "can fail or be drained while the rest serve (N+1). Default 2; 1 only when an outage of the single "
        "instance is acceptable (the plan then says the fleet has no redundancy).",
    )
    chunked_prefill: StrictBool = Field(
        False,
        description="Simulate the Neuron stack with chunked prefill (1,024-token chunks), as vLLM on NxD "
        "Inference can be configured; default off (prefills pause decoding).",
    )

    @field_validator("stack")
    @classmethod
    def _stack(cls, v: str) -> str:
        return _check_stack(v, "neuron")


class Pricing(_Model):
    """How the candidate capacity would be bought."""

    term: Term = Field(
        "on-demand",
        description="Pricing term for the candidates: on-demand, spot, 1yr, 3yr, ri-effective "
        "(as priced in the catalog).",
    )


class Porting(_Model):
    """One-time engineering cost of moving the model to Neuron."""

    engineer_days: Annotated[Real, In("days", zero=True)] = Field(
        ge=0, le=100_000, description="Engineer-days to port and validate the model on Neuron."
    )
    day_rate_usd: Annotated[Money, In("usd_per_day")] = Field(
        Decimal("800"),
        gt=0,
        le=Decimal(1_000_000),
        description="Cost of one engineer-day in USD (assumption).",
    )


class Stability(_Model):
    """How much the model moves: the seed's reasons to stay on GPU."""

    model_changes_per_month: Annotated[Real, In("per_month", zero=True)] = Field(
        0.0,
        ge=0,
        le=10_000,
        description="How often the model architecture or shapes change per month (retrains keep it).",
    )
    custom_cuda_kernels: StrictBool = Field(
        False, description="The model depends on hand-written CUDA / Triton kernels (no Neuron equivalent)."
    )
    research_churn: StrictBool = Field(
        False,
        description="Research work: the model shape changes weekly and uses operators the day they ship.",
    )


# Units a figure may be given in, per quantity, and the factor to the unit chipswap computes in. Data, not
# code.
FIGURE_UNITS: dict[str, tuple[str, dict[str, float]]] = {
    "throughput": (
        "requests/s",
        {"requests/s": 1.0, "req/s": 1.0, "requests/min": 1 / 60, "requests/h": 1 / 3600},
    ),
    "ttft_p99": ("ms", {"ms": 1.0, "s": 1000.0}),
    "e2e_p99": ("ms", {"ms": 1.0, "s": 1000.0}),
    "tokens_per_s": ("tokens/s", {"tokens/s": 1.0, "tokens/min": 1 / 60, "tokens/h": 1 / 3600}),
    "run_hours": ("h", {"h": 1.0, "hours": 1.0, "min": 1 / 60, "s": 1 / 3600}),
}
# The unit (chipswap.ranges) of each figure, in its FIGURE_UNITS base unit.
FIGURE_RANGES = {
    "throughput": "rate",
    "ttft_p99": "ms",
    "e2e_p99": "ms",
    "tokens_per_s": "token_rate",
    "run_hours": "hours",
}


class FigureIn(_Model):
    """One figure you know for an instance: value, unit and where it comes from (e.g. your load test)."""

    value: Real | None = Field(None, gt=0, le=1e12, description="The number.")
    unit: str | None = Field(
        None, max_length=40, description='Its unit, e.g. "requests/s", "ms", "tokens/s", "h".'
    )
    source: Source = Field(
        "stated",
        description='"measured" (you measured it: it outranks every projection), "published benchmark", '
        '"stated", "assumption".',
    )
    band_pct: Annotated[Real, In("percent_band", zero=True)] | None = Field(
        None, ge=0, le=1000, description="Its uncertainty in percent (e.g. 5 for a load test's spread)."
    )
    note: str | None = Field(None, max_length=500, description="How it was obtained (shown beside it).")

    @model_validator(mode="after")
    def _complete(self) -> FigureIn:
        example = '{ value = 12.5, unit = "requests/s", source = "measured" }'
        if self.value is None:
            raise ValueError(
                f"value: expected a number (missing); a {self.source} figure needs a value and a unit, "
                f"e.g. {example}"
            )
        if self.unit is None:
            raise ValueError(
                f"unit: expected a unit (missing); a {self.source} figure needs a value and a unit, "
                f"e.g. {example}"
            )
        return self


class InstanceFigures(_Model):
    """Figures you know for one instance type (the GPU fleet's or a candidate's); each overrides the
    projection
    when its source ranks higher (measured > projected > published > stated > assumption)."""

    throughput: FigureIn | None = Field(
        None, description="Requests per second one instance sustains while meeting the SLO (serving)."
    )
    ttft_p99: FigureIn | None = Field(None, description="99th-percentile time to first token at that load.")
    e2e_p99: FigureIn | None = Field(None, description="99th-percentile end-to-end latency at that load.")
    tokens_per_s: FigureIn | None = Field(None, description="Training tokens per second per instance.")
    run_hours: FigureIn | None = Field(None, description="Wall-clock hours of one training run (training).")

    @model_validator(mode="after")
    def _units(self) -> InstanceFigures:
        for name, (_base, units) in FIGURE_UNITS.items():
            f = getattr(self, name)
            if f is not None and f.unit not in units:
                raise ValueError(f"{name}.unit: expected one of {', '.join(units)} (got {f.unit!r})")
            spec = ranges.Spec(FIGURE_RANGES[name])
            if f is not None and f.value is not None and ranges.problem(f.value * units[f.unit], spec):
                raise ValueError(
                    f"{name}.value: expected {ranges.span(spec)} (got {f.value!r} {f.unit}); give a value "
                    "in that range"
                )
        return self


class CandidateThroughput(_Model):
    """Serving throughput of one candidate instance: a stated figure or a speed factor relative to the GPU
    (a speed factor is always an assumption)."""

    requests_per_s: Annotated[Real, In("rate")] | None = Field(
        None, gt=0, le=1e9, description="Requests per second one instance sustains at the SLO."
    )
    speed_factor: Annotated[Real, In("factor")] | None = Field(
        None,
        gt=0,
        le=10_000,
        description="Throughput relative to one instance of the current GPU fleet (0.8 = 20% slower); "
        "always labelled an assumption.",
    )
    p99_ms: Annotated[Real, In("ms")] | None = Field(
        None,
        gt=0,
        le=MAX_MS,
        description="99th-percentile end-to-end latency at that throughput, if known (an assumption unless "
        'source = "measured").',
    )
    source: Source = Field("stated", description="Where the figure comes from.")
    note: str | None = Field(
        None, max_length=500, description="Free text shown next to the figure (how it was obtained)."
    )

    @model_validator(mode="after")
    def _one(self) -> CandidateThroughput:
        if (self.requests_per_s is None) == (self.speed_factor is None):
            raise ValueError("expected exactly one of requests_per_s, speed_factor")
        return self


class Throughput(_Model):
    """Serving throughput you state for the GPU fleet and the candidates. Optional: with a [model], chipswap
    projects them; these figures take part in the same precedence rule as [figures]."""

    gpu_requests_per_s: Annotated[Real, In("rate")] | None = Field(
        None,
        gt=0,
        le=1e9,
        description="Requests per second one instance of the current fleet sustains at the SLO.",
    )
    gpu_p99_ms: Annotated[Real, In("ms")] | None = Field(
        None, gt=0, le=MAX_MS, description="99th-percentile latency of the GPU fleet at that load."
    )
    gpu_source: Source = Field("stated", description="Where the GPU figure comes from.")
    gpu_note: str | None = Field(None, max_length=500, description="Free text shown next to the GPU figure.")
    target_utilization: Annotated[Real, In("fraction")] = Field(
        0.7,
        gt=0,
        le=1,
        description="Fraction of a stated throughput the fleets are planned to run at (headroom). Used only "
        "where a fleet is sized from a requests/s figure; simulated fleets are sized for the SLO.",
    )
    candidates: dict[str, CandidateThroughput] = Field(
        default_factory=dict,
        description="Per candidate instance type: its throughput (see the fields below).",
    )


class CandidateJob(_Model):
    """How long one training run takes on a candidate: stated hours or a speed factor relative to the GPU."""

    hours: Annotated[Real, In("hours")] | None = Field(
        None, gt=0, le=1e6, description="Wall-clock hours of one run on one candidate instance."
    )
    speed_factor: Annotated[Real, In("factor")] | None = Field(
        None,
        gt=0,
        le=10_000,
        description="Speed relative to the GPU instance (20 h on GPU, 26 h here = 0.769); an assumption.",
    )
    source: Source = Field("stated", description="Where the figure comes from.")
    note: str | None = Field(None, max_length=500, description="Free text shown next to the figure.")

    @model_validator(mode="after")
    def _one(self) -> CandidateJob:
        if (self.hours is None) == (self.speed_factor is None):
            raise ValueError("expected exactly one of hours, speed_factor")
        return self


class TrainLayout(_Model):
    """The training layout the job runs (every key optional; the rest is chosen). Without it chipswap
    projects the stack's conventional layout and shows its own fastest feasible layout beside it."""

    tp: Annotated[Whole, In("workers")] | None = Field(
        None, ge=1, le=1024, description="Tensor-parallel degree."
    )
    pp: Annotated[Whole, In("workers")] | None = Field(
        None, ge=1, le=256, description="Pipeline stages (need not divide the layers)."
    )
    cp: Annotated[Whole, In("workers")] | None = Field(
        None, ge=1, le=256, description="Context-parallel degree."
    )
    dp: Annotated[Whole, In("count")] | None = Field(
        None, ge=1, le=1 << 20, description="Data-parallel replicas."
    )
    sharding: Literal["fsdp", "hsdp", "zero1", "none"] | None = Field(
        None,
        description="Training-state sharding over the data-parallel group (hsdp: FSDP inside a node, "
        "replicated across nodes; none = DDP).",
    )
    recompute: Literal["none", "selective", "full"] | None = Field(
        None, description="Activation recompute (checkpointing)."
    )
    micro_batch: Annotated[Whole, In("batch")] | None = Field(
        None, ge=1, le=4096, description="Sequences per micro-batch."
    )
    vp: Annotated[Whole, In("workers")] | None = Field(
        None, ge=1, le=64, description="Virtual (interleaved) pipeline stages per device (with pp > 1)."
    )


class Job(_Model):
    """A recurring training / fine-tuning run (instead of a serving fleet). Give its size (tokens, or epochs x
    dataset_tokens) and chipswap projects the hours on every instance; stated hours rank below a projection
    unless their source is "measured"."""

    gpu_hours: Annotated[Real, In("hours")] | None = Field(
        None, gt=0, le=1e6, description="Wall-clock hours of one run on the fleet (all its instances)."
    )
    gpu_source: Source = Field("stated", description="Where the GPU hours come from.")
    tokens: Annotated[Real, In("tokens_total")] | None = Field(
        None, gt=0, le=MAX_JOB_TOKENS, description="Tokens processed by one run (sequence tokens x steps)."
    )
    epochs: Annotated[Real, In("epochs")] | None = Field(
        None, gt=0, le=10_000, description="Epochs per run (with dataset_tokens)."
    )
    dataset_tokens: Annotated[Real, In("tokens_total")] | None = Field(
        None, gt=0, le=MAX_JOB_TOKENS, description="Tokens in the training set (with epochs)."
    )
    sequence_length: Annotated[Whole, In("tokens")] | None = Field(
        None, gt=0, le=MAX_TOKENS, description="Training sequence length in tokens (default: the model's)."
    )
    runs_per_month: Annotated[Real, In("per_month")] = Field(
        gt=0, le=100_000, description="How many identical runs happen per month."
    )
    dtype: Literal["bf16", "fp8", "best"] = Field(
        "bf16",
        description=(
            "Training dtype projected on both sides: bf16 (like for like, the default), fp8 (where the chip "
            "trains in fp8: H100/H200/B200; others bf16, said in the summary) or best (each side at its "
            "fastest)."
        ),
    )
    global_batch: Annotated[Whole, In("batch")] | None = Field(
        None, gt=0, le=1 << 20, description="Global batch in sequences (default: about 2M tokens a step)."
    )
    layout: TrainLayout | None = Field(
        None, description="The training layout the job runs on the GPU fleet (see the fields below)."
    )
    stack: Literal["pytorch", "megatron"] = Field(
        "pytorch",
        description="Training stack on GPUs: pytorch (FSDP / DTensor: torchtitan, LLM Foundry) or megatron "
        "(NeMo / Megatron-Core); Trainium runs the Neuron stack.",
    )
    fp8_recipe: Literal["tensorwise", "rowwise", "mxfp8"] | None = Field(
        None,
        description="fp8 scaling recipe where the job trains in fp8: tensorwise (default), rowwise or mxfp8 "
        "(B200 only; elsewhere tensorwise).",
    )
    candidates: dict[str, CandidateJob] = Field(
        default_factory=dict, description="Per candidate instance type: its run time (see the fields below)."
    )

    @model_validator(mode="after")
    def _size(self) -> Job:
        if (self.epochs is None) != (self.dataset_tokens is None):
            raise ValueError(
                "expected epochs and dataset_tokens together (run size = epochs x dataset_tokens)"
            )
        if self.tokens is not None and self.epochs is not None:
            raise ValueError("expected tokens or epochs x dataset_tokens, not both")
        if self.job_tokens is not None and self.job_tokens > MAX_JOB_TOKENS:
            raise ValueError(f"epochs: epochs x dataset_tokens is over {MAX_JOB_TOKENS:g} tokens")
        return self

    @property
    def job_tokens(self) -> float | None:
        """Tokens one run processes: `tokens`, or epochs x dataset_tokens; None when the size is not given."""
        if self.tokens is not None:
            return self.tokens
        if self.epochs is not None and self.dataset_tokens is not None:
            return self.epochs * self.dataset_tokens
        return None


class VerdictSettings(_Model):
    """Thresholds of the screening rules and the close-call margin (defaults documented in docs/plan.md)."""

    close_margin_pct: Annotated[Money, In("percent", zero=True)] = Field(
        Decimal("20"),
        ge=0,
        le=100,
        description="A monthly saving below this percent of today's cost is a close call, and a close "
        "call is a no.",
    )
    close_payback_months: Annotated[Whole, In("months")] = Field(
        6,
        ge=1,
        le=1200,
        description="A payback later than this many months is a close call, and a close call is a no.",
    )
    bursty_peak_to_mean: Annotated[Real, In("ratio")] = Field(
        2.0,
        gt=1,
        le=1e6,
        description="Traffic whose peak-window rate exceeds this multiple of its mean is bursty (stay on "
        "GPU).",
    )
    low_traffic_rps: Annotated[Real, In("rate")] = Field(
        1.0,
        gt=0,
        le=MAX_RPS,
        description="Below this mean rate (requests/s) traffic is too low for a port to pay (stay on GPU).",
    )
    low_traffic_tokens_per_s: Annotated[Real, In("token_rate")] = Field(
        250.0,
        gt=0,
        le=MAX_RPS * 100,
        description='LLM traffic (mode = "llm"): below this mean token volume (prompt + output tokens/s) '
        "traffic is too low for a port to pay (stay on GPU); replaces low_traffic_rps for LLMs, whose "
        "requests "
        "cost in proportion to their tokens (assumption: 1 request/s of a 250-token exchange).",
    )
    min_monthly_bill_usd: Annotated[Money, In("usd", zero=True)] = Field(
        Decimal("2000"),
        ge=0,
        le=MAX_USD,
        description="Below this monthly spend the bill is too small to matter (stay on GPU).",
    )
    max_model_changes_per_month: Annotated[Real, In("per_month", zero=True)] = Field(
        1.0,
        ge=0,
        le=10_000,
        description="Above this many architecture changes per month the model is not stable (stay on GPU).",
    )
    min_horizon_months: Annotated[Real, In("months", zero=True)] = Field(
        6.0, ge=0, le=1200, description="Work that lives fewer months than this is short-lived (stay on GPU)."
    )


class Workload(_Model):
    """A workload file: one model, its traffic or job, today's GPU fleet, and the Neuron candidates."""

    title: str = Field("workload", max_length=300, description="A name for the report.")
    kind: Literal["serving", "training"] = Field(
        "serving", description='"serving" (a fleet answering traffic) or "training" (a recurring job).'
    )
    horizon_months: Annotated[Whole, In("months")] = Field(
        12, ge=1, le=120, description="How many months the decision should pay off over."
    )
    model: ModelSpec | None = Field(
        None, description="The model (needed for the readiness check and the projection)."
    )
    traffic: Traffic | None = Field(None, description="Traffic for a serving workload.")
    fleet: Fleet = Field(description="The current GPU fleet.")
    slo: Slo = Field(default_factory=Slo, description="Latency objective (serving).")
    targets: Targets = Field(description="Neuron candidates.")
    pricing: Pricing = Field(default_factory=Pricing, description="Pricing term for the candidates.")
    porting: Porting = Field(description="One-time porting estimate.")
    stability: Stability = Field(default_factory=Stability, description="How much the model changes.")
    figures: dict[str, InstanceFigures] = Field(
        default_factory=dict,
        description="Per instance type (the fleet's or a candidate's): figures you know, e.g. measured "
        "throughput; each outranks a projection only when its source ranks higher.",
    )
    bench_results: list[Annotated[str, Field(max_length=4096)]] = Field(
        default_factory=list,
        max_length=64,
        description="`chipswap bench` result files (JSON, relative to the workload file): each gives its "
        "instance measured throughput (goodput at the SLO) and latency, which outrank every projection.",
    )
    throughput: Throughput | None = Field(
        None, description="Stated serving throughput figures (optional with a [model]: it is projected)."
    )
    job: Job | None = Field(None, description="Training run figures (kind = training).")
    verdict: VerdictSettings = Field(default_factory=VerdictSettings, description="Verdict thresholds.")

    @property
    def utilization(self) -> float:
        return self.throughput.target_utilization if self.throughput else 0.7

    @model_validator(mode="after")
    def _kind_sections(self) -> Workload:
        names = [self.fleet.instance, *self.targets.candidates]
        for name in self.figures:
            if name not in names:
                near = closest(name, names, n=1)
                fix = f"did you mean {near[0]}?" if near else "use the fleet's instance or a candidate"
                raise ValueError(f'figures."{name}": expected the fleet instance or a candidate; {fix}')
        has_model = self.model is not None
        tables = {"throughput.candidates": self.throughput.candidates if self.throughput else {}}
        tables["job.candidates"] = self.job.candidates if self.job else {}
        for key, table in tables.items():
            for name in table:
                if name not in self.targets.candidates:
                    near = closest(name, self.targets.candidates, n=1)
                    want = near[0] if near else self.targets.candidates[0]
                    raise ValueError(
                        f'{key}: expected a table [{key}."{want}"] for a candidate; the table for {name!r} '
                        "names "
                        "no candidate (see targets.candidates)"
                    )
        if self.kind == "serving":
            if self.traffic is None:
                raise ValueError('traffic: expected a [traffic] table for kind = "serving"')
            tp = self.throughput
            given = set(tp.candidates) if tp else set()
            given |= {n for n, f in self.figures.items() if f.throughput is not None}
            missing = [c for c in self.targets.candidates if c not in given]
            if missing and not has_model and not self.bench_results:
                raise ValueError(
                    f'throughput.candidates: expected a table [throughput.candidates."{missing[0]}"] with '
                    f"requests_per_s or speed_factor, or a [model] to project it"
                    f"{_table_hint(missing[0], tp.candidates if tp else {})}"
                )
            needs_gpu = tp is not None and any(t.speed_factor is not None for t in tp.candidates.values())
            gpu_given = (tp is not None and tp.gpu_requests_per_s is not None) or (
                self.fleet.instance in self.figures
                and self.figures[self.fleet.instance].throughput is not None
            )
            if needs_gpu and not gpu_given and not has_model:
                raise ValueError(
                    "throughput.gpu_requests_per_s: expected a number when a candidate uses speed_factor"
                )
        else:
            if self.job is None:
                raise ValueError('job: expected a [job] table for kind = "training"')
            sized = has_model and (self.job.job_tokens is not None or self.job.gpu_hours is not None)
            if not sized:
                if self.job.gpu_hours is None and not _has_figure(
                    self.figures, self.fleet.instance, "run_hours"
                ):
                    raise ValueError(
                        "job.gpu_hours: expected the hours of one run, or the run's size (job.tokens, or "
                        "job.epochs x job.dataset_tokens) with a [model] to project it"
                    )
                missing = [
                    c
                    for c in self.targets.candidates
                    if c not in self.job.candidates and not _has_figure(self.figures, c, "run_hours")
                ]
                if missing:
                    raise ValueError(
                        f'job.candidates: expected a table [job.candidates."{missing[0]}"] with hours or '
                        f"speed_factor, or the run's size (job.tokens) with a [model] to project it"
                        f"{_table_hint(missing[0], self.job.candidates)}"
                    )
        return self


def _has_figure(figures: dict[str, InstanceFigures], instance: str, name: str) -> bool:
    return instance in figures and getattr(figures[instance], name) is not None


def _table_hint(name: str, tables: dict[str, Any]) -> str:
    """' (the tables given are ...)' when a candidate's table is missing but others exist (a typo)."""
    near = closest(name, tables, n=1)
    if near:
        return f"; a table for {near[0]!r} is given: if that is a typo, use the same name in both places"
    return ""
