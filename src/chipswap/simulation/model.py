"""The fleet simulator's data: how a replica serves (`ReplicaSetup`, built from a `ServingConfig`), what a
simulation produced (`SimResult` and its parts), which requests a setup rejects, and the cumulative
step-time tables every engine reads decode times from.

Pure: numpy and the standard library; no files, clock, printing or torch. Bad input raises ChipswapError.
"""

from __future__ import annotations

import math
from array import array
from bisect import bisect_left
from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np

from chipswap.errors import ChipswapError
from chipswap.simulation.policies import (
    CHUNKED_PREFILL,
    DEFAULT_MAX_NUM_SEQS,
    DEFAULT_TOKEN_BUDGET,
    NEURON_STATIC_SLOTS,
    PREFILL_FIRST,
    check_policy,
)
from chipswap.simulation.servicetime import ServiceTimes, ServingConfig, live_slots, positions_held
from chipswap.simulation.traffic import Traffic

MODES = ("llm", "encoder")
MAX_TABLE_COLUMNS = 2048  # context intervals per step-time table row (the block is widened to stay under it)
DENSE_TABLE_ENTRIES = 8_000_000  # per-token cumulative tables up to this size (64 MB); on-demand beyond
DEFAULT_CONTEXT_BLOCK = 16  # tokens per KV-cache block on GPUs (vLLM's default block size)
DEFAULT_MAX_QUEUE_DELAY_S = 0.005
LOOKUP_MAX_LENGTH = 4_000_000  # prefill times by a table indexed by length up to this length (32 MB)
OVER_LENGTH = ("reject", "refuse")  # what a request longer than max_length is (ReplicaSetup.over_length)
CDF_POINTS = 201  # quantiles kept for latency-distribution plots (bounded, whatever the traffic size)


