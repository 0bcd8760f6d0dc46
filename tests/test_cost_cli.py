"""`chipswap cost job|serve` through the real CLI: the seed's worked example to the cent, JSON, bad input."""

from __future__ import annotations

import json
from decimal import Decimal

import pytest

from chipswap.economics.catalog_io import load_catalog
from tests.cli_helpers import run_cli, run_inproc, run_json


def job(baseline: str, hours: str, candidate: str, candidate_hours: str, *extra: str) -> list[str]:
    """The argv of `chipswap cost job`: a baseline run of `hours` against a candidate of `candidate_hours`."""
    base = ["--baseline", baseline, "--baseline-hours", hours]
    return ["cost", "job", *base, "--candidate", candidate, "--candidate-hours", candidate_hours, *extra]


def serve(instance: str, throughput: str, *extra: str) -> list[str]:
    """The argv of `chipswap cost serve` for `instance` serving `throughput` requests/s each."""
    return ["cost", "serve", "--instance", instance, "--throughput", throughput, *extra]


WORKED_EXAMPLE = job("p5.48xlarge", "20", "trn1.32xlarge", "26", "--porting-days", "3")


def test_worked_example_table_via_real_cli() -> None:
    proc = run_cli(*WORKED_EXAMPLE)
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.splitlines()
    base = next(x for x in lines if "p5.48xlarge" in x)
    od = next(x for x in lines if "trn1.32xlarge" in x and "on-demand" in x)
    three = next(x for x in lines if "trn1.32xlarge" in x and " 3yr " in x)
    assert "$1,100.80" in base
    assert "$559.00" in od and "49.2 %" in od
    assert od.rstrip(" │").split()[-1] == "5"  # pays back on the 5th identical run
    assert "$213.20" in three
    assert "$2,400.00" in proc.stdout and "$800/day" in proc.stdout  # the assumption is shown


