"""User catalog overrides (--catalog FILE): merging, replacing, and errors that name file, line and field."""

from __future__ import annotations

from decimal import Decimal
from pathlib import Path

import pytest

from chipswap.economics.catalog_io import load_catalog
from chipswap.errors import ChipswapError

PRICE = """
[[price]]
instance = "trn1.32xlarge"
region = "us-east-1"
term = "on-demand"
usd_per_hour = 19.99
source = "my-quote"
as_of = "2026-11-01"
"""

INSTANCE = """
[[instance]]
name = "trn9.xlarge"
family = "trn9"
kind = "trainium"
accelerator = "Trainium2"
accelerator_count = 1
accelerator_memory_gib = 96
neuron_cores = 8
vcpus = 8
memory_gib = 32
regions = ["us-east-1"]
source = "made up for a test"
as_of = "2026-11-01"
"""


def write(tmp_path: Path, text: str) -> Path:
    p = tmp_path / "mine.toml"
    p.write_text(text)
    return p


def test_override_merges_over_shipped(tmp_path: Path) -> None:
    cat = load_catalog(write(tmp_path, PRICE + INSTANCE))
    assert cat.rate("trn1.32xlarge").usd_per_hour == Decimal("19.99")
    assert cat.rate("trn1.32xlarge").source == "my-quote"
    assert cat.rate("p5.48xlarge").usd_per_hour == Decimal("55.04")  # untouched shipped price
    assert cat.instance("trn9.xlarge").neuron_cores == 8
    assert load_catalog().rate("trn1.32xlarge").usd_per_hour == Decimal("21.5")  # shipped cache not mutated


def test_override_grouped_rows(tmp_path: Path) -> None:
    text = """
[[prices]]
term = "spot"
source = "my-crawl"
as_of = "2026-11-02"
rows = [
  ["trn1.32xlarge", "us-east-1", 3.1],
  ["inf2.xlarge", "us-east-1", 0.2, "one AZ"],
]
"""
    cat = load_catalog(write(tmp_path, text))
    assert cat.rate("trn1.32xlarge", term="spot").usd_per_hour == Decimal("3.1")
    assert cat.rate("inf2.xlarge", term="spot").note == "one AZ"


def test_replace_true_drops_shipped_data(tmp_path: Path) -> None:
    cat = load_catalog(write(tmp_path, "replace = true\n" + INSTANCE))
    assert [i.name for i in cat.instances] == ["trn9.xlarge"]
    with pytest.raises(ChipswapError, match="trn9.xlarge"):
        cat.instance("trn1.32xlarge")


@pytest.mark.parametrize(
    ("text", "needles"),
    [
        ("[[price]\ninstance = 'x'\n", [":", "line 1", "TOML"]),
        (PRICE.replace("usd_per_hour = 19.99\n", ""), [":2:", "usd_per_hour"]),
        (PRICE.replace("19.99", "-1"), [":2:", "usd_per_hour", "> 0"]),
        (PRICE.replace("19.99", '"cheap"'), [":2:", "usd_per_hour"]),
        (PRICE.replace('"on-demand"', '"5yr"'), [":2:", "term", "5yr"]),
        (PRICE.replace('source = "my-quote"\n', ""), [":2:", "source"]),
        (INSTANCE.replace('"trainium"', '"tpu"'), [":2:", "kind", "tpu"]),
        (INSTANCE.replace("neuron_cores = 8\n", ""), [":2:", "neuron_cores"]),
        (
            '[[prices]]\nterm = "spot"\nsource = "s"\nas_of = "d"\nrows = [\n  ["a", "us-east-1", 1],\n'
            '  ["b", "us-east-1"],\n]\n',
            [":7:", "row 2"],
        ),
        (PRICE.replace('"trn1.32xlarge"', '"nope.xlarge"'), ["nope.xlarge", "unknown instance"]),
        ("title = 'nothing here'\n", ["no [[instance]]"]),
    ],
)
def test_malformed_override_names_file_and_line(tmp_path: Path, text: str, needles: list[str]) -> None:
    path = write(tmp_path, text)
    with pytest.raises(ChipswapError) as exc:
        load_catalog(path)
    msg = str(exc.value)
    assert str(path) in msg
    assert "\n" not in msg
    for needle in needles:
        assert needle in msg, msg


def test_missing_override_file(tmp_path: Path) -> None:
    with pytest.raises(ChipswapError, match="not found"):
        load_catalog(tmp_path / "nope.toml")
