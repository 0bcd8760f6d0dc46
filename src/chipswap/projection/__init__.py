"""Projection: the user's model on an instance -> serving configuration, service times, throughput and
latency with error bands (or training tokens/s), and the calibration that fits the platform models.

Pure core (no I/O, no torch, no clock):
- work.py        a model's parameters, bytes and FLOPs in closed form (ModelWork), the MoE experts a decode
                 step touches;
- hfconfig.py    which Hugging Face config fields give which size (aliases, family traits, MoE layer pattern,
                 unread fields refused) - any decoder config, no list of model types;
- platform.py    a chip family's spec sheet + fitted coefficients -> seconds for a model's work;
- predict.py     the serving projection itself (ServingProjection); records in projected.py,
                 the encoder search in predict_encoder.py;
- stacks.py      the serving-stack registry (ids, side, description): nxdi-vllm, nxdi-tgi, tnx-2.18, vllm,
                 trtllm, tgi;
- serving/       the serving room: physics.py (the one time model per phase, every chip family and stack;
                 the stack's schedule as data), coverage.py (bands of each kind of extrapolation, the
                 outside-coverage refusal);
- layouts.py     the LLM layout search (TP, replicas, compiled batch, pinned, padded heads, slow-edge rank);
- fitting/       the fitting room: tables.py (least-squares fit of the SDK / NVIDIA table coefficients and
                 held-out validation; import path chipswap.projection.fitting); the I/O modules rows.py
                 (the modern serving runs) and physfit.py (the physical model's fit across shapes, its
                 held-out and extrapolation tests, physics.toml);
- training/      the training room (model.py, layout.py, transfer.py pure; project.py, rows.py, fit.py
                 shell); callers import chipswap.projection.training.
Shell:
- api.py         the projection API for callers: loads the catalog and platform files, calls predict.py;
- platforms.py   loads data/platforms/*.toml (the projection's only I/O edge for platform data);
- flops.py       FLOPs counted on the real torch graph (validates work.py; a factory model's work);
- calibration.py reads the published benchmark tables and writes data/platforms/<family>.toml (encoder rows
                 in calibration_encoders.py);
"""
