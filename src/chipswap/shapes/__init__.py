"""Shapes: which fixed input shapes (buckets) to compile, from a length histogram.

Pure core (numpy and the standard library; no files, clock, printing or torch), re-exported here as the
package's API (`from chipswap import shapes as B; B.plan_optimal(B.histogram_from_lengths(...), ...)`):
- histogram.py  length histograms (from lengths, pairs or decode events), bounded by MAX_LENGTH;
- costmodel.py  what a padded request costs per bucket length (tokens, attention FLOPs, measured latencies);
- buckets.py    the exact optimal planner, its budgets, and the evaluation of any set of edges;
- baselines.py  the fixed-rule baselines (powers of two, quantiles, geometric, linear, one bucket).
Shell:
- shapeplan.py  a trace or its histograms -> a ShapePlan (buckets, padding cost, baselines, stack snippets);
                reads and writes `chipswap.shapeplan/1` plan files (atomically);
- planfile.py   the lenient reader of a plan file's bucket keys, used by `compile` and `check`.
"""

from chipswap.shapes.baselines import baseline_plans, geometric_ladder, powers_of_two_ladder
from chipswap.shapes.buckets import (
    MAX_DP_CELLS,
    POLICIES,
    Budgets,
    Candidates,
    Evaluation,
    brute_force_edges,
    candidate_edges,
    effective_lengths,
    evaluate,
    optimal_edges_per_k,
    plan_optimal,
    resolve_max_length,
)
from chipswap.shapes.costmodel import (
    CostModel,
    attention_coefficients,
    attention_cost,
    measured_cost,
    tokens_cost,
)
from chipswap.shapes.histogram import (
    MAX_LENGTH,
    Histogram,
    check_length_bound,
    decode_histogram,
    decode_histogram_from_events,
    histogram_from_lengths,
    histogram_from_pairs,
)

__all__ = [
    "MAX_DP_CELLS",
    "MAX_LENGTH",
    "POLICIES",
    "Budgets",
    "Candidates",
    "CostModel",
    "Evaluation",
    "Histogram",
    "attention_coefficients",
    "attention_cost",
    "baseline_plans",
    "brute_force_edges",
    "candidate_edges",
    "check_length_bound",
    "decode_histogram",
    "decode_histogram_from_events",
    "effective_lengths",
    "evaluate",
    "geometric_ladder",
    "histogram_from_lengths",
    "histogram_from_pairs",
    "measured_cost",
    "optimal_edges_per_k",
    "plan_optimal",
    "powers_of_two_ladder",
    "resolve_max_length",
    "tokens_cost",
]
