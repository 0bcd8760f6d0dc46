"""Where a trace comes from, and the one DuckDB connection that reads it.

A source is one file, a folder of files (searched recursively, Spark/Hive `_SUCCESS` and hidden files skipped)
or a
glob (`logs/2024-*/part-*.parquet`), all of one format: CSV/TSV, JSONL (or a JSON array), Parquet; CSV and
JSON
may be gzip or zstd compressed (`.csv.gz`, `.jsonl.zst`). This module resolves the files, reads their header
to
map columns to fields, and opens a sandboxed DuckDB connection: it may read only those files (external access
off,
configuration locked, no extension downloads), with a memory cap and its own spill folder that is removed
after.

It is the I/O edge for traces. It may not plan, and it never executes anything from the data: file and column
names reach SQL only as bound parameters or quoted identifiers.
"""

from __future__ import annotations

import contextvars
import glob as globlib
import os
import tempfile
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from typing import Any

from chipswap.errors import ChipswapError, closest
from chipswap.textsafe import one_line

# Logical field -> names recognised without flags (compared case-insensitively, first match wins).
COLUMN_ALIASES: dict[str, tuple[str, ...]] = {
    "timestamp": ("TIMESTAMP", "timestamp", "time", "arrival_time", "arrival_timestamp", "ts", "created_at"),
    "prompt_tokens": (
        "ContextTokens",
        "prompt_tokens",
        "input_tokens",
        "num_prompt_tokens",
        "prompt_len",
        "prompt_length",
        "input_length",
        "input_len",
        "context_tokens",
        "request_tokens",
        "seq_len",
        "sequence_length",
        "length",
        "tokens",
        "num_tokens",
    ),
    "output_tokens": (
        "GeneratedTokens",
        "output_tokens",
        "completion_tokens",
        "generated_tokens",
        "num_output_tokens",
        "output_len",
        "output_length",
        "response_tokens",
    ),
    # pre-aggregated histograms only: how many requests a row stands for
    "count": ("count", "requests", "num_requests", "n", "cnt", "frequency", "freq", "weight"),
}
FIELDS = tuple(COLUMN_ALIASES)
FIELD_FLAGS = {
    "timestamp": "--time-col",
    "prompt_tokens": "--prompt-col",
    "output_tokens": "--output-col",
    "count": "--count-col",
}
# File suffix -> format; compression suffixes may follow (CSV and JSON only).
FORMATS: dict[str, str] = {
    ".csv": "csv",
    ".tsv": "tsv",
    ".jsonl": "jsonl",
    ".ndjson": "jsonl",
    ".json": "json",
    ".parquet": "parquet",
    ".pq": "parquet",
}
FORMAT_NAMES = {"csv": "CSV", "tsv": "TSV", "jsonl": "JSONL", "json": "JSON", "parquet": "Parquet"}
COMPRESSIONS: dict[str, str] = {".gz": "gzip", ".gzip": "gzip", ".zst": "zstd", ".zstd": "zstd"}
BUNDLED_TRACE = "azure_llm_2023_code.csv"

MAX_FILES = 100_000  # files in one folder or glob
DUCKDB_MEMORY_LIMIT = "256MB"  # the engine spills to its temp folder beyond this
DUCKDB_THREADS = max(1, min(4, os.cpu_count() or 1))
_GLOB_CHARS = set("*?[")
# The types the engine may guess for a CSV column: its default list without BIGNUM, whose parse of one long
# number is quadratic (a 1 MiB number took 173 s) and which no trace value needs (issue 32).
CSV_TYPE_CANDIDATES = (
    "BOOLEAN", "BIGINT", "HUGEINT", "DOUBLE", "TIME", "DATE", "TIMESTAMP", "TIMESTAMPTZ", "VARCHAR",
)  # fmt: skip


def bundled_trace_path() -> Path:
    """Path of the bundled Azure LLM code trace (CC-BY 4.0, Patel et al., Splitwise, ISCA 2024)."""
    return Path(str(resources.files("chipswap.data").joinpath("traces", BUNDLED_TRACE)))


@dataclass(frozen=True)
class TraceSource:
    """Resolved input files. given: what the user passed (for messages); files: absolute paths, in order."""

    given: str
    files: tuple[str, ...]
    fmt: str  # csv | tsv | jsonl | json | parquet

    @property
    def label(self) -> str:
        return one_line(self.given)

    def where(self, file: str | None = None) -> str:
        """How messages name a file: the path as given for one file, else the file inside the folder/glob."""
        if file is None or len(self.files) == 1:
            return self.label
        return one_line(file)


