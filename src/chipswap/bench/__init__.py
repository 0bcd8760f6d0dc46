"""`chipswap bench`: an open-loop load generator that replays a trace against a URL; measured results.

schedule.py  trace -> bounded send schedule (pure)
clients.py   chipswap /v1/predict and OpenAI-compatible streaming completions/chat (httpx)
runner.py    the open-loop driver with per-request timeouts and early stop
stats.py     per-request records -> measured figures (pure)
results.py   the chipswap.bench/1 file: build, and the strict reader other stages use

Importing this package is cheap (no httpx); the reader is re-exported here.
"""

from chipswap.bench.results import (
    SCHEMA,
    BenchResults,
    BucketFigures,
    MeasuredServing,
    bucket_latency_table,
    measured_serving,
    parse_bench_results,
    read_bench_results,
)

__all__ = [
    "SCHEMA",
    "BenchResults",
    "BucketFigures",
    "MeasuredServing",
    "bucket_latency_table",
    "measured_serving",
    "parse_bench_results",
    "read_bench_results",
]
