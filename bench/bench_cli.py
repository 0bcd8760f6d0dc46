"""CPU and wall time of the commands a user iterates on (issue 38), this tree side by side with a baseline
tree (main before the speed work: a `git archive` of its commit), in one run, with the load average at each
run.

Each run is a fresh `python -m chipswap ...` process; CPU is the child's user + system seconds (getrusage),
the figure that is comparable on a shared machine; wall depends on the load, which is quoted. The two trees
alternate (this, baseline, this, ...), so a change in the machine's load hits both alike; medians of
`--repeat` runs. Each tree runs from a copy of its src/ with its bytecode compiled first (as an installed
package has its .pyc files; `--no-bytecode`: from the trees themselves under PYTHONDONTWRITEBYTECODE, every
run compiling chipswap's modules, as rounds 1 and 2 measured). project and check run as the first call for
their config: each timed run gets an empty accepted-config memo (chipswap.models.checked), so nothing a
previous run learnt is reused.

Commands (`--only NAME` to pick; trial and plan-trn2 are opt-in, they take minutes on main):
- plan:          chipswap plan --example llama-serving --no-aws (the bundled example; the demo), the first
                 plan of its model (an empty readiness memo)
- plan-again:    the same plan again (the readiness memo holds the first run's check: chipswap.readiness.
                 memo), as a user re-plans after changing the SLO, a price or the traffic
- plan-classifier / plan-finetune / plan-trn2: the other bundled examples (--example NAME --no-aws)
- plan-chat:     a chat workload (Llama 3 8B, TTFT / TPOT / end-to-end p99 objectives, 4 x g6e.12xlarge today)
                 on a 20,000-request trace (written by this script: Poisson arrivals at 20 requests/s,
                 log-normal prompt and answer lengths, fixed seed)
- project-config: chipswap project CONFIG.json -i inf2.48xlarge -i p5.48xlarge (Qwen2.5-7B's config.json)
- project-train: chipswap project CONFIG.json -i p5.48xlarge --train-tokens 2e9 --nodes 32 (Llama 3 70B)
- check-70b:     chipswap check CONFIG.json (Llama 3 70B's config.json, one default shape)
- trial:         chipswap trial (opt-in: --only trial)

    python bench/bench_cli.py --baseline /tmp/base [--baseline-label 31a66e0] [--repeat 1] [--no-write]
        [--only NAME ...] [--section NAME] [--no-bytecode]
    git archive 31a66e0 | tar -x -C /tmp/base      # the baseline tree

Writes its section of docs/benchmarks.md via bench/_results.write_section("cli", ...) (or `--section NAME`).
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _results import ROOT, write_section  # noqa: E402

MODELS = ROOT / "src" / "chipswap" / "data" / "models"
TARGETS = {"plan": "<= 10 s wall", "plan-again": "<= 10 s wall", "project-config": "<= 1 s",
           "project-train": "<= 1 s", "check-70b": "<= 10 s CPU", "trial": "<= 30 s",
           "plan-classifier": "<= 30 s", "plan-finetune": "<= 30 s", "plan-trn2": "<= 30 s",
           "plan-chat": "<= 30 s"}  # fmt: skip
OPT_IN = ("trial", "plan-trn2")
CHAT = """title = "chat assistant (bench)"
kind = "serving"
[model]
preset = "llama-3-8b"
task = "causal-lm"
[traffic]
trace = "chat.csv"
mode = "llm"
burst_window_s = 120
[fleet]
instance = "g6e.12xlarge"
count = 4
[slo]
ttft_p99_ms = 1500
tpot_p99_ms = 80
e2e_p99_ms = 30000
[targets]
candidates = ["inf2.48xlarge", "trn1.32xlarge"]
[porting]
engineer_days = 20
day_rate_usd = 800
"""


def _chat(folder: Path, requests: int = 20_000, rate_rps: float = 20.0) -> str:
    """The chat workload and its trace (seeded: the same file every run)."""
    import numpy as np

    rng = np.random.default_rng(38)
    t = np.cumsum(rng.exponential(1 / rate_rps, requests))
    prompt = np.clip(rng.lognormal(np.log(1000), 0.6, requests), 16, 7000).astype(int)
    out = np.clip(rng.lognormal(np.log(300), 0.5, requests), 2, 1000).astype(int)
    rows = ["TIMESTAMP,ContextTokens,GeneratedTokens"]
    rows += [f"{a:.3f},{p},{o}" for a, p, o in zip(t, prompt, out, strict=True)]
    d = folder / "chat"
    d.mkdir(parents=True, exist_ok=True)
    (d / "chat.csv").write_text("\n".join(rows) + "\n")
    (d / "chat.toml").write_text(CHAT)
    return str(d / "chat.toml")


def _config(preset: str, arch: str, folder: Path) -> str:
    """A transformers config.json from a shipped preset's config (what a user passes)."""
    cfg = json.loads((MODELS / f"{preset}.json").read_text())["config"]
    cfg = {**cfg, "architectures": [arch], "torch_dtype": "bfloat16"}
    d = folder / preset
    d.mkdir(parents=True, exist_ok=True)
    (d / "config.json").write_text(json.dumps(cfg))
    return str(d / "config.json")


