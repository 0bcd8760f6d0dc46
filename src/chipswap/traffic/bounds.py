"""Bounds on what a trace file may expand to, checked before the engine reads it (issue 19).

* Compression bombs: a gzip file is decompressed for its first ``SAMPLE_BYTES`` of output; if that output is
  more than ``MAX_EXPANSION`` times the compressed bytes it took, or the whole file projects past
  ``MAX_DECOMPRESSED_BYTES`` at that ratio, it is refused (a real CSV/JSONL trace compresses 3-20x; a 5 MB
  file that expands to 5 GiB is ~1000x). A zstd file is judged by the content size its frame header declares
  (``zstd`` writes it by default).
* Binary or sparse files: NUL bytes in the first ``SAMPLE_BYTES`` of a (decompressed) text trace mean it is
  not a text trace (a sparse file is all NUL bytes) and are refused before any line is read.
* Long rows and fields (issue 32): every line of a CSV/TSV/JSONL trace (plain or gzip) is at most
  ``MAX_ROW_BYTES`` and every field (a run of bytes without a delimiter or line break) at most
  ``MAX_FIELD_BYTES``, checked over the whole file before the engine parses a value (``check_lengths``:
  backward byte searches from each run start, linear and on ordinary data mostly sublinear). The error
  names the line, the data row and the value's first characters. Of a gzip file the first
  ``GZIP_CHECK_BYTES`` decompressed are checked; a zstd file is left to the reader's own line limit (no zstd
  decoder in the standard library); past those, the engine's work stays linear (see GZIP_CHECK_BYTES).
* Long lines: readers here never hold more than ``MAX_LINE_BYTES`` of one line (``bounded_lines``).

Pure file reads of the named files only; no engine, no writes.
"""

from __future__ import annotations

import os
import zlib
from collections.abc import Iterator
from typing import Any

from chipswap.errors import ChipswapError
from chipswap.textsafe import one_line

MAX_EXPANSION = 200  # decompressed / compressed bytes; above this a file is treated as a compression bomb
MAX_DECOMPRESSED_BYTES = 64 << 30  # one trace file, decompressed (projected from the sample's ratio)
SAMPLE_BYTES = 4 << 20  # decompressed bytes looked at per file (~20 ms of gzip)
MAX_LINE_BYTES = 16 << 20  # one line (a longer line is itself the error)
MAX_ROW_BYTES = 2 << 20  # one CSV/TSV/JSONL line (the engine's own CSV default, max_line_size, is the same)
MAX_FIELD_BYTES = 256 << 10  # one field: a run of bytes without a delimiter or a line break
BLOCK_BYTES = 8 << 20  # read and searched at a time
# of a gzip trace, the decompressed bytes the length check reads (decompressing is the check's whole cost:
# 2.1 s for 85 MB at load 6 on 2 cores); past them the engine's own line limit (2 MiB), the BIGNUM-free type
# guess and checks.MAX_VALUE_CHARS keep the work per byte linear, and the value's own error names its row
GZIP_CHECK_BYTES = 64 << 20
# bytes that end a field, per format (a JSON value also ends at : and brackets)
FIELD_ENDS = {"csv": b",\r\n", "tsv": b"\t\r\n", "jsonl": b",:{}[]\r\n", "json": b",:{}[]\r\n"}
_ZSTD_MAGIC = b"\x28\xb5\x2f\xfd"


def _refuse_bomb(file: str, ratio: float, how: str) -> ChipswapError:
    return ChipswapError(
        f"{one_line(file)}: expands {ratio:,.0f}x when decompressed ({how}), over the limit of "
        f"{MAX_EXPANSION}x for a trace; this is a compression bomb or not a trace: decompress it yourself "
        "and check it"
    )