@dataclass(frozen=True)
class ReplicaSetup:
    """How one replica serves: batching limits, compiled shapes, length limits. Identical for every
    replica."""

    max_batch: int  # continuous-batching slots (LLM) or largest batch (encoder)
    batch_sizes: tuple[
        int, ...
    ] = ()  # compiled batch sizes a batch is padded up to; () = run at its own size
    prefill_buckets: tuple[int, ...] = ()  # prompt (or encoder sequence) buckets; () = no padding (GPU)
    decode_buckets: tuple[
        int, ...
    ] = ()  # decode context buckets (Neuron); () = mean context in KV blocks (GPU)
    max_length: int = 0  # most positions a sequence may hold (positions_held); 0 = only the buckets limit it
    context_block: int = DEFAULT_CONTEXT_BLOCK  # GPU decode context granularity (tokens)
    max_queue_delay_s: float = (
        DEFAULT_MAX_QUEUE_DELAY_S  # encoder dynamic batching: longest wait to fill a batch
    )
    policy: str = PREFILL_FIRST  # LLM scheduler policy (chipswap.simulation.policies)
    token_budget: int = 0  # tokens per step with chunked prefill (0: the policy's default, or no chunking)
    kv_blocks: int = 0  # KV-cache blocks of `context_block` tokens per replica (GPU); 0 = never binds
    # a request holding more than max_length positions: "reject" (a serving limit, e.g. vLLM's max_model_len
    # or the workload's overflow policy: rejected and counted) or "refuse" (the limit came from a projection,
    # so such traffic is a setup error: simulate refuses it with the count instead of dropping requests)
    over_length: str = "reject"
    # the decode step's growth with the live batch (issue 40): seconds added to every decode step per
    # sequence in flight, on top of decode_step_s(padded batch, context) (a stack's fitted per-sequence
    # host work, chipswap.projection.stack_load); 0 = the step depends on the padded batch only
    live_step_s: float = 0.0

    def __post_init__(self) -> None:
        if not isinstance(self.max_batch, int) or not 1 <= self.max_batch <= 1 << 16:
            raise ChipswapError(
                f"max batch must be an integer 1 .. 65536, got {self.max_batch!r}; fix max_batch"
            )
        for name in ("batch_sizes", "prefill_buckets", "decode_buckets"):
            vals = getattr(self, name)
            if any(not isinstance(v, int) or v < 1 for v in vals) or list(vals) != sorted(set(vals)):
                raise ChipswapError(
                    f"{name} must be ascending distinct integers >= 1, got {vals!r}; fix {name}"
                )
        if self.batch_sizes and self.batch_sizes[-1] < self.max_batch:
            raise ChipswapError(
                f"largest compiled batch size {self.batch_sizes[-1]} is below max batch {self.max_batch}; "
                "compile a batch size >= max_batch or lower max_batch"
            )
        if not isinstance(self.max_length, int) or self.max_length < 0:
            raise ChipswapError(
                f"max length must be an integer >= 0, got {self.max_length!r}; 0 means no limit"
            )
        if not isinstance(self.context_block, int) or self.context_block < 1:
            raise ChipswapError(f"context block must be an integer >= 1, got {self.context_block!r}; e.g. 16")
        check_policy(self.policy)
        if self.over_length not in OVER_LENGTH:
            raise ChipswapError(
                f"over_length {self.over_length!r} is not known; use one of {', '.join(OVER_LENGTH)}"
            )
        ls = self.live_step_s
        if not (isinstance(ls, int | float) and math.isfinite(ls) and 0 <= ls < 1):
            raise ChipswapError(f"live_step_s {ls!r} is not a per-sequence step time; give seconds in [0, 1)")
        for name in ("token_budget", "kv_blocks"):
            v = getattr(self, name)
            if not isinstance(v, int) or v < 0:
                raise ChipswapError(f"{name} must be an integer >= 0, got {v!r}; 0 means the default")
        if self.policy == PREFILL_FIRST and self.token_budget:
            raise ChipswapError(
                "prefill-first never chunks a prefill, so a token budget does not apply; "
                "drop token_budget or use chunked-prefill"
            )
        if self.policy == CHUNKED_PREFILL and not self.token_budget:
            object.__setattr__(self, "token_budget", DEFAULT_TOKEN_BUDGET)
        d = self.max_queue_delay_s
        if not (isinstance(d, int | float) and math.isfinite(d) and d >= 0):
            raise ChipswapError(f"max queue delay must be >= 0 seconds, got {d!r}; e.g. 0.005")

    @property
    def padded(self) -> bool:
        return bool(self.prefill_buckets)

    def padded_batch(self, n: int) -> int:
        """The batch size a batch of `n` requests runs at."""
        if not self.batch_sizes:
            return n
        return self.batch_sizes[bisect_left(self.batch_sizes, n)]


