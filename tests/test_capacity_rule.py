"""The pure capacity screening rule (chipswap.economics.capacity): offered / not offered / quota too low /
unknown,
the vCPU increase to request, the region recommendation, and the verdict wording the plan shows."""

from __future__ import annotations

from dataclasses import replace

import pytest

from chipswap.economics.capacity import (
    CHECK_QUOTA,
    QUOTA_CLASSES,
    Quota,
    RegionCapacity,
    capacity_block_count,
    capacity_reason,
    is_region_name,
    qualify_verdict,
    quota_class,
    screen_capacity,
    sold_as_capacity_blocks,
)
from chipswap.verdict.rules import CLOSE, MOVE_INF, MOVE_TRN, STAY, decide
from tests.test_verdict import clean

TRN = QUOTA_CLASSES[0]


def facts(region: str = "us-east-1", *, offered=True, limit=256, usage=0, vcpus=128, checked=True, **kw):
    quota = None if limit == "none" else Quota(TRN.on_demand_code, TRN.on_demand_name, limit, usage)
    return RegionCapacity(
        instance="trn1.32xlarge",
        region=region,
        vcpus_per_instance=vcpus,
        checked=checked,
        as_of="2026-11-30",
        offered=offered,
        zones=("a", "b") if offered else (),
        quota=quota,
        **kw,
    )


@pytest.mark.parametrize(
    ("count", "limit", "usage", "increase"),
    [(8, 256, 0, 768), (8, 512, 264, 776), (1, 0, 0, 128), (3, 384, 1, 1)],
)
def test_quota_too_low_asks_for_exactly_the_missing_vcpus(count, limit, usage, increase) -> None:
    s = screen_capacity(facts(limit=limit, usage=usage), count)
    assert s.status == "quota-too-low" and s.outcome == "fail"
    assert s.increase_vcpus == count * 128 + usage - limit == increase
    assert s.requested_limit_vcpus == limit + increase
    assert s.qualifier == f"request a quota increase of {increase:,} vCPUs in us-east-1 first"
    assert TRN.on_demand_code in s.text and f"{count * 128:,} vCPUs" in s.text


@pytest.mark.parametrize(("count", "limit", "usage"), [(2, 256, 0), (1, 256, 128), (8, 2048, 1024)])
def test_fits_exactly_at_the_boundary_and_below(count, limit, usage) -> None:
    s = screen_capacity(facts(limit=limit, usage=usage), count)
    assert s.status == "fits" and s.outcome == "pass" and s.is_pass
    assert s.qualifier == "" and s.increase_vcpus is None
    # one more instance than fits flips it
    more = (limit - usage) // 128 + 1
    assert screen_capacity(facts(limit=limit, usage=usage), more).status == "quota-too-low"


def test_the_clear_move_becomes_move_but_request_a_quota_increase() -> None:
    """The Must-show wording: a clear move, then the capacity rule, gives
    'move to Trainium — but request a quota increase of N vCPUs in REGION first'."""
    training = {"kind": "training", "target_kind": "trainium", "peak_to_mean": None, "mean_rps": None}
    clear = decide(clean(target="trn1.32xlarge", **training))
    assert clear.verdict == MOVE_TRN and clear.is_move
    s = screen_capacity(facts(limit=256, usage=128), 8)
    line = qualify_verdict(clear.verdict, s)
    assert line == "move to Trainium — but request a quota increase of 896 vCPUs in us-east-1 first"
    # a fleet that fits leaves the verdict as it was; stay / close-call verdicts are never qualified
    assert qualify_verdict(clear.verdict, screen_capacity(facts(limit=4096), 8)) == MOVE_TRN
    assert qualify_verdict(STAY, s) == STAY and qualify_verdict(CLOSE, s) == CLOSE
    assert qualify_verdict(MOVE_INF, s).startswith(MOVE_INF + " — but request")


