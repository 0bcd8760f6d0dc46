# chipswap: `make demo` and `make test` are the only two set-up commands a newcomer needs.
SHELL := /bin/bash
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed-stamp
export AOTI_RUNTIME_CHECK_INPUTS := 1

.PHONY: install demo test test-random test-fast lint bench browser clean calibrate fuzz

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

# Every test, on every core (pytest-xdist; work stealing balances the slow ones); hypothesis derandomized
# (tests/conftest.py, profile "ci"), so a run never fails on a new random draw.
test: $(STAMP) browser ## the whole test suite
	$(PY) -m pytest -q -p no:cacheprovider -n auto --dist worksteal

test-random: $(STAMP) browser ## the whole suite with fresh hypothesis draws (exploration; a failure prints its seed)
	HYPOTHESIS_PROFILE=random $(PY) -m pytest -q -p no:cacheprovider -n auto --dist worksteal

test-fast: $(STAMP) ## the pure-core tests only (seconds)
	$(PY) -m pytest -q -m "not slow and not browser"

fuzz: $(STAMP) ## the hostile-input fuzz suite, 20x longer than in `make test`, a new seed each run (printed)
	CHIPSWAP_FUZZ_SCALE=$${CHIPSWAP_FUZZ_SCALE:-20} CHIPSWAP_FUZZ_SEED=$${CHIPSWAP_FUZZ_SEED:-$$(date +%s)} \
	  $(PY) -m pytest -q -p no:cacheprovider tests/fuzz

lint: $(STAMP)
	$(VENV)/bin/ruff check src tests bench
	$(VENV)/bin/mypy

bench: $(STAMP) ## every benchmark in bench/; results land in docs/benchmarks.md
	@set -e; for b in bench/bench_*.py; do echo "== $$b"; $(PY) $$b; done

calibrate: $(STAMP) ## re-fit the projection's platform coefficients from ../shared/reference (docs/projection.md)
	$(VENV)/bin/chipswap calibrate

clean:
	rm -rf $(VENV) build *.egg-info src/*.egg-info .pytest_cache
