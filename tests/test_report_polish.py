"""What the reports say, written for people: no Python `None` or `7.711e+04` in report.md or on the terminal,
a fleet that misses the SLO says so beside its size, money to the cent with separators, an unknown capacity
check reads as not checked, a saving chart only when there are bands to draw, and the plan JSON names its
schema."""

from __future__ import annotations

import math
import re
from decimal import Decimal
from types import SimpleNamespace

import pytest
from hypothesis import given
from hypothesis import strategies as st

from chipswap.plan.figures import Figure
from chipswap.plan.result import FleetPlan
from chipswap.textsafe import human_number


def _fleet(**over) -> FleetPlan:
    base = dict(
        instance="trn1.32xlarge",
        kind="trainium",
        throughput=Figure(2.2981, "requests/s per instance", "projected", band=1.23),
        e2e_p99=Figure(77110.4, "ms", "projected", band=1.23),
        ttft_p99=Figure(1981.2, "ms", "projected", band=1.23),
        count=363,
        meets_slo=False,
    )
    return FleetPlan(**{**base, **over})


@given(st.floats(min_value=1e-4, max_value=1e15) | st.floats(min_value=-1e15, max_value=-1e-4))
def test_human_number_reads_back_and_has_no_exponent(x: float) -> None:
    text = human_number(x)
    assert "e" not in text and "None" not in text
    back = float(text.replace(",", ""))
    rel = 5.1e-3 if abs(x) < 1 else 5.1e-4  # 3 significant digits for fractions, 4 up to 1,000
    assert math.isclose(back, x, rel_tol=rel, abs_tol=0.5 if abs(x) >= 1000 else 0), (x, text)


def test_human_number_unknowns() -> None:
    assert human_number(None) == "unknown" and human_number(float("nan")) == "unknown"
    assert human_number(Decimal("77110")) == f"{77110:,}"


def test_markdown_fleet_row_formats_numbers_and_says_misses_slo() -> None:
    from chipswap.report.markdown import _fleet_row

    row = _fleet_row(_fleet(), serving=True)
    assert "e+0" not in row and "None" not in row
    assert f"{round(77110.4):,} ms" in row
    assert re.search(r"\| 363 — misses SLO \|", row)
    unsized = _fleet_row(_fleet(count=None, sizing="simulated: no fleet size meets the SLO"), serving=True)
    assert "None" not in unsized and "no fleet size meets the SLO" in unsized


def test_terminal_figure_line_says_misses_slo_beside_the_count() -> None:
    from chipswap.cli.plan import figure_line

    line = figure_line(_fleet())
    assert "363 instances; misses SLO" in line and "e+0" not in line
    assert "misses SLO" not in figure_line(_fleet(meets_slo=True))


def test_unknown_reason_reads_not_checked() -> None:
    from chipswap.economics.capacity import capacity_reason

    screen = SimpleNamespace(
        outcome="unknown", text="capacity: check quota first", vcpus_needed=1536, block_days_needed=None
    )
    line = capacity_reason(screen).line()  # type: ignore[arg-type]
    assert line.startswith("[?]") and "not checked: within the region's vCPU quota" in line
    passed = SimpleNamespace(outcome="pass", text="capacity: fits", vcpus_needed=1536, block_days_needed=None)
    assert "not checked" not in capacity_reason(passed).line()  # type: ignore[arg-type]


def test_bench_cost_line_is_money_to_the_cent(capsys) -> None:
    from chipswap.cli.bench import _print
    from tests.test_loadgen import _doc

    doc = _doc()
    doc["cost"]["per_million_requests_usd"] = "53803.8038"
    _print(doc, None)
    out = capsys.readouterr().out
    assert "$53,803.80 " in out and "53803.8038" not in out
    assert "$0.7582/h" in out  # an hourly rate keeps the digits AWS publishes


def test_saving_chart_only_with_bands() -> None:
    from chipswap.report import html

    def result(band):
        c = SimpleNamespace(
            instance="trn1.32xlarge", cost_per_million_usd=Decimal(12), meets_slo=True, count=3,
            monthly_usd=Decimal(1000), saving_pct=Decimal(40), saving_pct_range=band,
        )  # fmt: skip
        return c

    rows_banded = [result((Decimal(20), Decimal(60)))]
    rows_flat = [result((None, None))]
    assert html.saving_plot(rows_banded, 10.0)[0] == "savingband"
    key, text = html.saving_plot(rows_flat, 10.0)
    assert key == "savingband_note" and "no candidate's figures carry an error band" in text.unescape()


@pytest.mark.slow
def test_plan_json_names_its_schema_and_report_md_reads_for_people(capsys, tmp_path) -> None:
    import json

    from chipswap.plan.result import PLAN_SCHEMA
    from tests.cli_helpers import run_inproc

    code, out, err = run_inproc(capsys, "plan", "--no-aws", "-q", "--json", "--out", str(tmp_path / "r"))
    assert code == 0, err
    doc = json.loads(out)
    assert next(iter(doc)) == "schema" and doc["schema"] == PLAN_SCHEMA
    assert re.fullmatch(r"chipswap\.plan/\d+", PLAN_SCHEMA)
    assert json.loads((tmp_path / "r" / "report.json").read_text())["schema"] == PLAN_SCHEMA
    md = (tmp_path / "r" / "report.md").read_text()
    assert not re.search(r"\bNone\b", md) and not re.search(r"\d\.\d+e[+-]\d", md)
    unsized = [c for c in doc["candidates"] if c["count"] is None]
    assert unsized  # the bundled example has a candidate no fleet size serves within the SLO
    for c in unsized:
        row = next(x for x in md.splitlines() if x.startswith(f"| {c['instance']} — excluded"))
        assert "not sized" in row and "misses SLO" in row
