"""Trace-driven discrete-event simulation of a serving fleet: continuous batching for LLMs, dynamic batching
for fixed-shape encoders, Neuron padding to buckets, round-robin or least-loaded dispatch across replicas.

Every call a replica makes is timed by a `ServiceTimes` (projected or measured); this module never decides how
fast a chip is. It is fast because it does not step through tokens: between two events (an arrival that can
join, a completion) the batch on a replica is fixed and its representative context grows by one token per
step, so the time of m decode steps is a difference of a cumulative step-time table (built once per batch
size, over context intervals on which the step time is constant). A request that runs alone on its replica
(idle when it arrives, done before the next one comes) is computed in closed form with the same arithmetic.
`tests.simulate_reference` steps through every call and is the oracle the tests compare this module
against.

Pure: numpy and the standard library. It may not read files, the clock or the network, print, or import torch.
Bad input raises ChipswapError (one line: what is wrong and how to fix it).

Serving rules (the naive reference implements the same rules independently):
- LLM, per replica: FIFO queue; at every call boundary, if a request is waiting and fewer than `max_batch`
  requests are running, the head of the queue is prefilled alone (batch 1, prompt padded to its prefill bucket
  on Neuron); its first token is out when the prefill ends (TTFT). Otherwise one decode step runs for all
  running requests. A request with `o` output tokens needs `o - 1` decode steps after its prefill; the j-th
  one attends over `prompt + j` positions. A step is timed at `decode_step_s(batch, context)`, where batch is
  the running count (padded up to the next compiled batch size when `batch_sizes` is set) and context is the
  batch's mean context rounded up to a `context_block` (GPU, paged KV cache) or, with `decode_buckets`
  (Neuron), the bucket that holds the batch's longest context.
- Encoder, per replica: FIFO queue; when the replica is free, a batch of up to `max_batch` waiting requests
  starts as soon as `max_batch` are waiting or the oldest has waited `max_queue_delay_s`; it runs at the next
  compiled batch size and at the sequence bucket (Neuron) or length (GPU) of its longest member.
- Dispatch: round robin (each arrival to the next replica in turn; the default), or least loaded (the replica
  with the fewest outstanding requests, waiting + running, the lowest-numbered one on ties).
- A request that cannot fit (prompt beyond the largest prefill bucket, prompt + output beyond the largest
  decode bucket or `max_length`) is rejected and counted, never truncated or resized; beyond a `max_length`
  that came from a projection (`ReplicaSetup.over_length == "refuse"`) the traffic is refused with the count.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace

import numpy as np

from chipswap.errors import ChipswapError
from chipswap.simulation.encoder import _simulate_encoder
from chipswap.simulation.engine import SCAN_REPLICAS, _simulate_llm
from chipswap.simulation.model import (
    CDF_POINTS,
    DEFAULT_CONTEXT_BLOCK,
    DEFAULT_MAX_QUEUE_DELAY_S,
    DENSE_TABLE_ENTRIES,
    LOOKUP_MAX_LENGTH,
    MAX_TABLE_COLUMNS,
    MODES,
    BucketLatency,
    LatencyStats,
    Padding,
    ReplicaSetup,
    SimResult,
    _DecodeTables,
    _Run,
    _service_value,
    _take,
    padded_lengths,
    prefill_times,
    reject_mask,
    setup_from_serving,
)
from chipswap.simulation.policies import CHUNKED_PREFILL, DYNAMIC_BATCHING, scheduler_policy_for
from chipswap.simulation.servicetime import ServiceTimes, positions_held
from chipswap.simulation.steps import StepSim
from chipswap.simulation.traffic import (
    DEFAULT_SCALE_METHOD,
    MAX_REQUESTS,
    SCALE_METHOD_WORDS,
    SCALE_METHODS,
    Traffic,
    Window,
    bursty_arrivals,
    busiest_window,
    make_traffic,
    poisson_arrivals,
    repeat_traffic,
    scale_traffic,
    traffic_with_lengths,
)

__all__ = [
    "DEFAULT_SCALE_METHOD",
    "SCALE_METHODS",
    "SCALE_METHOD_WORDS",
    "DISPATCHERS",
    "CDF_POINTS",
    "DEFAULT_CONTEXT_BLOCK",
    "DEFAULT_MAX_QUEUE_DELAY_S",
    "DENSE_TABLE_ENTRIES",
    "LOOKUP_MAX_LENGTH",
    "MAX_REQUESTS",
    "MAX_TABLE_COLUMNS",
    "MODES",
    "SCAN_REPLICAS",
    "BucketLatency",
    "LatencyStats",
    "Padding",
    "ReplicaSetup",
    "SimResult",
    "Traffic",
    "Window",
    "busiest_window",
    "bursty_arrivals",
    "make_traffic",
    "padded_lengths",
    "poisson_arrivals",
    "prefill_times",
    "reject_mask",
    "repeat_traffic",
    "request_work",
    "scale_traffic",
    "scheduler_policy_for",
    "setup_from_serving",
    "simulate",
    "traffic_with_lengths",
]

DISPATCH = ("least_loaded", "round_robin")  # per-replica queues (both engines, and the reference simulator)
DISPATCHERS = (*DISPATCH, "shared")  # "shared": one queue every replica draws from (step scheduler only)
# Round robin is what the published multi-replica runs use (nginx before 3 replicas) and what a plain load
# balancer does; it waits longer than a shared queue (docs/simulation.md: Erlang-C check), so it is the
# conservative choice for both fleets alike. Least loaded counts outstanding requests, which on continuous
# batching does not track the remaining work (it can lengthen the tail).
DEFAULT_DISPATCH = "round_robin"
MAX_REPLICAS = 100_000


def request_work(
    traffic: Traffic, service: ServiceTimes, setup: ReplicaSetup, mode: str = "llm"
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Per-request bounds that need no simulation, for the requests this setup accepts (NaN where rejected):

    - alone: latency on an otherwise idle replica (TTFT, end-to-end): the prefill, then every decode step at
      batch 1 (padded batch on Neuron) and the request's own context (the floor no fleet size can beat);
    - work: replica-seconds the request costs at best, with every decode step shared by a full batch; the
      sum over a window divided by its length bounds the number of replicas from below.
    Encoders: alone = one call at batch 1 (padded), work = its share of a full batch call."""
    if mode not in MODES:
        raise ChipswapError(f"simulation mode {mode!r} is not known; use one of {', '.join(MODES)}")
    rejected, _ = reject_mask(traffic, setup, mode)
    ok = ~rejected
    p = traffic.prompt_tokens[ok]
    ttft = np.full(len(traffic), np.nan)
    e2e = np.full(len(traffic), np.nan)
    work = np.full(len(traffic), np.nan)
    if not ok.any():
        return ttft, e2e, work
    B = setup.max_batch
    if mode == "encoder":
        length = padded_lengths(p, setup.prefill_buckets)
        uniq, inv = np.unique(length, return_inverse=True)
        alone = np.array(
            [
                _service_value(service.encoder_s(setup.padded_batch(1), int(L)), "an encoder call")
                for L in uniq
            ]
        )
        full = np.array(
            [
                _service_value(service.encoder_s(setup.padded_batch(B), int(L)), "an encoder call")
                for L in uniq
            ]
        )
        ttft[ok] = e2e[ok] = alone[inv]
        work[ok] = full[inv] / B
        return ttft, e2e, work
    o = traffic.output_tokens[ok]
    pre = prefill_times(service, padded_lengths(p, setup.prefill_buckets))
    tables = _DecodeTables(service, setup, int(positions_held(p, o).max()))
    lo, hi = p + 1, p + np.maximum(o, 1)  # decode step j of o - 1 runs at context p + j
    ttft[ok] = pre
    e2e[ok] = pre + (_take(tables.row(1), hi) - _take(tables.row(1), lo))
    work[ok] = pre + (_take(tables.row(B), hi) - _take(tables.row(B), lo)) / B
    return ttft, e2e, work