def commands(work: Path) -> dict[str, list[str]]:
    qwen = _config("qwen2.5-7b", "Qwen2ForCausalLM", work)
    llama70 = _config("llama-3-70b", "LlamaForCausalLM", work)
    return {
        "plan": ["plan", "--example", "llama-serving", "--no-aws", "-q", "--out", str(work / "report")],
        "plan-again": ["plan", "--example", "llama-serving", "--no-aws", "-q", "--out", str(work / "again")],
        **{
            f"plan-{short}": ["plan", "--example", name, "--no-aws", "-q", "--out", str(work / name)]
            for short, name in (
                ("classifier", "classifier-serving"),
                ("finetune", "finetune"),
                ("trn2", "trn2-serving"),
            )
        },  # fmt: skip
        "plan-chat": ["plan", _chat(work), "--no-aws", "-q", "--out", str(work / "chat-report")],
        "project-config": ["project", qwen, "-i", "inf2.48xlarge", "-i", "p5.48xlarge"],
        "project-train": ["project", llama70, "-i", "p5.48xlarge", "--train-tokens", "2e9", "--nodes", "32"],
        "check-70b": ["check", llama70],
        "trial": ["trial", "--example", "llama-serving", "--no-aws", "--force", "--out", str(work / "kit")],
    }


def _compiled(src: Path, dest: Path) -> str:
    """A copy of a tree's src/ with its bytecode compiled (an installed package has its .pyc files; the
    checkouts are left as they are), so neither tree pays for compiling chipswap in a timed run."""
    shutil.copytree(src, dest / "src", ignore=shutil.ignore_patterns("__pycache__"))
    subprocess.run([sys.executable, "-m", "compileall", "-q", str(dest / "src")], check=False,
                   stdout=subprocess.DEVNULL, timeout=600)  # fmt: skip
    return str(dest / "src")


