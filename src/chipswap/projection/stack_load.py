"""Serving stacks under load, as data: how each stack's decode step depends on the live batch, how a prefill
interrupts decoding, how a waiting request is admitted, and how well the shared rate sweeps validate the
stack's knee (saturation rate), from data/platforms/stack_load.toml.

What it is for: the simulator runs each stack's rules (chipswap.simulation.policies maps the same stack ids
to the policies below; tests/test_stack_load.py keeps the two in step); `project` widens the band of its
capacity figure (the knee) for a stack whose knee the sweeps do not validate (`knee_widening`);
bench/bench_knee.py measures the held-out knee errors (chipswap.projection.fitting.knee) and writes them
into the file, keeping the rules as written.

Shell: reads one shipped TOML file. No numbers are fitted here.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Any

from chipswap.datafile import inside, read_toml, strict_int, strict_number
from chipswap.errors import ChipswapError

STACK_LOAD_FILE = "stack_load.toml"
DECODE_BATCH = ("compiled", "live")
RULE_FIELDS = ("policy", "decode_batch", "prefill", "admission", "kv")


@dataclass(frozen=True)
class StackLoad:
    """One stack's behaviour under load. decode_batch: "compiled" (a decode step runs the compiled batch's
    graph, so it costs decode_step_s(compiled batch, bucket) whatever is in flight) or "live" (the step of
    the sequences in flight). prefill, admission, kv: the rules in words (the simulator's policy runs
    them). validated: the shared rate sweeps test this stack's knee, held out by source; knee_median /
    knee_max: the held-out |error| of the simulated saturation rate (knee_median_other: under the other
    decode-batch rule, for comparison)."""

    stack: str
    policy: str
    decode_batch: str
    prefill: str
    admission: str
    kv: str
    validated: bool = False
    knee_runs: int = 0
    knee_sources: int = 0
    knee_median: float = 0.0
    knee_max: float = 0.0
    knee_median_other: float = 0.0
    # issue 40: seconds each decode step grows per live sequence, fitted on the shared rate sweeps held out
    # by source (chipswap.projection.fitting.knee.held_out); a stack with a fitted term runs the occupancy
    # of its admission rule (every compiled slot live at saturation). None: not fitted (the physical fit's
    # occupancy, no growth)
    live_step_s: float | None = None
    tpot_sweeps: int = 0  # shared sweeps whose loaded/idle TPOT ratio the held-out fit reproduces ...
    tpot_within: int = 0  # ... within 25 % (of tpot_sweeps)
    tpot_worst: float = 0.0  # the largest |relative error| of that ratio


@dataclass(frozen=True)
class StackLoadData:
    stacks: dict[str, StackLoad]
    widening: float  # the knee band's widening for a stack not validated (relative)
    note: str = ""

    def knee_widening(self, stack: str) -> float:
        """Relative widening of the capacity (knee) band of a stack the sweeps do not validate (0 if they
        do)."""
        s = self.stacks.get(stack)
        return 0.0 if s is not None and s.validated else self.widening

    def live_step(self, stack: str) -> float | None:
        """The stack's fitted per-live-sequence step growth (seconds), None where it is not fitted."""
        s = self.stacks.get(stack)
        return None if s is None else s.live_step_s


def _stack(name: str, d: Any) -> StackLoad:
    where = f"{STACK_LOAD_FILE} stacks.{name}"
    if not isinstance(d, dict):
        raise ChipswapError(f"{where} must be a table; fix {STACK_LOAD_FILE}")
    missing = [k for k in RULE_FIELDS if not isinstance(d.get(k), str) or not d.get(k)]
    if missing:
        raise ChipswapError(f"{where} has no {', '.join(missing)}; give each rule in words")
    if d["decode_batch"] not in DECODE_BATCH:
        raise ChipswapError(f"{where}.decode_batch is {d['decode_batch']!r}; use compiled or live")
    num = {k: strict_number(d.get(k, 0.0), f"{where}.{k}", lo=0) for k in
           ("knee_median", "knee_max", "knee_median_other")}  # fmt: skip
    live = d.get("live_step_s")
    return StackLoad(
        name, d["policy"], d["decode_batch"], d["prefill"], d["admission"], d["kv"],
        validated=bool(d.get("validated", False)),
        knee_runs=strict_int(d.get("knee_runs", 0), f"{where}.knee_runs", lo=0, hi=100_000),
        knee_sources=strict_int(d.get("knee_sources", 0), f"{where}.knee_sources", lo=0, hi=10_000), **num,
        live_step_s=None if live is None else strict_number(live, f"{where}.live_step_s", lo=0, hi=0.5),
        tpot_sweeps=strict_int(d.get("tpot_sweeps", 0), f"{where}.tpot_sweeps", lo=0, hi=10_000),
        tpot_within=strict_int(d.get("tpot_within", 0), f"{where}.tpot_within", lo=0, hi=10_000),
        tpot_worst=strict_number(d.get("tpot_worst", 0.0), f"{where}.tpot_worst", lo=0),
    )  # fmt: skip