def _format_of(path: str) -> tuple[str | None, str | None]:
    """(format, compression) from a file name's suffixes."""
    name = path.lower()
    comp = None
    for suffix, codec in COMPRESSIONS.items():
        if name.endswith(suffix):
            comp, name = codec, name[: -len(suffix)]
            break
    return FORMATS.get(os.path.splitext(name)[1]), comp


# Follow symlinks that lead out of a trace folder (or glob base)? Off unless the command is told
# (--follow-symlinks): a folder from someone else may link to /etc/shadow (issue 19).
FOLLOW_LINKS: contextvars.ContextVar[bool] = contextvars.ContextVar("chipswap_follow_links", default=False)


def _check_link(root: Path, path: str) -> None:
    """A symlinked trace file must resolve inside ``root`` unless FOLLOW_LINKS is set."""
    if FOLLOW_LINKS.get() or not os.path.islink(path):
        return
    base = os.path.realpath(root)
    target = os.path.realpath(path)
    if os.path.commonpath([base, target]) != base:
        raise ChipswapError(
            f"{one_line(path)} is a symlink to {one_line(target, 120)}, outside the trace folder; chipswap "
            "does not follow it unless you pass --follow-symlinks"
        )


def _walk(root: Path) -> list[str]:
    out: list[str] = []
    for dirpath, dirnames, filenames in os.walk(root):
        dirnames[:] = sorted(d for d in dirnames if not d.startswith((".", "_")))
        for name in sorted(filenames):
            if name.startswith((".", "_")):
                continue  # _SUCCESS, _metadata, .crc files written next to Spark/Hive datasets
            if _format_of(name)[0] is None:
                continue
            _check_link(root, os.path.join(dirpath, name))
            out.append(os.path.join(dirpath, name))
            if len(out) > MAX_FILES:
                raise ChipswapError(
                    f"{one_line(root)}: more than {MAX_FILES:,} trace files in the folder; point at a "
                    "sub-folder or merge the files"
                )
    return out


def resolve_source(path: str | Path, *, fmt: str | None = None, what: str = "trace") -> TraceSource:
    """Resolve a file, folder or glob into a TraceSource (one format, at least one non-empty file)."""
    given = str(path)
    p = Path(given)
    if p.is_dir():
        files = _walk(p)
        if not files:
            raise ChipswapError(
                f"{what} folder {one_line(given)} holds no .csv/.tsv/.jsonl/.json/.parquet files (optionally "
                ".gz/.zst); give a folder of trace files"
            )
    elif p.exists():
        files = [str(p)]
    elif _GLOB_CHARS & set(given):
        files = sorted(f for f in globlib.glob(given, recursive=True) if os.path.isfile(f))
        base = Path(os.path.dirname(given.split("*")[0].split("?")[0].split("[")[0]) or ".")
        for f in files:
            _check_link(base, f)
        if not files:
            raise ChipswapError(f"{what} glob {one_line(given)} matches no files; check the pattern")
        if len(files) > MAX_FILES:
            raise ChipswapError(
                f"{what} glob {one_line(given)} matches {len(files):,} files, more than {MAX_FILES:,}; "
                "narrow it"
            )
    else:
        raise ChipswapError(
            f"{what} file not found: {one_line(given)}; give the path of a CSV, JSONL or "
            "Parquet trace, a folder of them, or a glob"
        )
    kinds: dict[str, str] = {}
    for f in files:
        kind, comp = _format_of(f) if fmt is None else (fmt, _format_of(f)[1])
        if kind is None:
            raise ChipswapError(
                f"cannot tell the format of {one_line(os.path.basename(f))} from its suffix; use .csv, .tsv, "
                ".jsonl, .json or .parquet (optionally .gz/.zst)"
            )
        if kind not in FORMAT_NAMES:
            raise ChipswapError(f"format {kind!r} is unknown; use one of {', '.join(FORMAT_NAMES)}")
        if kind == "parquet" and comp is not None:
            raise ChipswapError(
                f"{one_line(f)}: a Parquet file compressed with {comp} cannot be read; Parquet compresses "
                "inside the file, so write it uncompressed on the outside"
            )
        if _GLOB_CHARS & set(os.path.basename(f)):
            raise ChipswapError(
                f"{one_line(f)}: file names with *, ? or [ are read as patterns by the engine; rename "
                "the file"
            )
        kinds.setdefault(kind, f)
    if len(kinds) > 1:
        (k1, f1), (k2, f2) = list(kinds.items())[:2]
        raise ChipswapError(
            f"{what} {one_line(given)} mixes formats: {one_line(f1)} is {FORMAT_NAMES[k1]} and "
            f"{one_line(f2)} is "
            f"{FORMAT_NAMES[k2]}; give files of one format"
        )
    non_empty = [os.path.abspath(f) for f in files if os.path.getsize(f) > 0]
    if not non_empty:
        raise ChipswapError(
            f"{one_line(given)}: the {what} is empty (no requests); give a {what} with at least one row"
        )
    from chipswap.traffic.bounds import check_lengths, check_trace_file

    for f in non_empty:  # compression bombs, binary/sparse files, huge fields: refused before the engine
        check_trace_file(f, next(iter(kinds)))
        check_lengths(f, next(iter(kinds)), one_line(given) if len(non_empty) == 1 else one_line(f))
    return TraceSource(given=given, files=tuple(non_empty), fmt=next(iter(kinds)))