def _gzip_sample(file: str) -> tuple[bytes, int]:
    """(first decompressed bytes, compressed bytes consumed for them)."""
    raw_size = os.path.getsize(file)
    out = bytearray()
    used = 0
    d = zlib.decompressobj(16 + zlib.MAX_WBITS)
    with open(file, "rb") as fh:
        while len(out) < SAMPLE_BYTES:
            chunk = fh.read(64 << 10)
            if not chunk:
                break
            used += len(chunk)
            try:
                out += d.decompress(chunk, SAMPLE_BYTES - len(out))
                while d.unconsumed_tail and len(out) < SAMPLE_BYTES:
                    out += d.decompress(d.unconsumed_tail, SAMPLE_BYTES - len(out))
            except zlib.error:
                break  # the engine names a damaged file
            if len(out) >= SAMPLE_BYTES:
                used -= len(d.unconsumed_tail)
                break
            if d.eof:
                if d.unused_data:  # a second gzip member: keep going with a fresh decompressor
                    rest = d.unused_data
                    d = zlib.decompressobj(16 + zlib.MAX_WBITS)
                    out += d.decompress(rest, SAMPLE_BYTES - len(out))
                else:
                    break
    return bytes(out[:SAMPLE_BYTES]), max(min(used, raw_size), 1)


def _zstd_declared_size(file: str) -> int | None:
    """The Frame_Content_Size of the first zstd frame, when the header carries it."""
    with open(file, "rb") as fh:
        head = fh.read(18)
    if len(head) < 6 or head[:4] != _ZSTD_MAGIC:
        return None
    fhd = head[4]
    fcs_flag = fhd >> 6
    single = (fhd >> 5) & 1
    did_flag = fhd & 3
    pos = 5 + (0 if single else 1) + (0, 1, 2, 4)[did_flag]
    size = (1 if single else 0, 2, 4, 8)[fcs_flag]
    if size == 0 or len(head) < pos + size:
        return None
    value = int.from_bytes(head[pos : pos + size], "little")
    return value + 256 if size == 2 else value


def check_trace_file(file: str, fmt: str) -> None:
    """Refuse a compression bomb or a binary/sparse text trace before the engine reads it."""
    low = file.lower()
    size = os.path.getsize(file)
    if low.endswith((".gz", ".gzip")):
        sample, used = _gzip_sample(file)
        if len(sample) / used > MAX_EXPANSION and len(sample) >= SAMPLE_BYTES:
            raise _refuse_bomb(file, len(sample) / used, f"its first {len(sample) >> 20} MiB")
        projected = size * len(sample) / used
        if projected > MAX_DECOMPRESSED_BYTES:
            raise ChipswapError(
                f"{one_line(file)}: would expand to about {projected / (1 << 30):,.0f} GiB, over the limit "
                f"of {MAX_DECOMPRESSED_BYTES >> 30} GiB for one trace file; split it into smaller files"
            )
    elif low.endswith((".zst", ".zstd")):
        declared = _zstd_declared_size(file)
        if declared is not None and size and declared / size > MAX_EXPANSION and declared > (1 << 20):
            raise _refuse_bomb(file, declared / size, "the size its header declares")
        if declared is not None and declared > MAX_DECOMPRESSED_BYTES:
            raise _refuse_bomb(file, declared / max(size, 1), "the size its header declares")
        return  # no zstd decoder in the standard library: the NUL check below needs plain bytes
    else:
        if fmt == "parquet":
            return
        with open(file, "rb") as fh:
            sample = fh.read(min(SAMPLE_BYTES, 1 << 20))
    nul = sample.find(b"\x00")
    if fmt != "parquet" and nul >= 0:
        raise ChipswapError(
            f"{one_line(file)}: holds NUL bytes (offset {nul:,}); a text trace has none (a binary or sparse "
            "file?); give a CSV/TSV/JSONL file"
        )


def _first_run_over(data: bytes, ends: bytes, limit: int) -> int | None:
    """Offset of the first run of more than ``limit`` bytes of ``data`` holding none of ``ends`` (pure), or
    None. A run still open at the end of ``data`` is not judged (it goes on in the next block).

    Linear and mostly sublinear: from a run start it looks for the last end byte in the next ``limit + 1``
    bytes (memrchr); none means a longer run, else the search restarts after it. Each byte is looked at at
    most twice per end byte, and ordinary data advances ~``limit`` bytes per step."""
    start, n = 0, len(data)
    while start + limit < n:
        j = max(data.rfind(ends[i : i + 1], start, start + limit + 1) for i in range(len(ends)))
        if j < 0:
            return start
        start = j + 1
    return None


