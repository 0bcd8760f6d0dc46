"""The exact bucket planner: optimality against brute force, cost models, baselines, budgets, errors."""

from __future__ import annotations

from itertools import combinations

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from chipswap import shapes as B
from chipswap.errors import ChipswapError
from chipswap.shapes import buckets as dp


@st.composite
def small_hist(draw, max_distinct=8, max_len=80):
    n = draw(st.integers(1, max_distinct))
    lengths = draw(st.lists(st.integers(1, max_len), min_size=n, max_size=n, unique=True))
    counts = draw(st.lists(st.integers(1, 50), min_size=n, max_size=n))
    return B.histogram_from_pairs(lengths, counts)


def _naive_cost(lengths, counts, edges, c):
    """Independent scorer: every length padded to the first edge >= it (overflow rejected)."""
    total = 0
    for L, w in zip(lengths, counts, strict=True):
        up = [e for e in edges if e >= L]
        if up:
            total += w * c(min(up))
    return total


COST_MODELS = [
    (B.tokens_cost(), lambda L: L),
    (B.attention_cost(7, 3), lambda L: 7 * L + 3 * L * L),
    (B.measured_cost([1, 10, 40, 80], [0.5, 1.25, 7.0, 30.5]), None),
]


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(h=small_hist(), model_idx=st.integers(0, 2), data=st.data())
def test_dp_equals_brute_force(h, model_idx, data):
    model, c = COST_MODELS[model_idx]
    if c is None:
        c = lambda L: float(model.cost([L])[0])  # noqa: E731
    n = h.lengths.size
    k = data.draw(st.integers(1, n))
    plan = B.plan_optimal(h, model, k=k, max_buckets=None)
    top = h.max_length
    # brute force over every k-subset of the distinct lengths (the last bucket fixed at the max length)
    inner = [int(x) for x in h.lengths[:-1]]
    best = min(_naive_cost(h.lengths, h.counts, [*combo, top], c) for combo in combinations(inner, k - 1))
    got = _naive_cost(h.lengths, h.counts, plan.edges.tolist(), c)
    assert plan.k == k and int(plan.edges[-1]) == top
    assert got == pytest.approx(best, rel=1e-12, abs=1e-9)
    assert plan.padded_total == pytest.approx(best, rel=1e-12, abs=1e-9)


@settings(max_examples=80, deadline=None)
@given(h=small_hist(), data=st.data())
def test_dp_equals_brute_force_with_max_length_truncate_and_align(h, data):
    top = data.draw(st.integers(1, 90))
    align = data.draw(st.sampled_from([1, 4, 16]))
    policy = data.draw(st.sampled_from(B.POLICIES))
    cands = B.candidate_edges(h, B.tokens_cost(), max_length=top, policy=policy, align=align)
    k = data.draw(st.integers(1, cands.edges.size))
    plan = B.plan_optimal(
        h, B.tokens_cost(), k=k, max_buckets=None, max_length=top, policy=policy, align=align
    )
    _, brute = B.brute_force_edges(h, k, B.tokens_cost(), max_length=top, policy=policy, align=align)
    assert plan.padded_total == brute
    assert int(plan.edges[-1]) == top
    assert all(e % align == 0 or e == top for e in plan.edges.tolist())


@settings(max_examples=60, deadline=None)
@given(h=small_hist(max_distinct=10))
def test_more_buckets_never_cost_more(h):
    vals = [
        B.plan_optimal(h, B.tokens_cost(), k=k, max_buckets=None).padded_total
        for k in range(1, h.lengths.size + 1)
    ]
    assert all(b <= a for a, b in zip(vals, vals[1:], strict=False))
    assert vals[-1] == pytest.approx(float(np.dot(h.lengths, h.counts)))  # one bucket per length: no padding


def test_optimal_is_exact_on_large_integers():
    # weights near 1e7 and costs near 1e4 overflow float64's exact range in the hull test; ints keep it exact
    rng = np.random.default_rng(3)
    lengths = rng.choice(np.arange(1, 5000), 14, replace=False)
    counts = rng.integers(1, 10_000_000, 14)
    h = B.histogram_from_pairs(lengths, counts)
    for k in (2, 3, 4):
        plan = B.plan_optimal(h, B.attention_cost(1000, 7), k=k, max_buckets=None)
        _, brute = B.brute_force_edges(h, k, B.attention_cost(1000, 7), max_length=h.max_length)
        assert plan.padded_total == brute


def test_histogram_from_lengths_counts_and_weights():
    h = B.histogram_from_lengths([5, 3, 5, 9, 3, 3])
    assert h.lengths.tolist() == [3, 5, 9] and h.counts.tolist() == [3, 2, 1]
    hw = B.histogram_from_lengths([5, 3], weights=[0.5, 2.0])
    assert hw.counts.tolist() == [2.0, 0.5]


