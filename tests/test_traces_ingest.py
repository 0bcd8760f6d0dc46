"""Trace ingestion through DuckDB: every format, folders, globs, compression, only the needed columns, and
one-line errors naming file, row and column for every kind of bad input."""

from __future__ import annotations

import csv
import gzip
import json

import duckdb
import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from chipswap import shapes as B
from chipswap.errors import ChipswapError
from chipswap.traffic import aggregate_trace, read_histogram, read_trace

RNG = np.random.default_rng(7)
N = 400
PROMPT = RNG.integers(1, 3000, N)
OUTPUT = RNG.integers(0, 300, N)
TIMES = np.cumsum(RNG.exponential(0.5, N))
COLS = ("TIMESTAMP", "ContextTokens", "GeneratedTokens")


def _rows(lo: int = 0, hi: int = N) -> list[list]:
    return [[float(TIMES[i]), int(PROMPT[i]), int(OUTPUT[i])] for i in range(lo, hi)]


def _csv(path, rows, header=COLS, delimiter=","):
    opener = gzip.open if str(path).endswith(".gz") else open
    with opener(path, "wt", newline="") as fh:
        w = csv.writer(fh, delimiter=delimiter)
        w.writerow(header)
        w.writerows(rows)
    return path


def _jsonl(path, rows, header=COLS):
    path.write_text("".join(json.dumps(dict(zip(header, r, strict=True))) + "\n" for r in rows))
    return path


def _parquet(path, rows, header=COLS):
    pq.write_table(pa.table({h: [r[i] for r in rows] for i, h in enumerate(header)}), path)
    return path


def _expected(mode: str) -> tuple[B.Histogram, B.Histogram | None]:
    prompt = B.histogram_from_lengths(PROMPT)
    return prompt, (B.decode_histogram(PROMPT, OUTPUT) if mode == "llm" else None)


def _same(h, mode: str) -> None:
    prompt, decode = _expected(mode)
    assert h.requests == N
    assert h.prompt.lengths.tolist() == prompt.lengths.tolist()
    assert h.prompt.counts.tolist() == prompt.counts.tolist()
    if decode is not None:
        d = h.decode_histogram(h.prompt.max_length, "reject")
        assert d.lengths.tolist() == decode.lengths.tolist() and d.counts.tolist() == decode.counts.tolist()


def test_every_format_and_compression_gives_the_same_histograms(tmp_path):
    files = [
        _csv(tmp_path / "t.csv", _rows()),
        _csv(tmp_path / "t.tsv", _rows(), delimiter="\t"),
        _csv(tmp_path / "t.csv.gz", _rows()),
        _jsonl(tmp_path / "t.jsonl", _rows()),
        _parquet(tmp_path / "t.parquet", _rows()),
    ]
    (tmp_path / "t.json").write_text(json.dumps([dict(zip(COLS, r, strict=True)) for r in _rows()]))
    files.append(tmp_path / "t.json")
    zst = tmp_path / "t.jsonl.zst"
    duckdb.sql(f"COPY (SELECT * FROM read_json('{files[3]}')) TO '{zst}' (FORMAT json, COMPRESSION zstd)")
    files.append(zst)
    for f in files:
        _same(aggregate_trace(f, mode="llm"), "llm")
    assert read_trace(files[2]).prompt_tokens.tolist() == PROMPT.tolist()


def test_folder_and_glob_read_every_part(tmp_path):
    data = tmp_path / "dataset"
    (data / "day=2").mkdir(parents=True)
    _parquet(data / "part-0.parquet", _rows(0, 150))
    _parquet(data / "day=2" / "part-1.parquet", _rows(150, N))
    (data / "_SUCCESS").write_text("")
    (data / ".part-0.parquet.crc").write_text("junk")
    _same(aggregate_trace(data, mode="llm"), "llm")
    _csv(tmp_path / "a-1.csv", _rows(0, 100))
    _csv(tmp_path / "a-2.csv", _rows(100, N), header=("GeneratedTokens", "TIMESTAMP", "ContextTokens"))
    # second file has the columns in another order: matched by name
    (tmp_path / "a-2.csv").write_text(
        "GeneratedTokens,TIMESTAMP,ContextTokens\n"
        + "".join(f"{r[2]},{r[0]},{r[1]}\n" for r in _rows(100, N))
    )
    _same(aggregate_trace(str(tmp_path / "a-*.csv"), mode="llm"), "llm")


