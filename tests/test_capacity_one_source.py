"""One source of capacity (issue 30): at steady state the fleet simulator saturates at the requests/s
`project` states for the same layout, within 2 %. Both charge a decode step by one rule
(chipswap.simulation.servicetime.charged_context: on a padded platform the decode bucket that holds the
longest live context; the mean request's last position, prompt + output - 1, at saturation), both run
output - 1 decode steps per request (the first token comes from the prefill) and the stack's live slots
(servicetime.live_slots)."""

from __future__ import annotations

import numpy as np
import pytest

from chipswap.models import load_preset
from chipswap.projection import api
from chipswap.projection.work import work_from_config
from chipswap.simulation import simulate as S
from chipswap.simulation.servicetime import charged_context

INF2 = "inf2.48xlarge"


def _work():
    return work_from_config(load_preset("llama-3.1-8b")["config"], name="llama-3.1-8b", task="causal-lm")


def _steady_rps(
    times, setup, replicas: int, rate: float, prompt: int, output: int, per_replica: int
) -> float:
    """Completions per second in the middle half of an overloaded run (arrivals at `rate`, evenly spaced),
    long enough that the slots' start-up cohorts have mixed."""
    n = per_replica * replicas
    arrivals = np.arange(n) / rate
    res = S.simulate(S.make_traffic(arrivals, [prompt] * n, [output] * n), times, setup, replicas)
    done = np.sort(arrivals + res.e2e_s)
    return (n // 2) / (done[3 * n // 4] - done[n // 4])


@pytest.mark.parametrize(
    "tp,prompt,output,buckets,decode",
    [
        (8, 1024, 256, (1024,), (1280,)),  # the layout: Llama-3.1-8B TP8 x 3 on inf2.48xlarge
        (2, 1024, 256, (1024,), (1280,)),  # 12 replicas
        (8, 1500, 250, (512, 1024, 2048), (1024, 2048, 4096)),  # the shared sweeps' workload
        (24, 700, 60, (256, 1024), (768, 1024)),  # a short output: 59 decode steps, not 60
    ],
)
def test_the_simulated_saturation_rate_is_the_projected_capacity(tp, prompt, output, buckets, decode):
    p = api.project_serving(
        _work(), INF2, prompt_tokens=prompt, output_tokens=output, buckets=list(buckets),
        decode_buckets=list(decode), tp=tp,
    )  # fmt: skip
    assert p.fits and p.config.tp_degree == tp and p.config.padded
    setup = S.setup_from_serving(p.config, prefill_buckets=buckets, decode_buckets=decode)
    projected = p.requests_per_s.value
    got = _steady_rps(p.times, setup, p.config.replicas, 2 * projected, prompt, output, 2500)
    assert got == pytest.approx(projected, rel=0.02)


def test_the_charged_context_is_the_bucket_of_the_longest_position():
    assert charged_context(1024, 256, (1280,)) == 1280
    assert charged_context(1024, 257, (1280, 2048)) == 1280  # 1,024 + 256 positions
    assert charged_context(1024, 258, (1280, 2048)) == 2048
    assert charged_context(1024, 256, ()) == 1152  # GPU: the mean live context
    assert charged_context(5000, 10, (1024,)) == 5009  # past the largest bucket: the position itself