def setup_from_serving(
    config: ServingConfig,
    *,
    mode: str = "llm",
    prefill_buckets: Sequence[int] = (),
    decode_buckets: Sequence[int] = (),
    max_queue_delay_s: float = DEFAULT_MAX_QUEUE_DELAY_S,
    policy: str | None = None,
    token_budget: int = 0,
    max_num_seqs: int = 0,
    max_length: int | None = None,
    over_length: str = "refuse",
) -> ReplicaSetup:
    """The replica setup of a chosen serving configuration. On Neuron (`config.padded`) an LLM decodes at its
    compiled batch sizes (the max batch when none are listed) and buckets must be given.

    `policy` is the stack's scheduler policy (default: static slots on Neuron, prefill-first elsewhere);
    `token_budget` is the chunked-prefill budget (and turns chunking on for static slots, a Neuron stack that
    has it). On a GPU whose KV-cache capacity is known (`config.kv_tokens`, from the projection's memory
    model), the KV cache is what limits the batch: slots rise to vLLM's max_num_seqs (`max_num_seqs`, default
    1024) and the cache holds kv_tokens / 16 blocks.

    `max_length` (default: the configuration's, which a projection sets from the lengths it was given) is the
    most positions a request may hold; a request beyond it is refused with the count (`over_length="refuse"`,
    the default: a projection at the mean lengths must not silently drop the longer half of a length mix) or,
    where the limit is the workload's own (its overflow policy), rejected and counted (`"reject"`)."""
    if mode not in MODES:
        raise ChipswapError(f"simulation mode {mode!r} is not known; use one of {', '.join(MODES)}")
    batch_sizes = tuple(config.batch_sizes)
    if config.padded:
        if not prefill_buckets:
            raise ChipswapError(
                f"{config.instance} pads requests to buckets but none were given; "
                "pass the shape plan's buckets"
            )
        if mode == "llm" and not decode_buckets:
            decode_buckets = prefill_buckets
        if not batch_sizes:
            batch_sizes = (config.max_batch,)
    if policy is None:
        policy = NEURON_STATIC_SLOTS if config.padded else PREFILL_FIRST
    check_policy(policy)
    kv_tokens = int(getattr(config, "kv_tokens", 0) or 0)
    slots, kv_blocks = config.max_batch, 0
    if mode == "llm" and config.padded:
        # the stack keeps `slot_occupancy` of the compiled slots busy; each step still runs the compiled batch
        slots = live_slots(config.max_batch, float(getattr(config, "slot_occupancy", 1.0) or 1.0))
    if mode == "llm" and not config.padded and kv_tokens:
        kv_blocks = kv_tokens // DEFAULT_CONTEXT_BLOCK
        slots = max(config.max_batch, max_num_seqs or DEFAULT_MAX_NUM_SEQS)
    return ReplicaSetup(
        max_batch=slots,
        batch_sizes=batch_sizes,
        prefill_buckets=tuple(int(b) for b in prefill_buckets) if config.padded else (),
        decode_buckets=tuple(int(b) for b in decode_buckets) if config.padded and mode == "llm" else (),
        max_length=config.max_length if max_length is None else max_length,
        max_queue_delay_s=max_queue_delay_s,
        policy=policy,
        token_budget=token_budget if mode == "llm" else 0,
        kv_blocks=kv_blocks,
        over_length=over_length,
        live_step_s=float(getattr(config, "live_step_s", 0.0) or 0.0) if mode == "llm" else 0.0,
    )


# ------------------------------------------------------------------------------------------------------------
# Results
# ------------------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class LatencyStats:
    """Percentiles of one latency over the measured, served requests (seconds; NaN when none were served).
    Percentiles are observed values (numpy's "higher" method), so a p99 is a latency some request really
    had."""

    p50: float
    p90: float
    p99: float
    mean: float
    max: float

    @staticmethod
    def of(values: np.ndarray) -> LatencyStats:
        if values.size == 0:
            nan = float("nan")
            return LatencyStats(nan, nan, nan, nan, nan)
        p50, p90, p99 = (float(x) for x in np.percentile(values, [50, 90, 99], method="higher"))
        return LatencyStats(p50, p90, p99, float(values.mean()), float(values.max()))


@dataclass(frozen=True)
class BucketLatency:
    """Latency of the requests whose prompt falls in (previous edge, edge]."""

    edge: int
    requests: int
    ttft: LatencyStats
    e2e: LatencyStats


@dataclass(frozen=True)
class Padding:
    """Work computed vs work needed. Prefill and encoder: tokens; decode: KV positions attended (batch x
    context summed over steps) and batch slots (a padded batch runs empty slots)."""

    prefill_tokens: int
    prefill_padded_tokens: int
    decode_positions: int
    decode_padded_positions: int
    batch_slots: int
    batch_padded_slots: int

    @property
    def prefill_waste(self) -> float:
        """Share of computed prefill (or encoder) tokens that were padding."""
        return 1 - self.prefill_tokens / self.prefill_padded_tokens if self.prefill_padded_tokens else 0.0

    @property
    def decode_waste(self) -> float:
        """Share of computed decode positions that were padding (context and batch)."""
        return (
            1 - self.decode_positions / self.decode_padded_positions if self.decode_padded_positions else 0.0
        )