def test_only_the_columns_the_mode_needs_are_read(tmp_path):
    # garbage in the time and output columns does not matter to encoder mode (it never reads them)
    rows = [["yesterday", 10, "lots"], ["", 20, -3]]
    p = _csv(tmp_path / "t.csv", rows)
    h = aggregate_trace(p, mode="encoder")
    assert h.prompt.lengths.tolist() == [10, 20] and h.columns == {"prompt_tokens": "ContextTokens"}
    with pytest.raises(ChipswapError, match="row 1, column GeneratedTokens: 'lots' is not a token count"):
        aggregate_trace(p, mode="llm")


def test_an_explicit_column_wins_over_auto_detection(tmp_path):
    p = _csv(tmp_path / "t.csv", _rows())
    h = aggregate_trace(p, mode="encoder", columns={"prompt_tokens": "GeneratedTokens"})
    assert h.columns["prompt_tokens"] == "GeneratedTokens"
    # llm mode: the output column is auto-detected among the columns that are left
    with pytest.raises(ChipswapError, match="no output column"):
        aggregate_trace(
            p, mode="llm", columns={"prompt_tokens": "GeneratedTokens", "timestamp": "ContextTokens"}
        )


def test_arrival_times_are_read_when_asked(tmp_path):
    h = aggregate_trace(_parquet(tmp_path / "t.parquet", _rows()), mode="encoder", times=True)
    assert h.duration_s == pytest.approx(TIMES[-1] - TIMES[0])
    assert h.arrival_rate_rps == pytest.approx((N - 1) / (TIMES[-1] - TIMES[0]))
    iso = _csv(tmp_path / "iso.csv", [["2023-11-16 18:17:03.9799600", 5, 1], ["2023-11-16T18:17:05Z", 6, 1]])
    assert aggregate_trace(iso, mode="encoder", times=True).duration_s == pytest.approx(1.02004)


@pytest.mark.parametrize(
    ("rows", "match"),
    [
        ([[0, 12, 3], [1, -4, 3]], r"row 2, column ContextTokens: '-4' is not positive"),
        ([[0, 12, 3], [1, 12.5, 3]], r"row 2, column ContextTokens: '12.5' is not a whole number"),
        ([[0, 12, 3], [1, "", 3]], r"row 2, column ContextTokens: an empty value"),
        ([[0, 12, 3], [1, "true", 3]], r"row 2, column ContextTokens: 'true' is a boolean"),
        ([[0, 12, 3], [1, 12, "x"]], r"row 2, column GeneratedTokens: 'x' is not a token count"),
        (
            [[0, 12, 3], [1, 2_000_000_000, 3]],
            r"ContextTokens: '2000000000' exceeds .* limit of",
        ),
        (
            [[0, 12, 3], [1, "1e20", 3]],
            r"ContextTokens: '1e\+?20' exceeds .* limit of 2,097,152",
        ),
        ([[0, 12, 3], [1, 10**30, 3]], r"row 2, column ContextTokens: '1(0{30}|\.0e\+30)' exceeds"),
        ([[0, 12, 3], [1, 2_000_000, 200_000]], r"row 2, columns ContextTokens \+ GeneratedTokens"),
        ([[0, 12, 3], ["soon", 12, 3]], r"row 2, column TIMESTAMP: 'soon' is not a timestamp"),
    ],
)
def test_bad_values_name_file_row_and_column(tmp_path, rows, match):
    p = _csv(tmp_path / "bad.csv", rows)
    with pytest.raises(ChipswapError, match=match) as exc:
        aggregate_trace(p, mode="llm", times=True)
    assert str(p) in str(exc.value) and "\n" not in str(exc.value)


