"""Optimal fixed-shape buckets for a length histogram: the exact planner, the budgets it honours and the
evaluation of any set of edges (histograms: shapes.histogram; cost models: shapes.costmodel; the fixed-rule
baselines: shapes.baselines).

Neuron compiles one graph per input shape, so every request is padded up to the smallest bucket that holds it.
Given a histogram of lengths, this module picks the K bucket upper edges that minimise the expected padded
cost, exactly: a dynamic programme over the candidate edges (the distinct lengths, rounded up to the
alignment) with prefix sums. The group cost (W_j - W_i) * c(E_j) is Monge because c is non-decreasing, so the
best split point of each layer moves monotonically; each layer is solved by divide and conquer on that split
point, vectorised in numpy one recursion depth at a time (O(n log n) per layer, no Python loop over
candidates). Integral weights and costs (token and FLOP models) are computed in int64 after removing the
constant and the common factor of the costs, with a proof that nothing overflows; when that bound fails, a
pure Python-integer convex-hull DP is used instead, so "optimal" means exactly optimal there. With fractional
costs (measured latencies) it is optimal up to floating-point rounding.

The DP's table (buckets x candidates) is capped by MAX_DP_CELLS.

Pure: numpy and the standard library only. It may not read or write files, read the clock, print, or import
torch. Everything it returns is a frozen dataclass or a numpy array. User errors are raised as ChipswapError
(one line).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from chipswap.errors import ChipswapError
from chipswap.shapes.costmodel import CostModel
from chipswap.shapes.histogram import Histogram, check_length_bound

POLICIES = ("reject", "truncate")

# buckets x candidate edges the exact DP may tabulate (its argmin table is int32): 256 MiB at most.
MAX_DP_CELLS = 1 << 26


# ------------------------------------------------------------------------------------------------------------
# Budgets
# ------------------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Budgets:
    """Limits a plan must meet. None means unlimited.

    max_buckets:      at most this many buckets (graphs to compile and keep loaded).
    max_compile_s:    total estimated compile time over buckets; per bucket compile_fixed_s +
    compile_per_token_s*L.
    device_memory_bytes: every bucket's memory estimate memory_fixed_bytes + memory_per_token_bytes*L
                      + memory_per_token2_bytes*L^2 must fit on the device (checked per bucket; the estimate
                      grows
                      with L, so this caps the largest bucket).
    """

    max_buckets: int | None = None
    max_compile_s: float | None = None
    compile_fixed_s: float | None = None
    compile_per_token_s: float = 0.0
    device_memory_bytes: int | None = None
    memory_fixed_bytes: int = 0
    memory_per_token_bytes: int = 0
    memory_per_token2_bytes: int = 0

    def compile_s(self, length: int | np.ndarray) -> np.ndarray | float:
        return (self.compile_fixed_s or 0.0) + self.compile_per_token_s * np.asarray(length, dtype=np.float64)

    def memory_bytes(self, length: int) -> int:
        L = int(length)
        return (
            self.memory_fixed_bytes + self.memory_per_token_bytes * L + self.memory_per_token2_bytes * L * L
        )


def _largest_length_in_memory(b: Budgets) -> int:
    """Largest L whose bucket fits device memory (0 if none)."""
    assert b.device_memory_bytes is not None
    lo, hi = 0, 1
    while b.memory_bytes(hi) <= b.device_memory_bytes and hi < 1 << 40:
        lo, hi = hi, hi * 2
    while hi - lo > 1:
        mid = (lo + hi) // 2
        if b.memory_bytes(mid) <= b.device_memory_bytes:
            lo = mid
        else:
            hi = mid
    return lo


# ------------------------------------------------------------------------------------------------------------
# Evaluation of a set of edges
# ------------------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Evaluation:
    """A bucket plan scored on a histogram under one cost model.

    Per bucket i (edges ascending; bucket i holds lengths in (edges[i-1], edges[i]]): weight, real cost
    (unpadded),
    padded cost (weight * c(edge)). waste = padded - real. Overflow: lengths above the largest edge; rejected
    (excluded from cost) or truncated (counted at the largest edge, their real cost taken at that edge too).
    """

    name: str
    edges: np.ndarray
    cost_model: str
    weights: np.ndarray
    real: np.ndarray
    padded: np.ndarray
    overflow_weight: float
    total_weight: float
    policy: str
    exact: bool = True
    note: str = ""
    compile_s: float | None = None

    @property
    def k(self) -> int:
        return int(self.edges.size)

    @property
    def real_total(self) -> float:
        return float(self.real.sum())

    @property
    def padded_total(self) -> float:
        return float(self.padded.sum())

    @property
    def waste(self) -> float:
        return self.padded_total - self.real_total

    @property
    def overhead_pct(self) -> float:
        r = self.real_total
        return 100.0 * self.waste / r if r > 0 else 0.0

    @property
    def overflow_share(self) -> float:
        return self.overflow_weight / self.total_weight if self.total_weight > 0 else 0.0

    @property
    def shares(self) -> np.ndarray:
        return self.weights / self.total_weight if self.total_weight > 0 else self.weights * 0.0

    def bucket_overhead_pct(self) -> np.ndarray:
        with np.errstate(divide="ignore", invalid="ignore"):
            out = np.where(
                self.real > 0, 100.0 * (self.padded - self.real) / np.where(self.real > 0, self.real, 1), 0.0
            )
        return out


def effective_lengths(hist: Histogram, max_length: int, policy: str) -> tuple[np.ndarray, np.ndarray, float]:
    """Apply the overflow policy: lengths and weights at or under max_length, and the overflow weight."""
    if policy not in POLICIES:
        raise ChipswapError(f"overflow policy {policy!r} is unknown; use one of {', '.join(POLICIES)}")
    cut = int(np.searchsorted(hist.lengths, max_length, side="right"))
    lengths = hist.lengths[:cut]
    weights = hist.counts[:cut]
    over = hist.counts[cut:]
    over_w = float(over.sum())
    if policy == "truncate" and over.size:
        lengths = np.append(lengths, np.int64(max_length))
        weights = np.append(weights, over.sum())
        if (
            lengths.size > 1 and lengths[-2] == max_length
        ):  # cannot happen (cut is side=right), kept for safety
            weights[-2] += weights[-1]
            lengths, weights = lengths[:-1], weights[:-1]
    return lengths, weights, over_w


def evaluate(
    hist: Histogram,
    edges: Sequence[int] | np.ndarray,
    cost_model: CostModel,
    *,
    policy: str = "reject",
    name: str = "plan",
    exact: bool = True,
    note: str = "",
    budgets: Budgets | None = None,
) -> Evaluation:
    """Score `edges` (ascending; the largest is the max length served) on `hist`."""
    e = np.asarray(sorted({int(x) for x in edges}), dtype=np.int64)
    if e.size == 0 or e[0] < 1:
        raise ChipswapError(f"bucket edges {list(edges)} must be positive lengths; give at least one bucket")
    lengths, weights, over_w = effective_lengths(hist, int(e[-1]), policy)
    idx = np.searchsorted(e, lengths, side="left")  # bucket index per length
    w = np.bincount(idx, weights=weights, minlength=e.size).astype(np.float64)
    real = np.bincount(idx, weights=weights * cost_model.real_cost(lengths), minlength=e.size)
    padded = w * cost_model.cost(e)
    comp = float(np.sum(budgets.compile_s(e))) if budgets and budgets.compile_fixed_s is not None else None
    return Evaluation(
        name=name,
        edges=e,
        cost_model=cost_model.name,
        weights=w,
        real=real,
        padded=padded,
        overflow_weight=over_w,
        total_weight=hist.total,
        policy=policy,
        exact=exact,
        note=note,
        compile_s=comp,
    )


# ------------------------------------------------------------------------------------------------------------
# The exact dynamic programme
# ------------------------------------------------------------------------------------------------------------


def _dp_layers_hull(W: list, C: list, extra: list | None, kmax: int) -> tuple[list, list[list[int]]]:
    """Exact fallback in Python integers, used when the int64 bound of _dp_layers fails.

    f_k(j) = min cost of covering candidates 0..j with exactly k groups, the last ending at j. Group (i, j]
    costs (W[j] - W[i]) * C[j] (+ extra[j]); W is the prefix weight. Monotone convex-hull trick: lines
    y = f_{k-1}(i) - W[i] * x with slopes -W[i] non-increasing in i, queried at x = C[j] non-decreasing in j.
    Returns, for k = 1..kmax, the value at the last candidate and the argmin tables for backtracking.
    """
    n = len(W)
    ex = extra if extra is not None else [0] * n
    f_prev = [W[j] * C[j] + ex[j] for j in range(n)]
    finals = [f_prev[-1]]
    args: list[list[int]] = [[-1] * n]
    inf = None
    for k in range(2, kmax + 1):
        f = [inf] * n
        arg = [-1] * n
        hm: list = []  # slopes
        hb: list = []  # intercepts
        hi: list[int] = []  # source index
        ptr = 0
        for j in range(k - 1, n):
            # add line from i = j-1 (which has k-1 groups ending there)
            i = j - 1
            bi = f_prev[i]
            if bi is not None:
                m = -W[i]
                if hm and hm[-1] == m:
                    if hb[-1] <= bi:
                        m = None
                    else:
                        hm.pop()
                        hb.pop()
                        hi.pop()
                if m is not None:
                    while len(hm) >= 2:
                        m1, b1, m2, b2 = hm[-2], hb[-2], hm[-1], hb[-1]
                        # line 2 useless if intersect(1,3) <= intersect(1,2)
                        if (bi - b1) * (m1 - m2) <= (b2 - b1) * (m1 - m):
                            hm.pop()
                            hb.pop()
                            hi.pop()
                        else:
                            break
                    hm.append(m)
                    hb.append(bi)
                    hi.append(i)
                    if ptr >= len(hm):
                        ptr = len(hm) - 1
            if not hm:
                continue
            x = C[j]
            if ptr >= len(hm):
                ptr = len(hm) - 1
            while ptr + 1 < len(hm) and hm[ptr + 1] * x + hb[ptr + 1] <= hm[ptr] * x + hb[ptr]:
                ptr += 1
            f[j] = hm[ptr] * x + hb[ptr] + W[j] * C[j] + ex[j]
            arg[j] = hi[ptr]
        finals.append(f[-1])
        args.append(arg)
        f_prev = f
    return finals, args


# Lines that cannot be a row minimum are dropped before the divide and conquer, a pass at a time, while a pass
# still removes at least this share of them (at most PRUNE_MAX_PASSES passes).
PRUNE_MIN_SHARE = 0.1
PRUNE_MAX_PASSES = 16


def _useful_lines(f_prev: np.ndarray, W: np.ndarray, first: int) -> np.ndarray:
    """Indices i >= first that may minimise f_prev[i] - W[i] * x for some x (a superset of the lower hull).

    A point (W_b, f_b) strictly above the chord between two other points (W_a, f_a), (W_c, f_c) is never a
    minimiser, for any x: its value is above a convex combination of theirs. Each pass drops every point
    that is certainly above the chord of its current neighbours. The test runs in float64 on integers below
    2^53 (exact copies; larger values skip the pruning) and only drops a point when the margin exceeds the
    rounding bound of the products (the differences are exact) 16 times over, so every exact minimiser (and
    so the leftmost one) is kept.
    """
    cols = np.arange(first, W.size)
    if (
        f_prev.dtype.kind in "iu"
        and max(abs(int(f_prev[first:].max())), abs(int(f_prev[first:].min())), int(W[-1])) >= 1 << 53
    ):
        return cols  # beyond 2^53 the float64 copies are not exact, so the margin below would not hold
    Wf, ff = W.astype(np.float64), f_prev.astype(np.float64)
    for _ in range(PRUNE_MAX_PASSES):
        if cols.size < 3:
            break
        a, b, c = cols[:-2], cols[1:-1], cols[2:]
        p1 = (Wf[b] - Wf[a]) * (ff[c] - ff[a])
        p2 = (Wf[c] - Wf[a]) * (ff[b] - ff[a])
        drop = (p1 - p2) < -(2.0**-48) * (np.abs(p1) + np.abs(p2))
        removed = int(np.count_nonzero(drop))
        if removed:
            keep = np.ones(cols.size, dtype=bool)
            keep[1:-1] = ~drop
            cols = cols[keep]
        if removed < PRUNE_MIN_SHARE * (cols.size + removed):
            break
    return cols


def _layer_divide_and_conquer(
    f_prev: np.ndarray, W: np.ndarray, C: np.ndarray, base: np.ndarray, k: int, *, prune: bool = True
) -> tuple[np.ndarray, np.ndarray]:
    """One DP layer: f(j) = base[j] + min over k-2 <= i < j of (f_prev[i] - W[i] * C[j]), for j >= k-1.

    The matrix A[j][i] = f_prev[i] - W[i] * C[j] is Monge (W and C non-decreasing), so the leftmost argmin
    opt(j) never decreases with j. Divide and conquer on j: solve the middle row, then the left half only
    looks at i <= opt(mid) and the right half at i >= opt(mid). All subproblems of one recursion depth are
    evaluated together in flat numpy arrays (their i-ranges overlap only at the ends), so a layer costs
    O(lines x depth + n) array work, about 20 numpy passes per depth.

    prune: only the lines that can be a minimum at all are searched (_useful_lines), and without the
    constraint i < j. That is exact because the constraint never binds without per-bucket extras:
    f_{k-1}(i') - f_{k-1}(i) >= (W_i' - W_i) C_{i+1} (extend any plan for i' from one for i; more buckets
    never cost more), so for i >= j the value never beats i = j - 1, and the leftmost unconstrained
    minimiser is below j. With extras (the compile-time Lagrangian) the constraint can bind, so the caller
    passes prune=False.
    """
    n = W.size
    f = np.zeros_like(f_prev)
    arg = np.full(n, -1, dtype=np.int32)
    cols = _useful_lines(f_prev, W, k - 2) if prune else np.arange(k - 2, n)
    jlo = np.array([k - 1], dtype=np.int64)
    jhi = np.array([n - 1], dtype=np.int64)
    ilo = np.array([0], dtype=np.int64)  # positions in cols
    ihi = np.array([cols.size - 1], dtype=np.int64)
    while jlo.size:
        mid = (jlo + jhi) >> 1
        # pruned: no i < j constraint is needed (see above); unpruned: cols[p] = k - 2 + p, so i <= mid - 1
        top = ihi if prune else np.minimum(ihi, mid - 1 - (k - 2))
        lens = top - ilo + 1  # >= 1: ilo <= opt(parent) <= ... < mid
        ends = np.cumsum(lens)
        starts = ends - lens
        seg = np.zeros(int(ends[-1]), dtype=np.intp)  # subproblem of each flat entry (cheaper than repeat)
        seg[starts[1:]] = 1
        np.cumsum(seg, out=seg)
        pos = np.arange(seg.size, dtype=np.int64)
        pos += (ilo - starts)[seg]
        i = cols[pos]
        v = W[i]
        v *= C[mid][seg]
        np.subtract(f_prev[i], v, out=v)
        best = np.minimum.reduceat(v, starts)
        hit = np.flatnonzero(v == best[seg])
        hseg = seg[hit]
        first = hit[np.r_[True, hseg[1:] != hseg[:-1]]]  # leftmost argmin of each subproblem
        opt = pos[first]
        f[mid] = best + base[mid]
        arg[mid] = cols[opt]
        left, right = mid > jlo, mid < jhi
        jlo, jhi, ilo, ihi = (
            np.concatenate([jlo[left], mid[right] + 1]),
            np.concatenate([mid[left] - 1, jhi[right]]),
            np.concatenate([ilo[left], opt[right]]),
            np.concatenate([opt[left], ihi[right]]),
        )
    return f, arg


def _int64_form(W: np.ndarray, C: np.ndarray) -> tuple[np.ndarray, np.ndarray] | None:
    """(W, C') in int64 with C' = (C - C[0]) / gcd, if every DP value then fits int64 with room to spare.

    Every plan covers the same total weight W[-1], so subtracting C[0] from all costs shifts each plan's cost
    by the same C[0] * W[-1], and dividing by the common factor scales it: the argmin is unchanged, exactly.
    None when the weights are fractional or the bound fails.
    """
    if W.dtype.kind not in "iu" or C.dtype.kind not in "iuO":
        return None
    if C.dtype == object:  # costs beyond int64: reduce in Python integers
        c0 = int(C[0])
        shifted = [int(c) - c0 for c in C.tolist()]
        g = math.gcd(*shifted) or 1
        if shifted[-1] // g >= 1 << 62:
            return None
        reduced = np.asarray([c // g for c in shifted], dtype=np.int64)
    else:
        shifted_np = C.astype(np.int64) - C[0]
        reduced = shifted_np // (int(np.gcd.reduce(shifted_np)) or 1)
    if int(W[-1]) * int(reduced[-1]) >= 1 << 61:  # |f_prev - W*C| and W*C + base stay below 2^62
        return None
    return W.astype(np.int64), reduced


def _dp_layers(
    W: np.ndarray, C: np.ndarray, extra: np.ndarray | None, kmax: int
) -> tuple[list, list[np.ndarray] | list[list[int]]]:
    """Values at the last candidate and argmin tables for k = 1..kmax (see _layer_divide_and_conquer).

    int64 when exact (see _int64_form), Python integers when integral but too large, float64 otherwise.
    """
    n = W.size
    if kmax * n > MAX_DP_CELLS:
        raise ChipswapError(
            f"{kmax} buckets over {n:,} candidate lengths exceeds the planner's table bound of "
            f"{MAX_DP_CELLS:,} cells; use fewer buckets or coarser edges with --align (e.g. 16)"
        )
    exact = _int64_form(W, C) if extra is None else None
    if exact is None and extra is None and W.dtype.kind in "iu" and C.dtype.kind in "iuO":
        return _dp_layers_hull([int(w) for w in W.tolist()], [int(c) for c in C.tolist()], None, kmax)
    if exact is not None:
        Wd, Cd = exact
        base = Wd * Cd
    else:
        Wd, Cd = W.astype(np.float64), C.astype(np.float64)
        base = Wd * Cd + (extra if extra is not None else 0.0)
    f_prev = base
    finals: list = [f_prev[-1]]
    args: list[np.ndarray] = [np.full(n, -1, dtype=np.int32)]
    top = min(kmax, n)
    for k in range(2, top + 1):
        if k < top:
            f_prev, arg = _layer_divide_and_conquer(f_prev, Wd, Cd, base, k, prune=extra is None)
            finals.append(f_prev[-1])
        else:  # the last layer is only read at the last candidate: one row, O(n)
            v = f_prev[k - 2 : n - 1] - Wd[k - 2 : n - 1] * Cd[n - 1]
            i = int(np.argmin(v))  # leftmost on ties
            arg = np.full(n, -1, dtype=np.int32)
            arg[n - 1] = k - 2 + i
            finals.append(v[i] + base[n - 1])
        args.append(arg)
    return finals, args


def _backtrack(args: list, k: int, n: int) -> list[int]:
    out = [n - 1]
    j = n - 1
    for layer in range(k - 1, 0, -1):
        j = int(args[layer][j])
        out.append(j)
    return out[::-1]


@dataclass(frozen=True)
class Candidates:
    """Edges the planner may choose from (ascending; the last is the served max length) and prefix weights."""

    edges: np.ndarray
    prefix: np.ndarray  # W[j] = weight of effective lengths <= edges[j] (int64 when integral)
    costs: (
        np.ndarray
    )  # C[j] = c(edges[j]): int64 when integral, object (Python ints) beyond int64, else float


def _cost_array(cost_model: CostModel, edges: np.ndarray) -> np.ndarray:
    """c(edges) exactly: int64 for integral models that fit, Python ints beyond, float64 otherwise."""
    if cost_model.integral and cost_model.kind != "measured":
        a, b, c0 = int(cost_model.linear), int(cost_model.quadratic), int(cost_model.constant)
        top = int(edges[-1]) if edges.size else 0
        if abs(c0) + abs(a) * top + abs(b) * top * top < 1 << 62:
            e = edges.astype(np.int64)
            return c0 + a * e + b * e * e
        return np.asarray([c0 + a * int(x) + b * int(x) * int(x) for x in edges.tolist()], dtype=object)
    vals = cost_model.cost(edges)
    if cost_model.integral:
        return np.rint(vals).astype(np.int64)
    return vals


def candidate_edges(
    hist: Histogram, cost_model: CostModel, *, max_length: int, policy: str, align: int = 1
) -> Candidates:
    lengths, weights, _ = effective_lengths(hist, max_length, policy)
    if cost_model.listed_only:
        edges = np.asarray([x for x in cost_model.table_lengths if x <= max_length], dtype=np.int64)
        if edges.size == 0 or edges[-1] != max_length:
            raise ChipswapError(
                f"max length {max_length} is not a measured shape; measured shapes are "
                f"{list(cost_model.table_lengths)}: pick one of them as --max-length or allow interpolation"
            )
    else:
        a = max(int(align), 1)
        edges = -(-lengths // a) * a
        if cost_model.kind == "measured":  # never pad to a shape below the smallest measured one
            edges = np.maximum(edges, cost_model.table_lengths[0])
        edges = np.minimum(edges, max_length)  # still ascending: drop repeats without a sort
        edges = edges[np.r_[True, edges[1:] != edges[:-1]]] if edges.size else edges
        if edges.size == 0 or edges[-1] != max_length:
            edges = np.append(edges, np.int64(max_length))
    cum = np.concatenate([[0], np.cumsum(weights)])
    pos = np.searchsorted(lengths, edges, side="right")
    W = cum[pos]
    if W.dtype.kind == "f" and np.all(W == np.round(W)) and (W.size == 0 or W[-1] < 2.0**53):
        W = W.astype(np.int64)
    C = _cost_array(cost_model, edges)
    if W.dtype.kind == "f" and C.dtype == object:
        C = C.astype(np.float64)
    return Candidates(edges=edges, prefix=W, costs=C)


def optimal_edges_per_k(
    cands: Candidates, kmax: int, extra: np.ndarray | list | None = None
) -> dict[int, list[int]]:
    """Optimal edges with exactly k buckets for every k in 1..min(kmax, candidates)."""
    n = cands.edges.size
    kmax = min(kmax, n)
    ex = None if extra is None else np.asarray(extra, dtype=np.float64)
    finals, args = _dp_layers(cands.prefix, cands.costs, ex, kmax)
    out = {}
    for k in range(1, kmax + 1):
        if finals[k - 1] is None:
            continue
        out[k] = [int(cands.edges[j]) for j in _backtrack(args, k, n)]
    return out


def brute_force_edges(
    hist: Histogram, k: int, cost_model: CostModel, *, max_length: int, policy: str = "reject", align: int = 1
) -> tuple[list[int], float]:
    """Exhaustive search over all k-subsets of candidate edges that end at max_length (for tests)."""
    from itertools import combinations

    c = candidate_edges(hist, cost_model, max_length=max_length, policy=policy, align=align)
    inner = c.edges[:-1].tolist()
    best: tuple[list[int], float] | None = None
    for combo in combinations(inner, k - 1):
        edges = [*combo, int(c.edges[-1])]
        val = evaluate(hist, edges, cost_model, policy=policy).padded_total
        if best is None or val < best[1]:
            best = (edges, val)
    if best is None:
        raise ChipswapError(f"k = {k} exceeds the {len(inner) + 1} candidate edges")
    return best


def plan_optimal(
    hist: Histogram,
    cost_model: CostModel,
    *,
    k: int | None = None,
    max_buckets: int | None = 6,
    max_length: int | None = None,
    policy: str = "reject",
    align: int = 1,
    budgets: Budgets | None = None,
) -> Evaluation:
    """The cheapest plan on `hist` under `cost_model` and `budgets`.

    k: exactly k buckets (error if the histogram has fewer candidate edges); otherwise at most max_buckets (or
    budgets.max_buckets). max_length: largest bucket (default: longest length, or for a listed-only measured
    table
    the smallest listed shape holding it). Exact for every budget except a compile-time budget whose
    per-bucket
    estimate grows with length; then the best plan found by a Lagrangian search over bucket penalties is
    returned
    with exact=False and a note.
    """
    b = budgets or Budgets()
    if hist.lengths.size == 0:
        raise ChipswapError(
            "no lengths to plan for: the trace is empty; give a trace with at least one request"
        )
    if k is not None and (not isinstance(k, int | np.integer) or k < 1):
        raise ChipswapError(f"K = {k} buckets is not allowed; K must be an integer >= 1")
    # k fixes the count; max_buckets is the cap when k is not given; budgets.max_buckets always caps
    cap = b.max_buckets if b.max_buckets is not None else (max_buckets if k is None else None)
    if cap is not None and cap < 1:
        raise ChipswapError(f"max buckets = {cap} is not allowed; use --max-buckets 1 or more")
    if align < 1:
        raise ChipswapError(f"alignment {align} must be >= 1; use 1 for any length or e.g. 128")
    top = resolve_max_length(hist, cost_model, max_length)
    if b.device_memory_bytes is not None:
        fit = _largest_length_in_memory(b)
        if b.memory_bytes(top) > b.device_memory_bytes:
            raise ChipswapError(
                f"memory budget: the bucket for max length {top} needs {b.memory_bytes(top)} bytes > device "
                f"memory {b.device_memory_bytes} bytes; lower --max-length to <= {fit} or use a larger device"
            )
    cands = candidate_edges(hist, cost_model, max_length=top, policy=policy, align=align)
    n = cands.edges.size
    if k is not None:
        if cap is not None and k > cap:
            raise ChipswapError(
                f"K = {k} exceeds the bucket budget of {cap}; raise --max-buckets or lower -k"
            )
        if k > n:
            raise ChipswapError(
                f"K = {k} buckets but the trace has only {n} distinct bucket lengths up to {top}; use -k <= "
                f"{n}"
            )
        kmax = k
    else:
        kmax = min(cap if cap is not None else n, n)

    if b.max_compile_s is not None:
        if b.compile_fixed_s is None:
            raise ChipswapError(
                "compile-time budget given without a per-bucket compile-time estimate; pass "
                "--compile-s-per-bucket"
            )
        one = float(b.compile_s(top))
        if one > b.max_compile_s:
            raise ChipswapError(
                f"compile-time budget {b.max_compile_s:g} s is below the {one:g} s estimated for the single "
                "bucket "
                f"at max length {top}; raise --max-compile-s to >= {one:g} or lower --max-length"
            )
        if b.compile_per_token_s == 0:
            fit_k = int(b.max_compile_s // b.compile_fixed_s) if b.compile_fixed_s > 0 else kmax
            if k is not None and k > fit_k:
                raise ChipswapError(
                    f"compile-time budget {b.max_compile_s:g} s fits {fit_k} buckets at "
                    f"{b.compile_fixed_s:g} s each, "
                    f"not K = {k}; raise --max-compile-s to >= {k * b.compile_fixed_s:g} or use -k <= {fit_k}"
                )
            kmax = min(kmax, fit_k)
        else:
            return _plan_with_compile_budget(hist, cost_model, cands, k, kmax, policy, b)

    per_k = optimal_edges_per_k(cands, kmax)
    edges = per_k[kmax] if k is not None else per_k[max(per_k)]
    return evaluate(hist, edges, cost_model, policy=policy, name="optimal", budgets=b)


def _plan_with_compile_budget(
    hist: Histogram,
    cost_model: CostModel,
    cands: Candidates,
    k: int | None,
    kmax: int,
    policy: str,
    b: Budgets,
) -> Evaluation:
    """Best plan whose total compile time fits, when per-bucket compile time grows with length.

    For each bucket count, the unconstrained optimum is exact if it fits. Otherwise a Lagrangian scan
    (penalty lam per compile second) yields feasible plans and, per count, the dual lower bound
    max_lam(f_k(lam) - lam*budget). The answer is flagged exact when its cost meets the smallest bound;
    otherwise exact=False with a note giving the gap to that bound.
    """
    budget = float(b.max_compile_s or 0.0)
    ks = [k] if k is not None else list(range(1, kmax + 1))
    best: tuple[float, list[int]] | None = None
    bound: dict[int, float] = {kk: -math.inf for kk in ks}

    def total_s(edges: list[int]) -> float:
        return float(np.sum(b.compile_s(np.asarray(edges))))

    def consider(per_k: dict[int, list[int]], lam: float | None) -> None:
        nonlocal best
        for kk in ks:
            edges = per_k.get(kk)
            if edges is None:
                continue
            t = total_s(edges)
            val = evaluate(hist, edges, cost_model, policy=policy).padded_total
            if lam is None:
                if t <= budget + 1e-9:
                    bound[kk] = max(bound[kk], val)  # unconstrained optimum fits: exact for this count
            else:
                bound[kk] = max(bound[kk], val + lam * (t - budget))
            if t <= budget + 1e-9 and (best is None or val < best[0]):
                best = (val, edges)

    consider(optimal_edges_per_k(cands, kmax), None)
    times = np.asarray(b.compile_s(cands.edges), dtype=np.float64)
    if any(v == -math.inf for v in bound.values()):
        # Lagrangian scan: penalise each bucket by lam * its compile time
        costs = np.asarray(cands.costs, dtype=np.float64)
        W = np.asarray(cands.prefix, dtype=np.float64)
        scale = max(float(costs.max()) * float(W[-1] or 1), 1.0) / max(float(times.max()), 1e-9)
        for lam in [0.0, *(scale * np.logspace(-9, 2, 45))]:
            consider(optimal_edges_per_k(Candidates(cands.edges, W, costs), kmax, lam * times), float(lam))
    if best is None:
        kk = k if k is not None else 1
        raise ChipswapError(
            f"compile-time budget {budget:g} s cannot fit {kk} bucket(s) ending at {int(cands.edges[-1])}; "
            "raise --max-compile-s or lower -k / --max-length"
        )
    val, edges = best
    lower = min(bound.values())
    exact = val <= lower + 1e-9 * max(abs(val), 1.0)
    note = ""
    if not exact:
        gap = 100.0 * (val - lower) / lower if lower > 0 else float("inf")
        note = (
            "compile-time budget binds: best plan from a Lagrangian search, within "
            f"{gap:.2f}% of the lower bound on the optimum"
        )
    return evaluate(hist, edges, cost_model, policy=policy, name="optimal", exact=exact, note=note, budgets=b)


def resolve_max_length(hist: Histogram | None, cost_model: CostModel, max_length: int | None) -> int:
    """The largest bucket: max_length (rounded up to a measured shape for a listed-only table), else the
    longest
    length in `hist` (which may be None only when max_length is given)."""
    if max_length is not None:
        if isinstance(max_length, bool) or not isinstance(max_length, int | np.integer) or max_length < 1:
            raise ChipswapError(
                f"max length {max_length!r} must be a positive integer; e.g. --max-length 4096"
            )
        check_length_bound(int(max_length), "max length")
        top = int(max_length)
    elif hist is None:
        raise ChipswapError("no max length and no histogram to take it from; pass --max-length")
    else:
        top = hist.max_length
    if cost_model.listed_only:
        xs = cost_model.table_lengths
        above = [x for x in xs if x >= top]
        if not above:
            raise ChipswapError(
                f"no measured shape holds length {top} (largest measured {xs[-1]}); measure a shape >= {top} "
                f"or pass --max-length {xs[-1]} with --policy truncate|reject"
            )
        top = above[0]
    return top