def simulate(
    traffic: Traffic,
    service: ServiceTimes,
    setup: ReplicaSetup,
    replicas: int,
    *,
    mode: str = "llm",
    dispatch: str = DEFAULT_DISPATCH,
    measure: tuple[float, float] | None = None,
    report_buckets: Sequence[int] = (),
) -> SimResult:
    """Replay `traffic` on `replicas` identical replicas. `measure=(start_s, end_s)` counts only requests
    arriving in that window in the statistics (the rest warm the fleet up or keep it busy); `report_buckets`
    are the prompt-length edges of the per-bucket latency table (default: the prefill buckets, or powers of
    2)."""
    if mode not in MODES:
        raise ChipswapError(f"simulation mode {mode!r} is not known; use one of {', '.join(MODES)}")
    if dispatch not in DISPATCHERS:
        raise ChipswapError(f"dispatch {dispatch!r} is not known; use one of {', '.join(DISPATCHERS)}")
    if isinstance(replicas, bool) or not isinstance(replicas, int) or not 1 <= replicas <= MAX_REPLICAS:
        raise ChipswapError(f"replica count must be an integer 1 .. {MAX_REPLICAS:,}, got {replicas!r}")
    n = len(traffic)
    if n == 0:
        raise ChipswapError("no requests to simulate (empty traffic or window); give traffic with arrivals")
    measured = np.ones(n, dtype=bool)
    if measure is not None:
        a = traffic.arrivals_s
        measured = (a >= measure[0]) & (a < measure[1])
        if not measured.any():
            raise ChipswapError(
                f"no arrivals in the window {measure[0]:g} .. {measure[1]:g} s; "
                "pick a window inside the trace"
            )
    rejected, _ = reject_mask(traffic, setup, mode)
    accepted = np.flatnonzero(~rejected)
    if mode == "llm" and needs_steps(traffic, setup, accepted, dispatch):
        run = simulate_steps(traffic, service, setup, replicas, accepted, dispatch)
    elif mode == "encoder" and dispatch == "shared":
        raise ChipswapError(
            "a shared queue is simulated for LLM serving only; use round_robin or least_loaded"
        )
    else:
        raw = _simulate_llm if mode == "llm" else _simulate_encoder
        run = raw(traffic, service, setup, replicas, accepted, dispatch == "least_loaded")
    res = _summarize(traffic, setup, mode, replicas, run, rejected, measured, report_buckets)
    policy = setup.policy if mode == "llm" else DYNAMIC_BATCHING
    return replace(res, policy=policy, dispatch=dispatch, preemptions=run.preemptions)


