# chipswap: `make demo` and `make test` are the only two set-up commands a newcomer needs.
SHELL := /bin/bash
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed-stamp
export AOTI_RUNTIME_CHECK_INPUTS := 1

.PHONY: install demo test test-slow test-all test-random test-fast lint bench browser clean calibrate fuzz fuzz-random

$(STAMP): pyproject.toml
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --disable-pip-version-check -q -e '.[dev]'
	touch $(STAMP)

install: $(STAMP) ## create .venv and install chipswap with everything it needs (torch 2.13.0 CPU)

demo: $(STAMP) ## run the main job on the bundled example: chipswap plan
	$(VENV)/bin/chipswap plan

# Headless Chromium renders the HTML report in a test; installed from Debian's packages when missing.
browser:
	@command -v chromium >/dev/null 2>&1 || command -v chromium-browser >/dev/null 2>&1 || \
	  { if [ "$$(id -u)" = 0 ]; then apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium >/dev/null; \
	    else echo "chromium missing: run 'sudo apt-get install chromium' for the report rendering test"; fi; }

# The suite on every core (pytest-xdist; work stealing balances the slow ones); hypothesis derandomized
# (tests/conftest.py, profile "ci"), so a run never fails on a new random draw. No test skips on a time budget:
# a fuzz test runs a fixed number of inputs (CHIPSWAP_FUZZ_SCALE times its count; deterministic seeds), so a
# loaded machine takes longer but tests the same things. Tests marked `slow` (real compiles and exports, whole
# plans per input) are in `make test-slow`; CI (.ci/run) runs both, side by side.
test: $(STAMP) browser ## the suite without the slow tests (<= 8 min on 2 idle cores; `make test-all`: everything)
	$(PY) -m pytest -q -p no:cacheprovider -n auto --dist worksteal -m "not slow"

test-slow: $(STAMP) browser ## the slow tests only: real compiles and exports, whole-plan fuzz inputs
	$(PY) -m pytest -q -p no:cacheprovider -n auto --dist worksteal -m slow

test-all: $(STAMP) browser ## every test, slow ones included
	$(PY) -m pytest -q -p no:cacheprovider -n auto --dist worksteal

test-random: $(STAMP) browser ## the whole suite with fresh hypothesis draws (exploration; a failure prints its seed)
	HYPOTHESIS_PROFILE=random $(PY) -m pytest -q -p no:cacheprovider -n auto --dist worksteal

test-fast: $(STAMP) ## the pure-core tests only (seconds)
	$(PY) -m pytest -q -m "not slow and not browser"

# The hostile-input fuzz suite with 20x the inputs of `make test`, the same inputs on every run (derandomized:
# a failure reproduces); CHIPSWAP_FUZZ_SEED=N draws another fixed set, `make fuzz-random` a new seed (printed).
fuzz: $(STAMP) ## the fuzz suite, 20x the inputs per kind of `make test`, deterministic
	CHIPSWAP_FUZZ_SCALE=$${CHIPSWAP_FUZZ_SCALE:-20} \
	  $(PY) -m pytest -q -p no:cacheprovider -n auto --dist worksteal tests/fuzz

fuzz-random: $(STAMP) ## the fuzz suite at 20x with a new seed each run (printed; exploration)
	CHIPSWAP_FUZZ_SCALE=$${CHIPSWAP_FUZZ_SCALE:-20} CHIPSWAP_FUZZ_SEED=$${CHIPSWAP_FUZZ_SEED:-$$(date +%s)} \
	  $(PY) -m pytest -q -p no:cacheprovider -n auto --dist worksteal tests/fuzz

lint: $(STAMP)
	$(VENV)/bin/ruff check src tests bench
	$(VENV)/bin/mypy

bench: $(STAMP) ## every benchmark in bench/; results land in docs/benchmarks.md
	@set -e; for b in bench/bench_*.py; do echo "== $$b"; $(PY) $$b; done

calibrate: $(STAMP) ## re-fit the projection's platform coefficients from ../shared/reference (docs/projection.md)
	$(VENV)/bin/chipswap calibrate
	$(PY) bench/bench_stacks.py --docs

clean:
	rm -rf $(VENV) build *.egg-info src/*.egg-info .pytest_cache
