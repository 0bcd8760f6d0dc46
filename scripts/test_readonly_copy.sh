#!/usr/bin/env bash
# The fast tests (not slow, not browser; about a minute on 2 cores) from a read-only copy of this checkout:
# a test that writes anywhere but pytest's temporary folders fails here. The copy is made read-only with
# chmod, or, as root (who ignores file modes), with a read-only bind mount in a private mount namespace.
# PYTHON=path overrides .venv/bin/python; extra arguments go to pytest (e.g. a list of test files).
set -euo pipefail
here="$(cd "$(dirname "$0")/.." && pwd)"
py="${PYTHON:-$here/.venv/bin/python}"
base="$(mktemp -d)"
trap 'chmod -R u+w "$base" 2>/dev/null; rm -rf "$base"' EXIT
copy="$base/repo"
mkdir "$copy"
tar -C "$here" --exclude=./.venv --exclude=.git --exclude=__pycache__ --exclude=./chipswap-report \
  --exclude=.pytest_cache --exclude=.hypothesis -cf - . | tar -C "$copy" -xf -
[ -e "$here/../shared" ] && ln -s "$(cd "$here/.." && pwd)/shared" "$base/shared"  # ../shared/reference
args=("$@")
[ "${#args[@]}" -gt 0 ] || args=(-n auto --dist worksteal -m "not slow and not browser")
run='cd "$1" && shift && if touch .probe 2>/dev/null; then echo "copy is writable" >&2; exit 3; fi
  PYTHONDONTWRITEBYTECODE=1 PYTHONPATH="$PWD/src" "$@"'
cmd=("$py" -m pytest -q -p no:cacheprovider "${args[@]}")
if [ "$(id -u)" != 0 ]; then
  chmod -R a-w "$copy"
  bash -c "$run" _ "$copy" "${cmd[@]}"
else
  unshare -m bash -c 'mount --bind "$1" "$1" && mount -o remount,bind,ro "$1" && shift && '"$run" \
    _ "$copy" "$copy" "${cmd[@]}"
fi
echo "ci: the fast tests pass from a read-only copy of the checkout"