# ------------------------------------------------------------------------------------------------------------
# The engine connection
# ------------------------------------------------------------------------------------------------------------


@contextmanager
def connect(source: TraceSource, *, ordered: bool = False) -> Iterator[Any]:
    """A DuckDB connection that can read only `source`'s files; removed with its spill folder on exit.

    ordered: keep rows in file order (only for reads that return rows; aggregations leave it off, which lets
    the engine stream with less memory).
    """
    import duckdb

    with tempfile.TemporaryDirectory(prefix="chipswap-duckdb-") as spill:
        con = duckdb.connect(
            config={
                "memory_limit": DUCKDB_MEMORY_LIMIT,
                "threads": DUCKDB_THREADS,
                "preserve_insertion_order": ordered,
                "temp_directory": spill,
                "autoinstall_known_extensions": False,
                "autoload_known_extensions": False,
            }
        )
        try:
            con.execute("SET allowed_paths = ?", [list(source.files)])
            con.execute("SET TimeZone = 'UTC'")
            # the type pushdown turns TRY_CAST on a CSV column into a strict cast inside the reader, which
            # would stop the scan at a bad value instead of letting the validation count it
            con.execute("SET disabled_optimizers = 'type_pushdown'")
            # group keys are bounded by MAX_LENGTH (2^21), so direct-indexed ("perfect") hash tables of up to
            # 22 bits are allowed: about twice as fast as the general hash aggregate on 10 M rows
            con.execute("SET perfect_ht_threshold = 22")
            con.execute("SET enable_progress_bar = true")  # progress is polled, never printed by the engine
            con.execute("SET enable_progress_bar_print = false")
            con.execute("SET enable_external_access = false")
            con.execute("SET lock_configuration = true")
            yield con
        finally:
            con.close()


def sql_string(text: str) -> str:
    """A SQL string literal."""
    return "'" + text.replace("'", "''") + "'"


def ident(name: str) -> str:
    """A quoted SQL identifier (column names come from data files)."""
    return '"' + name.replace('"', '""') + '"'


def relation(
    source: TraceSource,
    files: Sequence[str] | None = None,
    *,
    text_columns: Sequence[str] = (),
    with_filename: bool = False,
) -> tuple[str, list[Any]]:
    """(table function SQL, parameters) reading `files` (default: all) of the source.

    text_columns are read as VARCHAR, so the validation in SQL sees bad values instead of the engine failing
    on
    them. Several files are matched by column name (mixed column order and types are unified).
    """
    fl = list(files if files is not None else source.files)
    opts: list[str] = []
    if len(fl) > 1:
        opts.append("union_by_name = true")
    if with_filename:
        opts.append("filename = '__chipswap_file'")
    if source.fmt in ("csv", "tsv"):
        opts += ["header = true", "delim = " + sql_string("\t" if source.fmt == "tsv" else ",")]
        opts.append("auto_type_candidates = [" + ", ".join(map(sql_string, CSV_TYPE_CANDIDATES)) + "]")
        if text_columns:
            opts.append("types = {" + ", ".join(f"{sql_string(c)}: 'VARCHAR'" for c in text_columns) + "}")
        fn = "read_csv"
    elif source.fmt in ("jsonl", "json"):
        opts.append("format = " + ("'newline_delimited'" if source.fmt == "jsonl" else "'auto'"))
        if text_columns:  # JSON values of any type arrive as their text; validation decides
            opts.append("columns = {" + ", ".join(f"{sql_string(c)}: 'VARCHAR'" for c in text_columns) + "}")
        fn = "read_json"
    else:
        fn = "read_parquet"
    return f"{fn}(?{''.join(', ' + o for o in opts)})", [fl]


# ------------------------------------------------------------------------------------------------------------
# Column mapping
# ------------------------------------------------------------------------------------------------------------


