"""The trial's bench script: warm-up, the workload's traffic at the busiest-window rate, a rate sweep to
saturation, and the pick of the measured capacity that `chipswap plan --bench` reads.

Pure core: TrialSpec in, bash text out (every workload value through shlex.quote). No I/O. The script only
calls `chipswap bench` (so it picks up whatever the results schema carries after a merge) and Python's json
module to read the files it wrote.
"""

from __future__ import annotations

import json
import shlex

from chipswap.textsafe import one_line
from chipswap.trial.spec import Target, TrialSpec

q = shlex.quote

SWEEP_FACTORS = (0.5, 0.75, 1.0, 1.5, 2.0, 3.0, 4.0)  # x the projected requests/s per instance at the SLO
WARMUP_REQUESTS = 16
REPLAY_S = {"llm": 300, "encoder": 120}  # the busiest window is 300 s; encoders settle faster
SWEEP_S = {"llm": 120, "encoder": 60}
SATURATED_GOODPUT = 0.9  # a sweep step whose goodput is under 90 % of what was sent: saturated, stop
# no projected figure (outside what the calibration covers): a ladder of rates, x the busiest-window rate of
# the whole fleet, from which one instance's capacity is found (the sweep stops at saturation)
UNKNOWN_LADDER = (1 / 64, 1 / 32, 1 / 16, 1 / 8, 1 / 4, 1 / 2, 1.0)


def fmt_rate(x: float) -> str:
    return f"{x:.0f}" if x >= 1000 else f"{x:.4g}"


def fmt_rate_text(x: float) -> str:
    return f"{x:,.0f}" if x >= 1000 else f"{x:.4g}"


def per_instance_rate(spec: TrialSpec, t: Target) -> float:
    """The busiest-window arrival rate one instance of the planned fleet carries (no projected figure, so no
    planned fleet: the first step of the ladder)."""
    if not t.figure_known:
        return spec.traffic.busiest_rps * UNKNOWN_LADDER[0]
    return spec.traffic.busiest_rps / max(t.count, 1)


def sweep_rates(spec: TrialSpec, t: Target) -> list[float]:
    if not t.figure_known:
        return [spec.traffic.busiest_rps * f for f in UNKNOWN_LADDER]
    base = t.projected_rps or per_instance_rate(spec, t)
    return [base * f for f in SWEEP_FACTORS]


def bench_seconds(spec: TrialSpec, t: Target, warmup_s: float = 120.0) -> float:
    """Upper bound of the script's running time for one target (every sweep step run)."""
    return warmup_s + REPLAY_S[spec.mode] + SWEEP_S[spec.mode] * len(sweep_rates(spec, t))


def trace_args(spec: TrialSpec) -> list[str]:
    if spec.traffic.source == "bundled":
        return []
    if spec.traffic.source == "file" and spec.traffic.trace:
        return ["--trace", spec.traffic.trace]
    return ["--trace", "traffic.csv"]


def _slo_args(spec: TrialSpec) -> list[str]:
    out = []
    if "p99_ms" in spec.slo_ms:
        out += ["--slo-ms", f"{spec.slo_ms['p99_ms']:g}"]
    if "ttft_p99_ms" in spec.slo_ms and spec.mode == "llm":
        out += ["--slo-ttft-ms", f"{spec.slo_ms['ttft_p99_ms']:g}"]
    return out


def _target_case(spec: TrialSpec, t: Target) -> str:
    url = "http://127.0.0.1:8000" if t.side == "neuron" else (t.endpoint or "")
    var = "URL" if t.side == "neuron" else "GPU_URL"
    extra = ""
    vllm = spec.stack == "nxdi-vllm" if t.side == "neuron" else spec.gpu_stack == "vllm"
    if spec.mode == "llm" and vllm:
        extra = json.dumps({"ignore_eos": True})  # vLLM: generate the trace's output lengths exactly
    rate_why = f"busiest window / {t.count} instances" if t.figure_known else "no figure: the ladder's first"
    # defaults that come from the workload are assigned quoted, then expanded: they stay text
    return (
        f"  {t.side})\n"
        f"    DEFAULT_URL={q(url)}\n"
        f'    URL="${{{var}:-$DEFAULT_URL}}"\n'
        f"    INSTANCE={q(t.instance)} PRICE_TERM={q(t.term)}  # not TERM: that is the terminal's\n"
        f'    RATE="${{RATE:-{fmt_rate(per_instance_rate(spec, t))}}}"  # {rate_why}\n'
        f'    SWEEP_RATES="${{SWEEP_RATES:-{" ".join(fmt_rate(r) for r in sweep_rates(spec, t))}}}"\n'
        f"    DEFAULT_EXTRA_BODY={q(extra)}\n"
        '    EXTRA_BODY="${EXTRA_BODY-$DEFAULT_EXTRA_BODY}"  # EXTRA_BODY= (empty) sends none\n'
        "    ;;\n"
    )


