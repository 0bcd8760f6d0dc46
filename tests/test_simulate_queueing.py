"""The simulator against queueing theory where closed forms exist.

One replica with batch size 1 is a single FIFO server, so under Poisson arrivals its mean wait must match
Pollaczek-Khinchine, W_q = lambda E[S^2] / (2 (1 - rho)): M/M/1-like (geometric lengths, so S is geometric
with mean 1 s, the discrete cousin of the exponential; its exact E[S^2] is used) and M/D/1 (constant S). The
tolerance is 4 standard errors estimated by batch means over the run (waits are correlated, so the naive
sample SE would be too small), and each test also checks that SE is small, so a wrong simulator cannot hide
behind a wide band. Little's law and the utilisation law are checked on the same runs. Seeds are fixed.
"""

from __future__ import annotations

import numpy as np
import pytest

from chipswap.simulation import simulate as S
from tests.sim_services import Constant, TokenLinear

N = 100_000
BATCHES = 25
RATE = 0.5  # requests/s; with E[S] = 1 s, rho = 0.5


def _batch_means(values: np.ndarray) -> tuple[float, float]:
    """Mean and its standard error from non-overlapping batch means."""
    groups = np.array_split(values, BATCHES)
    means = np.array([g.mean() for g in groups])
    return float(values.mean()), float(means.std(ddof=1) / np.sqrt(BATCHES))


def _geometric(rng: np.random.Generator, mean: float, n: int) -> np.ndarray:
    return rng.geometric(1.0 / mean, n)


def _pk_wait(rate: float, es: float, es2: float) -> float:
    rho = rate * es
    return rate * es2 / (2 * (1 - rho))


def _check_wait(result: S.SimResult, expected: float) -> None:
    waits = result.start_s - result.arrivals_s
    mean, se = _batch_means(waits)
    assert se < 0.06 * expected, f"standard error {se:.4f} too large for the test to mean anything"
    assert abs(mean - expected) < 4 * se, (
        f"mean wait {mean:.4f} vs Pollaczek-Khinchine {expected:.4f} (SE {se:.4f})"
    )


def test_mg1_geometric_service_matches_pollaczek_khinchine():
    rng = np.random.default_rng(20240601)
    mean_len = 500
    lengths = _geometric(rng, mean_len, N)
    traffic = S.make_traffic(S.poisson_arrivals(RATE, rng, n=N), lengths)
    service = TokenLinear(per_call=0.0, per_token=1.0 / mean_len)  # S = L / 500: geometric, mean 1 s
    res = S.simulate(traffic, service, S.ReplicaSetup(max_batch=1, max_queue_delay_s=0.0), 1, mode="encoder")
    p = 1.0 / mean_len
    es, es2 = 1.0, (2 - p) / p**2 / mean_len**2  # E[L^2] = (2 - p) / p^2 for a geometric on 1, 2, ...
    _check_wait(res, _pk_wait(RATE, es, es2))
    # utilisation law: busy share = lambda E[S] (SE of busy/span ~ sqrt((1 + CV^2) / n), CV ~ 1)
    assert res.utilization == pytest.approx(RATE * es, abs=4 * np.sqrt(2 / N))
    # Little's law, L = lambda W: the time-average number in the system, integrated here from the trajectory
    # (arrivals +1, completions -1, in time order), against the true rate x the mean time in the system, and
    # the simulator's own figure (which it computes as lambda-hat x W) against the trajectory.
    times = np.concatenate((res.arrivals_s, res.arrivals_s + res.e2e_s))
    steps = np.concatenate((np.ones(N), -np.ones(N)))[np.argsort(times, kind="stable")]
    times = np.sort(times)
    in_system = np.cumsum(steps)
    trajectory_l = float(np.sum(in_system[:-1] * np.diff(times)) / (times[-1] - times[0]))
    _, se_w = _batch_means(res.e2e_s)
    assert trajectory_l == pytest.approx(res.mean_in_system, rel=1e-6)
    assert abs(trajectory_l - RATE * res.e2e_s.mean()) < 4 * RATE * se_w + 4 * trajectory_l / np.sqrt(N)
    expected_l = RATE * (_pk_wait(RATE, es, es2) + es)  # M/G/1: L = rho + lambda W_q
    assert abs(trajectory_l - expected_l) < 4 * RATE * se_w + 4 * expected_l / np.sqrt(N)


def test_md1_constant_service_matches_pollaczek_khinchine():
    rng = np.random.default_rng(7)
    traffic = S.make_traffic(S.poisson_arrivals(RATE, rng, n=N), np.full(N, 64))
    res = S.simulate(
        traffic, Constant(1.0), S.ReplicaSetup(max_batch=1, max_queue_delay_s=0.0), 1, mode="encoder"
    )
    _check_wait(res, _pk_wait(RATE, 1.0, 1.0))  # rho / (2 mu (1 - rho)) = 0.5
    assert res.utilization == pytest.approx(RATE, abs=4 / np.sqrt(N))


def test_llm_with_one_slot_is_md1_over_prefill_and_decode():
    """Continuous batching with one slot serialises requests: prefill (0.2 s) + 4 decode steps (0.2 s each)
    is a deterministic 1 s service."""
    rng = np.random.default_rng(11)
    traffic = S.make_traffic(S.poisson_arrivals(RATE, rng, n=N), rng.integers(1, 3000, N), np.full(N, 5))
    res = S.simulate(traffic, Constant(0.2), S.ReplicaSetup(max_batch=1), 1)
    _check_wait(res, _pk_wait(RATE, 1.0, 1.0))
    np.testing.assert_allclose(res.e2e_s - (res.start_s - res.arrivals_s), 1.0, rtol=1e-9)
    np.testing.assert_allclose(res.ttft_s - (res.start_s - res.arrivals_s), 0.2, rtol=1e-9)


def test_llm_with_one_slot_and_geometric_outputs_is_mg1():
    rng = np.random.default_rng(12)
    mean_out = 400
    outputs = _geometric(rng, mean_out, N)
    traffic = S.make_traffic(S.poisson_arrivals(RATE, rng, n=N), np.full(N, 100), outputs)
    step = 1.0 / mean_out  # prefill + (o - 1) steps = o x step: geometric, mean 1 s
    res = S.simulate(traffic, Constant(step), S.ReplicaSetup(max_batch=1), 1, dispatch="round_robin")
    p = 1.0 / mean_out
    _check_wait(res, _pk_wait(RATE, 1.0, (2 - p) / p**2 * step**2))


def test_wide_batches_do_not_queue():
    """With far more slots than requests and a step time that does not grow with the batch, continuous
    batching is an infinite-server system: each request takes its own prefill and decode steps, plus at most
    one step waiting for the batch's current step to end (and other requests' prefills, which are tiny
    here)."""
    rng = np.random.default_rng(3)
    n, step, tiny = 20_000, 0.01, 1e-7
    outputs = rng.integers(1, 300, n)
    traffic = S.make_traffic(S.poisson_arrivals(20.0, rng, n=n), np.full(n, 10), outputs)

    class StepOnly(Constant):
        def prefill_s(self, batch: int, length: int) -> float:
            return tiny

    res = S.simulate(traffic, StepOnly(step), S.ReplicaSetup(max_batch=4096), 1)
    own = tiny + (outputs - 1) * step
    extra = res.e2e_s - own
    assert extra.min() >= -1e-9
    assert extra.max() <= step + 1e-4
    assert res.mean_batch > 20.0 * (outputs - 1).mean() * step * 0.8  # lambda x decode time in the system
