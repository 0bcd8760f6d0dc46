"""Fitting room of the projection: reading the published serving rows, fitting the physical model's free
parameters per chip family across shapes, and measuring held-out and extrapolation errors (which are the
bands the serving room prints). I/O is limited to reading ../shared/reference and writing the shipped
data/platforms/physics.toml when asked.

- tables.py   the SDK / NVIDIA table fit (Transformers NeuronX era and TensorRT-LLM rows; the tnx-2.18 and
              GPU stacks' data in the same time model) and its held-out splits;
- rows.py     the serving runs (inf2, trn2 at LNC 1/2, H100 vLLM, the SDK and TensorRT-LLM tables),
              normalised;
- physfit.py  the physical model's fit across shapes, leave-one-source-out and extrapolation tests, bands.
"""

from chipswap.projection.fitting.tables import *  # noqa: F403  (the public import path of the table fit)
