# The two commands a new user types on a fresh machine:
#   make run    set up (virtualenv + deps) and open the console on the local pod emulator
#   make test   set up and run the default test suite (slow end-to-end tests: make test-slow)
PYTHON ?= $(shell command -v python3.11 || command -v python3)
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
# Bytecode is written (a shell's PYTHONDONTWRITEBYTECODE=1 made every test's subprocess and
# every xdist worker compile the project again: ~5 s of CPU per worker at collection alone).
PYTEST_ENV := env -u PYTHONDONTWRITEBYTECODE RAY_USAGE_STATS_ENABLED=0 WANDB_MODE=offline WANDB_SILENT=true PHANTOM_NO_CONFIG_DISCOVERY=1 NO_GCE_CHECK=True

# What a fresh machine installs is what the locks name (scripts/lock.py says which is which):
# uv.lock for .venv (uv sync --locked), requirements/xpk.txt for xpk's venv, requirements/uv.txt
# for uv itself, which pip installs first into a venv of its own. `make lock` re-locks after a
# pyproject edit (make lint fails until then); `make upgrade` moves every pin to the newest
# version pyproject allows, and `make test-latest` runs the fast suite on the newest versions
# in a scratch venv (.tools/latest) without touching the lock: run it before `make upgrade`,
# and when a dependency releases, to see what a user without the lock would meet.
TOOLS := .tools
UV := $(TOOLS)/uv/bin/uv
UV_STAMP := $(TOOLS)/uv/.installed
LATEST := $(TOOLS)/latest
INSTALL := $(PYTHON) scripts/install.py --uv $(UV) --python $(PYTHON)

# Test tools kept out of .venv (their dependencies would move the project's): each in its own
# virtualenv under .tools/. xpk is the judge of the GKE emulator (tests skip without it);
# Tunix only regenerates tests/fixtures/tunix (make tools-tunix; about 1.5 GB with jax).
XPK_VERSION := 1.16.0
TUNIX_VERSION := 0.1.7
XPK_STAMP := $(TOOLS)/xpk/.installed-$(XPK_VERSION)
TUNIX_STAMP := $(TOOLS)/tunix/.installed-$(TUNIX_VERSION)

# make test and make coverage run the fast suite on TEST_WORKERS pytest-xdist workers (0: one
# process). Each worker has its own XDG dirs (tests/conftest.py); fixtures take free ports.
# Measured on this 2-core machine shared with other runs (issue 33): one process 14 min 32 s;
# -n 2 362 s (with coverage on, load ~1.5); -n 4 336 s (load ~4). Later, quiet, 2,290 tests:
# -n 2 443 s with the cores 66% busy (tests wait on emulators and subprocesses), -n 3 357 s at
# 82%: three then. After the CPU cuts of issue 33 (the emulator zygote, shared trainer runs),
# quiet, one run each: -n 3 285.6 s at 79% busy (453 CPU-s), -n 4 274.5 s at 89% (488 CPU-s):
# four by default. The slow suite is CPU-bound (90% busy at -n 2), so it stays at two
# (-n 3 gave 0.885x on 11 of its tests, each test slower and nearer its margins). The slow suite
# runs on SLOW_WORKERS (two: its tests take free ports, own run and temp dirs, and two pods or
# Ray clusters side by side do not meet; -n 2: 55 passed in 1,798 s at load ~8; one process
# took 2,810 s for 51 earlier the same day, its load not recorded). --dist loadgroup keeps the tests that borrow one
# module's bring-up (a pod, a Ray head, an emulator) on one worker (tests/conftest.py).
TEST_WORKERS ?= 4
SLOW_WORKERS ?= 2
XDIST_ARGS ?= --dist loadgroup
COVERAGE_ARGS ?= --cov --cov-report=term:skip-covered --cov-report=html

CHAOS_SEED ?= 1
CHAOS_COUNT ?= 6
CHAOS_ARGS ?=
CHAOS_GKE_ARGS ?=

.PHONY: run setup test test-slow test-all test-latest coverage lint typecheck bench chaos chaos-watch chaos-gke clean tools-tunix lock upgrade image docs

$(UV_STAMP): requirements/uv.txt
	@test -x $(TOOLS)/uv/bin/python || $(PYTHON) -m venv $(TOOLS)/uv
	@if $(TOOLS)/uv/bin/python -m pip install --quiet --require-hashes -r requirements/uv.txt; \
	then touch $@; else echo "note: uv did not install; the locks' pins install with pip"; fi

$(STAMP): pyproject.toml uv.lock requirements/dev.txt $(UV_STAMP)
	$(INSTALL) project $(VENV)
	@touch $(STAMP)

$(XPK_STAMP): requirements/xpk.txt $(UV_STAMP)
	@if $(INSTALL) tool $(TOOLS)/xpk requirements/xpk.txt; then touch $@; \
	else echo "note: xpk $(XPK_VERSION) did not install; the tests that run it will be skipped"; fi

# Tunix is not locked: it only regenerates a fixture, by hand, at the version named above.
$(TUNIX_STAMP): $(UV_STAMP)
	@test -x $(TOOLS)/tunix/bin/python || $(PYTHON) -m venv $(TOOLS)/tunix
	$(UV) pip install --quiet --python $(TOOLS)/tunix/bin/python google-tunix==$(TUNIX_VERSION)
	@touch $@

