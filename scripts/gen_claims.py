"""Write docs/claims.md: the seed's numeric claims checked with chipswap's projection, bands and prices.

Usage:  python scripts/gen_claims.py  [--out docs/claims.md]

The page is chipswap.plan.claims.render_markdown(evaluate_claims()) and nothing else; tests/test_claims.py
fails when the committed page and the code disagree (re-run this after the projection or the catalog changes).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))
from chipswap.atomic import atomic_write_text  # noqa: E402
from chipswap.plan.claims import evaluate_claims, render_markdown  # noqa: E402

DEFAULT_OUT = Path(__file__).resolve().parents[1] / "docs" / "claims.md"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, default=DEFAULT_OUT)
    args = ap.parse_args()
    lines = evaluate_claims()
    atomic_write_text(args.out, render_markdown(lines))
    print(f"wrote {args.out}: {len(lines)} lines, {sum(ln.refused for ln in lines)} refused")


if __name__ == "__main__":
    main()
