"""Sensitivity stage: for each main input, the change that flips the verdict, like for like.

Traffic re-sizes BOTH fleets (each with its own sizer); a price term is applied to BOTH sides; the Neuron and
the
GPU throughput are varied separately. Input: PlanSetup and the VerdictStage. Output: the Flip rows. The search
itself is chipswap.verdict.sensitivity (pure); every evaluation here is a pure re-run of economics + verdict.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterator
from dataclasses import replace
from itertools import islice
from typing import Any

from chipswap.economics import cost
from chipswap.plan.economics import Scenario, economics, evaluate
from chipswap.plan.setup import PlanSetup
from chipswap.plan.sizing import RateSizer
from chipswap.plan.verdict import VerdictStage, band_check, rate
from chipswap.plan.workload import TERMS
from chipswap.verdict.rules import MEASURE, MOVES, STAY
from chipswap.verdict.sensitivity import Choice, Flip, Knob, sensitivity


def _with_utilization(scn: Scenario, u: float) -> Scenario:
    """Both fleets at utilization `u` (only fleets sized from a requests/s figure have one)."""
    g, c = scn.gpu_sizer, scn.cand_sizer
    return replace(
        scn,
        gpu_sizer=replace(g, utilization=u) if isinstance(g, RateSizer) else g,
        cand_sizer=replace(c, utilization=u) if isinstance(c, RateSizer) else c,
    )


def at_term(s: PlanSetup, scn: Scenario, instance: str, term: str) -> Scenario | None:
    """The scenario with BOTH sides bought on `term` (like for like); None when either side has no published
    price on it. A GPU figure the user stated (a bill) keeps its discount: it moves by the catalog's ratio
    between `term` and the fleet's own term."""
    wl = s.workload
    cand = rate(s.catalog, instance, s.region, term)
    gpu_t = rate(s.catalog, s.fleet.name, wl.fleet.region, term)
    gpu_own = rate(s.catalog, s.fleet.name, wl.fleet.region, wl.fleet.term)
    if cand is None or gpu_t is None or gpu_own is None or gpu_own.value <= 0:
        return None
    ratio = gpu_t.value / gpu_own.value
    out = replace(scn, cand_rate=cand.value, monthly_today=scn.monthly_today * ratio)
    if scn.gpu_rate is not None:
        out = replace(out, gpu_rate=scn.gpu_rate * ratio)
    return out


