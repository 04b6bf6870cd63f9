# The two commands a new user types on a fresh machine:
#   make run    set up (virtualenv + deps) and open the console on the local pod emulator
#   make test   set up and run the default test suite (slow end-to-end tests: make test-slow)
PYTHON ?= $(shell command -v python3.11 || command -v python3)
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
PYTEST_ENV := RAY_USAGE_STATS_ENABLED=0 WANDB_MODE=offline WANDB_SILENT=true PHANTOM_NO_CONFIG_DISCOVERY=1 NO_GCE_CHECK=True

CHAOS_SEED ?= 1
CHAOS_COUNT ?= 6
CHAOS_ARGS ?=

.PHONY: run setup test test-slow test-all lint typecheck bench chaos clean

$(STAMP): pyproject.toml
	@test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -e '.[dev]'
	@touch $(STAMP)

setup: $(STAMP)

run: $(STAMP)
	$(BIN)/phantom $(ARGS)

test: $(STAMP)
	@command -v ssh >/dev/null || echo "note: OpenSSH client (ssh) missing; its interop test will be skipped (apt-get install openssh-client)"
	$(PYTEST_ENV) $(BIN)/pytest -m "not slow" $(PYTEST_ARGS)

test-slow: $(STAMP)
	$(PYTEST_ENV) $(BIN)/pytest -m "slow" $(PYTEST_ARGS)

test-all: $(STAMP)
	$(PYTEST_ENV) $(BIN)/pytest $(PYTEST_ARGS)

# Seeded preemptions (head and workers, with and without notice) during a training job and a
# Ray Tune sweep on the local emulator, the watchdog alone recovering; exit 1 if a check fails.
chaos: $(STAMP)
	$(PYTEST_ENV) $(BIN)/python -m benchmarks.chaos --seed $(CHAOS_SEED) --count $(CHAOS_COUNT) $(CHAOS_ARGS)

lint: $(STAMP)
	$(BIN)/ruff check console engine emulators benchmarks kubeprint tests scripts
	$(BIN)/ruff format --check console engine emulators benchmarks kubeprint tests scripts
	$(BIN)/lint-imports pyproject.toml

typecheck: $(STAMP)
	$(BIN)/mypy

clean:
	rm -rf $(VENV) .pytest_cache .mypy_cache .ruff_cache
