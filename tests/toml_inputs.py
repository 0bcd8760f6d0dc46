"""Small, valid input files shared by the tests of `chipswap plan` and the catalog (a serving workload, one
price entry), as text for tests to edit: each test replaces or appends the part it makes hostile or bad.
Test data only: no I/O here."""

from __future__ import annotations

_SERVING = """title = "{title}"
{kind}[traffic]
steady_rps = {rps}
prompt_tokens = 512
output_tokens = {output_tokens}
[fleet]
instance = "{instance}"
count = {count}
[targets]
candidates = ["inf2.xlarge"]
[porting]
engineer_days = 10
[throughput]
gpu_requests_per_s = {gpu_rps}
[throughput.candidates."inf2.xlarge"]
{candidate}
"""

_PRICE = """[[price]]
instance = "trn1.32xlarge"
region = "us-east-1"
term = "{term}"
usd_per_hour = {value}
source = "{source}"
as_of = "2026-11-01"
"""


def serving_workload(
    *,
    title: str,
    rps: str,
    output_tokens: int,
    instance: str,
    count: int,
    gpu_rps: str,
    candidate: str,
    kind: bool = False,
) -> str:
    """A serving workload.toml: steady traffic of 512-token prompts on a GPU fleet, inf2.xlarge the candidate
    (`candidate`: its throughput line), 10 porting days; `kind` adds `kind = "serving"`."""
    return _SERVING.format(
        title=title,
        kind='kind = "serving"\n' if kind else "",
        rps=rps,
        output_tokens=output_tokens,
        instance=instance,
        count=count,
        gpu_rps=gpu_rps,
        candidate=candidate,
    )


def price_entry(*, term: str, value: str, source: str) -> str:
    """One [[price]] entry of a catalog override: trn1.32xlarge in us-east-1, as of 2026-11-01."""
    return _PRICE.format(term=term, value=value, source=source)
