"""The workload schema's building blocks: strict numbers (true/false and quoted numbers are not numbers,
NaN and inf refused), a number's unit (chipswap.ranges), the upper bounds every number has, and the frozen
base model that forbids extra keys. chipswap.plan.workload re-exports the public names.
"""

from __future__ import annotations

import math
from decimal import Decimal
from typing import Annotated, Any, Literal, get_args

from pydantic import AfterValidator, BaseModel, BeforeValidator, ConfigDict

from chipswap import ranges

Source = Literal["stated", "assumption", "seed example", "published benchmark", "projected", "measured"]
Term = Literal["on-demand", "spot", "1yr", "3yr", "ri-effective"]
TERMS: tuple[str, ...] = get_args(Term)

# Upper bounds: every number here may size an allocation (lengths, rates, counts) or a Decimal that is later
# rounded to the cent, so each has a documented ceiling far above any real workload.
MAX_TOKENS = 1_048_576  # longest prompt / output / sequence, tokens
MAX_RPS = 1_000_000.0  # requests per second
MAX_USD = Decimal("10000000000")  # any amount of money (USD)
MAX_MS = 3_600_000.0  # any latency (one hour)
MAX_COUNT = 100_000  # instances in a fleet
MAX_SCALE = 10_000.0  # traffic scale factor
MAX_JOB_TOKENS = 1e16  # tokens in one training run


# ---------------------------------------------------------------------------------------- strict numbers


def _number(v: Any, what: str = "a number") -> Any:
    """Refuse what pydantic's lax mode would coerce: true/false and quoted numbers are not numbers."""
    if isinstance(v, bool):
        raise ValueError(f"expected {what}, not {str(v).lower()}")
    if isinstance(v, str):
        raise ValueError(f"expected {what} without quotes")
    if isinstance(v, float) and not math.isfinite(v):
        raise ValueError("expected a finite number")
    return v


def _whole(v: Any) -> Any:
    v = _number(v, "an integer")
    if isinstance(v, float):
        raise ValueError("expected an integer (a whole number, no decimal point)")
    return v


def _money(v: Any) -> Any:
    v = _number(v)
    return Decimal(repr(v)) if isinstance(v, float) else v


Real = Annotated[float, BeforeValidator(_number)]
Whole = Annotated[int, BeforeValidator(_whole)]
Money = Annotated[Decimal, BeforeValidator(_money)]


class InRange:
    """A number with a unit (chipswap.ranges); the field's gt/ge/le lie inside the unit's range, and this
    refuses what they let through: a nonzero value below the unit's smallest (5e-324)."""

    def __init__(self, unit: str, zero: bool = False) -> None:
        self.spec = ranges.Spec(unit, zero)

    def __call__(self, v: Any) -> Any:
        if ranges.below_floor(ranges.as_decimal(v), self.spec):
            raise ValueError(f"expected {ranges.span(self.spec)}; give a value in that range")
        return v + 0 if v == 0 else v  # -0.0 -> 0.0


def In(unit: str, zero: bool = False) -> Any:  # noqa: N802 - reads as a type: Annotated[Real, In("rate")]
    """`Annotated[Real, In("rate")]`: the field's unit; `In("days", zero=True)`: 0 is also a value."""
    return AfterValidator(InRange(unit, zero))


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False)
