"""`chipswap shapes` end to end through chipswap.cli.main.main: tables, --json, --out, --plot, exit 2."""

from __future__ import annotations

import csv
import json

import numpy as np
import pytest

from chipswap.cli.main import main
from chipswap.shapes.shapeplan import load_plan
from chipswap.traffic import bundled_trace_path


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
        (lambda tp: ["-k", "99999"], "-k must be at most 256"),
        (lambda tp: [_bad_csv(tp, [["2023-01-01 00:00:00", "100", "1"]]), "-k", "5"], "use -k <= 1"),
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
    from chipswap.cli.shapes import saving_cell

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


# ---- traces of any size, --histogram, outliers, bounds ----------------------------------------------------


def test_histogram_flag_gives_the_raw_trace_plan(tmp_path, capsys):
    import duckdb

    hist = tmp_path / "hist.parquet"
    src = str(bundled_trace_path())
    duckdb.sql(
        f"COPY (SELECT ContextTokens AS prompt_tokens, GeneratedTokens AS output_tokens, count(*) AS n "
        f"FROM read_csv('{src}') GROUP BY ALL) TO '{hist}' (FORMAT parquet)"
    )
    for mode in ("encoder", "llm"):
        args = ["--mode", mode, "-k", "5", "--max-length", "4096", "--policy", "truncate", "--json"]
        code, raw, err = run(["shapes", src, *args], capsys)
        assert code == 0, err
        code, agg, err = run(["shapes", "--histogram", str(hist), *args], capsys)
        assert code == 0, err
        a, b = json.loads(raw), json.loads(agg)
        assert a.pop("source_trace") != b.pop("source_trace")
        assert a == b


def test_encoder_prompt_col_can_be_the_column_auto_detection_calls_output(capsys):
    argv = ["--mode", "encoder", "--prompt-col", "GeneratedTokens", "--json"]
    code, out, err = run(["shapes", str(bundled_trace_path()), *argv], capsys)
    assert code == 0, err
    d = json.loads(out)
    with bundled_trace_path().open() as fh:
        outputs = [int(r["GeneratedTokens"]) for r in csv.DictReader(fh)]
    assert d["max_length"] == max(outputs) and d["requests"] == len(outputs)
    assert sum(d["histogram"]["counts"]) == len(outputs)


def test_outlier_warning_proposes_a_max_length(tmp_path, capsys):
    rng = np.random.default_rng(0)
    lengths = [*rng.integers(100, 7000, 3000).tolist(), 7930, 14050]
    p = tmp_path / "t.csv"
    p.write_text("length\n" + "".join(f"{x}\n" for x in lengths))
    code, out, err = run(["shapes", str(p), "--mode", "encoder", "-k", "4"], capsys)
    assert code == 0, err
    assert "warning: the longest request (14,050 tokens) is 1.8x the next-longest request (7,930)" in out
    assert "--max-length 7930" in out
    code, out, err = run(["shapes", str(p), "--mode", "encoder", "-k", "4", "--json"], capsys)
    d = json.loads(out)
    assert err.startswith("chipswap: warning: the longest request")
    o = d["outlier"]
    assert o["proposed_max_length"] == 7930 and o["affected_share"] == pytest.approx(1 / 3002)
    assert o["proposed_overhead_pct"] < o["overhead_pct"] and o["padding_saved_pct"] > 0
    code, out, err = run(["shapes", str(p), "--mode", "encoder", "-k", "4", "--max-length", "7930"], capsys)
    assert code == 0 and "warning:" not in out


@pytest.mark.parametrize(
    ("argv", "needle"),
    [
        (["--mode", "encoder", "--max-positions", "4096"], "exceed the model's maximum positions 4,096"),
        (["--mode", "encoder", "--max-length", "8192", "--max-positions", "4096"], "maximum positions 4096"),
        (["--histogram", "x.csv"], "not both"),
        (["--count-col", "n"], "--count-col applies only to --histogram"),
        (["--max-length", "3000000000"], "limit of 2,097,152 tokens"),
    ],
)
def test_more_bad_flags(capsys, argv, needle):
    code, _, err = run(["shapes", str(bundled_trace_path()), *argv], capsys)
    assert code == 2 and err.count("\n") == 1 and needle in err


