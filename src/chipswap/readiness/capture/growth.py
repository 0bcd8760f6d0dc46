"""Does the captured graph grow with the sequence length? (a recurrent scan unrolled per token)

A fixed-shape compiler compiles one graph per bucket. A transformer's graph has the same number of nodes at
every sequence length (the length is a tensor dimension); a reference recurrent scan (Mamba's selective scan,
RecurrentGemma's RG-LRU) is a Python loop over time steps, so its exported graph gains nodes with every token,
and neuronx-cc's compile time and memory grow with it, bucket by bucket. The probe exports the model at two
short lengths and compares node counts; the pure part (`growth_issue`) turns the two counts into a finding.

torch is imported inside `probe_growth`; nothing here reads files or prints.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace
from typing import Any

from chipswap.readiness.rules import CaptureIssue, Inventory

PROBE_LENGTHS = (16, 32)  # short: the probe costs two small exports, not two at the user's length
MIN_RATIO = 1.10  # nodes(32) / nodes(16) above this, and ...
MIN_EXTRA_NODES = 64  # ... at least this many more nodes: the graph grows with the sequence
ISSUE_KIND = "graph_grows"


def growth_issue(
    short: int, long: int, nodes_short: int, nodes_long: int, checked_len: int
) -> CaptureIssue | None:
    """The finding for node counts at two lengths, or None when the graph does not grow with the sequence."""
    if (
        nodes_short <= 0
        or nodes_long <= nodes_short * MIN_RATIO
        or nodes_long - nodes_short < MIN_EXTRA_NODES
    ):
        return None
    per_token = (nodes_long - nodes_short) / (long - short)
    at_checked = round(nodes_short + per_token * (checked_len - short))
    ratio = nodes_long / nodes_short
    return CaptureIssue(
        kind=ISSUE_KIND,
        message=(
            f"the graph grows with the sequence: {nodes_short:,} nodes at {short} tokens, {nodes_long:,} at "
            f"{long} (x{ratio:.2f} for 2x the length, about {per_token:.0f} nodes per token), so about "
            f"{at_checked:,} at the checked length {checked_len}: a loop over time steps unrolled into the "
            "graph, compiled again and larger for every bucket"
        ),
    )


def _seq_spec(spec: Mapping[str, tuple[tuple[int, ...], str]], length: int) -> dict[str, Any] | None:
    """`spec` with its sequence dimension (axis 1 of the token inputs) set to `length`; None without one."""
    seq = {dims[1] for dims, _ in spec.values() if len(dims) == 2}
    if len(seq) != 1:
        return None
    (s,) = seq
    return {
        name: ((dims[0], length) if len(dims) == 2 and dims[1] == s else dims, dt)
        for name, (dims, dt) in spec.items()
    }


def _count_nodes(module: Any, inputs: Mapping[str, Any]) -> int:
    import torch

    from chipswap.readiness.capture import quiet

    with quiet():
        ep = torch.export.export(module, (), dict(inputs), strict=False)
    return sum(1 for n in ep.graph.nodes if n.op == "call_function")


def probe_growth(
    module: Any,
    spec: Mapping[str, tuple[tuple[int, ...], str]],
    *,
    device: str,
    vocab_size: int | None,
    highs: Mapping[str, int] | None,
) -> CaptureIssue | None:
    """Export `module` at PROBE_LENGTHS and return the growth finding, if any. A model without one sequence
    dimension, or one that does not export at the probe lengths, is not probed (None: the main capture has
    already reported whatever stops an export)."""
    from chipswap.readiness.capture import make_inputs

    specs = [_seq_spec(spec, n) for n in PROBE_LENGTHS]
    if specs[0] is None or specs[1] is None:
        return None
    checked = max(dims[1] for dims, _ in spec.values() if len(dims) == 2)
    counts = []
    for s in specs:
        try:
            counts.append(
                _count_nodes(module, make_inputs(s, device=device, vocab_size=vocab_size, highs=highs))
            )
        except Exception:  # noqa: BLE001 - the probe is advisory; export failures are the main capture's
            return None
    return growth_issue(PROBE_LENGTHS[0], PROBE_LENGTHS[1], counts[0], counts[1], checked)


def with_growth(inventory: Inventory, module: Any, spec: Any, **probe: Any) -> Inventory:
    """`inventory` plus the sequence-growth finding when its graph gains nodes with every token."""
    if not inventory.exported:
        return inventory
    issue = probe_growth(module, spec, **probe)
    return inventory if issue is None else replace(inventory, issues=(*inventory.issues, issue))
