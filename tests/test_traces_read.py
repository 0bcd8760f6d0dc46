"""Trace readers: formats, Azure schema detection, column mapping, one-line errors naming row/column."""

from __future__ import annotations

import csv
import json

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from chipswap.errors import ChipswapError
from chipswap.traffic import bundled_trace_path, read_trace


def _write_csv(path, header, rows):
    with path.open("w", newline="") as fh:
        w = csv.writer(fh)
        w.writerow(header)
        w.writerows(rows)
    return path


def test_bundled_azure_trace_is_recognised_without_flags():
    path = bundled_trace_path()
    t = read_trace(path)
    assert t.columns == {
        "timestamp": "TIMESTAMP",
        "prompt_tokens": "ContextTokens",
        "output_tokens": "GeneratedTokens",
    }
    with path.open() as fh:
        rows = list(csv.DictReader(fh))
    assert len(t) == len(rows)
    assert t.prompt_tokens.tolist() == [int(r["ContextTokens"]) for r in rows]
    assert t.output_tokens is not None and t.output_tokens.tolist() == [
        int(r["GeneratedTokens"]) for r in rows
    ]
    # seconds since the first request: 18:17:03.9799600 -> 18:17:04.0319600 is 0.052 s
    assert t.timestamps_s[0] == 0.0
    assert t.timestamps_s[1] == pytest.approx(0.052, abs=1e-6)
    assert (path.parent / "README.md").read_text().count("CC-BY 4.0") == 1


def test_csv_with_column_mapping(tmp_path):
    p = _write_csv(tmp_path / "t.csv", ["when", "n_in", "n_out"], [[0.5, 10, 3], [1.5, 20, 0]])
    with pytest.raises(ChipswapError, match="no prompt_tokens column found among when, n_in, n_out"):
        read_trace(p)
    t = read_trace(p, columns={"prompt_tokens": "n_in", "output_tokens": "n_out", "timestamp": "when"})
    assert t.prompt_tokens.tolist() == [10, 20]
    assert t.output_tokens.tolist() == [3, 0]
    assert t.timestamps_s.tolist() == [0.0, 1.0]


def test_jsonl_and_parquet_give_the_same_trace(tmp_path):
    rows = [
        {"timestamp": 3.0, "prompt_tokens": 7, "output_tokens": 2},
        {"timestamp": 4.5, "prompt_tokens": 9, "output_tokens": 5},
    ]
    j = tmp_path / "t.jsonl"
    j.write_text("\n".join(json.dumps(r) for r in rows) + "\n\n")
    q = tmp_path / "t.parquet"
    pq.write_table(pa.table({k: [r[k] for r in rows] for k in rows[0]}), q)
    a, b = read_trace(j), read_trace(q)
    for t in (a, b):
        assert t.prompt_tokens.tolist() == [7, 9]
        assert t.output_tokens.tolist() == [2, 5]
        assert t.timestamps_s.tolist() == [0.0, 1.5]


def test_parquet_timestamp_column(tmp_path):
    q = tmp_path / "t.parquet"
    ts = np.array(["2024-01-01T00:00:00", "2024-01-01T00:00:02.5"], dtype="datetime64[ms]")
    pq.write_table(pa.table({"TIMESTAMP": ts, "ContextTokens": [5, 6]}), q)
    t = read_trace(q)
    assert t.timestamps_s.tolist() == [0.0, 2.5]
    assert t.output_tokens is None


def test_trace_without_time_column_has_no_rate(tmp_path):
    p = _write_csv(tmp_path / "t.csv", ["length"], [[4], [8]])
    t = read_trace(p)
    assert t.timestamps_s is None and t.arrival_rate_rps is None and t.prompt_tokens.tolist() == [4, 8]


@pytest.mark.parametrize(
    ("rows", "match"),
    [
        (
            [["2023-01-01 00:00:00", "12", "3"], ["2023-01-01 00:00:01", "abc", "3"]],
            r"row 2, column ContextTokens: 'abc' is not a token count",
        ),
        (
            [["2023-01-01 00:00:00", "12", "3"], ["2023-01-01 00:00:01", "-4", "3"]],
            r"row 2, column ContextTokens: '-4' is not positive",
        ),
        ([["2023-01-01 00:00:00", "0", "3"]], r"row 1, column ContextTokens: '0' is not positive"),
        ([["2023-01-01 00:00:00", "12", "-1"]], r"row 1, column GeneratedTokens: '-1' is not >= 0"),
        (
            [["2023-01-01 00:00:00", "12.5", "1"]],
            r"row 1, column ContextTokens: '12.5' is not a whole number",
        ),
        ([["2023-01-01 00:00:00", "", "1"]], r"row 1, column ContextTokens: an empty value"),
        (
            [["2023-01-01 00:00:00", "5", "1"], ["yesterday", "5", "1"]],
            r"row 2, column TIMESTAMP: 'yesterday' is not a timestamp",
        ),
        ([["2023-01-01 00:00:00", "5"]], r"row 1 \(line 2\) has 2 fields, the header has 3"),
    ],
)
def test_bad_values_name_row_and_column(tmp_path, rows, match):
    p = _write_csv(tmp_path / "bad.csv", ["TIMESTAMP", "ContextTokens", "GeneratedTokens"], rows)
    with pytest.raises(ChipswapError, match=match) as exc:
        read_trace(p)
    assert "\n" not in str(exc.value) and str(p) in str(exc.value)


def test_bad_files(tmp_path):
    with pytest.raises(ChipswapError, match="not found"):
        read_trace(tmp_path / "missing.csv")
    empty = _write_csv(tmp_path / "empty.csv", ["ContextTokens"], [])
    with pytest.raises(ChipswapError, match="empty"):
        read_trace(empty)
    (tmp_path / "blank.csv").write_text("")
    with pytest.raises(ChipswapError, match="empty"):
        read_trace(tmp_path / "blank.csv")
    (tmp_path / "t.xlsx").write_text("x")
    with pytest.raises(ChipswapError, match="cannot tell the format"):
        read_trace(tmp_path / "t.xlsx")
    j = tmp_path / "t.jsonl"
    j.write_text('{"prompt_tokens": 3}\nnot json\n')
    with pytest.raises(ChipswapError, match="line 2 is not JSON"):
        read_trace(j)
    p = _write_csv(tmp_path / "t.csv", ["ContextTokens"], [[3]])
    with pytest.raises(ChipswapError, match="did you mean 'ContextTokens'"):
        read_trace(p, columns={"prompt_tokens": "ContextToken"})
    with pytest.raises(ChipswapError, match="unknown trace field"):
        read_trace(p, columns={"prompt": "ContextTokens"})


def test_jsonl_missing_value_names_row(tmp_path):
    j = tmp_path / "t.jsonl"
    j.write_text('{"prompt_tokens": 3}\n{"other": 1}\n')
    with pytest.raises(ChipswapError, match="row 2, column prompt_tokens: an empty value"):
        read_trace(j)
