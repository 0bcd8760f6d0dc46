"""Sensitivity: the bisection finds where a verdict flips, on functions whose flip point is known."""

from __future__ import annotations

from decimal import Decimal

from hypothesis import given, settings
from hypothesis import strategies as st

from chipswap.core.sensitivity import Choice, Knob, choice_flips, flip_point, sensitivity


def step(at: float, below: str = "move", above: str = "stay"):
    return lambda x: below if x < at else above


def test_flip_found_at_the_step() -> None:
    f = flip_point(Knob("engineer-days", 20.0, 0.0, 1000.0, step(137.4)))
    assert f.value is not None
    assert abs(f.value - 137.4) < 1e-6
    assert f.verdict == "stay"
    assert "137.4 engineer-days instead of 20" in f.text


def test_slower_throughput_wording() -> None:
    # verdict flips when the candidate is slower than 1/1.4 of its stated throughput
    f = flip_point(Knob("throughput ratio", 1.0, 0.05, 20.0, lambda m: "move" if m >= 1 / 1.4 else "close"))
    assert f.value is not None
    assert abs(f.value - 1 / 1.4) < 1e-6
    assert f.text.startswith("a 1.40x slower Neuron throughput would flip it to 'close'")


def test_nearest_side_wins() -> None:
    def f(x: float) -> str:
        return "a" if 0.5 < x < 3.0 else "b"

    got = flip_point(Knob("traffic", 1.0, 0.01, 100.0, f))
    assert got.value is not None and abs(got.value - 0.5) < 1e-6


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
    assert f.value is not None
    assert abs(f.value - t) <= 1e-6 * max(1.0, t)
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
    assert f.value is not None and "1.50 runs per month instead of 4" in f.text
    g = flip_point(Knob("run time (hours)", 26.0, 1.3, 520.0, step(40.0)))
    assert g.value is not None and "a Neuron run taking 40.0 hours instead of 26" in g.text
