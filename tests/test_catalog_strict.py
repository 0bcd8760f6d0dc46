"""Catalog files are data from someone else: every number is a plain finite number inside documented bounds.

NaN, inf, 1e300 (Decimal overflow in the cost engine), booleans and numeric strings as prices or sizes
give one line naming the file, the instance and the field, exit 2 — never a traceback (issue 15). Each case
below used to crash or to leave out the instance; a small seeded fuzz run covers the rest.
"""

from __future__ import annotations

from decimal import Decimal
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from chipswap.economics.catalog_io import load_catalog
from chipswap.errors import ChipswapError
from tests.cli_helpers import one_line_error, run_inproc
from tests.test_cost_cli import WORKED_EXAMPLE
from tests.toml_inputs import price_entry

PRICE = price_entry(term="on-demand", value="{value}", source="a colleague")

GROUPED = """[[prices]]
term = "spot"
source = "a colleague"
as_of = "2026-11-01"
rows = [
  ["inf2.xlarge", "us-east-1", 0.25],
  ["trn1.2xlarge", "us-west-2", {value}],
]
"""

INSTANCE = """[[instance]]
name = "trn9.xlarge"
family = "trn9"
kind = "trainium"
accelerator = "Trainium2"
accelerator_count = {count}
accelerator_memory_gib = {mem}
neuron_cores = 8
vcpus = 8
memory_gib = 32
regions = ["us-east-1"]
source = "made up"
as_of = "2026-11-01"
"""

def run_with(capsys, tmp_path: Path, text: str) -> tuple[int, str, str, Path]:
    path = tmp_path / "theirs.toml"
    path.write_text(text)
    code, out, err = run_inproc(capsys, *WORKED_EXAMPLE, "--catalog", str(path))
    return code, out, err, path


@pytest.mark.parametrize(
    ("value", "why"),
    [
        ("nan", "finite"),
        ("+nan", "finite"),
        ("inf", "finite"),
        ("-inf", "finite"),
        ("1e300", "<= 100000"),
        ("1e-300", "> 0"),
        ("0", "> 0"),
        ("-21.5", "> 0"),
        ("true", "plain number"),
        ('"21.5"', "plain number"),
        ("[21.5]", "plain number"),
    ],
)
def test_a_bad_price_is_one_line_naming_file_instance_and_field(capsys, tmp_path, value, why) -> None:
    for template, instance in ((PRICE, "trn1.32xlarge"), (GROUPED, "trn1.2xlarge")):
        code, out, err, path = run_with(capsys, tmp_path, template.format(value=value))
        assert code == 2, (value, out, err)
        assert err.startswith("chipswap: error: ") and err.count("\n") == 1 and "Traceback" not in err
        for needle in (str(path), instance, "usd_per_hour", why):
            assert needle in err, (needle, err)


@pytest.mark.parametrize(
    ("count", "mem", "field"),
    [(count, "96", "accelerator_count") for count in ("true", "1e9", "100000000000")]
    + [("1", mem, "accelerator_memory_gib") for mem in ("nan", '"96"', "1e300")],
)
def test_a_bad_size_names_the_instance_and_field(tmp_path, count, mem, field) -> None:
    path = tmp_path / "theirs.toml"
    path.write_text(INSTANCE.format(count=count, mem=mem))
    msg = one_line_error(None, load_catalog, path)
    assert str(path) in msg and "trn9.xlarge" in msg and field in msg


@pytest.mark.parametrize(
    ("text", "needle"),
    [
        ("instance = [1, 2]\n", "array of tables"),
        ("price = 3\n", "array of tables"),
        ('[[chip]]\nname = "X"\ntflops_dense = { bf16 = nan }\n', "finite"),
        ("x = " + "[" * 200 + "]" * 200 + "\n", "nested deeper"),
        (PRICE.format(value="21.5").replace('"us-east-1"', '"../../etc"'), "not an AWS region name"),
        (GROUPED.format(value="1").replace("0.25],", "0.25, 7],"), "note"),
    ],
)
def test_malformed_structures_are_one_line_errors(tmp_path, text, needle) -> None:
    path = tmp_path / "theirs.toml"
    path.write_text(text)
    with pytest.raises(ChipswapError) as exc:
        load_catalog(path)
    assert needle in str(exc.value) and str(path) in str(exc.value)


def test_non_utf8_and_folder_are_one_line_errors(tmp_path) -> None:
    bad = tmp_path / "latin1.toml"
    bad.write_bytes(PRICE.format(value="21.5").encode() + "# caf\xe9\n".encode("latin-1"))
    with pytest.raises(ChipswapError, match="not UTF-8"):
        load_catalog(bad)
    with pytest.raises(ChipswapError, match="is a folder"):
        load_catalog(tmp_path)


def test_prices_inside_the_bounds_load_exactly(tmp_path) -> None:
    from chipswap.economics.catalog_io import NUMBER_BOUNDS, parse_catalog

    lo, hi = NUMBER_BOUNDS["usd_per_hour"]
    for value in (lo, hi, Decimal("21.123456789012345678")):
        cat = parse_catalog(PRICE.format(value=value), "<test>")
        assert cat.rate("trn1.32xlarge").usd_per_hour == value


_values = st.one_of(
    st.floats(allow_nan=True, allow_infinity=True).map(repr),
    st.integers(min_value=-(10**30), max_value=10**30).map(str),
    st.decimals(allow_nan=False, allow_infinity=False).map(str),
    st.sampled_from(["nan", "inf", "-inf", "true", "false", '"1"', "[]", "{}", "1e999", "0x10", "1_000"]),
    st.text(max_size=8).map(lambda t: '"' + t.replace("\\", "").replace('"', "") + '"'),
)


@settings(max_examples=60, deadline=None, derandomize=True, suppress_health_check=[HealthCheck.too_slow])
@given(value=_values)
def test_fuzzed_prices_load_or_give_one_clean_error(value: str) -> None:
    """Seeded fuzz: any value either loads (and is inside the bounds) or is a one-line ChipswapError."""
    from chipswap.economics.catalog_io import NUMBER_BOUNDS, parse_catalog

    lo, hi = NUMBER_BOUNDS["usd_per_hour"]
    for template in (PRICE, GROUPED):
        try:
            cat = parse_catalog(template.format(value=value), "<fuzz>")
        except ChipswapError as exc:
            assert "\n" not in str(exc)
            continue
        for r in cat.rates:
            assert r.usd_per_hour.is_finite() and lo <= r.usd_per_hour <= hi
            assert (r.usd_per_hour * 8760 * 1000).quantize(Decimal("0.01"))  # the cost engine's arithmetic
