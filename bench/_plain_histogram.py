"""The plain baseline for bench_traces.py: what a user would write by hand with pyarrow + numpy.

python bench/_plain_histogram.py FILE_OR_FOLDER encoder|llm [--stream]

Reads the prompt column (llm: and the output column) of a CSV or Parquet trace with pyarrow, counts prompt
lengths with np.bincount and, in llm mode, builds the decode histogram with a difference array. --stream reads
a
folder of Parquet files batch by batch (accumulating the counts), for traces that do not fit in memory. Prints
the number of distinct lengths so the work cannot be skipped. No validation, no planning: a lower bound on
what
any tool must spend to read the trace and count it.
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pyarrow.csv as pacsv
import pyarrow.parquet as pq

PROMPT, OUTPUT = "ContextTokens", "GeneratedTokens"


def _add(acc: np.ndarray, values: np.ndarray) -> np.ndarray:
    counts = np.bincount(values)
    if counts.size > acc.size:
        counts[: acc.size] += acc
        return counts
    acc[: counts.size] += counts
    return acc


def main() -> None:
    path, mode = Path(sys.argv[1]), sys.argv[2]
    stream = "--stream" in sys.argv
    cols = [PROMPT] + ([OUTPUT] if mode == "llm" else [])
    prompt_hist = np.zeros(1, dtype=np.int64)
    starts = np.zeros(1, dtype=np.int64)
    ends = np.zeros(1, dtype=np.int64)
    if stream:
        batches = (
            b for f in sorted(path.glob("*.parquet")) for b in pq.ParquetFile(f).iter_batches(columns=cols)
        )
    elif path.suffix == ".csv":
        options = pacsv.ConvertOptions(include_columns=cols)
        batches = iter([pacsv.read_csv(path, convert_options=options).combine_chunks()])
    else:
        batches = iter([pq.read_table(path, columns=cols).combine_chunks()])
    for batch in batches:
        p = batch.column(PROMPT).to_numpy()
        prompt_hist = _add(prompt_hist, p)
        if mode == "llm":
            g = batch.column(OUTPUT).to_numpy()
            gen = g > 0
            starts = _add(starts, p[gen] + 1)
            ends = _add(ends, p[gen] + g[gen] + 1)
    distinct = int(np.count_nonzero(prompt_hist))
    if mode == "llm":
        n = max(starts.size, ends.size)
        diff = np.pad(starts, (0, n - starts.size)) - np.pad(ends, (0, n - ends.size))
        distinct += int(np.count_nonzero(np.cumsum(diff)))
    print(distinct)


if __name__ == "__main__":
    main()