@lru_cache(maxsize=4)
def load_stack_load(folder: str | None = None) -> StackLoadData:
    """The stacks' behaviour under load (the shipped file, or the one in `folder`)."""
    from chipswap.projection.platforms import shipped_dir

    root = Path(folder) if folder else shipped_dir()
    path = inside(root, STACK_LOAD_FILE, "stack-under-load file")
    if not path.is_file():
        raise ChipswapError(f"{STACK_LOAD_FILE} is missing from {root}; restore it from the repository")
    data = read_toml(path, "stack-under-load file")
    stacks = {name: _stack(name, d) for name, d in (data.get("stacks") or {}).items()}
    widening = strict_number(data.get("widening", 0.0), f"{STACK_LOAD_FILE} widening", lo=0, hi=10)
    return StackLoadData(stacks, widening, str(data.get("note", "")))


def stack_load_text(data: StackLoadData, header: str) -> str:
    """The file's text (rules as given, knee figures as measured)."""
    lines = [*(f"# {h}" if h else "#" for h in header.splitlines()), "schema = 1",
             f"widening = {data.widening!r}", ""]  # fmt: skip
    for name, s in data.stacks.items():
        lines.append(f'[stacks."{name}"]')
        for k in RULE_FIELDS:
            lines.append(f"{k} = {_q(getattr(s, k))}")
        lines.append(f"validated = {'true' if s.validated else 'false'}")
        if s.validated:
            lines += [f"knee_runs = {s.knee_runs}", f"knee_sources = {s.knee_sources}",
                      f"knee_median = {s.knee_median!r}", f"knee_max = {s.knee_max!r}",
                      f"knee_median_other = {s.knee_median_other!r}"]  # fmt: skip
        if s.live_step_s is not None:
            lines += [f"live_step_s = {s.live_step_s!r}", f"tpot_sweeps = {s.tpot_sweeps}",
                      f"tpot_within = {s.tpot_within}", f"tpot_worst = {s.tpot_worst!r}"]  # fmt: skip
        lines.append("")
    return "\n".join(lines)


def _q(text: str) -> str:
    return '"' + text.replace("\\", "\\\\").replace('"', '\\"') + '"'


DOCS_MARK = "stack-load"  # docs/simulation.md holds <!-- stack-load --> ... <!-- /stack-load -->


def docs_block(data: StackLoadData) -> str:
    """The part of docs/simulation.md that quotes this file (written by bench/simulation_docs.py; a test
    compares the two): each stack's rules as the file words them, its held-out knee error, the widening."""
    lines = [
        "Generated from `src/chipswap/data/platforms/stack_load.toml` by `python bench/simulation_docs.py` "
        "(do not edit by hand; `tests/test_stack_load.py` compares).",
        "",
        "| stack | policy | decode batch | prefill | admission | KV cache | knee held out by source | "
        "decode step under load (issue 40, held out by source) |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for name, s in data.stacks.items():
        if s.validated:
            knee = (
                f"median {s.knee_median:.1%}, largest {s.knee_max:.1%} ({s.knee_runs} runs, "
                f"{s.knee_sources} source{'s' if s.knee_sources != 1 else ''}); other decode-batch rule "
                f"{s.knee_median_other:.1%}"
            )
        else:
            knee = f"not validated: capacity band widened {data.widening:.0%}"
        if s.live_step_s is None:
            step = "not fitted (the physical fit's occupancy)"
        else:
            step = (
                f"+{s.live_step_s * 1e3:.2f} ms per live sequence, every compiled slot live; loaded/idle "
                f"TPOT within 25 % on {s.tpot_within} of {s.tpot_sweeps} sweeps (largest {s.tpot_worst:.1%})"
            )
        lines.append(
            f"| `{name}` | `{s.policy}` | {s.decode_batch} | {s.prefill} | {s.admission} | {s.kv} | {knee} "
            f"| {step} |"
        )
    worst = max((s.knee_median for s in data.stacks.values() if s.validated), default=0.0)
    lines += [
        "",
        f"Widening of a stack the sweeps do not validate: **{data.widening:.0%}** (the largest median "
        f'held-out knee error of a validated stack, {worst:.1%}, rounded up); `project` prints "band widened '
        f"{data.widening:.0%}: <stack>'s knee not validated under load\" on its requests/s.",
    ]
    return "\n".join(lines)
