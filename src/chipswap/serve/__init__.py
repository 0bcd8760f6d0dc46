"""Serving-time runtime: route variable-length requests onto fixed-shape compiled buckets."""

from chipswap.serve.router import (
    POLICIES,
    Router,
    RouterStats,
    choose_batch,
    choose_bucket,
)

__all__ = ["POLICIES", "Router", "RouterStats", "choose_batch", "choose_bucket"]
