"""`chipswap cache ls | verify | prune | rm KEY`: inspect and tidy the compiled-artifact cache."""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path

import typer

cache_app = typer.Typer(
    help=(
        "The compiled-artifact cache: one entry per (model graph, weights, input shapes, backend + version, "
        "flags, chipswap version). Entries are ready, failed (log kept, not retried unless asked) or locked "
        "(being compiled now)."
    ),
    no_args_is_help=True,
)

CACHE_DIR = typer.Option(
    None, "--cache-dir", help="Cache folder (default: $CHIPSWAP_CACHE_DIR or the user cache dir)."
)
JSON = typer.Option(False, "--json", help="Machine-readable output.")


def _cache(cache_dir: Path | None):
    from chipswap.cache import ArtifactCache

    return ArtifactCache(cache_dir)


def _row(e) -> dict:
    parts = e.meta.get("parts", {})
    shape = ""
    if "batch" in e.meta:
        shape = f"{e.meta['batch']}x{e.meta['seq_len']}"
    return {
        "key": e.key,
        "state": e.state,
        "kind": parts.get("kind", ""),
        "model": e.meta.get("model", ""),
        "backend": parts.get("backend", ""),
        "shape": shape,
        "size_bytes": e.size,
        "created": e.meta.get("created"),
        "error": e.meta.get("error"),
        "holder": e.meta.get("holder"),
    }


@cache_app.command("ls")
def _ls(cache_dir: Path | None = CACHE_DIR, as_json: bool = JSON) -> None:
    """List cache entries."""
    c = _cache(cache_dir)
    rows = [_row(e) for e in c.list()]
    if as_json:
        sys.stdout.write(json.dumps({"cache_dir": str(c.root), "entries": rows}, indent=1) + "\n")
        return
    from rich.console import Console
    from rich.table import Table

    t = Table(title=f"chipswap cache: {c.root}")
    for col in ("key", "state", "model", "backend", "shape", "size", "age"):
        t.add_column(col, justify="right" if col in ("size", "age") else "left")
    now = time.time()
    for r in rows:
        age = f"{(now - r['created']) / 3600:.1f} h" if r["created"] else ""
        t.add_row(
            r["key"][:12],
            r["state"],
            r["model"],
            r["backend"] or r["kind"],
            r["shape"],
            f"{r['size_bytes'] / 2**20:.1f} MiB",
            age,
        )
    Console(width=None if sys.stdout.isatty() else 120).print(t)
    total = sum(r["size_bytes"] for r in rows)
    Console(width=None if sys.stdout.isatty() else 120).print(f"{len(rows)} entries, {total / 2**20:.1f} MiB")


@cache_app.command("verify")
def _verify(
    cache_dir: Path | None = CACHE_DIR,
    discard: bool = typer.Option(
        False, "--discard", help="Remove corrupt entries (they are rebuilt on use)."
    ),
    as_json: bool = JSON,
) -> int:
    """Re-check every ready entry's checksums. Exit 1 when a corrupt entry is found."""
    c = _cache(cache_dir)
    bad: dict[str, list[str]] = {}
    checked = 0
    for e in c.list():
        if e.state in ("ready", "corrupt"):
            checked += 1
            problems = c.verify_entry(e)
            if problems:
                bad[e.key] = problems
    if discard:
        for key in bad:
            c.remove(key)
    if as_json:
        doc = {"checked": checked, "corrupt": bad, "discarded": discard}
        sys.stdout.write(json.dumps(doc, indent=1) + "\n")
    else:
        for key, problems in bad.items():
            typer.echo(f"corrupt {key[:12]}: {'; '.join(problems)}{' (discarded)' if discard else ''}")
        typer.echo(f"checked {checked} entries, {len(bad)} corrupt")
    return 1 if bad and not discard else 0


def _error(msg: str):
    from chipswap.errors import ChipswapError

    return ChipswapError(msg)


def _check_limit(flag: str, value: float | None, example: str) -> None:
    """Reject negative, NaN and infinite limits before the cache is touched."""
    import math

    if value is None:
        return
    if math.isnan(value) or math.isinf(value) or value < 0:
        raise _error(f"{flag} must be a finite number >= 0, got {value!r}; pass {example}")


@cache_app.command("prune")
def _prune(
    cache_dir: Path | None = CACHE_DIR,
    older_than: float | None = typer.Option(
        None, "--older-than", help="Also remove entries unused for DAYS."
    ),
    max_size: float | None = typer.Option(
        None, "--max-size", help="Also remove least recently used entries until the cache fits in GiB."
    ),
    keep_failed: bool = typer.Option(False, "--keep-failed", help="Keep failed entries (and their logs)."),
    dry_run: bool = typer.Option(False, "--dry-run", help="Only list what would be removed."),
    as_json: bool = JSON,
) -> None:
    """Remove failed and corrupt entries, leftovers of killed compiles, and optionally old entries."""
    _check_limit("--older-than", older_than, "DAYS, e.g. --older-than 30")
    _check_limit("--max-size", max_size, "GiB, e.g. --max-size 20")
    if max_size is not None and max_size * 2**30 > 2**62:
        raise _error(f"--max-size {max_size:g} GiB is too large; pass a size in GiB, e.g. --max-size 20")
    c = _cache(cache_dir)
    removed = c.prune(
        failed=not keep_failed,
        older_than_s=older_than * 86400 if older_than is not None else None,
        max_bytes=int(max_size * 2**30) if max_size is not None else None,
        dry_run=dry_run,
    )
    if as_json:
        sys.stdout.write(
            json.dumps({"removed": [{"key": k, "why": w} for k, w in removed], "dry_run": dry_run}, indent=1)
            + "\n"
        )
        return
    for k, why in removed:
        typer.echo(f"{'would remove' if dry_run else 'removed'} {k[:12]} ({why})")
    typer.echo(f"{len(removed)} entries {'would be ' if dry_run else ''}removed")


@cache_app.command("rm")
def _rm(
    key: str = typer.Argument(..., help="Cache key or a unique prefix of it (see chipswap cache ls)."),
    cache_dir: Path | None = CACHE_DIR,
    as_json: bool = JSON,
) -> None:
    """Remove one entry."""
    c = _cache(cache_dir)
    removed = c.remove(key)
    if as_json:
        sys.stdout.write(json.dumps({"cache_dir": str(c.root), "removed": removed}, indent=1) + "\n")
        return
    typer.echo(f"removed {removed}")


def register(app: typer.Typer) -> None:
    app.add_typer(cache_app, name="cache")
