"""Sensitivity: the bisection finds where a verdict flips, on functions whose flip point is known."""

from __future__ import annotations

from decimal import Decimal

from hypothesis import example, given, settings
from hypothesis import strategies as st

from chipswap.verdict.sensitivity import Choice, Knob, choice_flips, flip_point, sensitivity


def step(at: float, below: str = "move", above: str = "stay"):
    return lambda x: below if x < at else above


def test_flip_found_at_the_step() -> None:
    f = flip_point(Knob("engineer-days", 20.0, 0.0, 1000.0, step(137.4)))
    assert f.value is not None and f.edge is not None
    assert abs(f.edge - 137.4) < 1e-6 and f.value == 137.4
    assert f.verdict == "stay"
    assert "137.4 engineer-days instead of 20" in f.text


def test_slower_throughput_wording() -> None:
    # verdict flips when the candidate is slower than 1/1.4 of its stated throughput
    f = flip_point(Knob("throughput ratio", 1.0, 0.05, 20.0, lambda m: "move" if m >= 1 / 1.4 else "close"))
    assert f.value is not None and f.edge is not None
    assert abs(f.edge - 1 / 1.4) < 1e-6
    # the edge is 1/1.4 itself, where the verdict is still "move": the printed value goes one step past it
    assert f.text.startswith("a 1.41x slower Neuron throughput would flip it to 'close'")


def test_nearest_side_wins() -> None:
    def f(x: float) -> str:
        return "a" if 0.5 < x < 3.0 else "b"

    got = flip_point(Knob("traffic", 1.0, 0.01, 100.0, f))
    assert got.edge is not None and abs(got.edge - 0.5) < 1e-6


def test_no_flip_in_range() -> None:
    got = flip_point(Knob("utilization", 0.7, 0.05, 1.0, lambda _u: "move"))
    assert got.value is None and got.verdict is None
    assert "no utilization" in got.text


@settings(max_examples=60, deadline=None)
@given(st.floats(min_value=0.06, max_value=19.0).filter(lambda t: abs(t - 1.0) > 1e-3))
def test_bisection_recovers_any_threshold(t: float) -> None:
    if t > 1:
        f = flip_point(Knob("x", 1.0, 0.05, 20.0, step(t)))
    else:
        f = flip_point(Knob("x", 1.0, 0.05, 20.0, lambda x: "move" if x >= t else "stay"))
    assert f.value is not None and f.edge is not None
    assert abs(f.edge - t) <= 1e-6 * max(1.0, t)
    # the printed value is rounded toward the flip (4 decimals for an unnamed knob): a rerun there flips
    assert abs(f.value - t) <= 1e-4 + 1e-9 and (f.value >= t if t > 1 else f.value < t)
    assert f"{f.value:g}" in f.text
    # the base verdict is "move" on both sides, so the flipped one must be "stay"
    assert f.verdict == "stay"


def test_price_term_choices() -> None:
    prices = {"on-demand": Decimal("12"), "spot": Decimal("3"), "1yr": None, "3yr": Decimal("5")}

    def verdict(term: str) -> str | None:
        p = prices[term]
        return None if p is None else ("move" if p < 6 else "close")

    f = choice_flips(Choice("price term", "on-demand", tuple(prices), verdict))
    assert f.value == "spot" and f.verdict == "move"
    assert "3yr gives 'move'" in f.text
    assert "1yr: no published price, not evaluated" in f.text


def test_sensitivity_runs_every_knob() -> None:
    out = sensitivity(
        [Knob("a", 1.0, 0.1, 10.0, step(2.0)), Knob("b", 1.0, 0.1, 10.0, lambda _x: "same")],
        [Choice("price term", "x", ("x", "y"), lambda c: "p" if c == "x" else "q")],
    )
    assert [f.knob for f in out] == ["a", "b", "price term"]
    assert out[0].value is not None and out[1].value is None and out[2].value == "y"


def test_training_knob_wording() -> None:
    f = flip_point(Knob("runs per month", 4.0, 0.04, 400.0, step(1.5, below="stay", above="move")))
    # below 1.5 runs it flips; 1.50 itself does not, so 1.49 is printed
    assert f.value is not None and "1.49 runs per month instead of 4" in f.text
    g = flip_point(Knob("run time (hours)", 26.0, 1.3, 520.0, step(40.0)))
    assert g.value is not None and "a Neuron run taking 40.0 hours instead of 26" in g.text


# --------------------------------------------- issue 15: the printed flip value is rounded toward the flip


def _printed(name: str, text: str, base: float) -> float:
    """The value a reader would type back in, parsed from the flip's words."""
    import re

    if name == "throughput ratio":
        m = re.search(r"a ([\d.]+)x (slower|faster)", text)
        assert m
        return 1 / float(m.group(1)) if m.group(2) == "slower" else float(m.group(1))
    pattern = {
        "engineer-days": r"taking ([\d.]+) engineer-days",
        "utilization": r"at ([\d.]+)% utilization",  # below 10% the product prints a decimal: "3.8%"
        "traffic": r"([\d.]+)x today's traffic",
        "runs per month": r"([\d.]+) runs per month",
    }[name]
    m = re.search(pattern, text)
    assert m, text
    v = float(m.group(1))
    return v / 100 if name == "utilization" else v


@settings(max_examples=80, deadline=None)
@given(
    st.sampled_from(["throughput ratio", "engineer-days", "utilization", "traffic", "runs per month"]),
    st.floats(min_value=0.07, max_value=0.95),
    st.booleans(),
)
@example("utilization", 0.946, False)  # edge 3.78%: printed "3.7% utilization" (a CI failure, issue 18)
@example("traffic", 0.03, True)
def test_rerun_at_the_printed_value_flips(name: str, frac: float, above: bool) -> None:
    """Old code printed the edge rounded to nearest (e.g. '1.57x' for an edge at 1.5734): a rerun at the
    printed value kept the old verdict. Now the printed number is rounded into the flipped side."""
    base = {"utilization": 0.7, "engineer-days": 20.0, "runs per month": 4.0}.get(name, 1.0)
    hi = 1.0 if name == "utilization" else base * 20
    edge = base + (hi - base) * frac if above else base * (1 - frac)

    def verdict(x: float) -> str:
        return ("stay" if x >= edge else "move") if above else ("stay" if x <= edge else "move")

    f = flip_point(Knob(name, base, base * 0.05, hi, verdict))
    assert f.value is not None and f.verdict == "stay"
    assert verdict(_printed(name, f.text, base)) == "stay"  # a rerun at the printed value flips
    assert verdict(float(f.value)) == "stay"


def test_old_rounding_would_not_flip() -> None:
    """The case from the QA pass: an edge at 1.5734x traffic printed as 1.57x did not flip on a rerun."""
    f = flip_point(Knob("traffic", 1.0, 0.01, 100.0, lambda x: "close" if x >= 1.5734 else "move"))
    assert f.text.startswith("1.58x today's traffic") and f.value == 1.58
