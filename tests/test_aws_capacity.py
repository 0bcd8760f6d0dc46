"""`chipswap capacity` and the plan's capacity facts against a moto server on loopback (real HTTP, real
botocore parsing) for what moto implements (instance type offerings, instances, instance types, spot price
history, STS), and botocore Stubbers (model-checked responses) for what it does not (Service Quotas EC2
codes, spot placement scores, Capacity Block offerings). No test reaches the internet."""

from __future__ import annotations

import json
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta

import pytest

from chipswap.economics.aws import access as aws_access
from chipswap.economics.aws.access import AwsAccess
from chipswap.economics.aws.capacity import capacity_for_plan, gather_capacity
from chipswap.economics.capacity import qualify_verdict
from chipswap.economics.catalog_io import load_catalog
from chipswap.verdict.rules import MOVE_TRN
from tests.aws_helpers import (
    STS_IDENTITY,
    Moto,
    Stubs,
    block_internet,
    closed_port,
    ec2_error,
    fake_aws,
    fake_credentials,
    json_error,
    offline_env,
    quota_response,
    routed_factory,
    run_instances,
    sealed,
    sts_error,
)
from tests.cli_helpers import run_inproc

TODAY = "2026-11-30"


@pytest.fixture
def aws(moto: Moto, monkeypatch: pytest.MonkeyPatch) -> Iterator[tuple[Moto, Stubs]]:
    """Fake credentials, no internet, the moto server (no instances running), and a fresh set of stubs."""
    yield moto, sealed(monkeypatch)
    moto.terminate_all()


def access_for(moto: Moto, stubs: Stubs) -> AwsAccess:
    return AwsAccess(client_factory=routed_factory(moto, stubs))


def gather(moto: Moto, stubs: Stubs, instance: str, count: int, region: str = "us-east-1", **kw):
    """gather_capacity for one region through moto + stubs, without the display-only extras by default."""
    kw.setdefault("extras", False)
    return gather_capacity(
        load_catalog(), instance, [region], count, access=access_for(moto, stubs), today=TODAY, **kw
    )


def zones_moto_offers(moto: Moto, region: str, instance: str) -> set[str]:
    """What moto's own (real-AWS-derived) offerings data says, asked independently of chipswap."""
    got = moto.client("ec2", region).describe_instance_type_offerings(
        LocationType="availability-zone", Filters=[{"Name": "instance-type", "Values": [instance]}]
    )
    return {o["Location"] for o in got["InstanceTypeOfferings"]}


def stub_quota(stubs: Stubs, region: str, value: float, code: str = "L-2C3B7624") -> None:
    stubs.respond(
        "service-quotas",
        region,
        "GetServiceQuota",
        quota_response(code, "Running On-Demand Trn instances", value),
        {"ServiceCode": "ec2", "QuotaCode": code},
    )


def stub_extras(stubs: Stubs, regions: list[str], *, blocks_in: str | None = None) -> None:
    stubs.respond(
        "ec2",
        regions[0],
        "GetSpotPlacementScores",
        {"SpotPlacementScores": [{"Region": r, "Score": 3 + n} for n, r in enumerate(regions)]},
    )
    start = datetime(2026, 12, 7, 11, 30, tzinfo=UTC)
    if blocks_in is not None:
        r = blocks_in
        offers = [
            {
                "CapacityBlockOfferingId": "cbr-0123456789abcdef0",
                "InstanceType": "trn1.32xlarge",
                "AvailabilityZone": f"{r}b",
                "InstanceCount": 8,
                "StartDate": start,
                "EndDate": start + timedelta(hours=24),
                "CapacityBlockDurationHours": 24,
                "UpfrontFee": "2974.08",
                "CurrencyCode": "USD",
                "Tenancy": "default",
            }
        ]
        stubs.respond("ec2", r, "DescribeCapacityBlockOfferings", {"CapacityBlockOfferings": offers})


