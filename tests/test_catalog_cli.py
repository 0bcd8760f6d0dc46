"""`chipswap catalog` list / filter / show / chips, --json, --catalog, and bad input."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from chipswap.economics.catalog_io import load_catalog
from tests.cli_helpers import run_inproc
from tests.test_cost_cli import serve

run = run_inproc


def test_list_json_filters(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(capsys, "catalog", "--family", "inf2", "--json")
    assert code == 0
    data = json.loads(out)
    names = [i["name"] for i in data["instances"]]
    assert names == [i.name for i in load_catalog().select(family="inf2")]
    assert len(names) == 4
    code, out, _ = run(capsys, "catalog", "--accelerator", "h100", "--region", "ap-south-1", "--json")
    data = json.loads(out)
    assert {i["name"] for i in data["instances"]} == {"p5.48xlarge", "p5.4xlarge"}
    assert all(p["region"] == "ap-south-1" for i in data["instances"] for p in i["prices"])


def test_list_table_shows_unknown_price_as_dash(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(capsys, "catalog", "--family", "trn2", "--region", "us-east-2")
    assert code == 0
    row = next(x for x in out.splitlines() if "trn2.48xlarge" in x)
    assert "-" in row.split("│")[8]  # on-demand column: unknown, not a number


def test_show_json_has_chip_and_priced_terms(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(capsys, "catalog", "show", "TRN1.32xlarge", "--json", "--region", "us-east-1")
    assert code == 0
    data = json.loads(out)
    assert data["chip"]["name"] == "Trainium"
    terms = {p["term"]: p for p in data["prices"]}
    assert set(terms) == {"on-demand", "spot", "1yr", "3yr", "ri-effective"}
    assert all(p["source"] and p["as_of"] for p in data["prices"])


def test_show_table_and_chips(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(capsys, "catalog", "show", "trn2.48xlarge")
    assert code == 0 and "Capacity Blocks" in out and "Capacity Block, as of 2026-07-15" in out
    code, out, _ = run(capsys, "catalog", "show", "u-trn2x64")
    assert code == 0 and "no known price" in out and "64 x Trainium2" in out
    code, out, _ = run(capsys, "catalog", "chips", "--json")
    assert code == 0
    assert {c["name"] for c in json.loads(out)} >= {"Trainium3", "B200", "A10G"}


def test_catalog_override_flag(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    f = tmp_path / "c.toml"
    f.write_text(
        '[[price]]\ninstance = "inf2.xlarge"\nregion = "us-east-1"\nterm = "on-demand"\n'
        'usd_per_hour = 0.5\nsource = "quote"\nas_of = "2026-11-01"\n'
    )
    code, out, _ = run(
        capsys, "catalog", "show", "inf2.xlarge", "--region", "us-east-1", "--json", "--catalog", str(f)
    )
    assert code == 0
    od = next(p for p in json.loads(out)["prices"] if p["term"] == "on-demand")
    assert od["usd_per_hour"] == 0.5 and od["source"] == "quote"
    code, out, err = run(capsys, *serve("inf2.xlarge", "1000", "--json", "--catalog", str(f)))
    assert code == 0, err
    assert json.loads(out)["fleets"][0]["usd_per_hour"] == 0.5


@pytest.mark.parametrize(
    ("args", "needle"),
    [
        (["catalog", "show", "p5.48xl"], "p5.48xlarge"),
        (["catalog", "--family", "trn3"], "--family"),
        (["catalog", "--region", "mars-1"], "--region"),
        (["catalog", "show", "trn1.32xlarge", "--region", "xx-1"], "unknown region 'xx-1'"),
        (["catalog", "show", "trn1.32xlarge", "--region", "us-eats-1"], "did you mean us-east-1?"),
        (["catalog", "--region", "us-eats-1"], "did you mean us-east-1?"),
        (["catalog", "--accelerator", "TPU"], "--accelerator"),
        (["catalog", "--catalog", "/no/such/file.toml"], "/no/such/file.toml"),
    ],
)
def test_bad_input_one_line_exit_2(capsys: pytest.CaptureFixture[str], args: list[str], needle: str) -> None:
    code, _, err = run(capsys, *args)
    assert code == 2
    assert err.startswith("chipswap: error: ") and err.count("\n") == 1
    assert needle in err


def test_malformed_override_via_real_cli(tmp_path: Path) -> None:
    f = tmp_path / "bad.toml"
    f.write_text(
        '[[price]]\ninstance = "inf2.xlarge"\nregion = "us-east-1"\nterm = "on-demand"\n'
        'usd_per_hour = "free"\nsource = "q"\nas_of = "d"\n'
    )
    proc = subprocess.run(
        [sys.executable, "-m", "chipswap", "catalog", "--catalog", str(f)],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 2
    assert proc.stderr.startswith(f"chipswap: error: {f}:1:")
    assert "usd_per_hour" in proc.stderr and len(proc.stderr.splitlines()) == 1
    assert "Traceback" not in proc.stderr


def test_show_prints_each_distinct_note_once(capsys: pytest.CaptureFixture[str]) -> None:
    catalog = load_catalog(None)
    spot_notes = [r.note for r in catalog.rates_for("trn1.32xlarge", None) if r.term == "spot" and r.note]
    assert len(spot_notes) >= 2  # several regions, notes differing only in their min/max tail
    code, out, _ = run(capsys, "catalog", "show", "trn1.32xlarge")
    assert code == 0
    head = "spot observed once per AZ"
    assert out.count(head) == 1
    assert all(n.split("; min ")[-1].split(" over")[0].split(", max")[0] in out for n in spot_notes)