def test_a_bad_value_after_the_engines_type_guess_is_still_named(tmp_path):
    rows = [[i, 5 + i % 7, 1] for i in range(30_000)] + [[30_000, "abc", 1]]
    p = _csv(tmp_path / "late.csv", rows)
    with pytest.raises(ChipswapError, match="row 30001, column ContextTokens: 'abc' is not a token count"):
        aggregate_trace(p, mode="encoder")


def test_bad_typed_values_in_parquet_and_json(tmp_path):
    cases = [
        ({"ContextTokens": [True, False]}, "t1.parquet", "row 1, column ContextTokens: 'true' is a boolean"),
        (
            {"ContextTokens": [5, 9_000_000_000_000_000_000]},
            "t2.parquet",
            "row 2, column ContextTokens: .* exceeds",
        ),
        (
            {"ContextTokens": [5.0, 0.5]},
            "t3.parquet",
            "row 2, column ContextTokens: '0.5' is not a whole number",
        ),
        ({"ContextTokens": [5, -1]}, "t4.parquet", "row 2, column ContextTokens: '-1' is not positive"),
    ]
    for cols, name, match in cases:
        path = tmp_path / name
        pq.write_table(pa.table(cols), path)
        with pytest.raises(ChipswapError, match=match):
            aggregate_trace(path, mode="encoder")
    j = tmp_path / "t.jsonl"
    j.write_text('{"prompt_tokens": 3}\n{"prompt_tokens": {"n": 4}}\n')
    with pytest.raises(ChipswapError, match="row 2, column prompt_tokens: .* is not a token count"):
        aggregate_trace(j, mode="encoder")
    j.write_text('{"prompt_tokens": 3}\n{"prompt_tokens": false}\n')
    with pytest.raises(ChipswapError, match="row 2, column prompt_tokens: 'false' is a boolean"):
        aggregate_trace(j, mode="encoder")


def test_multi_file_errors_name_the_file(tmp_path):
    d = tmp_path / "parts"
    d.mkdir()
    _csv(d / "a.csv", _rows(0, 10))
    _csv(d / "b.csv", [*_rows(10, 12), [9.0, -5, 1]])
    with pytest.raises(ChipswapError, match=r"b\.csv: row 3, column ContextTokens: '-5' is not positive"):
        aggregate_trace(d, mode="llm")
    (d / "b.csv").unlink()
    _csv(d / "c.csv", [[1.0, 5]], header=("TIMESTAMP", "GeneratedTokens"))
    with pytest.raises(ChipswapError, match=r"c\.csv: no column 'ContextTokens', which other files"):
        aggregate_trace(d, mode="encoder")


@pytest.mark.parametrize(
    ("name", "content", "match"),
    [
        (
            "ragged.csv",
            "ContextTokens,GeneratedTokens\n3,4\n5\n",
            r"row 2 \(line 3\) has 1 fields, the header has 2",
        ),
        ("bad.jsonl", '{"prompt_tokens": 3}\n{"prompt_tokens": 4}\nnot json\n', "line 3 is not JSON"),
        ("list.jsonl", '{"prompt_tokens": 3}\n[4]\n', "line 2 is not a JSON object"),
        ("latin.csv", b"ContextTokens,name\n3,caf\xe9\n", "not UTF-8"),
        ("fake.parquet", "not parquet at all", "not a readable Parquet file"),
    ],
)
def test_malformed_files_are_one_line_errors(tmp_path, name, content, match):
    p = tmp_path / name
    p.write_bytes(content if isinstance(content, bytes) else content.encode())
    with pytest.raises(ChipswapError, match=match) as exc:
        aggregate_trace(p, mode="encoder")
    assert "\n" not in str(exc.value)