def test_histogram_has_no_arrival_times(tmp_path, capsys):
    h = tmp_path / "h.csv"
    h.write_text("length,count\n10,3\n")
    argv = ["--histogram", str(h), "--mode", "encoder", "--arrival-rate", "trace"]
    code, _, err = run(["shapes", *argv], capsys)
    assert code == 2 and "pass --arrival-rate RPS" in err
    code, out, err = run(["shapes", "--histogram", str(h), "--mode", "encoder", "--json"], capsys)
    assert code == 0 and json.loads(out)["requests"] == 3


@pytest.mark.parametrize("huge", ["2000000000", "1000000000000", "1e20"])
def test_a_huge_length_in_a_trace_is_one_line_in_a_fresh_process(tmp_path, huge):
    from tests.cli_helpers import run_cli

    p = tmp_path / "huge.csv"
    p.write_text("TIMESTAMP,ContextTokens,GeneratedTokens\n0,12,3\n1,40,5\n2," + huge + ",1\n")
    res = run_cli("shapes", str(p), "--mode", "llm")
    assert res.returncode == 2, res.stderr
    assert res.stderr.count("\n") == 1 and "Traceback" not in res.stderr
    assert f"{p}: row 3, column ContextTokens:" in res.stderr and "limit of 2,097,152 tokens" in res.stderr


def test_folder_and_glob_traces(tmp_path, capsys):
    src = bundled_trace_path().read_text().splitlines()
    d = tmp_path / "logs"
    d.mkdir()
    (d / "a.csv").write_text("\n".join(src[:4000]) + "\n")
    (d / "b.csv").write_text("\n".join([src[0], *src[4000:]]) + "\n")
    code, whole, err = run(["shapes", str(bundled_trace_path()), "-k", "4", "--json"], capsys)
    assert code == 0, err
    for target in (str(d), str(d / "*.csv")):
        code, parts, err = run(["shapes", target, "-k", "4", "--json"], capsys)
        assert code == 0, err
        assert json.loads(parts)["sequence_buckets"] == json.loads(whole)["sequence_buckets"]
        assert json.loads(parts)["decode_buckets"] == json.loads(whole)["decode_buckets"]
    code, _, err = run(["shapes", str(d / "*.parquet")], capsys)
    assert code == 2 and "matches no files" in err


def test_latency_table_is_read_strictly(tmp_path, capsys):
    good = tmp_path / "lat.json"
    good.write_text('{"2048": 0.01, "4096": 0.02, "8192": 0.05}')
    argv = ["--mode", "encoder", "--cost-model", "measured", "--latency-table", str(good), "-k", "2"]
    code, out, err = run(["shapes", str(bundled_trace_path()), *argv, "--json"], capsys)
    assert code == 0, err
    assert json.loads(out)["cost_model"] == "measured"
    for name, text, needle in [
        ("nan.json", '{"128": NaN}', "not a number JSON allows"),
        ("bool.json", '[{"shape": true, "latency_s": 0.1}]', "entry 0 shape must be an integer"),
        ("huge.json", '{"99999999999": 0.1}', "outside [1, 2,097,152]"),
        ("neg.csv", "shape,latency\n128,-1\n", "row 1 latency is -1.0, outside"),
        ("empty.csv", "shape,latency\n", "no 'shape,latency' rows"),
    ]:
        bad = tmp_path / name
        bad.write_text(text)
        argv = ["--mode", "encoder", "--cost-model", "measured", "--latency-table", str(bad)]
        code, _, err = run(["shapes", str(bundled_trace_path()), *argv], capsys)
        assert code == 2 and err.count("\n") == 1 and needle in err, (name, err)
