"""Serving-time runtime: route variable-length requests onto fixed-shape compiled buckets."""

from chipswap.serve.router import (
    POLICIES,
    InputTooLong,
    Router,
    RouterStats,
    choose_batch,
    choose_bucket,
    pad_batch,
)

__all__ = ["POLICIES", "InputTooLong", "Router", "RouterStats", "choose_batch", "choose_bucket", "pad_batch"]