def test_worked_example_json_exact(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run_inproc(capsys, *WORKED_EXAMPLE, "--json")
    assert code == 0
    data = json.loads(out)
    assert Decimal(str(data["baseline"]["cost_usd"])) == Decimal("1100.80")
    by_term = {c["term"]: c for c in data["candidates"]}
    od, three = by_term["on-demand"], by_term["3yr"]
    assert Decimal(str(od["cost_usd"])) == Decimal("559.00")
    assert round(od["saving_pct"]) == 49
    assert od["pays_back_run"] == 5
    assert Decimal(str(three["cost_usd"])) == Decimal("213.20")
    assert three["source"] == "seed-article"
    assert by_term["ri-effective"]["note"] and "not stated" in by_term["ri-effective"]["note"].lower()
    assert data["porting"] == {"engineer_days": 3.0, "day_rate_usd": 800.0, "cost_usd": 2400.0}
    # the JSON agrees with the catalog it priced from
    cat = load_catalog()
    assert Decimal(str(data["baseline"]["usd_per_hour"])) == cat.rate("p5.48xlarge").usd_per_hour


def test_candidate_terms_filter_runs_per_month_and_custom_rate(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = run_inproc(
        capsys,
        *WORKED_EXAMPLE,
        "--candidate-term",
        "3yr",
        "--candidate-rate",
        "10",
        "--reserved",
        "8760,7,1",
        "--runs-per-month",
        "2",
        "--json",
    )
    assert code == 0, err
    cands = json.loads(out)["candidates"]
    assert [c["term"] for c in cands] == ["3yr", "reserved-1yr", "custom"]
    assert cands[1]["usd_per_hour"] == 8.0  # 8760 / 8760 h + 7
    assert cands[2]["cost_usd"] == 260.0
    # 3yr saves 887.60 a run, 1775.20 a month: 2400 is covered in month 2
    assert cands[0]["pays_back_month"] == 2


def test_more_porting_days_pay_back_later(capsys: pytest.CaptureFixture[str]) -> None:
    runs = []
    for days in ("0", "3", "10"):
        code, out, _ = run_inproc(
            capsys, *WORKED_EXAMPLE[:-1], days, "--candidate-term", "on-demand", "--json"
        )
        assert code == 0
        runs.append(json.loads(out)["candidates"][0]["pays_back_run"])
    assert runs[0] < runs[1] < runs[2]


def test_never_pays_back_when_candidate_costs_more(capsys: pytest.CaptureFixture[str]) -> None:
    argv = job("g6.xlarge", "1", "trn1.32xlarge", "1", "--candidate-term", "on-demand")
    code, out, _ = run_inproc(capsys, *argv)
    assert code == 0
    assert "never" in out


def test_serve_cost_per_million_and_fleet(capsys: pytest.CaptureFixture[str]) -> None:
    baseline = ("--baseline", "g5.xlarge", "--baseline-throughput", "600")
    data = run_json(
        capsys, *serve("inf2.xlarge", "900", "--utilization", "0.6", "--rps", "2000", *baseline, "--json")
    )
    base, cand = data["fleets"]
    cat = load_catalog()
    inf2 = cat.rate("inf2.xlarge").usd_per_hour
    expect = Decimal(10**6) / 900 * inf2 / 3600 / Decimal("0.6")
    assert abs(Decimal(str(cand["usd_per_million"])) - expect) < Decimal("0.0001")
    assert cand["count"] == 4 and base["count"] == 6  # ceil(2000/540), ceil(2000/360)
    assert Decimal(str(cand["monthly_usd"])) == (inf2 * 4 * 730).quantize(Decimal("0.01"))
    assert data["saving_per_month_usd"] > 0 and data["pays_back_month"] == 2


def test_serve_table_runs(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run_inproc(capsys, *serve("inf2.48xlarge", "50"))
    assert code == 0
    assert "inf2.48xlarge" in out and "$ per 1M req" in out


@pytest.mark.parametrize(
    ("args", "needle"),
    [
        (["--baseline-hours", "0"], "--baseline-hours"),
        (["--candidate-hours", "-3"], "--candidate-hours"),
        (["--candidate-hours", "abc"], "--candidate-hours"),
        (["--candidate", "trn1.32xlarg"], "trn1.32xlarge"),
        (["--region", "eu-west-1"], "us-east-1"),  # lists regions that have a price
        (["--candidate-term", "5yr"], "--candidate-term"),
        (["--reserved", "1,2"], "--reserved"),
        (["--porting-days", "-1"], "--porting-days"),
        (["--region", "us-eats-1"], "unknown region 'us-eats-1'; did you mean us-east-1?"),
        (["--baseline-count", "1.5"], "--baseline-count"),
        (["--reserved", "a,b,c"], "--reserved 10000,5.50,1"),
    ],
)
def test_job_bad_input_one_line_exit_2(
    capsys: pytest.CaptureFixture[str], args: list[str], needle: str
) -> None:
    argv = list(WORKED_EXAMPLE)
    for flag, value in zip(args[::2], args[1::2], strict=True):
        if flag in argv:
            argv[argv.index(flag) + 1] = value
        else:
            argv += [flag, value]
    code, out, err = run_inproc(capsys, *argv)
    assert code == 2
    assert err.startswith("chipswap: error: ") and err.count("\n") == 1
    assert needle in err
    assert "Traceback" not in err


@pytest.mark.parametrize(
    ("args", "needle"),
    [
        (["--instance", "inf2.xlarge", "--throughput", "0"], "--throughput"),
        (["--instance", "inf2.xlarge", "--throughput", "-5"], "--throughput"),
        (["--instance", "inf2.xlarge", "--throughput", "5", "--utilization", "2"], "--utilization"),
        (["--instance", "trn2.48xlarge", "--throughput", "5", "--region", "us-west-2"], "Capacity Blocks"),
        (
            ["--instance", "inf2.xlarge", "--throughput", "5", "--baseline", "g5.xlarge"],
            "--baseline-throughput",
        ),
        (
            ["--instance", "inf2.xlarge", "--throughput", "5", "--hours-per-month", "1000"],
            "--hours-per-month",
        ),
        (["--instance", "inf2.xlarge", "--throughput", "5", "--count", "1.5"], "--count"),
        (
            ["--instance", "inf2.xlarge", "--throughput", "5", "--reserved", "a,b,c"],
            "--reserved 10000,5.50,1",
        ),
        (
            ["--instance", "inf2.xlarge", "--throughput", "5", "--region", "us-eats-1"],
            "error: unknown region 'us-eats-1'; did you mean us-east-1?",
        ),
    ],
)
def test_serve_bad_input_one_line_exit_2(
    capsys: pytest.CaptureFixture[str], args: list[str], needle: str
) -> None:
    code, out, err = run_inproc(capsys, "cost", "serve", *args)
    assert code == 2
    assert err.startswith("chipswap: error: ") and err.count("\n") == 1
    assert needle in err


def test_bad_input_via_real_cli_has_no_traceback() -> None:
    proc = run_cli(*serve("inf2.xlarge", "-1"))
    assert proc.returncode == 2
    assert proc.stderr.startswith("chipswap: error: --throughput")
    assert len(proc.stderr.splitlines()) == 1 and "Traceback" not in proc.stderr


def test_trn2_is_priced_as_a_capacity_block_and_a_rate_replaces_it(
    capsys: pytest.CaptureFixture[str],
) -> None:
    snap = load_catalog().rate("trn2.48xlarge", "us-east-2", "capacity-block")
    for region in ((), ("--region", "us-east-2")):
        code, out, _ = run_inproc(capsys, *serve("trn2.48xlarge", "5", *region), "--json")
        assert code == 0
        fleet = json.loads(out)["fleets"][0]
        assert (fleet["term"], fleet["region"]) == ("capacity-block", "us-east-2")
        assert fleet["monthly_usd"] == float((snap.usd_per_hour * 730).quantize(Decimal("0.01")))
    code, out, _ = run_inproc(capsys, *serve("trn2.48xlarge", "5"))
    assert code == 0 and f"Capacity Block, as of {snap.as_of}" in out and "renewals assumed" in out
    code, out, _ = run_inproc(
        capsys, *serve("trn2.48xlarge", "5", "--region", "us-east-2"), "--rate", "40", "--json"
    )
    assert code == 0
    assert json.loads(out)["fleets"][0]["source"] == "user --rate"


# the seed's worked example with trn2 as the candidate (priced as a Capacity Block); add --candidate-hours
TRN2_JOB = ["cost", "job", "--baseline", "p5.48xlarge", "--baseline-hours", "20"]
TRN2_JOB += ["--candidate", "trn2.48xlarge"]


def test_trn2_job_is_one_block_covering_the_hours_and_per_hour(capsys: pytest.CaptureFixture[str]) -> None:
    rate = load_catalog().rate("trn2.48xlarge", "us-east-2", "capacity-block").usd_per_hour
    args = TRN2_JOB
    code, out, _ = run_inproc(capsys, *args, "--candidate-hours", "26", "--json")
    assert code == 0
    cands = json.loads(out)["candidates"]
    assert [c["cost_usd"] for c in cands] == [
        float((rate * 26).quantize(Decimal("0.01"))),
        float((rate * 48).quantize(Decimal("0.01"))),  # 26 h -> one 2-day block
    ]
    code, out, _ = run_inproc(capsys, *args, "--candidate-hours", "26", "--block-days", "7", "--json")
    assert code == 0 and json.loads(out)["candidates"][1]["hours"] == 7 * 24
    for days, needle in (("15", "not sold"), ("1", "does not cover")):
        code, _, err = run_inproc(capsys, *args, "--candidate-hours", "26", "--block-days", days)
        assert code == 2 and needle in err and err.count("\n") == 1


def test_docs_worked_example_command_gives_the_seed_numbers() -> None:
    """The exact command docs/cost.md (and the README) quote reproduces the seed's example to the cent."""
    import shlex
    from pathlib import Path

    doc = (Path(__file__).resolve().parents[1] / "docs" / "cost.md").read_text()
    line = next(x for x in doc.splitlines() if x.startswith("chipswap cost job --baseline p5.48xlarge"))
    proc = run_cli(*shlex.split(line)[1:])
    assert proc.returncode == 0, proc.stderr
    rows = [x for x in proc.stdout.splitlines() if "x p5.48xlarge" in x or "x trn1.32xlarge" in x]
    assert len(rows) == 3
    assert "$1,100.80" in rows[0]
    assert "$559.00" in rows[1] and "49.2 %" in rows[1] and rows[1].rstrip(" │").endswith("5")
    assert "$213.20" in rows[2]