def test_bad_sources(tmp_path):
    with pytest.raises(ChipswapError, match="trace file not found"):
        aggregate_trace(tmp_path / "missing.csv")
    with pytest.raises(ChipswapError, match="matches no files"):
        aggregate_trace(str(tmp_path / "nothing-*.parquet"))
    (tmp_path / "empty").mkdir()
    with pytest.raises(ChipswapError, match="holds no .csv"):
        aggregate_trace(tmp_path / "empty")
    mixed = tmp_path / "mixed"
    mixed.mkdir()
    _csv(mixed / "a.csv", _rows(0, 3))
    _parquet(mixed / "b.parquet", _rows(3, 6))
    with pytest.raises(ChipswapError, match="mixes formats: .*a.csv is CSV and .*b.parquet is Parquet"):
        aggregate_trace(mixed)
    (tmp_path / "zero.csv").write_text("")
    with pytest.raises(ChipswapError, match="empty"):
        aggregate_trace(tmp_path / "zero.csv")
    for mode in ("encoder", "llm"):  # llm mode on a text file takes the streamed path
        with pytest.raises(ChipswapError, match="empty"):
            aggregate_trace(_csv(tmp_path / "header.csv", []), mode=mode)
    (tmp_path / "t.xlsx").write_text("x")
    with pytest.raises(ChipswapError, match="cannot tell the format"):
        aggregate_trace(tmp_path / "t.xlsx")
    (tmp_path / "t.parquet.gz").write_bytes(gzip.compress(b"x"))
    with pytest.raises(ChipswapError, match="Parquet compresses inside the file"):
        aggregate_trace(tmp_path / "t.parquet.gz")
    with pytest.raises(ChipswapError, match="mode 'gpu' is unknown"):
        aggregate_trace(_csv(tmp_path / "ok.csv", _rows(0, 3)), mode="gpu")


def test_histogram_counts_are_validated(tmp_path):
    h = _csv(tmp_path / "h.csv", [[10, 3], [20, -2]], header=("length", "count"))
    with pytest.raises(ChipswapError, match=r"row 2, column count: '-2' is not >= 0"):
        read_histogram(h, mode="encoder")
    h = _csv(tmp_path / "h2.csv", [[10, 3], [20, 1.5]], header=("length", "count"))
    with pytest.raises(ChipswapError, match="row 2, column count: '1.5' is not a whole number"):
        read_histogram(h, mode="encoder")
    h = _csv(tmp_path / "h3.csv", [[10, 0], [20, 0]], header=("length", "count"))
    with pytest.raises(ChipswapError, match="empty .* with a count above 0"):
        read_histogram(h, mode="encoder")
    h = _csv(tmp_path / "h4.csv", [[10, 3]], header=("length", "requests_seen"))
    with pytest.raises(ChipswapError, match="no count column found .* --count-col"):
        read_histogram(h, mode="encoder")


def test_progress_is_reported_while_the_engine_scans(tmp_path):
    seen: list[float] = []
    h = aggregate_trace(_parquet(tmp_path / "t.parquet", _rows()), mode="llm", progress=seen.append)
    assert h.requests == N and seen and seen[-1] == 1.0 and all(0 <= x <= 1 for x in seen)


def test_parquet_statistics_prove_validity_only_when_they_can(tmp_path, monkeypatch):
    from chipswap.traffic import aggregate as A

    seen: list[bool] = []
    real = A._proven_valid
    monkeypatch.setattr(A, "_proven_valid", lambda con, scan: seen.append(real(con, scan)) or seen[-1])
    good = _parquet(tmp_path / "good.parquet", _rows())
    _same(aggregate_trace(good, mode="llm"), "llm")
    bad = _parquet(tmp_path / "bad.parquet", [*_rows(0, 5), [9.0, 2_000_000, 200_000]])
    with pytest.raises(ChipswapError, match=r"row 6, columns ContextTokens \+ GeneratedTokens"):
        aggregate_trace(bad, mode="llm")
    _same(aggregate_trace(_csv(tmp_path / "t.csv", _rows()), mode="llm"), "llm")
    assert seen == [True, False, False]  # statistics: clean file, out-of-bound sum, no statistics in CSV