def test_decode_histogram_matches_expansion():
    rng = np.random.default_rng(0)
    p = rng.integers(1, 50, 200)
    g = rng.integers(0, 30, 200)
    h = B.decode_histogram(p, g)
    expanded = np.concatenate([np.arange(pi + 1, pi + gi + 1) for pi, gi in zip(p, g, strict=True)])
    ref = B.histogram_from_lengths(expanded)
    assert h.lengths.tolist() == ref.lengths.tolist()
    assert h.counts.tolist() == ref.counts.tolist()
    assert h.total == int(g.sum())


def test_attention_coefficients_by_hand():
    # h=8, 2 layers, MLP 32 (non gated), MHA: per layer 4h^2 + 4h^2 + 2*2*h*32 = 256 + 256 + 1024
    a, b = B.attention_coefficients(8, 2, intermediate_size=32)
    assert a == 2 * (4 * 64 + 4 * 64 + 4 * 8 * 32)
    assert b == 2 * 4 * 8
    # grouped-query attention shrinks K/V projections; a gated MLP has three matrices
    a_gqa, _ = B.attention_coefficients(
        8, 1, intermediate_size=32, num_attention_heads=4, num_key_value_heads=1, gated_mlp=True
    )
    assert a_gqa == 4 * 64 + 4 * 8 * 2 + 6 * 8 * 32
    with pytest.raises(ChipswapError, match="multiple of num_key_value_heads"):
        B.attention_coefficients(8, 1, num_attention_heads=4, num_key_value_heads=3)


def test_attention_model_prefers_finer_buckets_at_long_lengths():
    h = B.histogram_from_pairs([100, 900, 1000, 1900, 2000], [10, 10, 10, 10, 10])
    tok = B.plan_optimal(h, B.tokens_cost(), k=3, max_buckets=None)
    att = B.plan_optimal(h, B.attention_cost(1, 50), k=3, max_buckets=None)
    assert tok.padded_total <= B.evaluate(h, att.edges, B.tokens_cost()).padded_total
    assert att.padded_total <= B.evaluate(h, tok.edges, B.attention_cost(1, 50)).padded_total


def test_measured_listed_only_picks_measured_shapes_and_interpolation_is_linear():
    table = B.measured_cost([64, 128, 256, 512], [1.0, 1.5, 3.0, 7.0], interpolate=False)
    h = B.histogram_from_pairs([10, 70, 200, 300], [5, 5, 5, 5])
    plan = B.plan_optimal(h, table, k=2, max_buckets=None)
    assert set(plan.edges.tolist()) <= {64, 128, 256, 512} and plan.edges[-1] == 512
    interp = B.measured_cost([64, 128], [1.0, 2.0])
    assert interp.cost([96])[0] == pytest.approx(1.5)
    with pytest.raises(ChipswapError, match="outside the measured latency table"):
        interp.cost([129])
    with pytest.raises(ChipswapError, match="non-decreasing"):
        B.measured_cost([64, 128], [2.0, 1.0])


def test_overflow_policies_report_share():
    h = B.histogram_from_pairs([10, 20, 30], [6, 3, 1])
    rej = B.plan_optimal(h, B.tokens_cost(), k=1, max_length=20, policy="reject")
    assert rej.overflow_share == pytest.approx(0.1)
    assert rej.padded_total == 9 * 20  # the 30 is dropped
    tr = B.plan_optimal(h, B.tokens_cost(), k=1, max_length=20, policy="truncate")
    assert tr.overflow_share == pytest.approx(0.1)
    assert tr.padded_total == 10 * 20  # the 30 is cut to 20


def test_baselines():
    assert B.powers_of_two_ladder(7437) == [128, 256, 512, 1024, 2048, 4096, 7437]
    assert B.powers_of_two_ladder(4096) == [128, 256, 512, 1024, 2048, 4096]
    # tensor2tensor: x = max(x + 1, int(x * 1.1)) from 8
    lad = B.geometric_ladder(40)
    assert lad[:5] == [8, 9, 10, 11, 12] and lad[-1] == 40
    assert all(b == max(a + 1, int(a * 1.1)) for a, b in zip(lad[:-2], lad[1:-1], strict=False))
    h = B.histogram_from_lengths(np.arange(1, 1001))
    bl = B.baseline_plans(h, B.tokens_cost(), k=3, max_length=1000)
    assert bl["powers_of_two"].edges.tolist() == [256, 512, 1000]
    assert bl["single_max"].edges.tolist() == [1000]
    assert bl["quantiles"].edges.tolist() == [334, 667, 1000]
    assert bl["linear"].edges.tolist() == [334, 667, 1000]
    assert bl["geometric"].k == 3 and bl["geometric"].edges[0] == 128
    # K beyond the ladder extends below 128 by halving
    many = B.baseline_plans(h, B.tokens_cost(), k=7, max_length=1000)["powers_of_two"]
    assert many.edges.tolist() == [16, 32, 64, 128, 256, 512, 1000]
    # the optimum is at least as good as every baseline at equal K
    opt = B.plan_optimal(h, B.tokens_cost(), k=3, max_buckets=None)
    for name in ("powers_of_two", "quantiles", "geometric", "linear"):
        assert opt.padded_total <= bl[name].padded_total


