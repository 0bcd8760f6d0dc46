"""Labels only evidence raises (issue 42): a plain "measured" needs the run's own evidence (the tokenizer
agreeing, or the host checked beside the server, and the physics floor met at the stated or the most
demanding dtype). A remote server that fakes /v1/models and TGI /info is "identity by server claim"; an
imported peer file (e.g. a GPU run relabelled inf2.48xlarge) is "identity as the file states"; without a
stated dtype the floor for the label is fp32's, not int4's.

Through plan.bench_check.checked_measured with the shipped catalog and the tiny-gpt2 preset (no server)."""

from __future__ import annotations

from dataclasses import replace

import pytest

from chipswap.bench.evidence import (
    LABEL_BOTH,
    LABEL_CLAIM,
    LABEL_FILE,
    LABEL_METADATA,
    LABEL_NAME,
    Evidence,
    Judgement,
    tpot_floor_ms,
    trust,
)
from chipswap.bench.identity import BenchIdentity
from chipswap.bench.results import BenchResults, MeasuredServing
from chipswap.economics.catalog_io import load_catalog
from chipswap.models import resolve_model
from chipswap.plan.bench_check import _declared, checked_measured


def test_trust_needs_the_runs_own_evidence() -> None:
    def j(label: str, floor_ok: bool = True) -> Judgement:
        return Judgement((), label, (), floor_ok)

    assert trust(j(LABEL_BOTH), imported=False, host_checked=False) == ""
    assert trust(j(LABEL_METADATA), imported=False, host_checked=False) == LABEL_CLAIM
    assert trust(j(LABEL_METADATA), imported=False, host_checked=True) == ""
    assert trust(j(LABEL_BOTH, floor_ok=False), imported=False, host_checked=True) == LABEL_CLAIM
    assert trust(j(LABEL_NAME), imported=False, host_checked=False) == LABEL_NAME
    assert trust(j(LABEL_BOTH), imported=True, host_checked=True) == LABEL_FILE


@pytest.fixture(scope="module")
def parts():
    cat = load_catalog()
    inst = cat.instance("g5.xlarge")
    model = resolve_model("tiny-gpt2")
    return cat, inst, model


def _results(ident: BenchIdentity, ev: Evidence, imported: str | None = None) -> BenchResults:
    return BenchResults(
        source="b.json", protocol="openai-completions", model=ident.model_name, url="http://203.0.113.7:8000",
        instance="g5.xlarge", term=None, region=None, measured_at="", complete=True, stop_reason="", sent=8,
        ok=8, duration_s=2.0, requests_per_s=4.0, goodput_rps=None, slo_e2e_ms=None, slo_ttft_ms=None,
        e2e_p50_ms=None, e2e_p90_ms=None, e2e_p99_ms=None, ttft_p99_ms=None, itl_p99_ms=None, error_rate=0.0,
        reject_rate=0.0, padding_waste=None, cost_per_million_usd=None, buckets=(), identity=ident,
        imported_from=imported, evidence=ev,
    )  # fmt: skip


def _source(parts, ident: BenchIdentity, ev: Evidence, imported: str | None = None) -> str:
    cat, inst, model = parts
    m = MeasuredServing("g5.xlarge", None, None, 4.0, None, None, "throughput (no SLO given)", evidence=ev)
    got = checked_measured(
        _results(ident, ev, imported), m, model=model, task=None, instance=inst, accept=False,
        chip=cat.chip(inst.accelerator),
    )  # fmt: skip
    return got.source


def _slow_tpot(parts) -> float:
    cat, inst, model = parts
    d = _declared(model, None, inst, cat.chip(inst.accelerator), "fp32")
    floor = tpot_floor_ms(d)
    assert floor is not None
    return floor * 3


def test_a_remote_server_that_describes_itself_is_identity_by_server_claim(parts) -> None:
    _, _, model = parts
    # a server on another machine that answers /v1/models and TGI /info with the workload's model
    ident = BenchIdentity(model_name=model.name, dtype="float32", beside_server=False)
    ev = Evidence(tpot_p50_ms=_slow_tpot(parts), server_model=model.name, model_sha="0" * 40,
                  max_context=model.config["n_positions"])  # fmt: skip
    assert _source(parts, ident, ev) == f"measured; {LABEL_CLAIM}"
    # the tokenizer agreeing (the bench's own counts against the server's) is the run's own evidence
    tok = replace(ev, tokenizer_vocab=model.config["vocab_size"], tokens_compared=8, tokens_agree=8)
    assert _source(parts, ident, tok) == "measured"


def test_an_imported_peer_file_is_identity_as_the_file_states(parts) -> None:
    _, _, model = parts
    ident = BenchIdentity(model_name=model.name, declared_instance="g5.xlarge")
    ev = Evidence(tpot_p50_ms=_slow_tpot(parts))
    assert _source(parts, ident, ev, imported="guidellm") == f"measured; {LABEL_FILE}"


def test_without_a_stated_dtype_the_label_needs_the_most_demanding_floor(parts) -> None:
    cat, inst, model = parts
    chip = cat.chip(inst.accelerator)
    fp32 = tpot_floor_ms(_declared(model, None, inst, chip, "fp32"))
    int4 = tpot_floor_ms(_declared(model, None, inst, chip, "int4"))
    assert fp32 is not None and int4 is not None and fp32 > 4 * int4
    host = dict(beside_server=True, gpus=("NVIDIA A10G",), ec2_instance_type="g5.xlarge")
    ident = BenchIdentity(model_name=model.name, **host)  # no dtype stated
    between = Evidence(tpot_p50_ms=(fp32 + int4) / 2)  # over int4's floor, under fp32's
    assert _source(parts, ident, between) == f"measured; {LABEL_NAME}"  # not refused, not plain either
    over = Evidence(tpot_p50_ms=fp32 * 1.5)
    assert _source(parts, ident, over) == "measured"  # host checked + floor met at fp32
    stated = replace(ident, dtype="int4")  # a stated dtype is the floor
    assert _source(parts, stated, between) == "measured"
