"""`chipswap shapes` end to end through chipswap.cli.main: tables, --json, --out, --plot, exit 2."""

from __future__ import annotations

import csv
import json

import numpy as np
import pytest

from chipswap.cli import main
from chipswap.shapeplan import load_plan
from chipswap.traces import bundled_trace_path


def run(argv, capsys):
    with pytest.raises(SystemExit) as exc:
        main(argv)
        raise SystemExit(0)
    out = capsys.readouterr()
    return exc.value.code or 0, out.out, out.err


def test_table_output_on_bundled_trace(capsys):
    code, out, err = run(["shapes", str(bundled_trace_path()), "-k", "5", "--mode", "encoder"], capsys)
    assert code == 0, err
    assert "sequence buckets" in out and "powers_of_two" in out and "optimum-cli export neuron" in out
    assert out.count("--sequence_length") == 5


def test_json_out_and_plot(tmp_path, capsys):
    plan_path, svg_path = tmp_path / "plan.json", tmp_path / "h.svg"
    code, out, err = run(
        ["shapes", "-k", "4", "--json", "--out", str(plan_path), "--plot", str(svg_path)], capsys
    )
    assert code == 0, err
    d = json.loads(out)
    assert d["schema"] == "chipswap.shapeplan/1" and len(d["sequence_buckets"]) == 4
    assert load_plan(plan_path).sequence_buckets == d["sequence_buckets"]
    assert svg_path.read_text().startswith("<svg")
    # the optimum printed is the optimum: no 4-edge plan from the baselines does better
    assert all(d["totals"]["waste"] <= b["waste"] for b in d["baselines"].values() if b["k"] == 4)


def test_column_mapping_flags(tmp_path, capsys):
    p = tmp_path / "t.csv"
    with p.open("w", newline="") as fh:
        w = csv.writer(fh)
        w.writerow(["t", "inp", "gen"])
        rng = np.random.default_rng(1)
        for i in range(50):
            w.writerow([i * 0.1, int(rng.integers(1, 300)), int(rng.integers(1, 20))])
    code, _, err = run(["shapes", str(p)], capsys)
    assert code == 2 and "--prompt-col" in err
    code, out, err = run(
        [
            "shapes",
            str(p),
            "--prompt-col",
            "inp",
            "--output-col",
            "gen",
            "--time-col",
            "t",
            "-k",
            "3",
            "--json",
            "--arrival-rate",
            "trace",
        ],
        capsys,
    )
    assert code == 0, err
    assert json.loads(out)["batch"]["arrival_rate_rps"] == pytest.approx(10.0)


def _bad_csv(tmp_path, rows, header=("TIMESTAMP", "ContextTokens", "GeneratedTokens")):
    p = tmp_path / "bad.csv"
    with p.open("w", newline="") as fh:
        w = csv.writer(fh)
        w.writerow(header)
        w.writerows(rows)
    return str(p)


@pytest.mark.parametrize(
    ("args", "needle"),
    [
        (lambda tp: [_bad_csv(tp, [])], "empty"),
        (lambda tp: [_bad_csv(tp, [["2023-01-01 00:00:00", "x", "1"]])], "row 1, column ContextTokens"),
        (lambda tp: [_bad_csv(tp, [["2023-01-01 00:00:00", "0", "1"]])], "row 1, column ContextTokens"),
        (lambda tp: [_bad_csv(tp, [["2023-01-01 00:00:00", "-3", "1"]])], "is not positive"),
        (lambda tp: [_bad_csv(tp, [["1", "2"]], header=("a", "b"))], "no prompt_tokens column"),
        (lambda tp: ["-k", "0"], "K must be an integer >= 1"),
        (lambda tp: ["--max-buckets", "0"], "max-buckets 1 or more"),
        (lambda tp: ["--policy", "drop"], "reject, truncate"),
        (lambda tp: ["--cost-model", "flops"], "tokens, attention, measured"),
        (lambda tp: ["--mode", "gpu"], "use --mode encoder or --mode llm"),
        (
            lambda tp: ["--max-compile-s", "10", "--compile-s-per-bucket", "60"],
            "raise --max-compile-s to >= 60",
        ),
        (
            lambda tp: ["--device-memory-gib", "1", "--bucket-memory-per-token", "1000000"],
            "lower --max-length to <= 1073",
        ),
        (lambda tp: ["-k", "99999"], "use -k <="),
        (lambda tp: [str(tp / "missing.csv")], "trace file not found"),
        (lambda tp: ["--mode", "encoder", "--decode-k", "3"], "--decode-k 3 applies only to --mode llm"),
    ],
)
def test_bad_input_exits_2_with_one_line(tmp_path, capsys, args, needle):
    argv = args(tmp_path)
    if not argv or argv[0].startswith("-"):
        argv = [str(bundled_trace_path()), *argv]
    code, out, err = run(["shapes", *argv], capsys)
    assert code == 2
    assert err.startswith("chipswap: error: ") and err.count("\n") == 1
    assert needle in err


def test_baselines_with_another_k_show_no_saving(capsys):
    from chipswap.commands.shapes import saving_cell

    code, out, err = run(
        ["shapes", str(bundled_trace_path()), "-k", "4", "--mode", "encoder", "--json"], capsys
    )
    assert code == 0, err
    d = json.loads(out)
    other = {n: b for n, b in d["baselines"].items() if b["k"] != 4}
    same = {n: b for n, b in d["baselines"].items() if b["k"] == 4}
    assert other, "the bundled trace has baselines with another K"
    code, table, _ = run(["shapes", str(bundled_trace_path()), "-k", "4", "--mode", "encoder"], capsys)
    assert code == 0
    for b in other.values():
        cell = saving_cell({"k": b["k"], "waste_reduction_pct": -879.1}, 4)
        assert cell == f"n/a (K={b['k']})" and cell in table
    assert saving_cell({"k": 4, "waste_reduction_pct": 12.34}, 4) == "12.3%"
    assert "n/a (K=4)" not in table and (not same or "%" in table)


def test_plot_last_edge_is_inside_the_frame():
    import re

    from chipswap.report.shapes_plot import histogram_svg

    svg = histogram_svg((np.array([10, 50, 100]), np.array([1.0, 2.0, 3.0])), [50, 100])
    # matplotlib draws each edge as a path in a group with its gid; the axes frame has gid "frame"
    xs = [float(x) for x in re.findall(r'<g id="edge-\d+">\s*<path d="M ([0-9.]+) ', svg)]
    left, right = (
        float(x)
        for x in re.search(r'<g id="frame">\s*<path d="M ([0-9.]+) [0-9.]+\s+L ([0-9.]+) ', svg).groups()
    )
    assert len(xs) == 2 and max(xs) < right - 2 and min(xs) > left