_PICK = """
pick_capacity() {  # the run with the highest goodput (throughput without an SLO) -> results/TARGET.json
  "$PYTHON" - "$OUT" "results/${TARGET}.json" <<'PY'
import glob, json, os, shutil, sys
best, best_rps = None, -1.0
for f in sorted(glob.glob(os.path.join(sys.argv[1], "*.json"))):
    if os.path.basename(f).startswith("warmup"):
        continue
    d = json.load(open(f))
    if not d.get("complete") or not (d.get("counts") or {}).get("ok"):
        continue
    rps = (d.get("goodput") or d.get("throughput") or {}).get("requests_per_s") or 0.0
    if rps > best_rps:
        best, best_rps = f, rps
if best is None:
    sys.exit("bench: error: no complete run with a successful request to pick; nothing written to "
             + sys.argv[2] + "; see " + sys.argv[1])
shutil.copyfile(best, sys.argv[2])
print(f"bench: capacity {best_rps:.4g} requests/s from {os.path.basename(best)} -> {sys.argv[2]}")
PY
}

checked() {  # FILE NAME EXIT STRICT: one line and exit 1 when a run stopped early or had 0 successes
  # (STRICT=1: warm-up and replay); a sweep step that failed so (STRICT=0) only ends the sweep (exit 3)
  "$PYTHON" - "$1" "$2" "$3" "$4" "$TARGET" "$EXTRA_BODY" <<'PY'
import json, os, re, sys
path, name, rc, strict, target, extra = sys.argv[1:7]
def fail(why):
    why = " ".join(why.split())
    if strict == "1":
        sys.exit(f"bench: error: the {name} run {why}; nothing written to results/{target}.json")
    print(f"bench: sweep ends at {name}: it {why}")
    sys.exit(3)
if not os.path.exists(path):
    fail(f"wrote no results (chipswap bench exit {rc}: see its message above)")
d = json.load(open(path))
c = d.get("counts") or {}
reason = str(d.get("stop_reason") or "")
hint = ""
said = reason + json.dumps(d.get("errors") or [])
if extra and re.search(r"HTTP (400|422)|[Uu]nexpected field|[Uu]nknown field|extra", said):
    hint = (f"; the server may not accept the extra request fields {extra} (vLLM's ignore_eos): "
            f"rerun as EXTRA_BODY= ./bench.sh {target}")
if not d.get("complete"):
    fail(f"stopped early: {reason or 'no reason given'}{hint}")
if not c.get("ok"):
    errs = d.get("errors") or []
    top = f" ({errs[0].get('count')} x {errs[0].get('kind')}: {errs[0].get('message')})" if errs else ""
    fail(f"had 0 successful requests of {c.get('sent', 0)} sent{top}{hint}")
if rc != "0":
    fail(f"failed (chipswap bench exit {rc}: see its message above)")
PY
}

saturated() {  # FILE: true when goodput fell under the threshold (or errors/rejects rose) at this rate
  "$PYTHON" - "$1" <<'PY'
import json, sys
d = json.load(open(sys.argv[1]))
g, r = d.get("goodput"), d.get("rates") or {}
bad = (g is not None and (g.get("fraction_of_sent") or 0) < __THRESHOLD__) or \\
    (r.get("error") or 0) + (r.get("reject") or 0) + (r.get("timeout") or 0) > 0.05
sys.exit(0 if bad else 1)
PY
}
"""


