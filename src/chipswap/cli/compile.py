"""`chipswap compile MODEL`: compile every bucket of a shape plan, cache it, check it against eager PyTorch.

Parses flags and calls chipswap.compile.compiler.compile_plan; prints a rich table or JSON. Exit 0 = every
bucket
within --atol, 1 = compiled but some bucket differs from eager PyTorch by more than --atol, 2 = bad input.
"""

from __future__ import annotations

import json
import math
import sys
from pathlib import Path

import typer

from chipswap.cli.common import flag_ints, maybe_flag, switch
from chipswap.errors import ChipswapError

HELP = (
    "Compile MODEL once per fixed shape (sequence bucket x batch size) with the chosen backend, store each "
    "artifact in the content-addressed cache (reused across runs, paths and processes), and check every "
    "artifact against eager PyTorch on the same padded input (max abs diff vs --atol). MODEL is a preset "
    "name (e.g. distilbert-base), a config.json, a package.module:factory or a .pt2 file. Buckets come from "
    "--plan (written by chipswap shapes --out) or from --seq-len/--batch-sizes."
)


def _compile(
    model: str = typer.Argument(..., help="Preset name, config.json, package.module:factory or .pt2 file."),
    plan: Path | None = maybe_flag("--plan", help="Shape plan JSON (chipswap.shapeplan/1)."),
    seq_len: str | None = maybe_flag(
        "--seq-len", help="Sequence bucket(s) instead of --plan, e.g. 128 or 64,128."
    ),
    batch_sizes: str | None = maybe_flag(
        "--batch-sizes", help="Compiled batch sizes, e.g. 1,4 (default: the plan's, or 1)."
    ),
    backend: str = typer.Option(
        "onnxruntime", "--backend", help="onnxruntime (for CPU), aotinductor or neuron (Neuron hosts)."
    ),
    cache_dir: Path | None = maybe_flag(
        "--cache-dir", help="Artifact cache folder (default: $CHIPSWAP_CACHE_DIR or the user cache)."
    ),
    atol: float = typer.Option(1e-3, "--atol", help="Largest allowed max abs diff vs eager PyTorch."),
    task: str | None = maybe_flag("--task", help="Model task head (default: the preset's)."),
    retry_failed: bool = switch("--retry-failed", help="Compile keys that failed before again."),
    out: Path | None = maybe_flag(
        "--out", help="Write the compiled set (bucket -> cache key) for `chipswap serve`."
    ),
    as_json: bool = switch("--json", help="Machine-readable output."),
    trust_native: bool = switch(
        "--trust-native",
        help="Let a .pt2 model file load the AOTInductor shared objects it carries (runs native code from "
        "the file). Default: refused.",
    ),
) -> int:
    from chipswap.compile.backends import BACKEND_NAMES
    from chipswap.compile.cache import ArtifactCache
    from chipswap.compile.compiler import (
        check_model_against_plan,
        check_out_path,
        compile_plan,
        load_plan,
        plan_from_args,
        save_compiled_set,
        target_from_spec,
    )

    if backend not in BACKEND_NAMES:
        from chipswap.compile.backends import get_backend

        get_backend(backend)  # raises with a did-you-mean
    if not math.isfinite(atol) or atol < 0:
        raise ChipswapError(f"--atol must be a finite number >= 0, got {atol}; e.g. --atol 1e-3")
    if plan is not None and seq_len is not None:
        raise ChipswapError("give either --plan or --seq-len, not both; --plan takes the buckets from it")
    if out is not None:
        check_out_path(out)  # before any bucket is compiled
    decode_note = None
    if plan is not None:
        bp = load_plan(plan)
        decode = bp.extra.get("decode_buckets")
        if decode:
            from chipswap.textsafe import one_line

            decode_note = (
                f"note: plan {plan} has decode_buckets {one_line(decode, 120)} (llm mode); this backend"
                " compiles only the"
                f" sequence buckets {list(bp.sequence_buckets)}, not the decode buckets"
            )
        if batch_sizes:
            from chipswap.compile.compiler import BucketPlan
            from chipswap.shapes.planfile import _int_list, check_shapes

            batch = _int_list(flag_ints(batch_sizes, "--batch-sizes"), "--batch-sizes", "arguments")
            check_shapes(bp.sequence_buckets, batch, "arguments")
            bp = BucketPlan(bp.sequence_buckets, batch, bp.max_length, bp.extra)
    elif seq_len is not None:
        bp = plan_from_args(flag_ints(seq_len, "--seq-len"), flag_ints(batch_sizes or "1", "--batch-sizes"))
    else:
        raise ChipswapError(
            "no buckets given; pass --plan plan.json (from chipswap shapes --out) or --seq-len 128"
        )
    from chipswap.compile.backends import get_backend

    get_backend(backend).check_available()  # before building the model: a missing SDK fails fast
    target = target_from_spec(model, task=task, trust_native=trust_native)
    # before the cache dir is touched
    check_model_against_plan(target.config, bp, target.name, seq_flag=plan is None)
    if decode_note:
        sys.stderr.write(decode_note + "\n")
    cache = ArtifactCache(cache_dir)
    cache.ensure_writable()
    report = compile_plan(
        target, bp, backend=backend, cache=cache, atol=atol, retry_failed=retry_failed, progress=not as_json
    )
    if out is not None:
        save_compiled_set(report, out)
    if as_json:
        sys.stdout.write(json.dumps(report.to_json(), indent=1) + "\n")
    else:
        from rich.table import Table

        t = Table(title=f"{report.model} on {report.backend} (cache {report.cache_dir})")
        for col in ("batch", "seq len", "key", "status", "compile s", "max abs diff", f"<= {atol:g}", "size"):
            t.add_column(col, justify="right" if col not in ("key", "status") else "left")
        for b in report.buckets:
            t.add_row(
                str(b.batch),
                str(b.seq),
                b.key[:12],
                "cached" if b.cached else "compiled",
                f"{b.compile_s:.1f}",
                f"{b.max_abs_diff:.2e}",
                "ok" if b.ok else "FAIL",
                f"{b.size_bytes / 2**20:.1f} MiB",
            )
        from chipswap.cli.common import console, print_table

        con = console()
        print_table(con, t)
        if out is not None:
            con.print(f"compiled set written to {out}")
        if not report.ok:
            bad = [f"{b.batch}x{b.seq}" for b in report.buckets if not b.ok]
            con.print(f"buckets over --atol {atol:g}: {', '.join(bad)}")
    return 0 if report.ok else 1


def register(app: typer.Typer) -> None:
    app.command("compile", help=HELP)(_compile)