@dataclass(frozen=True)
class SimResult:
    """What one simulation produced. Statistics cover the measured requests (all, unless a measurement window
    was given); the per-request arrays cover every simulated request (NaN where rejected)."""

    mode: str
    replicas: int
    requests: int  # measured requests, served or rejected
    rejected: int  # measured requests rejected as too long
    reject_reasons: tuple[tuple[str, int], ...]
    ttft: LatencyStats  # arrival to first token (LLM) or to the result (encoder)
    e2e: LatencyStats  # arrival to the last token
    wait: LatencyStats  # arrival to the start of the request's first call (queueing)
    throughput_rps: float  # measured requests served per second of the measured span
    output_tokens_per_s: float
    utilization: float  # mean over replicas of busy time / simulated span
    replica_utilization: np.ndarray
    mean_batch: float  # running requests per decode step (LLM) or requests per batch (encoder)
    calls: int  # decode steps (LLM) or encoder batches run by the whole fleet
    mean_in_system: float  # time-average requests in the fleet (arrived, last token not out), whole run
    mean_waiting: float  # time-average requests waiting for their first call, whole run
    max_waiting: int  # most requests waiting at once across the fleet
    span_s: float  # first arrival to last completion of the whole run
    padding: Padding
    per_bucket: tuple[BucketLatency, ...]
    arrivals_s: np.ndarray = field(repr=False)
    ttft_s: np.ndarray = field(repr=False)
    e2e_s: np.ndarray = field(repr=False)
    start_s: np.ndarray = field(repr=False)  # start of each request's first call
    replica_of: np.ndarray = field(repr=False)  # -1 where rejected
    measured: np.ndarray = field(repr=False)  # bool: counted in the statistics
    policy: str = PREFILL_FIRST  # the scheduler policy simulated
    dispatch: str = "round_robin"
    preemptions: int = 0  # KV-cache recompute preemptions, whole run

    def latency_cdf(self, which: str = "e2e", points: int = CDF_POINTS) -> tuple[np.ndarray, np.ndarray]:
        """(quantile levels, latency seconds) of the measured served requests: a bounded-size distribution for
        plots. `which` is "ttft", "e2e" or "wait"."""
        if which not in ("ttft", "e2e", "wait"):
            raise ChipswapError(f"latency {which!r} is not known; use ttft, e2e or wait")
        values = {"ttft": self.ttft_s, "e2e": self.e2e_s, "wait": self.start_s - self.arrivals_s}[which]
        v = values[self.measured & ~np.isnan(values)]
        q = np.linspace(0.0, 1.0, max(2, min(points, 10_001)))
        if v.size == 0:
            return q, np.full(q.size, np.nan)
        return q, np.quantile(v, q, method="higher")


# ------------------------------------------------------------------------------------------------------------
# Step-time tables
# ------------------------------------------------------------------------------------------------------------


def _table_edges(setup: ReplicaSetup, top_context: int) -> list[int]:
    """Upper edges of the context intervals on which a decode step costs the same; the value charged for a
    context c is the first edge >= c."""
    if setup.decode_buckets:
        return list(setup.decode_buckets)
    block = setup.context_block
    if top_context / block > MAX_TABLE_COLUMNS:
        # long contexts: coarser blocks keep the number of service calls bounded
        block = block * math.ceil(top_context / block / MAX_TABLE_COLUMNS)
    return list(range(block, block * math.ceil(max(top_context, 1) / block) + 1, block))


