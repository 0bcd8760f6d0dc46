"""Money as exact Decimal: the one conversion every price, count and hour count goes through.

Pure: no files, clock or torch. Floats go through their shortest repr, so 21.5 is Decimal("21.5"), never the
binary expansion; booleans, non-numbers and non-finite values are one ChipswapError line.
"""

from __future__ import annotations

from decimal import Decimal

from chipswap.errors import ChipswapError


def D(value: object, name: str = "value") -> Decimal:
    """Exact Decimal from int / str / Decimal / float (floats go through their shortest repr)."""
    if isinstance(value, Decimal):
        out = value
    elif isinstance(value, bool):
        raise ChipswapError(f"{name} must be a number, got {value!r}; pass a number")
    elif isinstance(value, (int, str)):
        try:
            out = Decimal(str(value).strip())
        except ArithmeticError:
            raise ChipswapError(f"{name} must be a number, got {value!r}; pass a number like 21.50") from None
    elif isinstance(value, float):
        out = Decimal(repr(value))
    else:
        raise ChipswapError(f"{name} must be a number, got {value!r}; pass a number")
    if not out.is_finite():
        raise ChipswapError(f"{name} must be a finite number, got {value!r}; pass a number")
    return out
