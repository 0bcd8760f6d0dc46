"""Cost models for the bucket planner: what one padded request of a bucket length costs (tokens, attention
FLOPs, or measured latencies), and the attention coefficients of a transformer.

Pure: numpy and the standard library only; no files, clock, printing or torch.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from chipswap.errors import ChipswapError

# ------------------------------------------------------------------------------------------------------------
# Cost models
# ------------------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class CostModel:
    """Cost of running one sequence padded to length L.

    kind "tokens":    c(L) = L                      (padded tokens)
    kind "attention": c(L) = linear*L + quadratic*L^2 (+ constant), e.g. FLOPs from attention_coefficients()
    kind "measured":  c(L) from a per-shape latency table: linear interpolation between listed shapes
                      (interpolate=True) or only the listed shapes may be buckets (interpolate=False).
                      Lengths outside
                      the table are never extrapolated: they raise.
    """

    kind: str
    linear: float | int = 1
    quadratic: float | int = 0
    constant: float | int = 0
    table_lengths: tuple[int, ...] = ()
    table_costs: tuple[float, ...] = ()
    interpolate: bool = True

    @property
    def name(self) -> str:
        return self.kind

    @property
    def listed_only(self) -> bool:
        return self.kind == "measured" and not self.interpolate

    @property
    def integral(self) -> bool:
        if self.kind == "measured":
            return all(float(c).is_integer() for c in self.table_costs)
        return all(float(x).is_integer() for x in (self.linear, self.quadratic, self.constant))

    def cost(self, lengths: np.ndarray | Sequence[int]) -> np.ndarray:
        L = np.asarray(lengths, dtype=np.float64)
        if self.kind == "measured":
            xs = np.asarray(self.table_lengths, dtype=np.float64)
            if L.size and (L.min() < xs[0] or L.max() > xs[-1]):
                bad = L.min() if L.min() < xs[0] else L.max()
                raise ChipswapError(
                    f"length {int(bad)} is outside the measured latency table ({int(xs[0])}..{int(xs[-1])}); "
                    "measure that shape, lower --max-length, or use --cost-model tokens|attention"
                )
            return np.interp(L, xs, np.asarray(self.table_costs, dtype=np.float64))
        return self.constant + self.linear * L + self.quadratic * L * L

    def real_cost(self, lengths: np.ndarray) -> np.ndarray:
        """Cost of each length unpadded; for a table, lengths below the first shape cost as that shape."""
        if self.kind == "measured":
            xs = np.asarray(self.table_lengths, dtype=np.float64)
            return self.cost(np.clip(np.asarray(lengths, dtype=np.float64), xs[0], xs[-1]))
        return self.cost(lengths)


def tokens_cost() -> CostModel:
    return CostModel("tokens", linear=1)


def attention_cost(linear: float, quadratic: float) -> CostModel:
    if not (linear >= 0 and quadratic >= 0) or (linear == 0 and quadratic == 0):
        raise ChipswapError(
            f"attention cost coefficients a={linear}, b={quadratic} must be >= 0 and not both 0; "
            "derive them with attention_coefficients(hidden_size, num_layers)"
        )
    return CostModel("attention", linear=linear, quadratic=quadratic)


def measured_cost(
    lengths: Sequence[int], latencies: Sequence[float], *, interpolate: bool = True
) -> CostModel:
    """Per-shape latency table -> cost model. Shapes: distinct positive ints; latency non-decreasing."""
    if len(lengths) == 0 or len(lengths) != len(latencies):
        raise ChipswapError(
            "the measured latency table needs at least one (shape, latency) row with one latency per shape; "
            "run the benchmark first or use --cost-model tokens"
        )
    order = np.argsort(np.asarray(lengths))
    xs = [int(lengths[i]) for i in order]
    ys = [float(latencies[i]) for i in order]
    for i, (x, y) in enumerate(zip(xs, ys, strict=True)):
        if x < 1 or (i and x == xs[i - 1]):
            raise ChipswapError(
                f"measured table shape {x} is not a distinct positive length; list each shape once"
            )
        if not math.isfinite(y) or y < 0:
            raise ChipswapError(
                f"measured latency {y} for shape {x} is not a finite number >= 0; re-measure it"
            )
        if i and y < ys[i - 1]:
            raise ChipswapError(
                f"measured latency falls from {ys[i - 1]} at shape {xs[i - 1]} to {y} at shape {x}; "
                "the planner needs latency non-decreasing in length: re-measure or take the running maximum"
            )
    return CostModel(
        "measured", linear=0, table_lengths=tuple(xs), table_costs=tuple(ys), interpolate=interpolate
    )


def attention_coefficients(
    hidden_size: int,
    num_layers: int,
    *,
    intermediate_size: int | None = None,
    num_attention_heads: int | None = None,
    num_key_value_heads: int | None = None,
    gated_mlp: bool = False,
    vocab_size: int = 0,
) -> tuple[int, int]:
    """FLOPs of one forward pass over L tokens = a*L + b*L^2 (dense, no causal halving: padded shapes compute
    all).

    Per layer and token, matmul FLOPs (2 per multiply-add): Q and O projections 2*2*h*h, K and V projections
    2*2*h*kv_dim (kv_dim = h * kv_heads / heads under grouped-query attention), MLP 2*(2 or 3)*h*i (3 when
    gated,
    as in Llama). The L^2 term is QK^T and attention*V: 2*2*h per layer per (query, key) pair. An LM head adds
    2*h*vocab per token. For one decode step over a context of L, the same model costs a + b*L.
    """
    for name, v in (("hidden_size", hidden_size), ("num_layers", num_layers)):
        if not isinstance(v, int) or v < 1:
            raise ChipswapError(f"{name} = {v!r} must be a positive integer; take it from the model config")
    h = hidden_size
    inter = 4 * h if intermediate_size is None else intermediate_size
    heads = num_attention_heads or 1
    kv_heads = num_key_value_heads or heads
    if heads < 1 or kv_heads < 1 or heads % kv_heads:
        raise ChipswapError(
            f"num_attention_heads {heads} must be a multiple of num_key_value_heads {kv_heads}; check the "
            "config"
        )
    kv_dim = h * kv_heads // heads
    mlp_mats = 3 if gated_mlp else 2
    per_layer_linear = 4 * h * h + 4 * h * kv_dim + 2 * mlp_mats * h * inter
    a = num_layers * per_layer_linear + 2 * h * vocab_size
    b = num_layers * 4 * h
    return int(a), int(b)