@pytest.mark.parametrize(
    ("kw", "why"),
    [
        ({"offered": None}, "whether AWS offers"),
        ({"limit": None}, "quota (L-2C3B7624) in us-east-1 is not known"),
        ({"limit": "none", "quota_note": "outside the classes"}, "no quota reading"),
        ({"limit": 4096, "usage": None}, "already in use are not known"),
    ],
)
def test_unknown_is_never_a_pass(kw, why) -> None:
    s = screen_capacity(facts(**kw), 4)
    assert s.status == "unknown" and s.outcome == "unknown" and not s.is_pass
    assert why in s.text and "unknown is not a pass" in s.text
    assert s.qualifier == CHECK_QUOTA
    assert qualify_verdict(MOVE_TRN, s) == "move to Trainium — but check quota before committing"
    assert capacity_reason(s).outcome == "unknown" and capacity_reason(s).favours is None


def test_unknown_fleet_size_is_unknown() -> None:
    s = screen_capacity(facts(limit=100000), None)
    assert s.status == "unknown" and "fleet size is not known" in s.text


def test_limit_too_low_even_with_usage_unknown_says_at_least() -> None:
    s = screen_capacity(facts(limit=256, usage=None), 4)
    assert s.status == "quota-too-low" and s.increase_vcpus == 256
    assert "at least 256 vCPUs" in s.qualifier


def test_the_offline_snapshot_is_unknown_and_says_so() -> None:
    snap = facts(offered=None, limit="none", checked=False, offered_note="listed in the shipped region table")
    s = screen_capacity(snap, 1)
    assert s.outcome == "unknown" and "shipped snapshot 2026-11-30, not checked" in s.text


def test_not_offered_recommends_a_region_that_fits_first() -> None:
    here = facts("us-west-1", offered=False, limit=0)
    alt_small = facts("us-east-2", limit=128, usage=0)  # offers it, but 4 x 128 vCPUs do not fit
    alt_fits = facts("us-west-2", limit=1024, usage=0)
    s = screen_capacity(here, 4, [here, alt_small, alt_fits])
    assert s.status == "not-offered" and s.outcome == "fail"
    assert s.recommended_region == "us-west-2"
    assert s.qualifier == "trn1.32xlarge is not offered in us-west-1: run it in us-west-2"
    # nothing fits: the first region that offers it
    s2 = screen_capacity(here, 4, [alt_small, replace(alt_fits, quota=None)])
    assert s2.recommended_region == "us-east-2"
    # nothing offers it
    s3 = screen_capacity(here, 4, [facts("eu-west-1", offered=False)])
    assert s3.recommended_region is None and "no other checked region offers it" in s3.text
    assert capacity_reason(s).outcome == "fail" and capacity_reason(s).favours == "gpu"


def test_quota_classes_cover_the_catalog_families() -> None:
    cases = {
        "trn1.32xlarge": "Trn",
        "trn2.48xlarge": "Trn",
        "trn1n.32xlarge": "Trn",
        "inf2.xlarge": "Inf",
        "inf1.24xlarge": "Inf",
        "p5.48xlarge": "P",
        "p6-b200.48xlarge": "P",
        "p4de.24xlarge": "P",
        "g6e.xlarge": "G",
        "g5.48xlarge": "G",
        "vt1.3xlarge": "G",
    }
    for name, cls in cases.items():
        qc = quota_class(name)
        assert qc is not None and qc.name == cls, name
    assert quota_class("m5.large") is None and quota_class("inferno.x") is None
    assert TRN.code("on-demand") == "L-2C3B7624" and TRN.code("spot") == "L-6B0D517C"


def test_capacity_block_sizes_and_families() -> None:
    assert [capacity_block_count(n) for n in (1, 3, 8, 9, 64, 65)] == [1, 4, 8, 16, 64, None]
    assert sold_as_capacity_blocks("trn2.48xlarge") and sold_as_capacity_blocks("p5.48xlarge")
    assert not sold_as_capacity_blocks("inf2.xlarge") and not sold_as_capacity_blocks("p5en-x.48xlarge")


def test_region_names() -> None:
    assert all(is_region_name(r) for r in ("us-east-1", "ap-southeast-4", "us-gov-west-1", "eu-central-2"))
    assert not any(is_region_name(r) for r in ("us-east", "../x", "US-EAST-1", "us-east-1 ", ""))


def test_bad_fleet_size_is_a_programming_error() -> None:
    with pytest.raises(ValueError):
        screen_capacity(facts(), 0)