def flips(s: PlanSetup, v: VerdictStage) -> tuple[Flip, ...]:
    # "measure first": what flips it is the measured figure (the verdict's own lines say which), not a knob
    if v.best is None or v.verdict.verdict == MEASURE:
        return ()
    wl, th = s.workload, s.thresholds
    facts, scn = replace(v.facts, band_flip=None), v.scenario
    base_gpu = economics(scn).gpu_count if scn.gpu_sizer is not None else None
    best, gpu = v.best, v.gpu

    def verdict_of(x: Scenario) -> str:
        """The verdict re-planned for the variation `x`: the money re-sized on both sides and the error band
        checked again (as the plan does), so a row holds when re-run. A variation where no GPU fleet size
        meets the SLO any more is the objective's lever, not a cost flip: it is not offered here (the
        objectives' own rows say it)."""
        if base_gpu is not None and economics(x).gpu_count is None:
            return v.verdict.verdict
        plain = evaluate(facts, x, th).verdict
        if plain not in MOVES or gpu is None or best.saving_pct is None:
            return plain  # the band only ever turns a move into a close call
        band = band_check(facts, x, th, best, gpu)[0]
        return evaluate(replace(facts, band_flip=band), x, th).verdict

    knobs: list[Knob] = []
    if s.kind == "serving":
        knobs.append(
            Knob("throughput ratio", 1.0, 0.05, 20.0, lambda m: verdict_of(replace(scn, cand_speed=m)))
        )
        if scn.gpu_sizer is not None:
            knobs.append(
                Knob("GPU throughput ratio", 1.0, 0.05, 20.0, lambda m: verdict_of(replace(scn, gpu_speed=m)))
            )
    elif scn.cand_hours:
        base_h = scn.cand_hours
        knobs.append(
            Knob(
                "run time (hours)",
                base_h,
                base_h / 20,
                base_h * 20,
                lambda h: verdict_of(replace(scn, cand_hours=h)),
            )
        )
    day_rate = wl.porting.day_rate_usd
    knobs.append(
        Knob(
            "engineer-days",
            wl.porting.engineer_days,
            0.0,
            max(wl.porting.engineer_days * 50, 500.0),
            lambda d: verdict_of(replace(scn, porting_usd=cost.porting_cost(cost.D(round(d, 6)), day_rate))),
        )
    )
    if s.kind == "serving":
        if isinstance(scn.cand_sizer, RateSizer):
            knobs.append(
                Knob(
                    "utilization", wl.utilization, 0.05, 1.0, lambda u: verdict_of(_with_utilization(scn, u))
                )
            )
        knobs.append(Knob("traffic", 1.0, 0.01, 100.0, lambda f: verdict_of(replace(scn, traffic_factor=f))))
    elif scn.runs_per_month:
        runs = scn.runs_per_month
        knobs.append(
            Knob(
                "runs per month",
                runs,
                runs * 0.01,
                runs * 100,
                lambda r: verdict_of(replace(scn, traffic_factor=r / runs)),
            )
        )
    instance = v.best.instance

    def by_term(term: str) -> str | None:
        x = at_term(s, scn, instance, term)
        return None if x is None else verdict_of(x)

    choices = [Choice("price term", wl.pricing.term, tuple(TERMS), by_term)]
    return sensitivity(knobs, choices, directions(v.verdict.verdict))


def directions(verdict: str) -> tuple[tuple[str, Callable[[str], bool]], ...]:
    """The directions a verdict can flip in: a move only toward stay (any verdict that is not a move), a stay
    only toward move, a close call both ways (toward a move, and toward a plain "stay on GPU")."""
    to_move = ("toward move", lambda x: x in MOVES)
    if verdict in MOVES:
        return (("toward stay", lambda x: x not in MOVES),)
    if verdict == STAY:
        return (to_move,)
    return (to_move, ("toward stay", lambda x: x == STAY))


# Objective values tried, as multiples of the stated one (rounded to two significant digits), nearest first:
# a re-sizing from each fleet's size table per value, then the value that flips re-checked by re-planning.
OBJECTIVE_STEPS = (1.25, 0.8, 1.5, 0.67, 2.0, 0.5, 3.0, 0.33, 5.0, 0.2, 10.0)
CONFIRM_TRIES = 3  # re-planned values per objective and direction before "not confirmed"


def _two_digits(ms: float) -> float:
    step = 10.0 ** (math.floor(math.log10(ms)) - 1)
    return round(ms / step) * step


GOODPUT_STEPS = (99.9, 99.5, 99.0, 98.0, 95.0, 90.0, 80.0)  # goodput_pct values tried, nearest first


def _ladders(slo: Any) -> list[tuple[str, str, float, list[float], str]]:
    """(key, label, stated value, values to try nearest first, unit) for every stated objective."""
    from chipswap.plan.simulation import objective_words

    rows = []
    for key, base in slo.objectives().items():
        label = objective_words(key, base).split(" <= ")[0]
        rows.append((key, label, base, [_two_digits(base * st) for st in OBJECTIVE_STEPS], "ms"))
    if slo.goodput_pct is not None:
        g = float(slo.goodput_pct)
        rows.append(("goodput_pct", "goodput", g, sorted(GOODPUT_STEPS, key=lambda x: abs(x - g)), "%"))
    return rows


def _set(slo: Any, key: str, value: float) -> Any:
    if key == "goodput_pct":
        return type(slo).model_validate({**slo.model_dump(), "goodput_pct": value})
    return slo.with_objective(key, value)