def map_columns(
    source: TraceSource,
    header: Sequence[str],
    explicit: Mapping[str, str] | None,
    *,
    needed: Sequence[str],
    optional: Sequence[str] = (),
    mode: str | None = None,
) -> dict[str, str]:
    """Field -> column. Columns named explicitly win; auto-detection only looks at the columns left over."""
    explicit = dict(explicit or {})
    for key in explicit:
        if key not in FIELDS:
            raise ChipswapError(
                f"unknown trace field {key!r} in the column mapping; fields are {', '.join(FIELDS)}"
            )
    where = source.label
    out: dict[str, str] = {}
    for field, name in explicit.items():
        if field not in needed and field not in optional:
            continue
        if name not in header:
            hint = closest(name, header)
            raise ChipswapError(
                f"{where}: column {one_line(name)!r} (given for {field}) is not in the trace; columns are "
                f"{one_line(', '.join(header), 400)}"
                + (f"; did you mean {one_line(hint[0])!r}?" if hint else "")
            )
        out[field] = name
    taken = set(out.values())
    if len(taken) != len(out):
        raise ChipswapError(
            f"{where}: one column is mapped to two fields ({out}); give each field its own column"
        )
    lower: dict[str, str] = {}
    for h in header:
        lower.setdefault(h.lower(), h)
    for field in [*needed, *optional]:
        if field in out:
            continue
        for alias in COLUMN_ALIASES[field]:
            col = lower.get(alias.lower())
            if col is not None and col not in taken:
                out[field] = col
                taken.add(col)
                break
    for field in needed:
        if field in out:
            continue
        if field == "output_tokens" and mode == "llm":
            raise ChipswapError(
                f"{where}: llm mode needs generated-token counts but the trace has no output column; pass "
                "--output-col COLUMN or use --mode encoder"
            )
        raise ChipswapError(
            f"{where}: no {field} column found among {one_line(', '.join(header), 400) or '(none)'}; name it "
            f"with {FIELD_FLAGS[field]} COLUMN (recognised: {', '.join(COLUMN_ALIASES[field][:4])}, ...)"
        )
    return out


# ------------------------------------------------------------------------------------------------------------
# Naming the malformed line (the engine's messages give no line, or an off-by-one line for JSON)
# ------------------------------------------------------------------------------------------------------------

MAX_LINE_BYTES = 16 << 20  # a longer line is itself the error


def _open_text(file: str) -> Any:
    import gzip
    import io

    if file.lower().endswith((".gz", ".gzip")):
        return io.TextIOWrapper(gzip.open(file, "rb"), encoding="utf-8-sig", newline="")
    return open(file, encoding="utf-8-sig", newline="")  # noqa: SIM115 - closed by the caller's with


def locate_text_error(source: TraceSource) -> ChipswapError | None:
    """Stream CSV/TSV/JSONL files (plain or gzip) and name the first malformed line; None if none is found.

    Only used after the engine failed, so speed matters less than naming the line; memory is one line.
    """
    import csv
    import json

    from chipswap.traffic.bounds import bounded_lines

    if source.fmt not in ("csv", "tsv", "jsonl"):
        return None
    for file in source.files:
        if file.lower().endswith((".zst", ".zstd")):
            continue  # no zstd decoder in the standard library
        where = source.where(file)
        try:
            with _open_text(file) as fh:
                if source.fmt == "jsonl":
                    for lineno, line in enumerate(iter(lambda: fh.readline(MAX_LINE_BYTES), ""), start=1):
                        if len(line) >= MAX_LINE_BYTES:
                            return ChipswapError(
                                f"{where}: line {lineno} is longer than 16 MiB; one object per line"
                            )
                        if not line.strip():
                            continue
                        try:
                            obj = json.loads(line)
                        except json.JSONDecodeError as exc:
                            return ChipswapError(
                                f"{where}: line {lineno} is not JSON ({exc.msg}); one JSON object per line"
                            )
                        if not isinstance(obj, dict):
                            return ChipswapError(
                                f"{where}: line {lineno} is not a JSON object; one object per line"
                            )
                    continue
                reader = csv.reader(bounded_lines(fh, where), delimiter="\t" if source.fmt == "tsv" else ",")
                header = next(reader, None)
                if header is None:
                    continue
                for row in reader:
                    if not row:
                        continue
                    if len(row) != len(header):
                        return ChipswapError(
                            f"{where}: row {reader.line_num - 1} (line {reader.line_num}) has "
                            f"{len(row)} fields, "
                            f"the header has {len(header)}; fix that line"
                        )
        except UnicodeDecodeError as exc:
            return ChipswapError(f"{where}: not UTF-8 text ({exc.reason}); save the file as UTF-8")
        except ChipswapError as exc:  # a line over MAX_LINE_BYTES (bounded_lines)
            return exc
        except (csv.Error, OSError, EOFError) as exc:
            return ChipswapError(f"{where}: cannot be parsed ({one_line(exc, 160)}); fix the file")
    return None
