"""A sample of the fuzz suite's hostile inputs through the real CLI in a fresh process (`python -m chipswap`),
under a 2 GiB data limit and a timeout: the in-process runs cover the volume, this covers what only a real
process shows (the exit status the shell sees, what reaches stderr, interpreter start-up paths).
"""

from __future__ import annotations

import os
import resource
import subprocess
import sys
import time
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.fuzz import strategies as S
from tests.fuzz.harness import CEILING_BYTES, TALLY, Outcome, Sandbox, problems_of
from tests.fuzz.test_fuzz_inputs import PLAN, TRACE_ROWS

REPO = Path(__file__).resolve().parents[2]
# the kinds sampled through the real CLI (every kind runs in-process in test_fuzz_inputs.py)
SAMPLE_KINDS = ("bool_number", "huge", "wrong_type", "traversal", "long_list", "truncate", "invalid_utf8")


def _limit() -> None:
    resource.setrlimit(resource.RLIMIT_DATA, (CEILING_BYTES + 2**30, resource.RLIM_INFINITY))


def _run(box: Sandbox, argv: list[str]) -> Outcome:
    env = {**os.environ, "CHIPSWAP_CACHE_DIR": str(box.cache), "HOME": str(box.home)}
    t0 = time.monotonic()
    r = subprocess.run([sys.executable, "-m", "chipswap", *argv], capture_output=True, text=True,
                       cwd=box.work, env=env, timeout=120, preexec_fn=_limit)
    seconds = time.monotonic() - t0
    error = r.stderr if ("Traceback" in r.stderr or r.returncode < 0) else None
    # memory is bounded by the RLIMIT_DATA above (an over-limit allocation is a traceback here)
    return Outcome(r.returncode, r.stdout, r.stderr, error, seconds, 0, 0, box.outside_changes())


@pytest.fixture(scope="module")
def box(tmp_path_factory: pytest.TempPathFactory) -> Sandbox:
    base = tmp_path_factory.mktemp("fuzzcli") / "sandbox"
    base.mkdir()
    return Sandbox(base, REPO)


CLASSES = {
    "plans": ("plan.json", PLAN, S.to_json, lambda f: ["compile", "tiny-distilbert", "--plan", f, "--backend",
                                                      "neuron"], (2,), SAMPLE_KINDS),
    "traces": ("trace.csv", TRACE_ROWS, S.to_csv, lambda f: ["shapes", f, "--json"], (0, 2), SAMPLE_KINDS),
}


@pytest.mark.slow
@pytest.mark.parametrize("cls", sorted(CLASSES))
def test_fuzz_sample_through_the_real_cli(box: Sandbox, cls: str) -> None:
    name, template, encode, argv_of, allowed, kinds = CLASSES[cls]

    @settings(max_examples=4, deadline=None, derandomize=True, database=None,
              suppress_health_check=list(HealthCheck))
    @given(data=st.data(), kind=st.sampled_from(kinds))
    def case(data: st.DataObject, kind: str) -> None:
        hostile = data.draw(S.hostile_file(template, kind, encode))
        box.reset()
        f = box.place(name, hostile)
        outcome = _run(box, argv_of(str(f)))
        problems = problems_of(outcome, allowed)
        TALLY.add(f"cli:{cls}", outcome, problems)
        assert not problems, "\n".join(problems)

    case()


@pytest.mark.slow
def test_fuzz_sample_of_compile_flags_through_the_real_cli(box: Sandbox) -> None:
    @settings(max_examples=4, deadline=None, derandomize=True, database=None,
              suppress_health_check=list(HealthCheck))
    @given(flag=st.sampled_from(["--seq-len", "--batch-sizes", "--atol"]),
           value=st.sampled_from(["nan", "inf", "-1", "100000000", "1e9", "0", "\x1b[31m", "9" * 40]))
    def case(flag: str, value: str) -> None:
        box.reset()
        argv = ["compile", "tiny-distilbert", "--backend", "neuron", "--seq-len", "8", flag, value]
        outcome = _run(box, argv)
        problems = problems_of(outcome, (2,))
        TALLY.add("cli:flags", outcome, problems)
        assert not problems, "\n".join(problems)

    case()
