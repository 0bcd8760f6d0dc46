"""Known-bad modules: each yields its rule id at the line marked `# BAD: <tag>` in tests/badmodels.py."""

from __future__ import annotations

import pytest

from chipswap.errors import ChipswapError
from chipswap.readiness.check import run_check
from tests import badmodels


def _at(report, rule, line):
    return [
        f for f in report.findings if f.rule == rule and (f.location or "").endswith(f"badmodels.py:{line}")
    ]


@pytest.mark.parametrize("tag", sorted(badmodels.EXPECTED))
def test_bad_module_yields_rule_at_its_line(tag):
    factory, rule = badmodels.EXPECTED[tag]
    sdk = "2.27" if tag == "complex" else "2.32"  # complex64 is a blocker before SDK 2.32
    report = run_check(f"tests.badmodels:{factory}", sdk=sdk, target="inf2")
    line = badmodels.bad_line(tag)
    hits = _at(report, rule, line)
    assert hits, [(f.rule, f.location) for f in report.findings]
    severity = hits[0].severity
    if tag == "float64":
        assert severity == "warn" and report.exit_code == 0
    else:
        assert severity == "blocker" and report.exit_code == 1
    assert "badmodels.py" in (hits[0].code and hits[0].location or "")


def test_complex64_is_only_a_warning_on_232():
    report = run_check("tests.badmodels:make_complex", sdk="2.32", target="trn2")
    assert _at(report, "NCC_EVRF004.c64", badmodels.bad_line("complex"))
    assert report.exit_code == 0


def test_branch_failure_comes_from_draft_export():
    report = run_check("tests.badmodels:make_branch")
    assert not report.inventory.exported
    kinds = {i.kind for i in report.inventory.issues}
    assert "data_dependent" in kinds
    assert any(
        (i.location or "").endswith(f":{badmodels.bad_line('branch')}") for i in report.inventory.issues
    )


def test_good_module_is_ready():
    report = run_check("tests.badmodels:make_good", target="trn1")
    assert report.exit_code == 0 and not report.blockers
    assert str(report.support_percentage) == "100.00"


def test_forward_that_raises_is_a_usage_error():
    with pytest.raises(ChipswapError) as e:
        run_check("tests.badmodels:make_raises")
    msg = str(e.value)
    assert "RuntimeError" in msg and f"badmodels.py:{badmodels.bad_line('raises')}" in msg


def test_factory_returning_non_module():
    with pytest.raises(ChipswapError, match="not a torch.nn.Module"):
        run_check("tests.badmodels:make_not_a_module")


def test_analyze_json_keys_for_unsupported_node():
    report = run_check("tests.badmodels:make_custom_op")
    j = report.to_analyze_json()
    for key in (
        "support_percentage",
        "supported_operators",
        "unsupported_operators",
        "torch_neuronx_version",
        "neuronx_cc_version",
        "versions",
        "findings",
    ):
        assert key in j
    (entry,) = [u for u in j["unsupported_operators"] if u["kind"] == "chipswap_test::fused_gelu"]
    assert set(entry) >= {"kind", "failureAt", "call", "opGraph"}
    assert (
        "fused_gelu" in entry["opGraph"]
        and f"badmodels.py:{badmodels.bad_line('custom_op')}" in entry["call"]
    )
    sup = sum(j["supported_operators"].values())
    assert j["support_percentage"] == f"{100 * sup / (sup + 1):.2f}%"


@pytest.mark.parametrize("tag", sorted(badmodels.GOOD))
def test_plain_writes_and_float_accumulation_at_int64_positions_are_not_blockers(tag):
    """index_put without accumulate (a KV-cache update) and index_add into floats are not scatter-reduces on
    integers: NCC_EVRF016 keys on the written dtype and on accumulate, not on the int64 index tensor."""
    report = run_check(f"tests.badmodels:{badmodels.GOOD[tag]}", target="trn1")
    assert report.exit_code == 0 and not report.blockers, [(f.rule, f.location) for f in report.findings]
    line = badmodels.good_line(tag)
    ops = [op for op, _ in report.assessment.statuses if (op.location or "").endswith(f"badmodels.py:{line}")]
    writes = [op for op in ops if op.kind in ("aten::index_put", "aten::index_add")]
    assert writes and all("int64" in op.in_dtypes and op.data_dtype == "float32" for op in writes)


def test_user_moe_dispatch_is_reported_as_routing_at_its_line():
    report = run_check("tests.badmodels:make_moe")
    (hit,) = [f for f in report.blockers if f.rule == "CHIP_MOE_ROUTING"]
    assert hit.location.endswith(f"badmodels.py:{badmodels.bad_line('moe')}") and hit.module_path == "moe"
    assert "capacity" in hit.fix and "NxD Inference" in hit.fix
    # the generic data-dependence rule is superseded on the same line, not reported twice
    assert not [f for f in report.findings if f.rule == "NCC_EMOD025" and f.location == hit.location]


def test_factory_example_tensors_are_used_as_given():
    """A 10-word vocabulary and segment ids 0/1: values chipswap made up (ids up to 99) would not fit."""
    report = run_check("tests.badmodels:make_segments")
    assert report.exit_code == 0 and report.inventory.exported


def test_backward_only_op_found_with_training_at_forward_line():
    plain = run_check("tests.badmodels:make_cdist")
    assert not [f for f in plain.findings if f.rule == "CHIP_CPU_FALLBACK"]
    trained = run_check("tests.badmodels:make_cdist", training=True, target="trn1")
    (hit,) = [f for f in trained.findings if f.rule == "CHIP_CPU_FALLBACK"]
    assert "_cdist_backward" in hit.op and "backward" in hit.op
    assert hit.location.endswith(f"badmodels.py:{badmodels.bad_line('cdist_backward')}")
    phases = trained.phase_counts()
    assert phases["backward"] > 0 and phases["optimizer"] > 0 and trained.training


@pytest.mark.parametrize(
    "factory,needle",
    [
        ("make_exits", "called exit(3)"),
        ("make_forward_exits", "forward called exit(0)"),
        ("make_keyboard_like", "raised GeneratorExit"),
    ],
)
def test_factory_or_forward_that_exits_is_a_usage_error(factory, needle):
    with pytest.raises(ChipswapError) as e:
        run_check(f"tests.badmodels:{factory}")
    assert needle in str(e.value) and "\n" not in str(e.value)
