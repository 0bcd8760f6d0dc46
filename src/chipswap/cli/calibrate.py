"""`chipswap calibrate`: re-fit the platform coefficients from the published benchmark tables and write (or,
with --check, only compare) the shipped src/chipswap/data/platforms/<family>.toml files.

Parses flags and prints; the fit and validation are chipswap.projection.calibration. `make calibrate` runs it.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import typer
from rich.console import Console
from rich.table import Table

from chipswap.cli.common import maybe_flag, switch

HELP = (
    "Re-fit the projection's platform coefficients from ../shared/reference/{neuron,gpu}-benchmarks (or "
    "--reference DIR), validate them on held-out rows (leave one model / architecture / platform / GPU out) "
    "and write the shipped coefficient files. --check compares instead of writing and exits 1 when the "
    "shipped "
    "files differ from a fresh fit (what CI runs)."
)


def register(app: typer.Typer) -> None:
    @app.command("calibrate", help=HELP)
    def calibrate(
        reference: Path | None = maybe_flag(
            "--reference",
            help="folder holding neuron-benchmarks/ and gpu-benchmarks/ (default ../shared/reference)",
        ),
        check: bool = switch("--check", help="compare with the shipped files; exit 1 if they differ"),
        out: Path | None = maybe_flag("--out", help="write the files here instead of the package data"),
        as_json: bool = switch("--json", help="print JSON instead of tables"),
    ) -> None:
        from chipswap.errors import ChipswapError
        from chipswap.projection import calibration as C

        if out is not None and not out.is_dir():
            raise ChipswapError(f"--out folder does not exist: {out}; create it first")
        console = Console(stderr=True)
        if console.is_terminal and not as_json:
            with console.status("fitting") as status:
                cal = C.calibrate(reference, progress=lambda m: status.update(m))
        else:
            cal = C.calibrate(reference)
        summary = [
            {
                "group": g,
                "phase": p,
                "split": s,
                "metric": m,
                "median_error": e,
                "baseline_median_error": b,
                "n": n,
            }
            for g, p, s, m, e, b, n in C.summary_rows(cal)
        ]
        diff = C.differences(cal, out)
        written: list[str] = []
        if not check:
            written = [str(p) for p in C.write_families(cal, out)]
            _clear_platform_caches()
        from chipswap.projection.fitting import physfit
        from chipswap.projection.fitting.physcal import calibrate_physics

        phys_cal = calibrate_physics(reference)
        if physfit.physics_differ(phys_cal, out):
            diff.append("physics")
        if not check:
            written.append(str(physfit.write_physics(phys_cal, out)))
        phys_summary = [
            {
                "split": sp.kind,
                "family": fam,
                "metric": m,
                "median_error": got.median_abs,
                "signed_median": got.signed_median,
                "coverage": got.coverage,
                "band": got.half_width,
            }
            for sp in phys_cal.splits
            for fam in sorted({r.family for r in phys_cal.runs})
            for m in physfit.METRICS
            if (got := physfit.summarize(phys_cal, sp.kind, fam, m)) is not None
        ]
        if as_json:
            typer.echo(
                json.dumps(
                    {
                        "rows": len(cal.reference.rows),
                        "skipped": len(cal.reference.skipped),
                        "coefficients": {
                            f"{g}:{p}": dict(c.values) for (g, p), c in cal.coefficients.items()
                        },
                        "held_out": summary,
                        "physics": physfit.as_dict(phys_cal)
                        | {
                            "runs": len(phys_cal.runs),
                            "held_out": phys_summary,
                        },
                        "differs_from_shipped": diff,
                        "written": written,
                    },
                    indent=2,
                )
            )
        else:
            from chipswap.cli.common import console, print_table

            out_console = console()
            out_console.print(
                f"{len(cal.reference.rows)} published rows fitted, {len(cal.reference.skipped)} left out "
                "(reasons in docs/projection.md)"
            )
            t = Table(title="held-out median |predicted/published - 1| (calibrated vs spec-sheet roofline)")
            for col in ("group", "phase", "held out", "metric", "rows", "calibrated", "roofline"):
                t.add_column(col, justify="right")
            for s in summary:
                t.add_row(
                    s["group"],
                    s["phase"],
                    s["split"],
                    s["metric"],
                    str(s["n"]),
                    f"{s['median_error'] * 100:.1f}%",
                    f"{s['baseline_median_error'] * 100:.0f}%",
                )
            print_table(out_console, t)
            lp = physfit.long_prompt_errors(phys_cal)
            out_console.print(
                f"physical serving model ({len(phys_cal.runs)} modern serving runs): Trainium2 long prompts "
                f"fitted without them: TTFT {lp['ttft_s'] * 100:.1f}%, output tok/s "
                f"{lp['out_tok_s'] * 100:.1f}% "
                "median |error| (bench/bench_extrapolation.py prints every split)"
            )
            if check:
                out_console.print(
                    "shipped coefficients match a fresh fit"
                    if not diff
                    else f"shipped coefficients DIFFER from a fresh fit for: {', '.join(diff)}"
                )
            else:
                out_console.print(
                    f"wrote {len(written)} files"
                    + (f" (changed: {', '.join(diff)})" if diff else " (unchanged)")
                )
        if check and diff:
            sys.exit(1)


def _clear_platform_caches() -> None:
    """After writing the family files, later fits must read the fresh coefficients."""
    from chipswap.projection import platforms

    platforms._CACHE.clear()
    platforms.load_families.cache_clear()
    platforms.load_physics.cache_clear()
