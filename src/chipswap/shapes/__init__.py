"""Shapes: which fixed input shapes (buckets) to compile, from a length histogram.

- buckets.py    pure core: the exact bucket optimiser, the fixed-rule baselines and their cost models
                (numpy only; no files, clock or torch).
- shapeplan.py  a trace or its histograms -> a ShapePlan (buckets, padding cost, baselines, stack snippets);
                reads and writes `chipswap.shapeplan/1` plan files (atomically).
- planfile.py   the lenient reader of a plan file's bucket keys, used by `compile` and `check`.

May not import torch, read traces itself (chipswap.traffic does) or print.
"""