def long_run(data: bytes, fmt: str, *, rows: bool = True) -> tuple[int, int, str] | None:
    """(offset, limit, what) of the first line over MAX_ROW_BYTES or field over MAX_FIELD_BYTES in ``data``
    (pure; linear in len(data)), which starts at a line start; None if there is none. rows=False: only
    fields (a JSON array may be one line)."""
    found = []
    if rows:
        at = _first_run_over(data, b"\n", MAX_ROW_BYTES)
        if at is not None:
            found.append((at, MAX_ROW_BYTES, "line"))
    at = _first_run_over(data, FIELD_ENDS[fmt], MAX_FIELD_BYTES)
    if at is not None:
        found.append((at, MAX_FIELD_BYTES, "field"))
    return min(found) if found else None


def _size(n: int) -> str:
    return f"{n >> 20} MiB" if n >= 1 << 20 else f"{n >> 10} KiB"


def _blocks(file: str, gzip_limit: int | None = None) -> Iterator[bytes]:
    """The file's (decompressed) bytes in blocks of BLOCK_BYTES; of a gzip file at most ``gzip_limit``."""
    import gzip

    if not file.lower().endswith((".gz", ".gzip")):
        with open(file, "rb") as fh:
            yield from iter(lambda: fh.read(BLOCK_BYTES), b"")
        return
    left = gzip_limit if gzip_limit is not None else 1 << 62
    with gzip.open(file, "rb") as fz:
        while left > 0:
            block = fz.read(min(BLOCK_BYTES, left))
            if not block:
                return
            left -= len(block)
            yield block


def _line_at(file: str, offset: int) -> int:
    """The 1-based line of the (decompressed) byte ``offset`` (a second pass, only to word an error)."""
    seen = breaks = 0
    for block in _blocks(file):
        if seen + len(block) > offset:
            return breaks + block.count(b"\n", 0, offset - seen) + 1
        breaks += block.count(b"\n")
        seen += len(block)
    return breaks + 1


def check_lengths(file: str, fmt: str, where: str | None = None) -> None:
    """Refuse a text trace with a line over MAX_ROW_BYTES or a field over MAX_FIELD_BYTES before any value is
    parsed (the engine's type guess on one 1 MiB number was quadratic). One pass; memory: a block and the
    unfinished line (field, for a JSON array) before it.

    Rows are counted as the user sees them: line L of a CSV/TSV is data row L - 1 (the header is line 1), of
    a JSONL file row L; a quoted field with line breaks moves the row, so the line is named too."""
    if fmt not in FIELD_ENDS or file.lower().endswith((".zst", ".zstd")):
        return
    rows = fmt != "json"  # a JSON array may be one line: only its fields are bounded
    cut_at = b"\n" if rows else FIELD_ENDS[fmt]
    carry = b""  # the unfinished line (field) at the end of the block before, within the limit
    consumed = 0  # (decompressed) file offset of ``carry``
    for block in _blocks(file, GZIP_CHECK_BYTES):
        data = carry + block
        hit = long_run(data, fmt, rows=rows)
        if hit is not None:
            at, limit, what = hit
            line = _line_at(file, consumed + at)
            row = f"row {line - 1} (line {line})" if fmt in ("csv", "tsv") else f"row {line} (line {line})"
            start = data[at : at + 24].decode("utf-8", "replace")
            raise ChipswapError(
                f"{one_line(where or file)}: {row if rows else f'line {line}'} holds a {what} longer than "
                f"{_size(limit)}, starting {one_line(start, 40)!r}...; a trace value is a token count, a "
                "request count or a time, never that long: fix or drop that row"
            )
        cut = max(data.rfind(cut_at[i : i + 1]) for i in range(len(cut_at))) + 1
        consumed += cut
        carry = data[cut:]


def bounded_lines(fh: Any, where: str) -> Iterator[str]:
    """Lines of a text file, none longer than MAX_LINE_BYTES (a longer one is one error line, not memory)."""
    for line in iter(lambda: fh.readline(MAX_LINE_BYTES), ""):
        if len(line) >= MAX_LINE_BYTES and not line.endswith("\n"):
            raise ChipswapError(f"{where}: a line is longer than {MAX_LINE_BYTES >> 20} MiB; fix the file")
        yield line


__all__ = [
    "MAX_EXPANSION",
    "MAX_FIELD_BYTES",
    "MAX_LINE_BYTES",
    "MAX_ROW_BYTES",
    "bounded_lines",
    "check_lengths",
    "check_trace_file",
    "long_run",
]
