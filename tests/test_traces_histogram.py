"""A plan from a pre-aggregated histogram equals the plan from the raw trace, including the histogram made by
the warehouse SQL documented in docs/shapes.md (run here in DuckDB)."""

from __future__ import annotations

import re
from pathlib import Path

import duckdb
import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from chipswap.shapes.shapeplan import max_length_for_reading, plan_shapes
from chipswap.traffic import Trace, aggregate_trace, bundled_trace_path, read_histogram, read_trace

DOCS = Path(__file__).resolve().parents[1] / "docs" / "shapes.md"


def _plan_dict(plan) -> dict:
    d = plan.to_dict()
    d.pop("source_trace")
    return d


@pytest.fixture(scope="module")
def heavy(tmp_path_factory):
    """A heavy-tailed trace (one prompt far beyond the rest) as a raw Parquet file and as a joint histogram
    split over two CSV files that repeat some (prompt, output) pairs."""
    rng = np.random.default_rng(3)
    n = 6000
    p = np.clip(np.rint(rng.lognormal(6.5, 1.0, n)), 1, 60_000).astype(np.int64)
    p[17] = 200_000
    g = np.clip(np.rint(rng.lognormal(4.0, 1.2, n)), 0, 5000).astype(np.int64)
    d = tmp_path_factory.mktemp("heavy")
    raw = d / "raw.parquet"
    pq.write_table(pa.table({"prompt_tokens": p, "output_tokens": g}), raw)
    pairs, counts = np.unique(np.stack([p, g]), axis=1, return_counts=True)
    hist = d / "hist"
    hist.mkdir()
    half = pairs.shape[1] // 2
    for i, (lo, hi) in enumerate(((0, half + 50), (half, pairs.shape[1]))):
        c = counts[lo:hi].copy()
        if i == 1:
            c[:50] = 0  # the overlap: the first file already has the full counts of these pairs
        rows = "".join(f"{a},{b},{k}\n" for a, b, k in zip(pairs[0, lo:hi], pairs[1, lo:hi], c, strict=True))
        (hist / f"part-{i}.csv").write_text("prompt_tokens,output_tokens,requests\n" + rows)
    arrays = Trace(path="mem", prompt_tokens=p, output_tokens=g, timestamps_s=None, columns={})
    return raw, hist, arrays


@pytest.mark.parametrize(
    ("mode", "max_length", "policy", "k"),
    [
        ("encoder", None, "reject", 5),
        ("llm", None, "reject", 6),
        ("llm", 2048, "reject", 4),
        ("llm", 2048, "truncate", 4),
        ("encoder", 900, "truncate", None),
    ],
)
def test_histogram_plan_equals_raw_trace_plan(heavy, mode, max_length, policy, k):
    raw, hist, arrays = heavy
    cut = max_length_for_reading("tokens", max_length)
    kwargs = dict(mode=mode, k=k, max_length=max_length, policy=policy)
    from_raw = plan_shapes(aggregate_trace(raw, mode=mode, max_length=cut, policy=policy), **kwargs)
    from_hist = plan_shapes(read_histogram(hist, mode=mode, max_length=cut, policy=policy), **kwargs)
    from_arrays = plan_shapes(arrays, **kwargs)
    assert _plan_dict(from_hist) == _plan_dict(from_raw) == _plan_dict(from_arrays)
    assert from_hist.requests == 6000
    if max_length is None:  # the 200,000-token prompt is far beyond the rest: the plan proposes a max length
        assert from_hist.outlier["longest"] == 200_000 and from_hist.outlier["proposed_max_length"] < 100_000


def test_aggregates_built_for_another_max_length_are_refused(heavy):
    raw, _, _ = heavy
    h = aggregate_trace(raw, mode="llm", max_length=2048, policy="reject")
    with pytest.raises(Exception, match="aggregated for max length 2048"):
        plan_shapes(h, mode="llm", max_length=4096)


def _sql_blocks() -> dict[str, str]:
    text = DOCS.read_text()
    return {
        m.group(1): m.group(2)
        for m in re.finditer(r"<!-- chipswap-sql:(\w+) -->\n```sql\n(.*?)```", text, flags=re.S)
    }


def _select(block: str) -> str:
    """The SELECT ... GROUP BY part of a documented query, with the table name unqualified."""
    body = block[block.index("SELECT") :]
    body = body[: body.index("GROUP BY")] + body[body.index("GROUP BY") :].splitlines()[0]
    body = re.sub(r"`[^`]*\.(\w+)`", r"\1", body)
    return " ".join(body.split())


def test_documented_warehouse_sql_gives_the_raw_trace_plan(tmp_path):
    blocks = _sql_blocks()
    assert set(blocks) == {"presto", "bigquery", "spark"}
    selects = {name: _select(b) for name, b in blocks.items()}
    assert len(set(selects.values())) == 1, selects  # the three dialects run the same aggregation
    trace = read_trace(bundled_trace_path())
    con = duckdb.connect()
    t0 = np.datetime64("2024-06-10T00:00:00", "us")
    ts = t0 + (trace.timestamps_s * 1e6).astype("timedelta64[us]")
    log = pa.table(  # noqa: F841 - read by the SQL below
        {"ts": ts, "prompt_tokens": trace.prompt_tokens, "output_tokens": trace.output_tokens}
    )
    con.execute("CREATE TABLE inference_log AS SELECT * FROM log")
    out = tmp_path / "hist.parquet"
    con.execute(f"COPY ({selects['presto']}) TO '{out}' (FORMAT parquet)")
    assert con.execute(f"SELECT sum(requests) FROM '{out}'").fetchone()[0] == len(trace)
    for mode in ("encoder", "llm"):
        a = plan_shapes(read_histogram(out, mode=mode), mode=mode, k=5)
        b = plan_shapes(trace, mode=mode, k=5)
        assert _plan_dict(a) == _plan_dict(b)