def test_memory_budget_caps_max_length():
    h = B.histogram_from_pairs([100, 200, 4000], [1, 1, 1])
    budgets = B.Budgets(device_memory_bytes=1000, memory_fixed_bytes=200, memory_per_token_bytes=1)
    with pytest.raises(ChipswapError, match="lower --max-length to <= 800"):
        B.plan_optimal(h, B.tokens_cost(), budgets=budgets)
    ok = B.plan_optimal(h, B.tokens_cost(), budgets=budgets, max_length=800, policy="reject")
    assert ok.edges[-1] == 800 and ok.overflow_share == pytest.approx(1 / 3)


def test_compile_budget_constant_per_bucket_is_exact():
    h = B.histogram_from_lengths(np.arange(1, 200))
    b = B.Budgets(max_compile_s=650, compile_fixed_s=300)  # fits 2 buckets
    plan = B.plan_optimal(h, B.tokens_cost(), max_buckets=6, budgets=b)
    assert plan.k == 2 and plan.exact and plan.compile_s == 600
    assert plan.padded_total == B.plan_optimal(h, B.tokens_cost(), k=2).padded_total
    with pytest.raises(ChipswapError, match="raise --max-compile-s to >= 300"):
        B.plan_optimal(h, B.tokens_cost(), budgets=B.Budgets(max_compile_s=100, compile_fixed_s=300))
    with pytest.raises(ChipswapError, match="not K = 3"):
        B.plan_optimal(h, B.tokens_cost(), k=3, budgets=b)


@settings(max_examples=40, deadline=None)
@given(h=small_hist(max_distinct=7, max_len=60), budget=st.integers(20, 200))
def test_compile_budget_growing_with_length_is_feasible_and_exact_when_flagged(h, budget):
    b = B.Budgets(max_compile_s=budget, compile_fixed_s=10, compile_per_token_s=1.0)
    top = h.max_length
    if 10 + top > budget:
        with pytest.raises(ChipswapError, match="compile-time budget"):
            B.plan_optimal(h, B.tokens_cost(), max_buckets=4, budgets=b)
        return
    plan = B.plan_optimal(h, B.tokens_cost(), max_buckets=4, budgets=b)
    assert plan.compile_s is not None and plan.compile_s <= budget + 1e-9
    inner = [int(x) for x in h.lengths[:-1]]
    feasible = [
        B.evaluate(h, [*c, top], B.tokens_cost()).padded_total
        for k in range(1, 5)
        for c in combinations(inner, k - 1)
        if len(c) + 1 <= 4 and sum(10 + e for e in [*c, top]) <= budget
    ]
    assert plan.padded_total >= min(feasible)
    if plan.exact:
        assert plan.padded_total == min(feasible)


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"k": 0}, "K must be an integer >= 1"),
        ({"k": 5}, "only 3 distinct bucket lengths"),
        ({"max_buckets": 0}, "max-buckets 1 or more"),
        ({"policy": "drop"}, "reject, truncate"),
        ({"max_length": 0}, "positive integer"),
        ({"align": 0}, "alignment"),
    ],
)
def test_bad_parameters_raise_one_line(kwargs, match):
    h = B.histogram_from_pairs([1, 2, 3], [1, 1, 1])
    with pytest.raises(ChipswapError, match=match) as exc:
        B.plan_optimal(h, B.tokens_cost(), **kwargs)
    assert "\n" not in str(exc.value)


def test_bad_lengths_raise():
    with pytest.raises(ChipswapError, match="empty"):
        B.histogram_from_lengths([])
    with pytest.raises(ChipswapError, match=r"lengths\[1\] = 0 is not positive"):
        B.histogram_from_lengths([3, 0])
    with pytest.raises(ChipswapError, match="not a whole number"):
        B.histogram_from_lengths([3.5])


# ---- the vectorised DP, its int64 bound, and the length bound ----------------------------------------------


