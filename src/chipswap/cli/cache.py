"""`chipswap cache ls | verify | prune | rm KEY`: inspect and tidy the compiled-artifact cache.

A cache may be copied from someone else: every name and value shown from an entry's manifest goes through
chipswap.textsafe, and `ls` shows an entry *ready* only when its files are unchanged since their checksums
last matched (else it hashes small entries, or says *unverified*; see chipswap.compile.cache), and *unsigned*
when no valid tag vouches for its manifest (chipswap.compile.signing).
"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path

import typer

from chipswap.cli.common import flag_limit

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
    from chipswap.compile.cache import ArtifactCache

    return ArtifactCache(cache_dir)


def _text(value: object, limit: int = 120) -> str:
    from chipswap.textsafe import one_line

    return "" if value is None else one_line(value, limit)


def _number(value: object) -> float | None:
    import math

    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        return None
    return float(value)


def _row(e, state: str | None = None) -> dict:
    """One entry for display; everything from its entry.json is data: made one-line text or dropped."""
    meta = e.meta if isinstance(e.meta, dict) else {}
    parts = meta.get("parts") if isinstance(meta.get("parts"), dict) else {}
    shape = ""
    if _number(meta.get("batch")) is not None and _number(meta.get("seq_len")) is not None:
        shape = f"{int(meta['batch'])}x{int(meta['seq_len'])}"
    holder = meta.get("holder") if isinstance(meta.get("holder"), dict) else None
    return {
        "key": e.key,
        "state": state or e.state,
        "kind": _text(parts.get("kind", "")),
        "model": _text(meta.get("model", "")),
        "backend": _text(parts.get("backend", "")),
        "shape": shape,
        "size_bytes": e.size,
        "created": _number(meta.get("created")),
        "error": _text(meta.get("error"), 300) or None,
        "holder": {str(k)[:40]: _text(v, 80) for k, v in holder.items()} if holder else None,
    }


@cache_app.command("ls")
def _ls(cache_dir: Path | None = CACHE_DIR, as_json: bool = JSON) -> None:
    """List cache entries: ready, unverified (changed since last checked; run verify), unsigned (refused:
    no valid tag), corrupt, failed, locked."""
    from chipswap.compile.cache import LS_HASH_BUDGET_BYTES

    c = _cache(cache_dir)
    budget = [LS_HASH_BUDGET_BYTES]
    rows = [_row(e, c.quick_state(e, budget)) for e in c.list()]
    if as_json:
        sys.stdout.write(json.dumps({"cache_dir": str(c.root), "entries": rows}, indent=1) + "\n")
        return
    from rich.markup import escape
    from rich.table import Table

    t = Table(title=f"chipswap cache: {escape(str(c.root))}")
    for col in ("key", "state", "model", "backend", "shape", "size", "age"):
        t.add_column(col, justify="right" if col in ("size", "age") else "left")
    now = time.time()
    for r in rows:
        age = f"{(now - r['created']) / 3600:.1f} h" if r["created"] else ""
        t.add_row(  # text from entry.json is never rich markup
            r["key"][:12],
            r["state"],
            escape(r["model"]),
            escape(r["backend"] or r["kind"]),
            r["shape"],
            f"{r['size_bytes'] / 2**20:.1f} MiB",
            age,
        )
    from chipswap.cli.common import console, print_table

    con = console()
    print_table(con, t)
    total = sum(r["size_bytes"] for r in rows)
    con.print(f"{len(rows)} entries, {total / 2**20:.1f} MiB")


@cache_app.command("verify")
def _verify(
    cache_dir: Path | None = CACHE_DIR,
    discard: bool = typer.Option(
        False, "--discard", help="Remove corrupt entries (they are rebuilt on use)."
    ),
    as_json: bool = JSON,
) -> int:
    """Re-check every entry's signature (the cache key's HMAC over its manifest) and every ready entry's
    checksums. Exit 1 when an unsigned or corrupt entry is found."""
    from chipswap.compile.signing import refusal

    c = _cache(cache_dir)
    bad: dict[str, list[str]] = {}
    unsigned: dict[str, str] = {}
    checked = 0
    for e in c.list():
        if e.state in ("ready", "corrupt", "failed"):
            checked += 1
            why = c.signature_problem(e)  # no key at all: one line naming it, exit 2
            if why:
                unsigned[e.key] = why
            elif e.state != "failed" and (problems := c.verify_entry(e)):
                bad[e.key] = problems
    if discard:
        for key in [*unsigned, *bad]:
            c.remove(key)
    gone = " (discarded)" if discard else ""
    if as_json:
        doc = {"checked": checked, "corrupt": bad, "unsigned": unsigned, "discarded": discard}
        sys.stdout.write(json.dumps(doc, indent=1) + "\n")
    else:
        for key, why in unsigned.items():
            typer.echo(f"unsigned {refusal(key, str(c.root), why)}{gone}")
        for key, problems in bad.items():
            typer.echo(f"corrupt {key}: {'; '.join(problems)}{gone}")
        typer.echo(f"checked {checked} entries, {len(unsigned)} unsigned, {len(bad)} corrupt")
    return 1 if (bad or unsigned) and not discard else 0


def _error(msg: str):
    from chipswap.errors import ChipswapError

    return ChipswapError(msg)


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
    flag_limit("--older-than", older_than, "DAYS, e.g. --older-than 30")
    flag_limit("--max-size", max_size, "GiB, e.g. --max-size 20")
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
