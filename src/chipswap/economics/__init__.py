"""Economics: instances, prices, what a fleet costs, and whether it can be launched.

Pure core (Decimal money; no files, clock, network or torch):
- catalog.py     the instance / price / chip catalog as frozen dataclasses, with explaining lookups;
- cost.py        job cost, baseline-vs-candidate comparison, porting cost and break-even, serving cost;
- capacity.py    capacity screening: region offerings and quotas as data plus one pure function.
Shell:
- catalog_io.py  reads (and renders) the shipped catalog TOML and user overrides;
- aws/           the only I/O edge to AWS (read-only boto3): prices, capacity, quotas.
"""
