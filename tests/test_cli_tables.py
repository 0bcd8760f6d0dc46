"""Every table a command prints, at 60 and at 200 columns (the width chipswap.cli.common.console gives,
set here through OFF_TERMINAL_WIDTH as a narrow or a wide terminal would set it): at 60 no line is wider than
the terminal and no cell is cut ("in…", "0.…"): each row becomes a card; at 200 the table is drawn as a
table. The figures looked for come from the same command's --json."""

from __future__ import annotations

import json
import re

import pytest

from tests.cli_helpers import run_inproc

CATALOG = ("catalog", "--family", "inf2")
SHAPES = ("shapes", "-k", "4")


def _at(capsys, monkeypatch, width: int, *args: str, upto: str | None = None, code: int = 0) -> str:
    """The output at `width` columns, checked up to the line `upto` (what follows is copy-paste config, kept
    on one line on purpose)."""
    import chipswap.cli.common as common

    monkeypatch.setattr(common, "OFF_TERMINAL_WIDTH", width)
    got, out, err = run_inproc(capsys, *args)
    assert got == code, err
    out = out.split(f"\n{upto}\n")[0] if upto else out
    lines = out.splitlines()
    assert max(len(x) for x in lines) <= width, max(lines, key=len)
    assert "…" not in out
    return out


def _json(capsys, *args: str):
    code, out, err = run_inproc(capsys, *args, "--json")
    assert code == 0, err
    return json.loads(out)


def _price(x: float) -> str:
    return str(x)  # the catalog prints prices as published, every digit


def test_catalog_list_keeps_every_price_at_60_and_is_a_table_at_200(capsys, monkeypatch) -> None:
    found = _json(capsys, *CATALOG)["instances"]
    narrow = _at(capsys, monkeypatch, 60, *CATALOG)
    for inst in found:
        assert f"- {inst['name']}" in narrow  # one card per instance, named by it
        for p in inst["prices"]:
            if p["region"] == "us-east-1" and p["term"] in ("on-demand", "spot"):
                assert f"{p['term']}: {_price(p['usd_per_hour'])}" in narrow
        assert f"vCPU: {inst['vcpus']}" in narrow
    wide = _at(capsys, monkeypatch, 200, *CATALOG)
    assert "┃ instance" in wide and "- inf2" not in wide
    for inst in found:
        row = next(x for x in wide.splitlines() if f"│ {inst['name']} " in x)
        assert f" {inst['vcpus']} │" in row


def test_shapes_keeps_k_and_overhead_at_60_and_is_a_table_at_200(capsys, monkeypatch) -> None:
    plan = _json(capsys, *SHAPES)
    rows = {"optimal": plan["totals"], **plan["baselines"]}
    snippet = next(iter(plan["snippets"]))
    narrow = _at(capsys, monkeypatch, 60, *SHAPES, upto=snippet)
    for name, row in rows.items():
        card = narrow.split(f"- {name}\n", 1)[1].split("\n- ", 1)[0]
        assert f"K: {row['k']}" in card and f"overhead: {row['overhead_pct']:.1f}%" in card, name
        assert ", ".join(map(str, row["edges"])) in " ".join(card.split())  # every edge, none cut
    wide = _at(capsys, monkeypatch, 200, *SHAPES, upto=snippet)
    assert re.search(r"┃ plan +┃ +K ┃ overhead ┃", wide)
    for name, row in rows.items():
        line = next(x for x in wide.splitlines() if x.startswith(f"│ {name} "))
        cells = [c.strip() for c in line.split("│")[1:-1]]
        assert cells[1:3] == [str(row["k"]), f"{row['overhead_pct']:.1f}%"], name


@pytest.mark.parametrize(
    "args",
    [("catalog", "chips"), ("catalog", "show", "trn1.32xlarge"), ("catalog", "show", "p5.48xlarge")],
)
def test_catalog_tables_fit_60_and_200(capsys, monkeypatch, args) -> None:
    narrow = _at(capsys, monkeypatch, 60, *args)
    wide = _at(capsys, monkeypatch, 200, *args)
    assert len(narrow.splitlines()) > len(wide.splitlines())  # cards: more, shorter lines
    # every date in the wide table survives whole in the narrow output
    assert set(re.findall(r"\d{4}-\d\d-\d\d", wide)) <= set(re.findall(r"\d{4}-\d\d-\d\d", narrow))


def test_off_a_terminal_tables_stay_wide_whatever_columns_says(capsys, monkeypatch) -> None:
    from chipswap.cli.common import OFF_TERMINAL_WIDTH

    monkeypatch.setenv("COLUMNS", "80")  # what GNU readline exports to children of a process that loaded it
    code, out, _ = run_inproc(capsys, *CATALOG)
    assert code == 0 and "┃ instance" in out
    assert max(len(x) for x in out.splitlines()) <= OFF_TERMINAL_WIDTH


def test_check_findings_at_60_and_200_keep_every_rule_and_count(capsys, monkeypatch) -> None:
    args = ("check", "tests.badmodels:make_topk")
    code, out, err = run_inproc(capsys, *args, "--json")
    assert code == 1, err
    findings = json.loads(out)["findings"]
    narrow = _at(capsys, monkeypatch, 60, *args, code=1)
    cards = narrow.split("\n- ")[1:]
    assert [c.split("\n")[0] for c in cards] == [f["severity"] for f in findings]
    for card, f in zip(cards, findings, strict=True):
        assert f"rule: {f['rule']}" in card and f"n: {f['count']}" in card
    wide = _at(capsys, monkeypatch, 200, *args, code=1)
    for f in findings:
        row = next(x for x in wide.splitlines() if x.startswith("│") and f" {f['rule']} " in x)
        assert row.rstrip().endswith(f" {f['count']} │"), row  # the count column keeps its digits