def _report_edges(traffic: Traffic, setup: ReplicaSetup, report_buckets: Sequence[int]) -> np.ndarray:
    if report_buckets:
        edges = sorted({int(b) for b in report_buckets})
    elif setup.prefill_buckets:
        edges = list(setup.prefill_buckets)
    else:
        top = int(traffic.prompt_tokens.max())
        edges = [1 << k for k in range(max(1, top - 1).bit_length() + 1)]
    top = int(traffic.prompt_tokens.max())
    if edges[-1] < top:
        edges.append(top)  # requests past the last edge get their own row
    return np.asarray(edges, dtype=np.int64)


def _max_waiting(arrivals: np.ndarray, starts: np.ndarray) -> int:
    """Most requests waiting for their first call at once: just after each arrival, the arrivals so far minus
    the first calls started by then (a start at the same instant counts as done)."""
    if arrivals.size == 0:
        return 0
    started = np.searchsorted(np.sort(starts), arrivals, side="right")
    return int(max(0, (np.arange(1, arrivals.size + 1) - started).max()))


def _summarize(
    traffic: Traffic,
    setup: ReplicaSetup,
    mode: str,
    replicas: int,
    run: _Run,
    rejected: np.ndarray,
    measured: np.ndarray,
    report_buckets: Sequence[int],
) -> SimResult:
    arr = traffic.arrivals_s
    ttft = run.ttft - arr
    e2e = run.e2e - arr
    wait = run.start - arr
    served = measured & ~rejected
    done_times = run.e2e[~np.isnan(run.e2e)]
    last = float(done_times.max()) if done_times.size else float(arr[-1])
    span = max(last - float(arr[0]), 1e-12)
    if served.any():
        m_span = max(float(run.e2e[served].max()) - float(arr[measured].min()), 1e-12)
        throughput = float(served.sum()) / m_span
        tokens_s = float(traffic.output_tokens[served].sum()) / m_span if mode == "llm" else 0.0
    else:
        throughput = tokens_s = 0.0
    edges = _report_edges(traffic, setup, report_buckets)
    idx = np.flatnonzero(served)
    which = np.searchsorted(edges, traffic.prompt_tokens[idx], side="left")
    which = which.astype(np.int16 if edges.size < np.iinfo(np.int16).max else np.int64)  # (int16: radix sort)
    idx = idx[np.argsort(which, kind="stable")]
    bounds = np.concatenate(([0], np.cumsum(np.bincount(which, minlength=edges.size))))
    per_bucket = [
        BucketLatency(edge, int(hi - lo), LatencyStats.of(ttft[idx[lo:hi]]), LatencyStats.of(e2e[idx[lo:hi]]))
        for edge, lo, hi in zip(edges.tolist(), bounds[:-1], bounds[1:], strict=True)
        if hi > lo
    ]
    _, reasons = reject_mask(
        Traffic(arr[measured], traffic.prompt_tokens[measured], traffic.output_tokens[measured]), setup, mode
    )
    util = run.busy / span
    # time averages over the whole run by Little's law (the run starts and ends empty, so it holds exactly)
    mean_in_system = float(np.nansum(run.e2e - arr)) / span
    mean_waiting = float(np.nansum(run.start - arr)) / span
    max_waiting = _max_waiting(arr[~rejected], run.start[~rejected])
    return SimResult(
        mode=mode,
        replicas=replicas,
        requests=int(measured.sum()),
        rejected=int((measured & rejected).sum()),
        reject_reasons=reasons,
        ttft=LatencyStats.of(ttft[served]),
        e2e=LatencyStats.of(e2e[served]),
        wait=LatencyStats.of(wait[served]),
        throughput_rps=throughput,
        output_tokens_per_s=tokens_s,
        utilization=float(util.mean()),
        replica_utilization=util,
        mean_batch=run.slots / run.calls if run.calls else 0.0,
        calls=run.calls,
        mean_in_system=mean_in_system,
        mean_waiting=mean_waiting,
        max_waiting=max_waiting,
        span_s=span,
        padding=Padding(
            run.prefill_tokens,
            run.prefill_padded,
            run.decode_positions,
            run.decode_padded,
            run.slots,
            run.padded_slots,
        ),
        per_bucket=tuple(per_bucket),
        arrivals_s=arr,
        ttft_s=ttft,
        e2e_s=e2e,
        start_s=run.start,
        replica_of=run.replica_of,
        measured=measured,
    )