def test_capacity_must_show_table_against_moto(aws, monkeypatch, capsys) -> None:
    """`chipswap capacity trn1.32xlarge --count 8` against moto seeded with offerings (moto's own data),
    running instances (usage) and quotas (Stubber): the table and the quota increase to request."""
    moto, stubs = aws
    run_instances(moto, "us-east-1", "trn1.32xlarge", 2)  # 256 vCPUs of Trn in use
    run_instances(moto, "us-east-1", "trn1.2xlarge", 1)  # + 8
    run_instances(moto, "us-east-1", "m5.large", 3)  # another class: not counted
    regions = ["us-east-1", "us-west-1"]
    stub_quota(stubs, "us-east-1", 512.0)
    stub_quota(stubs, "us-west-1", 256.0)
    stub_extras(stubs, regions, blocks_in="us-east-1")
    monkeypatch.setattr(aws_access, "access_from_environment", lambda no_aws: access_for(moto, stubs))

    code, out, err = run_inproc(
        capsys, "capacity", "trn1.32xlarge", "--count", "8", "--region", "us-east-1", "--region", "us-west-1"
    )
    assert code == 0, err
    assert "checked with AWS" in out and "account 123456789012" in out
    assert "8 x trn1.32xlarge = 1,024 vCPUs (Running On-Demand Trn instances, L-2C3B7624)" in out
    need, used, limit = 8 * 128, 2 * 128 + 8, 512
    increase = need + used - limit
    assert f"request +{increase:,} vCPUs" in out
    assert f"request a quota increase of {increase:,} vCPUs, to {limit + increase:,}" in out
    assert "no: not offered" in out  # us-west-1 does not offer trn1.32xlarge in moto's offerings data
    assert "not offered in us-west-1; us-east-1 offers it" in out
    stubs.assert_all_used()

    code, out, err = run_inproc(
        capsys, "capacity", "trn1.32xlarge", "-n", "8", "--region", "us-east-1", "--json", "--no-aws"
    )
    # --no-aws is honoured by access_from_environment; here it is replaced, so the JSON is the live answer
    data = json.loads(out)
    assert data["checked"] is True and data["vcpus_needed"] == need


def test_gathered_facts_match_what_aws_answers(aws) -> None:
    moto, stubs = aws
    run_instances(moto, "us-east-1", "trn1.32xlarge", 1)
    run_instances(moto, "us-east-1", "trn1.32xlarge", 1, spot=True)  # spot: not in the on-demand quota
    stub_quota(stubs, "us-east-1", 1024.0)
    stub_extras(stubs, ["us-east-1"], blocks_in="us-east-1")
    found = gather(moto, stubs, "trn1.32xlarge", 4, extras=True)
    row = found.rows[0]
    assert found.checked and row.checked and row.as_of == TODAY
    assert row.offered is True
    assert set(row.zones) == zones_moto_offers(moto, "us-east-1", "trn1.32xlarge") and row.zones
    assert row.quota is not None and row.quota.limit_vcpus == 1024 and row.quota.usage_vcpus == 128
    assert row.spot_usd is not None and row.spot_usd > 0 and f"over {len(row.zones)} AZ(s)" in row.spot_note
    assert row.placement_score == 3
    assert len(row.blocks) == 1 and row.blocks[0].hours == 24
    assert row.blocks[0].usd_per_instance_hour == row.blocks[0].upfront_usd / (8 * 24)
    stubs.assert_all_used()


def test_plan_capacity_rule_turns_a_clear_move_into_request_a_quota_increase(aws) -> None:
    moto, stubs = aws
    run_instances(moto, "us-east-1", "trn1.32xlarge", 1)
    stub_quota(stubs, "us-east-1", 256.0)
    for r in ("us-east-2", "us-west-2"):  # the alternatives the catalog lists (asked for a recommendation)
        stub_quota(stubs, r, 0.0)
    access = access_for(moto, stubs)
    catalog = load_catalog()
    screen, note = capacity_for_plan(
        catalog, "trn1.32xlarge", "us-east-1", 8, term="on-demand", access=access, today=TODAY
    )
    assert "checked with AWS" in note
    increase = 8 * 128 + 128 - 256
    assert screen.status == "quota-too-low" and screen.increase_vcpus == increase
    assert qualify_verdict(MOVE_TRN, screen) == (
        f"move to Trainium — but request a quota increase of {increase:,} vCPUs in us-east-1 first"
    )


def test_plan_rule_recommends_a_region_when_its_region_does_not_offer_the_type(aws) -> None:
    moto, stubs = aws
    stub_quota(stubs, "us-west-1", 0.0)
    catalog = load_catalog()
    listed = [r for r in catalog.instance("trn1.32xlarge").regions if r != "us-west-1"][:8]
    for r in listed:
        stub_quota(stubs, r, 4096.0)
    screen, _ = capacity_for_plan(
        catalog,
        "trn1.32xlarge",
        "us-west-1",
        2,
        term="on-demand",
        access=access_for(moto, stubs),
        today=TODAY,
    )
    assert screen.status == "not-offered"
    offering = [r for r in listed if zones_moto_offers(moto, r, "trn1.32xlarge")]
    assert screen.recommended_region == offering[0]
    assert qualify_verdict(MOVE_TRN, screen).endswith(f"run it in {offering[0]}")