def _shown(key: str, value: float) -> str:
    from chipswap.plan.simulation import objective_words

    return f"{value:g}%" if key == "goodput_pct" else objective_words(key, value).split(" <= ")[1]


def _flipping(
    slo: Any, key: str, base: float, values: list[float], toward: Callable[[str], bool],
    quick: Callable[[str, float, Any], str],
) -> Iterator[tuple[float, Any]]:
    """(value, [slo] at it) for each value on one objective's ladder, nearest first, whose re-sizing flips
    the verdict `toward` the direction."""
    for value in values:
        try:
            x = _set(slo, key, value)
        except ValueError:  # e.g. a p50 tightened above the p99: not a value to offer
            continue
        if value != base and toward(quick(key, value, x)):
            yield value, x


def objective_flips(
    s: PlanSetup,
    v: VerdictStage,
    quick: Callable[[Any], str],
    replan: Callable[[Any], str],
    replan_all: Callable[[list[Any]], list[str]] | None = None,
) -> tuple[Flip, ...]:
    """Every stated objective (and goodput) as a sensitivity: the nearest value on the ladder
    (OBJECTIVE_STEPS; GOODPUT_STEPS) whose re-sizing flips the verdict in each direction, kept only when
    re-planning at that value (`replan`: the simulation, fleets and verdict stages run again for that [slo])
    gives that verdict too. `quick`: the verdict from the fleets' size tables (no simulation), to find it.
    `replan_all`: re-plans several [slo] side by side (each re-plan is deterministic, so running every
    value the search may reach at once, before it, gives the same flips sooner on idle cores; a value the
    search stops before is work spent for nothing)."""
    if (v.best is None and not v.candidates) or v.verdict.verdict == MEASURE:
        return ()  # "measure first": no objective is re-planned (minutes of simulation, both ways)
    slo = s.workload.slo
    out: list[Flip] = []
    done: dict[tuple[str, float], str] = {}
    resized: dict[tuple[str, float], str] = {}

    def quick_at(key: str, value: float, x: Any) -> str:
        if (key, value) not in resized:
            resized[(key, value)] = quick(x)
        return resized[(key, value)]

    ladders = [(d, toward, rung) for d, toward in directions(v.verdict.verdict) for rung in _ladders(slo)]
    if replan_all is not None:  # every value the search below may re-plan, in its order
        ahead: dict[tuple[str, float], Any] = {}
        for _d, toward, (key, _label, base, values, _unit) in ladders:
            for value, x in islice(_flipping(slo, key, base, values, toward, quick_at), CONFIRM_TRIES):
                ahead.setdefault((key, value), x)
        done.update(zip(ahead, replan_all(list(ahead.values())), strict=True))
    for direction, toward, (key, label, base, values, unit) in ladders:
        tried: list[float] = []
        confirmed: Flip | None = None
        for value, x in _flipping(slo, key, base, values, toward, quick_at):
            tried.append(value)
            after = done[(key, value)] = done.get((key, value)) or replan(x)
            if toward(after):
                looser = value < base if key == "goodput_pct" else value > base
                how = "relaxing" if looser else "tightening"
                text = f"{how} {label} to {_shown(key, value)} would flip it to '{after}'"
                text += " (re-planned at that value)"
                confirmed = Flip(f"{label} objective", base, value, after, text, value, direction)
                break
            if len(tried) >= CONFIRM_TRIES:
                break
        if confirmed is None:
            said = ", ".join(f"{t:g}" for t in tried)
            unconfirmed = ""
            if tried:
                unconfirmed = f" (re-sizing suggested {said} {unit}; re-planning did not confirm it)"
            span = f"from {min(values):g} to {max(values):g} {unit}"
            text = f"no {label} objective {span} changes the verdict {direction}{unconfirmed}"
            confirmed = Flip(f"{label} objective", base, None, None, text, None, direction)
        out.append(confirmed)
    return tuple(out)
