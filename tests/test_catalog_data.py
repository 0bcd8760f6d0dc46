"""The shipped catalog: coverage, provenance on every price, unknown prices left out, and the generator."""

from __future__ import annotations

import importlib.util
import sys
from decimal import Decimal
from pathlib import Path

import pytest

from chipswap.economics.catalog import TERMS, validate
from chipswap.economics.catalog_io import load_catalog
from chipswap.errors import ChipswapError

ROOT = Path(__file__).resolve().parents[1]
SHARED = ROOT.parent / "shared"
SIZES = {
    "trn1": {"2xlarge", "32xlarge"},
    "trn1n": {"32xlarge"},
    "trn2": {"48xlarge"},
    "inf1": {"xlarge", "2xlarge", "6xlarge", "24xlarge"},
    "inf2": {"xlarge", "8xlarge", "24xlarge", "48xlarge"},
    "p4d": {"24xlarge"},
    "p4de": {"24xlarge"},
    "p5": {"4xlarge", "48xlarge"},
    "p5e": {"48xlarge"},
    "p5en": {"48xlarge"},
    **{
        g: {"xlarge", "2xlarge", "4xlarge", "8xlarge", "12xlarge", "16xlarge", "24xlarge", "48xlarge"}
        for g in ("g5", "g6", "g6e")
    },
}


def _generator():
    """scripts/gen_catalog.py as a module (it is a script, not a package)."""
    spec = importlib.util.spec_from_file_location("gen_catalog", ROOT / "scripts" / "gen_catalog.py")
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


CHIPS = _generator().CHIPS  # the chips the generator must find in the shared reference tables


def test_every_family_and_size_is_present() -> None:
    cat = load_catalog()
    for family, sizes in SIZES.items():
        have = {i.name.split(".", 1)[1] for i in cat.select(family=family)}
        assert sizes <= have, (family, sizes - have)


def test_every_chip_has_specs_and_provenance() -> None:
    cat = load_catalog()
    for name in CHIPS:
        chip = cat.chip(name)
        assert chip.memory_gib > 0 and chip.memory_bandwidth_gb_s > 0
        assert chip.tflops("bf16") is not None and chip.tflops("bf16") > 0
        assert chip.source and chip.as_of
    assert cat.chip("Trainium2").memory_gib == 96  # the seed: 96 GiB per Trainium2 chip
    assert cat.chip("Trainium2").memory_bandwidth_gb_s == 2900  # ~2.9 TB/s
    assert cat.chip("H100").tflops("fp4") is None  # unknown stays unknown


def test_instances_are_consistent_with_their_chips() -> None:
    cat = load_catalog()
    assert validate(cat) == []
    for inst in cat.instances:
        chip = cat.chip(inst.accelerator)
        assert chip.kind == inst.kind
        assert (inst.neuron_cores > 0) == (inst.kind != "gpu")
        assert inst.regions or "no region list" in inst.source  # the UltraServer: no source lists regions
    # seed table: trn2.48xlarge 16 x Trainium2, 1.5 TB; inf2.48xlarge 12 chips, 384 GB; p5.48xlarge 8 x H100
    trn2 = cat.instance("trn2.48xlarge")
    assert (trn2.accelerator, trn2.accelerator_count, trn2.accelerator_memory_gib) == ("Trainium2", 16, 1536)
    assert cat.instance("inf2.48xlarge").accelerator_memory_gib == 384
    assert cat.instance("p5.48xlarge").accelerator_count == 8


def test_every_price_has_source_as_of_and_a_known_term() -> None:
    cat = load_catalog()
    assert len(cat.rates) > 500
    keys = dict(cat.sources)
    for r in cat.rates:
        assert r.usd_per_hour > 0 and isinstance(r.usd_per_hour, Decimal)
        assert r.source in keys, r
        assert r.as_of
        assert r.term in TERMS


def test_seed_list_and_reserved_prices() -> None:
    cat = load_catalog()
    assert cat.rate("p5.48xlarge").usd_per_hour == Decimal("55.04")
    assert cat.rate("trn1.32xlarge").usd_per_hour == Decimal("21.50")
    one, three = cat.rate("trn1.32xlarge", term="1yr"), cat.rate("trn1.32xlarge", term="3yr")
    assert (one.usd_per_hour, three.usd_per_hour) == (Decimal("13.23"), Decimal("8.20"))
    assert one.source == three.source == "seed-article"
    ri = cat.rate("trn1.32xlarge", term="ri-effective")
    assert ri.usd_per_hour == Decimal("8.197") and "not stated" in ri.note.lower()
    assert {r.instance for r in cat.rates if r.term == "ri-effective"} >= {
        "inf1.xlarge",
        "inf2.48xlarge",
        "trn1.2xlarge",
    }


def test_unknown_prices_are_absent_and_explained() -> None:
    cat = load_catalog()
    # trn2.48xlarge: only a Capacity Block rate is known (no on-demand, reserved or savings-plan rate)
    assert {r.term for r in cat.rates if r.instance == "trn2.48xlarge"} == {"capacity-block"}
    assert cat.capacity_block_only("trn2.48xlarge") and not cat.capacity_block_only("trn1.32xlarge")
    assert not [r for r in cat.rates if r.instance == "p5e.48xlarge" and r.term == "on-demand"]
    with pytest.raises(ChipswapError) as exc:
        cat.rate("trn2.48xlarge", "us-east-2")
    assert "Capacity Blocks" in str(exc.value)
    with pytest.raises(ChipswapError) as exc:
        cat.rate("trn1.32xlarge", "ap-south-1")
    msg = str(exc.value)
    assert "us-east-1" in msg and "us-west-2" in msg  # names the regions that have one


def test_unknown_instance_lists_closest_names() -> None:
    with pytest.raises(ChipswapError) as exc:
        load_catalog().instance("inf2.xlarg")
    assert "inf2.xlarge" in str(exc.value)


def test_load_is_cached() -> None:
    assert load_catalog() is load_catalog()


@pytest.mark.skipif(
    not (SHARED / "reference" / "pricing").is_dir(), reason="shared/ reference data not present"
)
def test_generator_reproduces_the_committed_file(tmp_path: Path) -> None:
    mod = _generator()
    out = tmp_path / "catalog.toml"
    argv = sys.argv
    try:
        sys.argv = ["gen_catalog.py", str(SHARED), "--out", str(out)]
        mod.main()
    finally:
        sys.argv = argv
    committed = ROOT / "src" / "chipswap" / "data" / "catalog" / "catalog.toml"
    assert out.read_text() == committed.read_text()


def test_find_rate_returns_none_for_unknown_price() -> None:
    cat = load_catalog()
    assert cat.find_rate("trn2.48xlarge", "us-east-2") is None
    assert cat.find_rate("inf2.xlarge") == cat.rate("inf2.xlarge")
    with pytest.raises(ChipswapError):
        cat.find_rate("nope.xlarge")
