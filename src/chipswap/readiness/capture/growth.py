"""Does the captured graph grow with the sequence length? (a recurrent scan unrolled per token or per chunk)

A fixed-shape compiler compiles one graph per bucket. A transformer's graph has the same number of nodes at
every sequence length (the length is a tensor dimension); a reference recurrent scan (Mamba's selective scan,
RecurrentGemma's RG-LRU) is a Python loop over time steps, so its exported graph gains nodes with every token,
and neuronx-cc's compile time and memory grow with it, bucket by bucket. A chunked scan (Gated DeltaNet's
chunks of 64, MiniMax's lightning-attention blocks of 256) loops over chunks: its graph is flat below one
chunk and grows above it. The probe exports the model at two short lengths and compares node counts, then,
where the config names a chunk or block size (or its layer types use a chunked scan), at two lengths above
the largest; the model is prepared as the main capture prepared it (the same data-dependent modules stubbed).
A probe that cannot run says so in a note. The pure part (`growth_issue`, `probe_lengths`) turns config
fields and node counts into lengths and a finding.

torch is imported inside `probe_growth`; nothing here reads files or prints.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import Any

from chipswap.readiness.rules import CaptureIssue, Inventory

PROBE_LENGTHS = (16, 32)  # short: the probe costs two small exports, not two at the user's length
# config fields that name the length a scan is chunked by (the probe goes above the largest), and layer types
# whose scan is chunked by a size the config does not name (transformers' torch_chunk_gated_delta_rule: 64)
CHUNK_KEYS = ("chunk_size", "block_size", "mamba_chunk_size", "ssm_chunk_size", "linear_attn_chunk_size",
              "chunk_length", "lightning_block_size")  # fmt: skip
CHUNKED_LAYER_TYPES = {"linear_attention": 64}
MAX_PROBE_LENGTH = 4096  # above this the probe would cost more than the check; it says so instead
MIN_RATIO = 1.10  # nodes(32) / nodes(16) above this, and ...
MIN_EXTRA_NODES = 64  # ... at least this many more nodes: the graph grows with the sequence
ISSUE_KIND = "graph_grows"


MIN_EXTRA_PER_CHUNK = 8  # above the chunk size: this many more nodes per extra chunk is a loop over chunks


def growth_issue(
    short: int, long: int, nodes_short: int, nodes_long: int, checked_len: int, chunk: int | None = None
) -> CaptureIssue | None:
    """The finding for node counts at two lengths, or None when the graph does not grow with the sequence.
    `chunk`: the lengths are 2 and 4 chunks of a chunked scan; any steady gain per chunk is the loop (a
    transformer's count does not move at all), where a per-token loop must clear MIN_RATIO and
    MIN_EXTRA_NODES."""
    extra = nodes_long - nodes_short
    if chunk is not None:
        chunks = (long - short) // chunk
        if nodes_short <= 0 or chunks <= 0 or extra < MIN_EXTRA_PER_CHUNK * chunks:
            return None
        per_chunk = extra / chunks
        at_checked = round(nodes_short + per_chunk * max(checked_len - short, 0) / chunk)
        return CaptureIssue(
            kind=ISSUE_KIND,
            message=(
                f"the graph grows with the sequence in chunks of {chunk} tokens: {nodes_short:,} nodes at "
                f"{short} tokens, {nodes_long:,} at {long} (about {per_chunk:.0f} nodes per chunk), so about "
                f"{at_checked:,} at the checked length {checked_len}: a loop over chunks unrolled into the "
                "graph, compiled again and larger for every bucket above one chunk"
            ),
        )
    if nodes_short <= 0 or nodes_long <= nodes_short * MIN_RATIO or extra < MIN_EXTRA_NODES:
        return None
    per_token = extra / (long - short)
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


def probe_lengths(config: Mapping[str, Any] | None) -> tuple[tuple[int, int], ...]:
    """The pairs of lengths to probe: PROBE_LENGTHS, then (2 x chunk, 4 x chunk) for the largest chunk or
    block size the config names (a chunk loop is flat below one chunk and only grows with their count)."""
    chunk = largest_chunk(config)
    pairs = [PROBE_LENGTHS]
    if chunk is not None and 2 * chunk > PROBE_LENGTHS[1]:
        pairs.append((2 * chunk, 4 * chunk))
    return tuple(pairs)


def largest_chunk(config: Mapping[str, Any] | None) -> int | None:
    """The largest chunk/block size a (text) config names, or its chunked layer types imply; None if none."""
    if not config:
        return None
    found = []
    for cfg in (config, config.get("text_config") if isinstance(config.get("text_config"), Mapping) else {}):
        for k in CHUNK_KEYS:
            v = cfg.get(k)
            if isinstance(v, int) and not isinstance(v, bool) and v > 1:
                found.append(v)
        types = cfg.get("layer_types")
        if isinstance(types, list):
            found += [
                CHUNKED_LAYER_TYPES[t] for t in set(types) if isinstance(t, str) and t in CHUNKED_LAYER_TYPES
            ]
    return max(found) if found else None


def _count_nodes(module: Any, inputs: Mapping[str, Any]) -> int:
    import torch

    from chipswap.readiness.capture import quiet

    with quiet():
        ep = torch.export.export(module, (), dict(inputs), strict=False)
    return sum(1 for n in ep.graph.nodes if n.op == "call_function")


@dataclass(frozen=True)
class Probe:
    issue: CaptureIssue | None
    note: str | None  # why (part of) the probe could not run


def probe_growth(
    module: Any,
    spec: Mapping[str, tuple[tuple[int, ...], str]],
    *,
    device: str,
    vocab_size: int | None,
    highs: Mapping[str, int] | None,
    config: Mapping[str, Any] | None = None,
    stubbed_classes: tuple[str, ...] = (),
) -> Probe:
    """Export `module` at each pair of probe_lengths (with the main capture's stubs) and return the first
    growth finding, or a note naming what could not be probed."""
    from chipswap.readiness.capture import make_inputs, stubbed

    if _seq_spec(spec, PROBE_LENGTHS[0]) is None:
        return Probe(None, None)  # no one sequence dimension: nothing grows with it
    checked = max(dims[1] for dims, _ in spec.values() if len(dims) == 2)
    limit = MAX_PROBE_LENGTH
    positions = (config or {}).get("max_position_embeddings")
    if isinstance(positions, int) and positions > 0:
        limit = min(limit, positions)
    for short, long in probe_lengths(config):
        if long > limit:
            return Probe(None, (
                f"the growth probe could not export above the chunk size {short // 2} (it would need {long} "
                f"tokens, over {limit}); a loop over chunks would go unseen"
            ))  # fmt: skip
        counts = []
        for n in (short, long):
            s = _seq_spec(spec, n)
            assert s is not None
            try:
                inputs = make_inputs(s, device=device, vocab_size=vocab_size, highs=highs)
                with stubbed(module, stubbed_classes, inputs, device=device):
                    counts.append(_count_nodes(module, inputs))
            except Exception as exc:  # noqa: BLE001 - the probe is advisory: say it did not run, and why
                return Probe(None, (
                    f"the growth probe could not export at {n} tokens ({type(exc).__name__}: "
                    f"{str(exc).splitlines()[0][:120] if str(exc).strip() else ''}), so a per-token or "
                    "per-chunk loop in the graph would go unseen"
                ))  # fmt: skip
        chunk = None if (short, long) == PROBE_LENGTHS else short // 2
        issue = growth_issue(short, long, counts[0], counts[1], checked, chunk)
        if issue is not None:
            return Probe(issue, None)
    return Probe(None, None)


def with_growth(
    inventory: Inventory, module: Any, spec: Any, *, config: Mapping[str, Any] | None = None, **probe: Any
) -> Inventory:
    """`inventory` plus the sequence-growth finding when its graph gains nodes with every token or chunk (or
    a note when the probe could not run). Runs where the main capture exported, with its stubs if any."""
    if not inventory.exported and not inventory.stubbed:
        return inventory
    got = probe_growth(module, spec, config=config, stubbed_classes=inventory.stubbed, **probe)
    if got.issue is not None:
        inventory = replace(inventory, issues=(*inventory.issues, got.issue))
    if got.note is not None:
        inventory = replace(inventory, notes=(*inventory.notes, got.note))
    return inventory
