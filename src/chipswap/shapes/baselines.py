"""The fixed-rule bucket baselines Neuron stacks and sequence toolkits use (powers of two, quantiles,
geometric, linear, one bucket), each evaluated under the same cost model as the optimum, so the saving is
like for like.

Pure: numpy and the standard library only; no files, clock, printing or torch.
"""

from __future__ import annotations

import math
from collections.abc import Callable

import numpy as np

from chipswap.shapes.buckets import Evaluation, effective_lengths, evaluate
from chipswap.shapes.costmodel import CostModel
from chipswap.shapes.histogram import Histogram

# ------------------------------------------------------------------------------------------------------------
# Baselines: the fixed rules Neuron stacks and sequence toolkits use
# ------------------------------------------------------------------------------------------------------------


def powers_of_two_ladder(max_length: int, start: int = 128) -> list[int]:
    """NxDI / transformers-neuronx / vLLM-neuron default: 128, 256, ... below max_length, then max_length."""
    out = []
    x = start
    while x < max_length:
        out.append(x)
        x *= 2
    return [*out, max_length]


def geometric_ladder(max_length: int, step: float = 1.1, min_length: int = 8) -> list[int]:
    """tensor2tensor `_bucket_boundaries`: x = min_length, x = max(x + 1, int(x * step)) until max_length."""
    out = []
    x = min_length
    while x < max_length:
        out.append(x)
        x = max(x + 1, int(x * step))
    return [*out, max_length]


def _top_k(ladder: list[int], k: int | None) -> list[int]:
    return ladder if k is None else ladder[-k:]


def _pow2_k(hist: Histogram, k: int | None, top: int) -> list[int]:
    ladder = powers_of_two_ladder(top)
    if k is None or k <= len(ladder):
        return _top_k(ladder, k)
    low = ladder[0]
    extra: list[int] = []
    while len(ladder) + len(extra) < k and low > 1:  # extend below 128 by halving
        low //= 2
        extra.append(low)
    return sorted(extra) + ladder


def _quantiles_k(hist: Histogram, k: int | None, top: int) -> list[int]:
    kk = k or 8
    lengths, weights, _ = effective_lengths(hist, top, "reject")
    if lengths.size == 0:
        return [top]
    sub = Histogram(lengths, weights)
    return sorted({*(sub.quantile(i / kk) for i in range(1, kk)), top})


def _geometric_k(hist: Histogram, k: int | None, top: int) -> list[int]:
    if k is None:
        return geometric_ladder(top)
    lo = max(min(128, top), 1)  # same start as the powers-of-two ladder; the ratio is fitted to reach top
    if k == 1 or lo >= top:
        return [top]
    r = (top / lo) ** (1.0 / (k - 1))
    return sorted({*(min(int(math.ceil(lo * r**i)), top) for i in range(k - 1)), top})


def _linear_k(hist: Histogram, k: int | None, top: int) -> list[int]:
    kk = k or 8
    return sorted({*(int(math.ceil(top * i / kk)) for i in range(1, kk)), top})


def _single(hist: Histogram, k: int | None, top: int) -> list[int]:
    return [top]


# name -> (edges rule at K buckets, what it is)
BASELINES: dict[str, tuple[Callable[[Histogram, int | None, int], list[int]], str]] = {
    "powers_of_two": (
        _pow2_k,
        "NxDI/transformers-neuronx/vLLM-neuron default: powers of 2 from 128, last = max "
        "(at K: the K largest; halves below 128 when K exceeds the ladder)",
    ),
    "single_max": (_single, "optimum-neuron export default: one shape at the max length (always K=1)"),
    "quantiles": (_quantiles_k, "fairseq-style: edges at the i/K quantiles of the lengths, last = max"),
    "geometric": (
        _geometric_k,
        "tensor2tensor-style geometric ladder; at K: from 128 with the ratio fitted to "
        "reach max in K steps (natural form, step 1.1 from 8: geometric_1.1_natural)",
    ),
    "linear": (_linear_k, "equal gaps: max*i/K"),
}


def baseline_plans(
    hist: Histogram,
    cost_model: CostModel,
    *,
    k: int | None,
    max_length: int,
    policy: str = "reject",
    include_natural: bool = True,
) -> dict[str, Evaluation]:
    """Every baseline at K buckets (where the rule allows), plus the natural NxDI and t2t ladders."""
    out: dict[str, Evaluation] = {}
    for name, (rule, desc) in BASELINES.items():
        edges = rule(hist, k, max_length)
        out[name] = _eval_baseline(hist, edges, cost_model, policy, name, desc)
    if include_natural:
        out["powers_of_two_natural"] = _eval_baseline(
            hist,
            powers_of_two_ladder(max_length),
            cost_model,
            policy,
            "powers_of_two_natural",
            "NxDI default ladder at its own K",
        )
        out["geometric_1.1_natural"] = _eval_baseline(
            hist,
            geometric_ladder(max_length),
            cost_model,
            policy,
            "geometric_1.1_natural",
            "tensor2tensor step 1.1 ladder from 8 at its own K",
        )
    return out


def _eval_baseline(
    hist: Histogram, edges: list[int], cost_model: CostModel, policy: str, name: str, desc: str
) -> Evaluation:
    if cost_model.listed_only:
        xs = np.asarray(cost_model.table_lengths)
        edges = sorted({int(xs[np.searchsorted(xs, e)]) for e in edges if e <= xs[-1]})
        desc += " (rounded up to measured shapes)"
    elif cost_model.kind == "measured":
        edges = sorted({max(int(e), cost_model.table_lengths[0]) for e in edges})
    return evaluate(hist, edges, cost_model, policy=policy, name=name, note=desc)