def test_access_denied_on_one_api_leaves_that_field_unknown(aws) -> None:
    moto, stubs = aws
    stubs.fail("service-quotas", "us-east-1", "GetServiceQuota", "AccessDeniedException", "not allowed", 400)
    found = gather(moto, stubs, "trn1.32xlarge", 2)
    row = found.rows[0]
    assert row.offered is True and row.quota is not None and row.quota.usage_vcpus == 0  # the rest still read
    assert row.quota.limit_vcpus is None
    assert "access denied to service-quotas:GetServiceQuota (AccessDeniedException)" in row.quota.limit_note
    from chipswap.economics.capacity import screen_capacity

    s = screen_capacity(row, 2)
    assert s.outcome == "unknown" and "check quota before committing" in s.text


def test_region_not_enabled_is_a_labelled_unknown_row(aws) -> None:
    moto, stubs = aws
    stubs.fail("ec2", "ap-east-1", "DescribeInstanceTypeOfferings", "OptInRequired", "opt in first", 401)
    stubs.fail("service-quotas", "ap-east-1", "GetServiceQuota", "AccessDeniedException", "", 400)
    found = gather(moto, stubs, "inf1.xlarge", 1, "ap-east-1", extras=True)
    row = found.rows[0]
    assert row.offered is None and "region not enabled for this account (OptInRequired)" in row.offered_note


def test_an_instance_type_aws_does_not_know_is_a_usage_error(aws, monkeypatch, capsys) -> None:
    moto, stubs = aws
    monkeypatch.setattr(aws_access, "access_from_environment", lambda no_aws: access_for(moto, stubs))
    code, out, err = run_inproc(capsys, "capacity", "trn9.48xlarge", "--region", "us-east-1")
    assert code == 2 and err.count("\n") == 1
    assert "AWS does not know instance type 'trn9.48xlarge'" in err and "Traceback" not in err
    # a type outside the catalog that AWS does know is checked with AWS's vCPU count
    stub_quota(stubs, "us-east-1", 64.0, code="L-1945791B")
    found = gather(moto, stubs, "inf2.8xlarge", 1)
    assert found.info.vcpus == 32


@pytest.mark.parametrize("bad", ["us-esat-1", "mars-north-1", "../etc"])
def test_a_region_that_does_not_exist_is_a_usage_error(aws, monkeypatch, capsys, bad) -> None:
    moto, stubs = aws
    monkeypatch.setattr(aws_access, "access_from_environment", lambda no_aws: access_for(moto, stubs))
    code, out, err = run_inproc(capsys, "capacity", "trn1.32xlarge", "--region", bad)
    assert code == 2 and err.startswith("chipswap: error: unknown AWS region") and err.count("\n") == 1
    if bad == "us-esat-1":
        assert "did you mean" in err and "us-east-1" in err


def test_without_credentials_it_works_offline_and_says_so_once(tmp_path) -> None:
    env = offline_env(with_keys=False, extra={"AWS_ENDPOINT_URL": f"http://127.0.0.1:{closed_port()}"})
    import subprocess
    import sys

    proc = subprocess.run(
        [sys.executable, "-m", "chipswap", "capacity", "trn1.32xlarge", "--count", "8"],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
        cwd=tmp_path,
    )
    assert proc.returncode == 0, proc.stderr
    text = proc.stdout + proc.stderr
    assert text.count("no AWS credentials found") == 1
    assert "snapshot, not checked" in proc.stdout and "as of 2025-08-25" in proc.stdout
    assert "unknown: check quota before committing" in proc.stdout
    assert "Traceback" not in text


def test_no_aws_flag_and_unreachable_network_fall_back_with_one_note(monkeypatch, capsys) -> None:
    block_internet(monkeypatch)
    fake_credentials(monkeypatch)
    code, out, err = run_inproc(
        capsys, "capacity", "inf2.xlarge", "--no-aws", "--region", "us-east-1", "--json"
    )
    data = json.loads(out)
    assert code == 0 and data["checked"] is False and data["source"] == "snapshot, not checked"
    assert err.count("--no-aws given") == 1
    assert data["regions"][0]["fits"] == "unknown"
    # credentials present but nothing answers: one note, snapshot rows, exit 0
    monkeypatch.setenv("AWS_ENDPOINT_URL", f"http://127.0.0.1:{closed_port()}")
    code, out, err = run_inproc(capsys, "capacity", "inf2.xlarge", "--region", "us-east-1")
    assert code == 0 and out.count("offline: AWS could not be reached") == 1
    assert "snapshot, not checked" in out


def test_expired_credentials_fall_back_offline(monkeypatch, capsys) -> None:
    block_internet(monkeypatch)
    fake_credentials(monkeypatch)
    expired = (
        403,
        sts_error("ExpiredToken", "The security token included in the request is expired"),
        "text/xml",
    )
    with fake_aws({"GetCallerIdentity": expired}, expired) as server:
        monkeypatch.setenv("AWS_ENDPOINT_URL", server.url)
        code, out, err = run_inproc(capsys, "capacity", "trn1.32xlarge", "--region", "us-east-1")
    assert code == 0, err
    assert out.count("AWS rejected the credentials (ExpiredToken)") == 1
    assert "snapshot, not checked" in out
    assert server.hits["GetCallerIdentity"] == 1  # the credentials check is one try, not retried


