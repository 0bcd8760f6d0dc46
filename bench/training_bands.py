"""Training projection bands: leave-one-source-out errors of the layout-aware training model.

    PYTHONPATH=src python bench/training_bands.py           # print per-source / per-family held-out errors
    PYTHONPATH=src python bench/training_bands.py --write   # also regenerate data/training/calibration.toml

Fits chipswap.projection.training_model on the published training rows (../shared/reference + data/training/
published_rows.toml), re-fits once per held-out source, and prints each source's median held-out error and
band coverage, against the targets (median |err| <= 20 % per GPU family, <= 25 % on Trainium,
coverage >= 80 %).
Exit 1 when a target is missed. Not timed.
"""

from __future__ import annotations

import sys

from chipswap.projection.training_fit import TARGETS, calibrate, write


def main(argv: list[str]) -> int:
    data = calibrate()
    h = data["held_out"]
    print("held out, leave-one-source-out (tokens/s per device)")
    print(f"{'source':24s} {'rows':>4s} {'median |err|':>13s} {'median err':>11s} {'in band':>8s}")
    for k, v in h["sources"].items():
        print(
            f"{k:24s} {v['rows']:4d} {v['median_abs_error']:13.1%} {v['median_error']:+11.1%} "
            f"{v['coverage']:8.0%}"
        )
    print(f"{'family':24s}")
    missed = []
    for k, v in h["families"].items():
        target = TARGETS["neuron"] if k == "Trainium" else TARGETS["nvidia"]
        ok = v["median_abs_error"] <= target
        missed += [] if ok else [f"{k} median {v['median_abs_error']:.1%} > {target:.0%}"]
        print(
            f"{k:24s} {v['rows']:4d} {v['median_abs_error']:13.1%} {v['median_error']:+11.1%} "
            f"{v['coverage']:8.0%}"
            f"  target <= {target:.0%}: {'ok' if ok else 'MISSED'}"
        )
    for g, v in h["groups"].items():
        ok = v["coverage"] >= TARGETS["coverage"]
        missed += [] if ok else [f"{g} coverage {v['coverage']:.0%}"]
        print(
            f"group {g}: band +-{v['band']:.1%}, coverage {v['coverage']:.0%} of {v['rows']} held-out rows"
            f" ({'ok' if ok else 'MISSED'})"
        )
    print("coefficients:", ", ".join(f"{k}={v}" for k, v in data["coefficients"].items()))
    if "--write" in argv:
        print("wrote", write(data))
    for m in missed:
        print("target missed:", m)
    return 1 if missed else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
