# twc: `make setup` once, then `make run` (the main job on the embedded environment)
# or `make test`. Tools are cached outside the work tree (~/.cache/twc).
SHELL := /bin/bash
ROOT := $(abspath .)
VENV := $(ROOT)/.venv
export PATH := $(ROOT)/.twc/bin:$(VENV)/bin:$(PATH)
export PULUMI_SKIP_UPDATE_CHECK := true
export PULUMI_DIY_BACKEND_NO_LEGACY_WARNING := true
PY := $(VENV)/bin/python
PYTEST_ARGS ?=
# `make test` runs its tests in this many processes (pytest-xdist), whole files at a time,
# so a module's shared embedded environment stays in one process; each process starts
# an embedded environment of its own. The end-to-end tests mostly wait on the real parts,
# so two processes keep both cores busy.
TEST_PROCS ?= 2

.PHONY: setup run tour test test-faults lint unit e2e bench local-up local-down clean chart-crds

setup:
	bash tools/setup.sh

# The tour: set up the embedded environment's tools, start it with a real worker process
# per Running pod (workers are added if it already runs without), `twc up` the local
# stack (stacks/local.yaml), run one workflow on each worker's task queue and wait for
# it, then show each worker's live status and pollers. `make tour` is the same without
# the set-up; an end-to-end test runs it.
run: setup
	@$(MAKE) --no-print-directory tour

tour:
	$(PY) -m twc local up --run-workers >/dev/null
	$(PY) -m twc up --stack local
	$(PY) -m twc local smoke --stack local
	$(PY) -m twc status --stack local

lint:
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .
	$(VENV)/bin/mypy
	$(VENV)/bin/lint-imports

unit:
	$(PY) -m pytest tests -m unit $(PYTEST_ARGS)

e2e:
	$(PY) -m pytest tests -m e2e $(PYTEST_ARGS)

# `make setup`, plus what only the tests use: helm, actionlint and Debian's PostgreSQL 15.
setup-test:
	bash tools/setup.sh test

# Everything CI runs: lint, then every test (unit, end-to-end and fault injection on the
# real tools; the fault tests are under tests/faults, so they are part of it).
test: setup-test lint
	$(PY) -m pytest tests -n $(TEST_PROCS) --dist loadfile --durations=25 $(PYTEST_ARGS)

# Only the fault-injection tests: each starts an embedded environment of its
# own, then stops Temporal or kube-apiserver or makes the state backend read-only.
test-faults: setup-test
	$(PY) -m pytest tests/faults -m faults $(PYTEST_ARGS)

bench: setup
	$(PY) -m bench $(BENCH_ARGS)

# The chart's copies of the CRDs (deploy/chart), regenerated after the fleet models change;
# a unit test fails while they are stale.
chart-crds:
	$(PY) tools/chart_crds.py

local-up:
	$(PY) -m twc local up

local-down:
	$(PY) -m twc local down

clean:
	-$(PY) -m twc local down
	rm -rf .twc