class _Piecewise:
    """A cumulative table F[c] computed on demand from interval values (for contexts too long to tabulate):
    same indexing as the dense table, so the simulation loop and `bisect` use either."""

    def __init__(self, edges: list[int], values: list[float], length: int) -> None:
        widths = np.diff(np.asarray([0, *edges], dtype=np.float64))
        self.edges = [0, *edges]
        self.cum = np.concatenate(([0.0], np.cumsum(widths * np.asarray(values)))).tolist()
        self.values = [0.0, *values]
        self.length = length

    def __len__(self) -> int:
        return self.length

    def __getitem__(self, c: int) -> float:
        y = c - 1
        if y <= 0:
            return 0.0
        k = bisect_left(self.edges, y)
        return float(self.cum[k - 1] + (y - self.edges[k - 1]) * self.values[k])

    def take(self, c: np.ndarray) -> np.ndarray:
        """F at many contexts at once."""
        y = np.maximum(np.asarray(c, dtype=np.int64) - 1, 0)
        edges = np.asarray(self.edges)
        k = np.maximum(np.searchsorted(edges, y, side="left"), 1)
        out = np.asarray(self.cum)[k - 1] + (y - edges[k - 1]) * np.asarray(self.values)[k]
        return np.where(y > 0, out, 0.0)


def _take(table: Cumulative, c: np.ndarray) -> np.ndarray:
    if isinstance(table, _Piecewise):
        return table.take(c)
    return np.frombuffer(table, dtype=np.float64)[c]


Cumulative = array | _Piecewise


def _cumulative(edges: list[int], values: list[float], top_context: int, dense: bool) -> Cumulative:
    """F[c] = sum of the per-step value over contexts 1 .. c-1, for c = 0 .. top_context + 1."""
    length = top_context + 2
    if not dense:
        return _Piecewise(edges, values, length)
    widths = np.diff(np.asarray([0, *edges]))
    per_context = np.repeat(np.asarray(values, dtype=np.float64), widths)[: length - 1]
    cum = np.zeros(length)
    cum[2:] = np.cumsum(per_context[: length - 2])
    return array("d", cum.tobytes())


def _service_value(value: float, what: str) -> float:
    v = float(value)
    if not math.isfinite(v) or v <= 0:
        raise ChipswapError(f"service time for {what} is {value!r}; service times must be positive seconds")
    return v


class _DecodeTables:
    """Cumulative step-time tables per padded batch size (built on first use), and the cumulative context
    charged per sequence (for padding accounting)."""

    def __init__(self, service: ServiceTimes, setup: ReplicaSetup, top_context: int) -> None:
        self.service = service
        self.setup = setup
        self.top = top_context
        self.edges = _table_edges(setup, top_context)
        cap = setup.max_length if setup.max_length and not setup.decode_buckets else 0
        self.charged = [min(e, cap) if cap else e for e in self.edges]  # context passed to the service
        # one table per padded batch, or per live count where the step grows with it (live_step_s)
        rows = len(setup.batch_sizes) if setup.batch_sizes and not setup.live_step_s else setup.max_batch
        self.dense = (top_context + 2) * (rows + 1) <= DENSE_TABLE_ENTRIES
        self.positions = _cumulative(self.edges, [float(c) for c in self.charged], top_context, self.dense)
        self._by_padded: dict[tuple[int, float], Cumulative] = {}
        self.by_batch: list[Cumulative | None] = [None] * (setup.max_batch + 1)

    def row(self, n: int) -> Cumulative:
        t = self.by_batch[n]
        if t is None:
            pb = self.setup.padded_batch(n)
            extra = n * self.setup.live_step_s  # the step's growth with the live batch
            key = (pb, extra)
            t = self._by_padded.get(key)
            if t is None:
                vals = [
                    _service_value(
                        self.service.decode_step_s(pb, c), f"a decode step at batch {pb}, context {c}"
                    )
                    + extra
                    for c in self.charged
                ]
                t = self._by_padded[key] = _cumulative(self.edges, vals, self.top, self.dense)
            self.by_batch[n] = t
        return t


