"""Prometheus metrics of one serving process: latency per bucket, queue depth, batch fill, padding, rejects.

Each server gets its own registry (several servers can live in one test process). The batcher and the HTTP
layer report events through the small methods below; nothing here decides anything. May not read the clock.

Exposed names (all prefixed ``chipswap_``):
  requests_total{status}                   HTTP answers to /v1/predict by status code
  request_seconds{bucket}                  server time of answered requests (receive -> response ready)
  queue_seconds{bucket}                    time a request waited for its batch to start
  batch_seconds{bucket}                    model time of one batch
  batch_fill_ratio{bucket}                 real requests / compiled batch size, per batch
  batches_total{bucket,batch}              batches run per compiled shape
  real_tokens_total{bucket}                tokens of real requests
  computed_tokens_total{bucket}            token slots computed (real + sequence padding + padding rows)
  padding_waste_ratio{bucket}              1 - real / computed so far
  queue_depth{bucket}                      requests waiting now
  rejects_total{reason}                    queue_full, timeout, draining, not_ready
  inflight                                 requests admitted and not yet answered
  ready                                    1 once every bucket is loaded and warmed, 0 while loading/draining
  connections_open                         connections the gate admitted and holds now (serve/gate.py)
  connections_dropped_total{reason}        closed by the gate (DROP_REASONS)
  probe_lane_total                         /healthz or /readyz served to a connection over a cap
"""

from __future__ import annotations

from typing import Any

LATENCY_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0)
FILL_BUCKETS = (0.125, 0.25, 0.375, 0.5, 0.625, 0.75, 0.875, 1.0)
REJECT_REASONS = ("queue_full", "timeout", "draining", "not_ready", "loop_busy")
# why the connection gate (serve/gate.py) closed a connection
DROP_REASONS = ("header_timeout", "body_timeout", "over_cap", "lane_full")


class ServeMetrics:
    """Counters, gauges and histograms in a private CollectorRegistry; ``render()`` is the /metrics body."""

    def __init__(self) -> None:
        from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

        self.registry = CollectorRegistry(auto_describe=True)
        r = self.registry
        self.requests = Counter(
            "chipswap_requests", "Answers to /v1/predict by HTTP status", ["status"], registry=r
        )
        self.request_s = Histogram(
            "chipswap_request_seconds",
            "Server time of answered requests",
            ["bucket"],
            buckets=LATENCY_BUCKETS,
            registry=r,
        )
        self.queue_s = Histogram(
            "chipswap_queue_seconds",
            "Wait before the request's batch started",
            ["bucket"],
            buckets=LATENCY_BUCKETS,
            registry=r,
        )
        self.batch_s = Histogram(
            "chipswap_batch_seconds",
            "Model time of one batch",
            ["bucket"],
            buckets=LATENCY_BUCKETS,
            registry=r,
        )
        self.fill = Histogram(
            "chipswap_batch_fill_ratio",
            "Real requests / compiled batch size",
            ["bucket"],
            buckets=FILL_BUCKETS,
            registry=r,
        )
        self.batches = Counter(
            "chipswap_batches", "Batches run per compiled shape", ["bucket", "batch"], registry=r
        )
        self.real_tokens = Counter("chipswap_real_tokens", "Tokens of real requests", ["bucket"], registry=r)
        self.computed_tokens = Counter(
            "chipswap_computed_tokens", "Token slots computed including padding", ["bucket"], registry=r
        )
        self.waste = Gauge(
            "chipswap_padding_waste_ratio", "1 - real / computed tokens", ["bucket"], registry=r
        )
        self.queue_depth = Gauge("chipswap_queue_depth", "Requests waiting", ["bucket"], registry=r)
        self.rejects = Counter("chipswap_rejects", "Requests turned away", ["reason"], registry=r)
        self.inflight = Gauge("chipswap_inflight", "Admitted requests not yet answered", registry=r)
        self.ready = Gauge("chipswap_ready", "1 when every bucket is loaded and warmed", registry=r)
        self.disconnects = Counter(
            "chipswap_client_disconnects",
            "Clients that went away before their request was read or answered (not a server error)",
            registry=r,
        )
        self.loop_lag = Gauge(
            "chipswap_event_loop_lag_seconds", "How late the HTTP event loop wakes up (smoothed)", registry=r
        )
        self.connections_open = Gauge(
            "chipswap_connections_open", "Connections the gate admitted and holds now", registry=r
        )
        self.connections_dropped = Counter(
            "chipswap_connections_dropped", "Connections the gate closed, by reason", ["reason"], registry=r
        )
        self.lane_probes = Counter(
            "chipswap_probe_lane", "Probes served to a connection over a connection cap", registry=r
        )
        for reason in REJECT_REASONS:
            self.rejects.labels(reason)
        for reason in DROP_REASONS:
            self.connections_dropped.labels(reason)
        self._tokens: dict[str, list[int]] = {}
        self._children: dict[tuple[int, tuple[str, ...]], Any] = {}

    # --- events from the batcher -----------------------------------------------------------------------
    def batch_done(
        self, bucket: int, batch: int, fill: int, real_tokens: int, computed_tokens: int, model_s: float
    ) -> None:
        b = str(bucket)
        self._child(self.batch_s, b).observe(model_s)
        self._child(self.fill, b).observe(fill / batch if batch else 0.0)
        self._child(self.batches, b, str(batch)).inc()
        self._child(self.real_tokens, b).inc(real_tokens)
        self._child(self.computed_tokens, b).inc(computed_tokens)
        tot = self._tokens.setdefault(b, [0, 0])
        tot[0] += real_tokens
        tot[1] += computed_tokens
        self._child(self.waste, b).set(1.0 - tot[0] / tot[1] if tot[1] else 0.0)

    def queued(self, bucket: int, depth: int) -> None:
        self._child(self.queue_depth, str(bucket)).set(depth)

    def rejected(self, reason: str) -> None:
        self._child(self.rejects, reason).inc()

    def _child(self, metric: Any, *labels: str) -> Any:
        """``metric.labels(*labels)``, looked up once: the library validates and locks on every call, and the
        request path makes several per request (issue 33's profile)."""
        key = (id(metric), labels)
        child = self._children.get(key)
        if child is None:
            child = self._children[key] = metric.labels(*labels)
        return child

    # --- events from the HTTP layer ----------------------------------------------------------------------
    def answered(
        self, status: int, bucket: int | None, request_s: float | None, queue_s: float | None
    ) -> None:
        self._child(self.requests, str(status)).inc()
        if bucket is not None and request_s is not None:
            self._child(self.request_s, str(bucket)).observe(request_s)
        if bucket is not None and queue_s is not None:
            self._child(self.queue_s, str(bucket)).observe(queue_s)

    def connection_event(self, reason: str) -> None:
        """From the connection gate: a DROP_REASONS entry, or "lane_probe"."""
        if reason == "lane_probe":
            self.lane_probes.inc()
        else:
            self._child(self.connections_dropped, reason).inc()

    def render(self) -> tuple[bytes, str]:
        from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

        return generate_latest(self.registry), CONTENT_TYPE_LATEST

    def value(self, name: str, **labels: Any) -> float:
        """One sample's current value (tests and the benchmark read counters without parsing text)."""
        got = self.registry.get_sample_value(name, {k: str(v) for k, v in labels.items()})
        return float(got) if got is not None else 0.0
