"""chipswap's only I/O edge to AWS: boto3 with the standard credential chain, read-only calls only.

- access.py   AwsAccess: clients, the read-only guard, retries with backoff, and every failure sorted into
              "offline" (no credentials, expired credentials, no network: fall back to the shipped snapshot
              with one note) or a per-API problem (access denied, throttled, region not enabled: a labelled
              "unknown" field).
- capacity.py the capacity source (offerings, quotas and usage, spot price, placement score, Capacity Blocks)
              and the snapshot source used offline; gather_capacity / capacity_for_plan.
- prices.py   the price source (Price List API on-demand prices, EC2 spot price history) and refresh_prices.

Nothing here decides anything: the rules live in chipswap.economics.capacity and chipswap.economics.catalog.
Nothing here writes files (the catalog command writes the refreshed file atomically).
"""