def reject_mask(
    traffic: Traffic, setup: ReplicaSetup, mode: str
) -> tuple[np.ndarray, tuple[tuple[str, int], ...]]:
    """Which requests cannot be served by this setup, and why (reason, count). With
    `setup.over_length == "refuse"`, a request longer than `max_length` is a refusal (ChipswapError with the
    count), never a silent drop."""
    p, o = traffic.prompt_tokens, traffic.output_tokens
    total = positions_held(p, o) if mode == "llm" else p
    if setup.max_length and setup.over_length == "refuse":
        over = int(np.count_nonzero(total > setup.max_length))
        if over:
            raise ChipswapError(
                f"{over:,} of {len(traffic):,} requests hold more positions than the replica's max length "
                f"{setup.max_length:,} (the longest holds {int(total.max()):,}: prompt + output - 1); "
                f"simulating would drop them: set max_length from the traffic's longest request "
                f"(setup_from_serving(..., max_length={int(total.max())})), project at the traffic's "
                "lengths, or pass over_length='reject' to count them as rejected"
            )
    rules: list[tuple[str, np.ndarray]] = []
    if setup.prefill_buckets:
        rules.append(("prompt longer than the largest prefill bucket", p > setup.prefill_buckets[-1]))
    if mode == "llm" and setup.decode_buckets:
        rules.append(
            ("prompt + output longer than the largest decode bucket", total > setup.decode_buckets[-1])
        )
    if setup.max_length:
        rules.append(("longer than the replica's max length", total > setup.max_length))
    if mode == "llm" and setup.kv_blocks:
        blocks = -(-total // setup.context_block)
        rules.append(("longer than the replica's whole KV cache", blocks > setup.kv_blocks))
    mask = np.zeros(len(traffic), dtype=bool)
    reasons: list[tuple[str, int]] = []
    for reason, hit in rules:
        new = hit & ~mask
        if new.any():
            reasons.append((reason, int(new.sum())))
        mask |= hit
    return mask, tuple(reasons)


def padded_lengths(lengths: np.ndarray, buckets: Sequence[int]) -> np.ndarray:
    """Each length padded up to the first bucket that holds it (buckets empty: unchanged). Lengths beyond the
    largest bucket map to it (callers reject those first)."""
    if not buckets:
        return lengths
    b = np.asarray(buckets, dtype=np.int64)
    return b[np.minimum(np.searchsorted(b, lengths, side="left"), b.size - 1)]


def prefill_times(service: ServiceTimes, lengths: np.ndarray) -> np.ndarray:
    """prefill_s(1, length) per request, calling the service once per distinct length."""
    if lengths.size == 0:
        return np.zeros(0)
    if int(lengths.max()) > LOOKUP_MAX_LENGTH:  # very long prompts: sort instead of a table by length
        present, inverse = np.unique(lengths, return_inverse=True)
    else:
        present, inverse = np.flatnonzero(np.bincount(lengths)), None
    times = np.array(
        [_service_value(service.prefill_s(1, int(L)), f"a prefill of {int(L)} tokens") for L in present]
    )
    if inverse is not None:
        return times[inverse]
    table = np.zeros(int(present[-1]) + 1)
    table[present] = times
    return table[lengths]


@dataclass
class _Run:
    """Raw output of a simulation loop (per-request absolute times over all requests; NaN where not
    served)."""

    ttft: np.ndarray  # time of the first token (LLM) or of the result (encoder)
    e2e: np.ndarray  # time of the last token
    start: np.ndarray  # start of the request's first call
    replica_of: np.ndarray
    busy: np.ndarray  # per replica, seconds spent in calls
    calls: int  # decode steps (LLM) or encoder batches
    prefill_tokens: int  # real prompt tokens prefilled (or encoded)
    prefill_padded: int  # tokens computed for them (buckets, padded batches)
    decode_positions: int  # real KV positions attended over all decode steps
    decode_padded: int  # positions computed (padded batch x charged context)
    slots: int  # running requests summed over decode steps (or requests over encoder batches)
    padded_slots: int  # padded batch size summed over the same calls
    preemptions: int = 0  # KV-cache recompute preemptions (step scheduler)
