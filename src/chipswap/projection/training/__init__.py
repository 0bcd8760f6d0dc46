"""The training room: how a dense transformer trains on N nodes of one instance type, and how well that is
known.

    model.py    pure: the layout-aware step time and memory (System, Layout, Coef, step_time, search)
    layout.py   pure: pinned layouts (--train-layout, job.layout) checked whole, the conventional layout
    project.py  callers' API: project_training (catalog + shipped calibration -> TrainingPlan)
    transfer.py pure: a family with no published rows (Trainium2, H200) by spec sheet, its transfer band
    rows.py     the published training rows (reads ../shared/reference and data/training)
    fit.py      the calibration: fit, leave-one-source-out bands, data/training/calibration.toml

Callers import the API from here (`from chipswap.projection.training import project_training`); nothing in
this file does work.
"""

from chipswap.projection.training.project import (
    DEFAULT_GLOBAL_BATCH_TOKENS,
    FP8_FAMILIES,
    TrainingPlan,
    calibration_path,
    coef_of,
    load_calibration,
    project_training,
    system_of,
    widened_band,
)

__all__ = [
    "DEFAULT_GLOBAL_BATCH_TOKENS",
    "FP8_FAMILIES",
    "TrainingPlan",
    "calibration_path",
    "coef_of",
    "load_calibration",
    "project_training",
    "system_of",
    "widened_band",
]