def needs_steps(traffic: Traffic, setup: ReplicaSetup, accepted: np.ndarray, dispatch: str) -> bool:
    """Whether this run needs the step scheduler: chunked prefill, a shared queue, or a KV cache that could
    fill up (otherwise the closed-form engine's rules are exactly the policy's)."""
    if setup.policy == CHUNKED_PREFILL or setup.token_budget or dispatch == "shared":
        return True
    if not setup.kv_blocks or accepted.size == 0:
        return False
    longest = int(positions_held(traffic.prompt_tokens[accepted], traffic.output_tokens[accepted]).max())
    return setup.max_batch * -(-longest // setup.context_block) > setup.kv_blocks


def simulate_steps(
    traffic: Traffic, service: ServiceTimes, setup: ReplicaSetup, R: int, accepted: np.ndarray, dispatch: str
) -> _Run:
    """Run the step scheduler; the result in the closed-form engine's format."""
    p, o = traffic.prompt_tokens[accepted], traffic.output_tokens[accepted]
    top = int(positions_held(p, o).max()) if accepted.size else 1
    tables = _DecodeTables(service, setup, top)
    sim = StepSim(
        traffic, service, setup, R, accepted, dispatch, tables, padded_lengths(p, setup.prefill_buckets)
    )
    sim.run()
    e2e, ttft, start = np.asarray(sim.e2e), np.asarray(sim.ttft), np.asarray(sim.start)
    if sim.alone is not None:
        idx, a, first, last = sim.alone
        start[idx], ttft[idx], e2e[idx] = a, first, last
    replica_of = np.asarray(sim.replica_of, dtype=np.int64)
    steps = np.maximum(o - 1, 0)
    real = int((steps * p + steps * (steps + 1) // 2).sum())
    padded = bool(setup.decode_buckets or setup.batch_sizes)
    busy = np.asarray([rp.busy for rp in sim.reps])
    return _Run(
        ttft=ttft,
        e2e=e2e,
        start=start,
        replica_of=replica_of,
        busy=busy,
        calls=sum(rp.steps for rp in sim.reps),
        prefill_tokens=int(p.sum()),
        prefill_padded=int(padded_lengths(p, setup.prefill_buckets).sum()),
        decode_positions=real,
        decode_padded=int(round(sum(rp.pad for rp in sim.reps))) if padded else real,
        slots=int(steps.sum()),
        padded_slots=sum(rp.pad_slots for rp in sim.reps) if padded else int(steps.sum()),
        preemptions=sim.preemptions,
    )
