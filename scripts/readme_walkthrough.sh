#!/usr/bin/env bash
# Run the README's walk-through (the ```bash block under "A walk-through") in this checkout, as a newcomer
# would: it writes plan.json, chipswap-report/ and compile artifacts here. CI runs it beside `make test` to
# show the suite never depends on what a person does in the checkout. CHIPSWAP=path overrides the
# .venv/bin/chipswap the README names; `make demo` runs as the `chipswap plan` it stands for.
set -euo pipefail
cd "$(dirname "$0")/.."
bin="${CHIPSWAP:-.venv/bin/chipswap}"
mapfile -t cmds < <(awk '/^### A walk-through/{f=1} f && /^```bash/{b=1; next} b && /^```/{exit} b' README.md)
[ "${#cmds[@]}" -gt 0 ] || { echo "readme: no walk-through block found in README.md" >&2; exit 1; }
for line in "${cmds[@]}"; do
  cmd="${line%%  #*}"                                    # drop the trailing comment
  cmd="${cmd/#make demo/.venv/bin/chipswap plan}"
  cmd="${cmd/#.venv\/bin\/chipswap/$bin}"
  [ -n "${cmd// }" ] || continue
  echo "readme: $cmd"
  eval "$cmd" > /dev/null
done
echo "readme: walk-through done (${#cmds[@]} commands)"