def run_once(src: str, argv: list[str], env: dict[str, str], cwd: Path) -> tuple[float, float, int, float]:
    """(cpu s, wall s, exit code, 1-min load average at the start) of one fresh process."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    load = os.getloadavg()[0]
    t0 = time.monotonic()
    r = subprocess.run(
        [sys.executable, "-m", "chipswap", *argv], cwd=cwd, env={**env, "PYTHONPATH": src},
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, timeout=3600, check=False,
    )  # fmt: skip
    wall = time.monotonic() - t0
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return cpu, wall, r.returncode, load


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--baseline", required=True, help="a tree whose src/ to time side by side")
    ap.add_argument("--baseline-label", default="")
    ap.add_argument("--repeat", type=int, default=1)
    ap.add_argument("--only", action="append", default=[], help="a command (repeat); default: all but "
                    f"{' and '.join(OPT_IN)}")  # fmt: skip
    ap.add_argument("--no-write", action="store_true")
    ap.add_argument("--no-bytecode", action="store_true", help="no .pyc files: every run compiles chipswap")
    ap.add_argument("--section", default="cli", help="the docs/benchmarks.md section to write (a run of a "
                    "few commands can go to its own section and leave the full table as it is)")  # fmt: skip
    args = ap.parse_args()
    label = args.baseline_label or args.baseline
    with tempfile.TemporaryDirectory(prefix="bench-cli-") as tmp:
        work = Path(tmp)
        cmds = commands(work)
        names = args.only or [n for n in cmds if n not in OPT_IN]
        unknown = [n for n in names if n not in cmds]
        if unknown:
            choices = ", ".join(cmds)
            print(f"bench_cli: no command {', '.join(unknown)}; choose from {choices}", file=sys.stderr)
            raise SystemExit(2)
        env = {**os.environ, "CHIPSWAP_PROJECT_CONFIG": "none", "CHIPSWAP_CACHE_KEY": str(work / "key" / "k")}
        if args.no_bytecode:  # every run compiles chipswap's modules again (a checkout under
            env["PYTHONDONTWRITEBYTECODE"] = "1"  # PYTHONDONTWRITEBYTECODE, as round 1 and 2 measured)
            trees = (("this", str(ROOT / "src")), ("baseline", str(Path(args.baseline) / "src")))
        else:
            env.pop("PYTHONDONTWRITEBYTECODE", None)
            trees = (("this", _compiled(ROOT / "src", work / "this")),
                     ("baseline", _compiled(Path(args.baseline) / "src", work / "baseline")))  # fmt: skip
        rows: dict[tuple[str, str], list[tuple[float, float, int, float]]] = {}
        runs = iter(range(10**6))
        warmed: set[str] = set()

        def memo(name: str, tree: str, src: str) -> dict[str, str]:
            """Empty memos (every project / check / plan is a first call), but for plan-again: the readiness
            memo of an untimed first run of the same plan (a baseline without the memo ignores it)."""
            n = next(runs)
            out = {**env, "CHIPSWAP_CHECKED_CONFIGS": str(work / f"memo-{n}"),
                   "CHIPSWAP_READINESS_MEMO": str(work / f"readiness-{n}")}  # fmt: skip
            if name == "plan-again":
                out["CHIPSWAP_READINESS_MEMO"] = str(work / f"readiness-warm-{tree}")
                if tree not in warmed:
                    warmed.add(tree)
                    run_once(src, cmds[name], out, work)
            return out

        for name in names:
            for _ in range(args.repeat):
                for tree, src in trees:
                    got = run_once(src, cmds[name], memo(name, tree, src), work)
                    rows.setdefault((name, tree), []).append(got)
                    print(f"{name:15} {tree:9} cpu {got[0]:7.2f} s  wall {got[1]:7.2f} s  exit {got[2]}"
                          f"  load {got[3]:.2f}", flush=True)  # fmt: skip
    lines = [
        f"Each command in a fresh process, this tree and the baseline (`{label}`) alternating, median of "
        f"{args.repeat}; CPU = user + system seconds of the process (comparable under load), wall depends on "
        "the load (1-minute load average at the start of each run, quoted). "
        + (
            "No bytecode cache (every run compiles chipswap's modules); "
            if args.no_bytecode
            else "Bytecode cached (as installed); "
        )
        + "project, check and plan are each the first call for their config (an empty accepted-config memo "
        "and readiness memo per run); plan-again is a plan whose readiness check a first run left in the "
        "readiness memo.",
        "",
        "| command | CPU this | CPU baseline | CPU ratio | wall this | wall baseline | load (this / base)"
        " | exit | target |",
        "|---|---:|---:|---:|---:|---:|---|---|---|",
    ]
    for name in names:
        a, b = rows[(name, "this")], rows[(name, "baseline")]
        ca, cb = statistics.median(x[0] for x in a), statistics.median(x[0] for x in b)
        wa, wb = statistics.median(x[1] for x in a), statistics.median(x[1] for x in b)
        la = "/".join(f"{x[3]:.1f}" for x in a)
        lb = "/".join(f"{x[3]:.1f}" for x in b)
        codes = f"{a[0][2]} / {b[0][2]}"
        lines.append(f"| {' '.join(cmds[name][:1])} ({name}) | {ca:.2f} s | {cb:.2f} s | {ca / cb:.2f}x |"
                     f" {wa:.1f} s | {wb:.1f} s | {la} / {lb} | {codes} | {TARGETS[name]} |")  # fmt: skip
    body = (
        "\n".join(lines)
        + "\n\nCommands timed:\n\n"
        + "\n".join(
            f"- {name}: `chipswap {' '.join(Path(x).name if '/' in x else x for x in cmds[name])}`"
            for name in names
        )
    )
    print(body)
    if not args.no_write:
        cmd = f"python bench/bench_cli.py --baseline {label} --repeat {args.repeat}"
        cmd += "".join(f" --only {n}" for n in args.only) + (" --no-bytecode" if args.no_bytecode else "")
        title = "Commands: CPU and wall, side by side with a baseline tree (issue 38)"
        if args.section != "cli":
            cmd += f" --section {args.section}"
            title += f": {', '.join(names)}"
        write_section(args.section, title, cmd, body)


if __name__ == "__main__":
    main()
