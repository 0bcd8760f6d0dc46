"""The open-loop driver: each request leaves at its planned time whatever the server does; bounded in count
and time.

Open loop: a slow server does not slow the sender down (a closed loop would hide overload). Latency is timed
from the moment each request leaves; how late that was against the plan is recorded as send lag.

Bounds, so a run always ends by itself:
- only the schedule's requests (already capped by --requests and --duration) are sent;
- each request has a timeout (connect, read, and the whole stream) and becomes status "timeout" after it;
- at most ``max_inflight`` requests are open at once; one planned beyond that is "not_sent";
- after the last send, stragglers get one timeout to finish, then are cancelled and counted as timeouts;
- the run stops early, keeping what it measured, when the server cannot be reached, does not speak the
  protocol or fails everything (the first answers all fail the same way), or after ``abort_after``
  connection failures in a row.

May not: target anything but the URL it is given, or write files (the command writes the results).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Protocol

import httpx

from chipswap.bench.clients import HttpStatusError, ProtocolError, RejectedError
from chipswap.bench.schedule import Schedule
from chipswap.bench.stats import Record
from chipswap.errors import ChipswapError
from chipswap.textsafe import one_line

# the first answers all failed the same way (no connection, not the protocol, HTTP errors): stop
EARLY_ANSWERS = 5


class Client(Protocol):
    name: str

    async def probe(self, http: httpx.AsyncClient) -> dict[str, Any]: ...

    async def send(self, http: httpx.AsyncClient, rec: Record, clock: Any) -> Record: ...


@dataclass(frozen=True)
class RunLimits:
    """Per-request and whole-run bounds."""

    timeout_s: float = 60.0  # one request, connect to last byte
    max_inflight: int = 512  # open requests at once
    connect_timeout_s: float = 5.0
    abort_after: int = 20  # connection failures in a row that end the run

    def __post_init__(self) -> None:
        if not 0 < self.timeout_s <= 3600:
            raise ChipswapError(f"--timeout must be in (0, 3600] s, got {self.timeout_s}")
        if not 1 <= self.max_inflight <= 100_000:
            raise ChipswapError(f"--max-inflight must be 1..100000, got {self.max_inflight}")


@dataclass
class RunOutcome:
    records: list[Record]
    server: dict[str, Any] | None
    complete: bool
    stop_reason: str
    elapsed_s: float
    extra: dict[str, Any] = field(default_factory=dict)


@dataclass
class _State:
    answered: int = 0
    early_bad: int = 0  # connect/protocol failures among the first EARLY_ANSWERS answers
    early_kind: str = ""
    early_msg: str = ""
    connect_streak: int = 0
    abort: str | None = None


class Progress(Protocol):
    def start(self, total: int) -> None: ...

    def update(self, sent: int, done: int, ok: int, rejected: int, failed: int) -> None: ...


def _classify(exc: BaseException) -> tuple[str, str]:
    if isinstance(exc, RejectedError):
        return "rejected", str(exc)
    if isinstance(exc, HttpStatusError):
        return "http_error", str(exc)
    if isinstance(exc, ProtocolError):
        return "protocol_error", str(exc)
    if isinstance(exc, (TimeoutError, httpx.TimeoutException)):
        kind = type(exc).__name__
        return "timeout", f"no complete answer within the timeout ({kind})"
    if isinstance(exc, (httpx.ConnectError, httpx.RemoteProtocolError, httpx.ReadError, httpx.WriteError)):
        return "connect_error", f"{type(exc).__name__}: {one_line(str(exc) or 'connection failed', 160)}"
    if isinstance(exc, httpx.HTTPError):
        return "connect_error", f"{type(exc).__name__}: {one_line(str(exc), 160)}"
    return "protocol_error", f"{type(exc).__name__}: {one_line(str(exc), 160)}"


def _abort_reason(
    base_url: str, kind: str, msg: str, streak: bool = False, extra: dict[str, Any] | None = None
) -> str:
    if kind == "http_error" and extra and msg.startswith(("HTTP 400", "HTTP 422")):
        fields = ", ".join(sorted(extra))
        return (
            f"the first {EARLY_ANSWERS} requests to {base_url} all failed ({msg}): the server refuses the"
            f" extra request fields ({fields}); rerun without --extra-body (the trial kit: EXTRA_BODY="
            " ./bench.sh SIDE)"
        )
    if kind == "connect_error":
        what = "lost the connection to" if streak else "cannot connect to"
        return f"{what} {base_url} ({msg}); is the server running and the URL right?"
    if kind == "http_error":
        if msg.startswith(("HTTP 404", "HTTP 405")):
            return (
                f"the first {EARLY_ANSWERS} requests to {base_url} all failed ({msg}): the server has no such"
                " route; check --protocol (predict for chipswap serve, completions or chat for an"
                " OpenAI-compatible server) and the URL"
            )
        return f"the first {EARLY_ANSWERS} requests to {base_url} all failed ({msg}); check the server's logs"
    return f"{base_url} does not answer in the protocol asked for: {msg}"


async def run_load(
    base_url: str,
    schedule: Schedule | Callable[[dict[str, Any]], Schedule],
    client: Client,
    *,
    limits: RunLimits | None = None,
    headers: dict[str, str] | None = None,
    progress: Progress | None = None,
    clock: Callable[[], float] = time.monotonic,
) -> RunOutcome:
    """Replay ``schedule`` against ``base_url`` and return every request's record (partial when stopped).

    ``schedule`` may be a function of the probe's answer (the predict client learns the model's range there).
    """
    lim = limits or RunLimits()
    timeout = httpx.Timeout(lim.timeout_s, connect=min(lim.connect_timeout_s, lim.timeout_s))
    pool = httpx.Limits(
        max_connections=lim.max_inflight, max_keepalive_connections=min(lim.max_inflight, 256)
    )
    records: list[Record] = []
    state = _State()
    counts = {"sent": 0, "done": 0, "ok": 0, "rejected": 0, "failed": 0}
    async with httpx.AsyncClient(
        base_url=base_url, timeout=timeout, limits=pool, headers=headers or {}, trust_env=False
    ) as http:
        t_probe = clock()
        try:
            server = await asyncio.wait_for(client.probe(http), timeout=lim.timeout_s)
        except ChipswapError as exc:
            return RunOutcome(records, None, False, str(exc), clock() - t_probe)
        except BaseException as exc:  # noqa: BLE001 - every transport failure is a stop reason, not a crash
            if isinstance(exc, (KeyboardInterrupt, asyncio.CancelledError)):
                raise
            kind, msg = _classify(exc)
            return RunOutcome(records, None, False, _abort_reason(base_url, kind, msg), clock() - t_probe)
        plan = schedule(server) if callable(schedule) else schedule
        records = [
            Record(i, float(plan.at_s[i]), int(plan.prompt_tokens[i]), int(plan.output_tokens[i]))
            for i in range(len(plan))
        ]
        if progress is not None:
            progress.start(len(records))
        t0 = clock()

        def rel() -> float:
            return clock() - t0

        inflight: set[asyncio.Task[None]] = set()
        wake = asyncio.Event()

        async def one(rec: Record) -> None:
            try:
                await asyncio.wait_for(client.send(http, rec, rel), timeout=lim.timeout_s)
                rec.status = "ok"
            except asyncio.CancelledError:
                rec.status, rec.error = (
                    "timeout",
                    "cancelled at the end of the run (still running after the drain)",
                )
                raise
            except BaseException as exc:  # noqa: BLE001 - recorded per request
                if isinstance(exc, KeyboardInterrupt):
                    raise
                rec.status, rec.error = _classify(exc)
                if isinstance(exc, RejectedError):
                    rec.retry_after_s = exc.retry_after
            finally:
                if rec.sent_s is None:
                    rec.sent_s = rel()
                _account(rec)

        def _account(rec: Record) -> None:
            counts["done"] += 1
            if rec.status == "ok":
                counts["ok"] += 1
            elif rec.status == "rejected":
                counts["rejected"] += 1
            else:
                counts["failed"] += 1
            state.answered += 1
            bad = rec.status in ("connect_error", "protocol_error", "http_error")
            if state.answered <= EARLY_ANSWERS:
                if bad and (not state.early_kind or state.early_kind == rec.status):
                    state.early_bad += 1
                    state.early_kind, state.early_msg = rec.status, rec.error or rec.status
                if state.answered == EARLY_ANSWERS and state.early_bad == EARLY_ANSWERS:
                    state.abort = _abort_reason(
                        base_url, state.early_kind, state.early_msg, extra=getattr(client, "extra_body", None)
                    )
            state.connect_streak = state.connect_streak + 1 if rec.status == "connect_error" else 0
            if state.connect_streak >= lim.abort_after and state.abort is None:
                state.abort = _abort_reason(base_url, "connect_error", rec.error or "", streak=True)
            if state.abort is not None:
                wake.set()
            if progress is not None:
                progress.update(
                    counts["sent"], counts["done"], counts["ok"], counts["rejected"], counts["failed"]
                )

        for rec in records:
            if state.abort is not None:
                break
            delay = rec.scheduled_s - rel()
            if delay > 0:
                try:
                    await asyncio.wait_for(wake.wait(), timeout=delay)
                except TimeoutError:
                    pass
                if state.abort is not None:
                    break
            if len(inflight) >= lim.max_inflight:
                rec.status, rec.error = (
                    "not_sent",
                    f"{lim.max_inflight} requests already open (--max-inflight)",
                )
                continue
            counts["sent"] += 1
            task = asyncio.create_task(one(rec))
            inflight.add(task)
            task.add_done_callback(inflight.discard)
            if progress is not None:
                progress.update(
                    counts["sent"], counts["done"], counts["ok"], counts["rejected"], counts["failed"]
                )
        # stragglers: one timeout to finish (they time out themselves), then cancel what is left
        if inflight:
            pending = set(inflight)
            _, still = await asyncio.wait(pending, timeout=0.1 if state.abort else lim.timeout_s + 1.0)
            for t in still:
                t.cancel()
            if still:
                await asyncio.wait(still, timeout=5.0)
        elapsed = rel()
    unsent = sum(1 for r in records if r.status == "not_sent" and r.error is None)
    if state.abort is not None:
        for r in records:
            if r.status == "not_sent" and r.error is None:
                r.error = "not sent: the run stopped early"
        return RunOutcome(records, server, False, state.abort, elapsed, {"unsent_after_stop": unsent})
    return RunOutcome(records, server, True, "every planned request was sent", elapsed)
