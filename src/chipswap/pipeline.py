"""Where `chipswap plan` used to live: it is now the chain of stages in `chipswap.plan` (one module per
stage).

Kept so `from chipswap.pipeline import run_plan, PlanResult` keeps working; nothing else lives here.
"""

from __future__ import annotations

from chipswap.plan import *  # noqa: F403  (the public names of the plan, unchanged)
from chipswap.plan import __all__ as __all__
