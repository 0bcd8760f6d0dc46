"""The physical fit's vendor fits, made in worker processes: every distinct (vendor, training rows) fit the
full fit and the held-out tests need, each once, each from the same cold start (physfit.fit_vendor).

What it is for: chipswap.projection.fitting.physfit.calibrate_physics and tests/test_physics_fit.py. It
starts processes (spawned, so the BLAS library loads with one thread in them) and sets the BLAS thread
variables in os.environ while it starts them; it reads and writes no file.
"""

from __future__ import annotations

import functools
import multiprocessing
import os
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

from chipswap.projection.fitting.physfit import (
    HELD_OUT_KEYS,
    SPLITS_DOC,
    VENDOR,
    Context,
    Fitted,
    PhysCalibration,
    Split,
    extrapolations,
    family_out,
    fit,
    fit_vendor,
    folds,
    gpu_table_fit,
    held_out,
    load_context,
    predict_all,
    region,
)
from chipswap.projection.fitting.rows import Run, Skip, read_runs
from chipswap.projection.platform import DeviceSpec
from chipswap.projection.work import ModelWork


def calibrate_physics(reference: str | Path | None = None, processes: int | None = None) -> PhysCalibration:
    """The full fit and every held-out test; the fits all start cold and run in `processes` workers
    (fit_many). The last calibration is kept for the process, keyed by the rows read: the same published
    rows give the same calibration (`chipswap calibrate` and then `--check` in one process fit once)."""
    runs, skipped = read_runs(reference)
    return _calibrated(tuple(runs), tuple(skipped), processes)


@functools.lru_cache(maxsize=1)
def _calibrated(rows: tuple[Run, ...], skipped: tuple[Skip, ...], processes: int | None) -> PhysCalibration:
    runs = list(rows)
    ctx = load_context(runs)
    trains = [runs] + [tr for key in HELD_OUT_KEYS.values() for tr, _ in folds(runs, key)]
    trains += [[r for r in runs if tr(r)] for _, _, tr, _ in extrapolations(ctx)]
    fit_many(ctx, trains, processes)
    fitted = fit(ctx, runs)
    lomo = held_out(ctx, runs, key=HELD_OUT_KEYS["lomo"])
    splits = [
        Split("loso", SPLITS_DOC["loso"], tuple(held_out(ctx, runs, key=HELD_OUT_KEYS["loso"]))),
        Split("lomo", SPLITS_DOC["lomo"], tuple(lomo)),
        Split("moe", SPLITS_DOC["moe"], tuple(f for f in lomo if ctx.works[f.run.model].is_moe)),
    ]
    for kind, title, tr, te in extrapolations(ctx):
        splits.append(Split(kind, title, tuple(region(ctx, runs, tr, te))))
    splits.append(Split("family", SPLITS_DOC["family"], tuple(family_out(ctx, runs))))
    vllm = [r for r in runs if r.stack == "vllm"]  # the published H100 vLLM runs
    splits.append(Split("gpu_table", SPLITS_DOC["gpu_table"], tuple(gpu_table_fit(ctx, vllm))))
    return PhysCalibration(runs, list(skipped), fitted, splits, predict_all(ctx, runs, fitted))


def fit_many(ctx: Context, trains: list[list[Run]], processes: int | None = None) -> None:
    """Make every vendor fit the training sets `trains` need (each vendor's rows once: a set that leaves
    a vendor's rows as another set has them gets that fit) into ctx.fits, in `processes` worker processes
    (default: up to 2 cores). Workers are spawned with one BLAS thread each: the fit's small SVDs run
    10x slower when BLAS threads contend for busy cores."""
    todo: dict[tuple[str, ...], list[Run]] = {}
    for runs in trains:
        for vendor in sorted({VENDOR[r.family] for r in runs}):
            mine = [r for r in runs if VENDOR[r.family] == vendor]
            key = tuple(r.row_id for r in mine)
            if key not in ctx.fits:
                todo.setdefault(key, mine)
    if not todo:
        return
    keys = sorted(todo, key=lambda k: -len(k))  # the largest first: the pool ends together
    n = max(1, min(len(keys), processes or min(2, os.cpu_count() or 1)))
    saved = {k: os.environ.get(k) for k in _ONE_THREAD}
    os.environ.update(_ONE_THREAD)
    try:
        spawn = multiprocessing.get_context("spawn")  # a worker that fails to start ends the pool
        with ProcessPoolExecutor(
            n, spawn, initializer=_worker_init, initargs=(ctx.works, ctx.devices)
        ) as pool:
            for key, got in zip(keys, pool.map(_worker_fit, [todo[k] for k in keys]), strict=True):
                ctx.fits[key] = got
    finally:
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


_ONE_THREAD = {"OPENBLAS_NUM_THREADS": "1", "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}
_WORKER: list[Context] = []  # a fit worker's context (set once per spawned process)


def _worker_init(works: dict[str, ModelWork], devices: dict[tuple[str, int], DeviceSpec]) -> None:
    _WORKER[:] = [Context(works, devices)]


def _worker_fit(runs: list[Run]) -> Fitted:
    return fit_vendor(_WORKER[0], runs)
