"""Fleet sizers: how many instances carry a traffic level, as a function the sensitivity can re-evaluate.

A sizer answers `count(traffic_factor, speed)`: the instances needed when traffic is `traffic_factor` times
the
load the fleet was sized for and the instance is `speed` times as fast as its figure says (the band's edges).
None means no fleet size meets the objective. Two kinds:

- RateSizer: from a requests/s-per-instance figure (stated, measured, or the simulator's capacity at the SLO)
  and a utilization target: ceil(rate x factor / (per_instance x speed x utilization)).

Both never go below `least`, the redundancy floor (targets.min_replicas, N+1: default 2).
- CurveSizer: from a table of simulated capacities at several speeds (the simulation stage builds it), so a
  re-sizing at another traffic or speed is a lookup, never a new simulation.

Pure: no I/O, no clock.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Protocol

MAX_FLEET = 1_000_000  # instances; a count above it is reported as "cannot be sized"


class Sizer(Protocol):
    def count(self, traffic_factor: float = 1.0, speed: float = 1.0) -> int | None: ...

    @property
    def how(self) -> str: ...


def _ceil(x: float) -> int:
    # a count that is a whole number up to float noise stays that number (20 / (2 x 0.5) is 20, not 21)
    return max(1, math.ceil(x - 1e-9))


@dataclass(frozen=True)
class RateSizer:
    """ceil(rate_rps x factor / (per_instance_rps x speed x utilization)), at least 1."""

    rate_rps: float  # the arrival rate the fleet is sized for (the busiest window, after scale)
    per_instance_rps: float  # requests/s one instance carries
    utilization: float = 1.0
    least: int = 1  # the redundancy floor (targets.min_replicas): never fewer instances

    def count(self, traffic_factor: float = 1.0, speed: float = 1.0) -> int | None:
        cap = self.per_instance_rps * speed * self.utilization
        if cap <= 0:
            return None
        n = max(self.least, _ceil(self.rate_rps * traffic_factor / cap))
        return n if n <= MAX_FLEET else None

    @property
    def how(self) -> str:
        u = f" at {self.utilization:.0%} utilization" if self.utilization < 1 else ""
        return f"{self.rate_rps:,.3g} requests/s / ({self.per_instance_rps:,.3g} per instance{u})"


@dataclass(frozen=True)
class CurveSizer:
    """Simulated capacity per instance (requests/s meeting the SLO) at several speed factors; between them the
    capacity is interpolated in log-log space (capacity grows smoothly with speed). A speed outside the table
    uses the nearest entry scaled linearly, which is conservative for slower and optimistic for faster."""

    rate_rps: float
    speeds: tuple[float, ...]  # increasing
    capacity_rps: tuple[float | None, ...]  # per instance at each speed; None: no size meets the SLO
    what: str = "simulated for the SLO"
    least: int = 1  # the redundancy floor (targets.min_replicas): never fewer instances

    def capacity(self, speed: float) -> float | None:
        sp, cap = self.speeds, self.capacity_rps
        if speed in sp:
            return cap[sp.index(speed)]
        if speed <= sp[0]:
            return None if cap[0] is None else cap[0] * speed / sp[0]
        if speed >= sp[-1]:
            return None if cap[-1] is None else cap[-1] * speed / sp[-1]
        i = next(k for k in range(1, len(sp)) if sp[k] >= speed)
        lo, hi = cap[i - 1], cap[i]
        if lo is None or hi is None:  # infeasible at one end: between them it is not known to be feasible
            return None
        w = (math.log(speed) - math.log(sp[i - 1])) / (math.log(sp[i]) - math.log(sp[i - 1]))
        return math.exp(math.log(lo) + w * (math.log(hi) - math.log(lo)))

    def count(self, traffic_factor: float = 1.0, speed: float = 1.0) -> int | None:
        cap = self.capacity(speed)
        if cap is None or cap <= 0:
            return None
        n = max(self.least, _ceil(self.rate_rps * traffic_factor / cap))
        return n if n <= MAX_FLEET else None

    @property
    def how(self) -> str:
        return self.what


@dataclass(frozen=True)
class FixedSizer:
    """A fleet whose size does not follow traffic (training runs on a fixed number of nodes)."""

    n: int

    def count(self, traffic_factor: float = 1.0, speed: float = 1.0) -> int | None:
        return self.n

    @property
    def how(self) -> str:
        return f"{self.n} instances (stated)"