lock: $(UV_STAMP)
	$(PYTHON) scripts/lock.py --uv $(UV) write

upgrade: $(UV_STAMP)
	$(PYTHON) scripts/lock.py --uv $(UV) write --upgrade

test-latest: $(UV_STAMP) $(XPK_STAMP)
	rm -rf $(LATEST)
	$(UV) venv --quiet --python $(PYTHON) $(LATEST)
	$(UV) pip install --quiet --python $(LATEST)/bin/python --compile-bytecode -e '.[dev]'
	$(UV) pip list --python $(LATEST)/bin/python --format freeze > $(LATEST)/versions.txt
	$(PYTEST_ENV) $(LATEST)/bin/pytest -m "not slow" -n $(TEST_WORKERS) $(XDIST_ARGS) $(PYTEST_ARGS)

setup: $(STAMP) $(XPK_STAMP)

tools-tunix: $(TUNIX_STAMP)

run: $(STAMP)
	$(BIN)/phantom $(ARGS)

test: $(STAMP) $(XPK_STAMP)
	@command -v ssh >/dev/null || echo "note: OpenSSH client (ssh) missing; its interop test will be skipped (apt-get install openssh-client)"
	$(PYTEST_ENV) $(BIN)/pytest -m "not slow" -n $(TEST_WORKERS) $(XDIST_ARGS) $(PYTEST_ARGS)

test-slow: $(STAMP) $(XPK_STAMP)
	$(PYTEST_ENV) $(BIN)/pytest -m "slow" -n $(SLOW_WORKERS) $(XDIST_ARGS) $(PYTEST_ARGS)

test-all: $(STAMP) $(XPK_STAMP)
	$(PYTEST_ENV) $(BIN)/pytest -n $(SLOW_WORKERS) $(XDIST_ARGS) $(PYTEST_ARGS)

# Branch coverage of console/, engine/ and emulators/ over the fast suite (sources and
# branch mode in pyproject's [tool.coverage]): a table here, the browsable report in htmlcov/.
coverage: $(STAMP) $(XPK_STAMP)
	$(PYTEST_ENV) $(BIN)/pytest -m "not slow" -n $(TEST_WORKERS) $(XDIST_ARGS) $(COVERAGE_ARGS) $(PYTEST_ARGS)

# Seeded preemptions (head and workers, with and without notice) during a training job and a
# Ray Tune sweep on the local emulator, the watchdog alone recovering; exit 1 if a check fails.
chaos: $(STAMP)
	$(PYTEST_ENV) $(BIN)/python -m benchmarks.chaos --seed $(CHAOS_SEED) --count $(CHAOS_COUNT) $(CHAOS_ARGS)

# The real `phantom watch` as the only watchdog, itself SIGKILLed mid-recovery and restarted:
# seeded worker, head and whole-slice kills, some overlapping, during a Ray Tune sweep.
chaos-watch: $(STAMP)
	$(PYTEST_ENV) $(BIN)/python -m benchmarks.chaos_watch --seed $(CHAOS_SEED) $(CHAOS_WATCH_ARGS)

# The same on GKE: seeded slice preemptions (with and without the pods' grace), node failures
# and container crashes during a GRPO workload on the GKE emulator; exit 1 if a check fails.
chaos-gke: $(STAMP)
	$(PYTEST_ENV) $(BIN)/python -m benchmarks.chaos_gke --seed $(CHAOS_SEED) --count $(CHAOS_COUNT) $(CHAOS_GKE_ARGS)

# The watchdog's image (deploy/Dockerfile) with buildah, no Docker engine: the sdist and the
# wheel (dist/), then the image from the wheel and the lock's pins. BASE picks the base; where
# it cannot be pulled (no registry but PyPI's and Debian's here) a Debian bookworm made by
# debootstrap stands in, built once. Needs buildah and debootstrap (apt-get install), as root.
IMAGE ?= phantom-watch
BASE ?= python:3.11-slim
image: $(STAMP)
	rm -f dist/phantom_console-*
	$(BIN)/python -m build --no-isolation --outdir dist . > /dev/null
	$(PYTHON) scripts/image.py --wheel "$$(ls dist/phantom_console-*.whl)" --tag $(IMAGE) --base $(BASE)

# The user docs (docs/, mkdocs-material): the reference pages regenerated from the code, then
# built into site/. make lint checks both: the generated pages current, the build --strict.
MKDOCS := NO_MKDOCS_2_WARNING=1 $(BIN)/mkdocs
docs: $(STAMP)
	$(BIN)/python scripts/docs.py write
	$(MKDOCS) build --strict --quiet

lint: $(STAMP)
	$(PYTHON) scripts/lock.py --uv $(UV) check
	$(BIN)/python scripts/docs.py check
	$(MKDOCS) build --strict --quiet
	$(BIN)/ruff check console engine emulators benchmarks kubeprint tests scripts
	$(BIN)/ruff format --check console engine emulators benchmarks kubeprint tests scripts
	$(BIN)/lint-imports pyproject.toml

typecheck: $(STAMP)
	$(BIN)/mypy

clean:
	rm -rf $(VENV) $(TOOLS) .pytest_cache .mypy_cache .ruff_cache .coverage htmlcov site dist
