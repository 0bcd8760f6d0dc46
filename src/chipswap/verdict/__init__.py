"""Verdict: the migration decision as tables, and what would flip it.

All pure (no I/O):
- rules.py        the seed article's screening rules and break-even, as tables -> Verdict with reasons;
- sensitivity.py  for each main input, the change that flips the verdict (searched, then re-checked).
"""