def test_vectorised_dp_equals_python_integer_hull_on_larger_histograms():
    # the divide-and-conquer layers (numpy) against the previous planner's convex-hull DP (Python integers)
    rng = np.random.default_rng(11)
    models = [B.tokens_cost(), B.attention_cost(1000, 7), B.measured_cost([1, 100, 900], [0.5, 2.0, 9.25])]
    for trial in range(40):
        n = int(rng.integers(2, 400))
        lengths = np.sort(rng.choice(np.arange(1, 900), n, replace=False))
        counts = rng.integers(1, 5 if trial % 2 else 10**6, n)
        h = B.histogram_from_pairs(lengths, counts)
        top = int(rng.integers(1, h.max_length + 1)) if trial % 3 == 0 else h.max_length
        policy = B.POLICIES[trial % 2]
        align = (1, 1, 8)[trial % 3]
        for model in models:
            c = B.candidate_edges(h, model, max_length=top, policy=policy, align=align)
            kmax = min(8, c.edges.size)
            _, fast = dp._dp_layers(c.prefix, c.costs, None, kmax)
            _, ref = dp._dp_layers_hull(c.prefix.tolist(), c.costs.tolist(), None, kmax)
            for k in range(1, kmax + 1):
                got = [int(c.edges[j]) for j in dp._backtrack(fast, k, c.edges.size)]
                want = [int(c.edges[j]) for j in dp._backtrack(ref, k, c.edges.size)]
                a = B.evaluate(h, got, model, policy=policy).padded_total
                b = B.evaluate(h, want, model, policy=policy).padded_total
                assert a == pytest.approx(b, rel=1e-12), (trial, model.kind, k)


def test_costs_beyond_int64_fall_back_to_exact_integers():
    rng = np.random.default_rng(5)
    lengths = rng.choice(np.arange(1, 5000), 12, replace=False)
    h = B.histogram_from_pairs(lengths, rng.integers(1, 10**7, 12))
    model = B.attention_cost(10**12 + 1, 7)  # no common factor: the reduced costs stay ~1e15, weights ~1e8
    c = B.candidate_edges(h, model, max_length=h.max_length, policy="reject")
    assert dp._int64_form(c.prefix, c.costs) is None  # so the Python-integer DP runs
    for k in (2, 3, 4):
        plan = B.plan_optimal(h, model, k=k, max_buckets=None)
        _, brute = B.brute_force_edges(h, k, model, max_length=h.max_length)
        assert plan.padded_total == brute


@pytest.mark.parametrize("huge", [2_000_000_000, 10**12, 1e20, 10**30])
def test_a_huge_length_is_an_error_not_a_huge_allocation(huge):
    # the previous planner ran np.bincount up to the longest length: 16 GB at 2e9, terabytes at 1e12
    import tracemalloc

    tracemalloc.start()
    try:
        with pytest.raises(ChipswapError, match="limit of 2,097,152 tokens") as exc:
            B.histogram_from_lengths(np.asarray([5, huge, 7], dtype=object if huge == 10**30 else None))
        assert "lengths[1]" in str(exc.value)
        with pytest.raises(ChipswapError, match="limit of 2,097,152 tokens"):
            B.decode_histogram(np.asarray([5, 6]), np.asarray([3, int(min(huge, 2**62))]))
        with pytest.raises(ChipswapError, match="limit of 2,097,152"):
            B.plan_optimal(
                B.histogram_from_pairs([3, 4], [1, 1]), B.tokens_cost(), max_length=int(min(huge, 2**62))
            )
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 8 << 20


def test_prompt_plus_output_beyond_the_bound_is_an_error():
    with pytest.raises(ChipswapError, match="prompt \\+ output tokens of request 1"):
        B.decode_histogram(np.asarray([5, 2_000_000]), np.asarray([3, 200_000]))


def test_decode_histogram_from_events_equals_per_request_difference_array():
    rng = np.random.default_rng(2)
    p = rng.integers(1, 3000, 5000)
    g = rng.integers(0, 400, 5000)
    per_request = B.decode_histogram(p, g)
    gen = g > 0
    sl, sc = np.unique(p[gen], return_counts=True)
    el, ec = np.unique((p + g)[gen], return_counts=True)
    events = B.decode_histogram_from_events(sl, sc, el, ec)
    assert events.lengths.tolist() == per_request.lengths.tolist()
    assert events.counts.tolist() == per_request.counts.tolist()
    with pytest.raises(ChipswapError, match="do not balance"):
        B.decode_histogram_from_events(sl, sc, el[:-1], ec[:-1])


def test_dp_table_is_bounded():
    h = B.histogram_from_lengths(np.arange(1, 3001))
    with pytest.raises(ChipswapError, match="table bound"):
        dp._dp_layers(np.arange(1, 3001), np.arange(1, 3001), None, B.MAX_DP_CELLS // 3000 + 1)
    assert B.plan_optimal(h, B.tokens_cost(), k=6).k == 6