def bench_script(spec: TrialSpec) -> str:
    """bench.sh [neuron|gpu]: warm-up, replay at the busiest-window rate, sweep to saturation, pick."""
    protocol = "completions" if spec.mode == "llm" else "predict"
    common = ["--protocol", protocol, *_slo_args(spec), *trace_args(spec)]
    targets = [spec.neuron] + ([spec.gpu] if spec.gpu is not None else [])
    cases = "".join(_target_case(spec, t) for t in targets)
    sides = " | ".join(t.side for t in targets)
    return (
        "#!/usr/bin/env bash\n"
        "# shellcheck disable=SC2016  # workload text is single-quoted on purpose: it stays text\n"
        "# chipswap trial kit: measure one side with `chipswap bench` (warm-up, the workload's traffic at "
        "the\n"
        "# busiest-window rate, a rate sweep up to saturation) and keep the capacity run for `chipswap "
        "plan`.\n"
        "# Generated by `chipswap trial` (see README.md).\n"
        "set -euo pipefail\n"
        'cd "$(dirname "$0")"\n'
        f"TRIAL_TITLE={q(one_line(spec.title, 300))}  # one line: it cannot forge output lines\n"
        'TARGET="${1:-neuron}"\n'
        'PYTHON="${PYTHON:-python3}"\n'
        f'REPLAY_S="${{REPLAY_S:-{REPLAY_S[spec.mode]}}}"\n'
        f'SWEEP_S="${{SWEEP_S:-{SWEEP_S[spec.mode]}}}"\n'
        f'WARMUP_REQUESTS="${{WARMUP_REQUESTS:-{WARMUP_REQUESTS}}}"\n'
        f"REGION={q(spec.neuron.region)}\n"
        'case "$TARGET" in\n' + cases + f'  *) echo "usage: bench.sh [{sides}]" >&2; exit 2 ;;\n'
        "esac\n"
        f"COMMON=({' '.join(q(a) for a in common)})\n"
        'if [[ -n "$EXTRA_BODY" ]]; then COMMON+=(--extra-body "$EXTRA_BODY"); fi\n'
        'OUT="results/runs/${TARGET}"\n'
        'mkdir -p "$OUT"\n'
        + _PICK.replace("__THRESHOLD__", str(SATURATED_GOODPUT))
        + """
run() {  # NAME STRICT RATE SECONDS [more chipswap bench flags]: exit 1 (strict) or 3 (sweep) on a failed run
  local name="$1" strict="$2" rate="$3" secs="$4" rc=0
  shift 4
  rm -f "$OUT/${name}.json"
  chipswap bench "$URL" "${COMMON[@]}" --instance "$INSTANCE" --term "$PRICE_TERM" --region "$REGION" \\
    --rate "$rate" --duration "$secs" --out "$OUT/${name}.json" "$@" || rc=$?
  checked "$OUT/${name}.json" "$name" "$rc" "$strict"
}

echo "bench: ${TRIAL_TITLE} -- ${TARGET} on ${INSTANCE} at ${URL}"
run warmup 1 1 600 --requests "$WARMUP_REQUESTS"
run replay 1 "$RATE" "$REPLAY_S" --requests 1000000
step=0
for rate in $SWEEP_RATES; do
  step=$(( step + 1 ))
  rc=0
  run "sweep-${step}" 0 "$rate" "$SWEEP_S" --requests 1000000 || rc=$?
  if (( rc == 3 )); then break; elif (( rc != 0 )); then exit "$rc"; fi
  if saturated "$OUT/sweep-${step}.json"; then
    echo "bench: saturated at ${rate} requests/s"
    break
  fi
done
pick_capacity
"""
    )


def traffic_csv(prompts: list[int], outputs: list[int] | None, rows: int = 2000) -> str:
    """A trace of the workload's lengths without timestamps (arrivals: Poisson at --rate): `rows` rows taken
    evenly from the lengths the plan read (all of them when fewer)."""
    n = len(prompts)
    if n == 0:
        raise ValueError("no lengths")
    take = [round(i * (n - 1) / max(rows - 1, 1)) for i in range(min(rows, n))] if n > rows else range(n)
    lines = ["ContextTokens,GeneratedTokens"]
    for i in take:
        out = outputs[i] if outputs is not None and i < len(outputs) else 1
        lines.append(f"{max(int(prompts[i]), 1)},{max(int(out), 1)}")
    return "\n".join(lines) + "\n"