def test_throttling_is_retried_with_backoff_then_reported(monkeypatch) -> None:
    """Real botocore retries (standard mode, chipswap's own client config) against a loopback server that
    always throttles: exactly max_attempts tries, then a labelled unknown with a clear message."""
    block_internet(monkeypatch)
    fake_credentials(monkeypatch)
    throttled = (503, ec2_error("RequestLimitExceeded", "Request limit exceeded."), "text/xml")
    answers = {
        "GetCallerIdentity": (200, STS_IDENTITY, "text/xml"),
        "GetServiceQuota": (
            400,
            json_error("ThrottlingException", "Rate exceeded"),
            "application/x-amz-json-1.1",
        ),
    }
    with fake_aws(answers, throttled) as server:
        monkeypatch.setenv("AWS_ENDPOINT_URL", server.url)
        access = AwsAccess(max_attempts=2)
        found = gather_capacity(
            load_catalog(), "trn1.32xlarge", ["us-east-1"], 1, access=access, today=TODAY, extras=False
        )
    row = found.rows[0]
    assert found.checked and found.account == "111122223333"
    assert server.hits["DescribeInstanceTypeOfferings"] == 2 and server.hits["GetServiceQuota"] == 2
    assert row.offered is None
    assert row.offered_note == (
        "AWS throttled ec2:DescribeInstanceTypeOfferings (RequestLimitExceeded) after 2 tries with backoff; "
        "try again in a minute"
    )
    assert row.quota is not None and "AWS throttled service-quotas:GetServiceQuota" in row.quota.limit_note


def test_only_read_only_operations_are_ever_called(aws) -> None:
    """The guard refuses writes; a full capacity run (every API it uses) asks only Describe / Get / List."""
    moto, stubs = aws
    with pytest.raises(PermissionError):
        AwsAccess(client_factory=lambda *a: None).call("ec2", "us-east-1", "RunInstances")
    stub_quota(stubs, "us-east-1", 512.0)
    stub_extras(stubs, ["us-east-1"], blocks_in="us-east-1")
    asked: list[str] = []
    route = routed_factory(moto, stubs)

    def recording(service: str, region: str, operation: str):
        asked.append(operation)
        return route(service, region, operation)

    run_instances(moto, "us-east-1", "trn1.32xlarge", 1)
    gather_capacity(
        load_catalog(),
        "trn1.32xlarge",
        ["us-east-1"],
        2,
        access=AwsAccess(client_factory=recording),
        today=TODAY,
    )
    assert {
        "GetCallerIdentity",
        "DescribeInstanceTypeOfferings",
        "GetServiceQuota",
        "DescribeInstances",
        "DescribeInstanceTypes",
        "DescribeSpotPriceHistory",
        "GetSpotPlacementScores",
        "DescribeCapacityBlockOfferings",
    } <= set(asked)
    assert all(op.startswith(("Describe", "Get", "List")) for op in asked), asked


@pytest.mark.slow
def test_the_plans_clear_move_gets_the_quota_increase_line(aws, tmp_path) -> None:
    """Must show, end to end: the plan's own clear 'move' for the seed's fine-tuning run on 8 instances, then
    the capacity rule with facts from moto (offerings, usage) and Service Quotas (Stubber)."""
    from chipswap import plan as pipeline
    from chipswap.cli.plan import example_path
    from chipswap.plan.workload_file import load_workload

    moto, stubs = aws
    text = example_path("finetune").read_text().replace("count = 1", "count = 8")
    # the seed's hours as measured figures (a projection would outrank them as stated ones)
    text = text.replace('gpu_source = "seed example"', 'gpu_source = "measured"')
    text = text.replace('source = "seed example"', 'source = "measured"')
    wl_path = tmp_path / "finetune8.toml"
    wl_path.write_text(text)
    result = pipeline.run_plan(load_workload(wl_path), wl_path)
    assert result.verdict.verdict == MOVE_TRN and result.best is not None and result.best.count == 8
    run_instances(moto, "us-east-1", "trn1.32xlarge", 1)
    stub_quota(stubs, "us-east-1", 512.0)
    for r in ("us-east-2", "us-west-2"):
        stub_quota(stubs, r, 0.0)
    screen, note = capacity_for_plan(
        load_catalog(),
        result.best.instance,
        "us-east-1",
        result.best.count,
        term="on-demand",
        access=access_for(moto, stubs),
        today=TODAY,
    )
    increase = 8 * 128 + 128 - 512
    assert qualify_verdict(result.verdict.verdict, screen) == (
        f"move to Trainium — but request a quota increase of {increase:,} vCPUs in us-east-1 first"
    )
