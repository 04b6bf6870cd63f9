"""Shared test setup: isolated XDG dirs, offline W&B, no Ray usage stats, pod fixtures."""

from __future__ import annotations

import atexit
import gc
import os
import shutil
import tempfile

import pytest

# Before anything imports ray/wandb/jax: tests never phone home and never touch ~/.
_SESSION_HOME = tempfile.mkdtemp(prefix="phantom-tests-")
atexit.register(shutil.rmtree, _SESSION_HOME, True)  # every session used to leave one in /tmp
os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
# Google's libraries must never probe the link-local metadata server from a test.
os.environ["NO_GCE_CHECK"] = "True"
os.environ["WANDB_MODE"] = "offline"
os.environ["WANDB_SILENT"] = "true"
os.environ.pop("WANDB_API_KEY", None)
os.environ["PHANTOM_NO_CONFIG_DISCOVERY"] = "1"
os.environ["XDG_STATE_HOME"] = os.path.join(_SESSION_HOME, "state")
os.environ["XDG_CONFIG_HOME"] = os.path.join(_SESSION_HOME, "config")
# wandb-core's debug logs and the like went to ~/.cache; with pytest-xdist every worker
# imports this file, so each worker has its own dirs and default run dirs never collide.
os.environ["XDG_CACHE_HOME"] = os.path.join(_SESSION_HOME, "cache")
os.environ["XDG_DATA_HOME"] = os.path.join(_SESSION_HOME, "data")
os.environ.setdefault("WANDB_DIR", os.path.join(_SESSION_HOME, "wandb"))

# The emulator pod fixtures (`pod`, `ray_pod`) live in tests/support/fixtures_pod.py; the
# trainers preempted by a notice that tests/engine and tests/services/ledger both read, in
# tests/support/noticed_runs.py (a plugin, so that both directories share one copy).
pytest_plugins = ["tests.support.fixtures_pod", "tests.support.noticed_runs"]

# The emulator daemons the tests start (pods, GKE clusters, W&B servers) are forked by one
# zygote per test process that has their third-party imports loaded (~0.45 s of CPU each
# otherwise, ~135 starts a fast run): tests/support/emulator_zygote.py.
# PHANTOM_TEST_ZYGOTE=0 starts each with its own interpreter, as a user's `up` does.
if os.environ.get("PHANTOM_TEST_ZYGOTE", "1") != "0":
    from tests.support import emulator_zygote

    emulator_zygote.install()


_SHARED_SCOPES = ("module", "package", "session")


def pytest_collection_finish(session: pytest.Session) -> None:
    """What collection imported (the product, textual, torch, jax: most of a test process's
    objects) is moved out of the collector's sight, as the console does at start
    (console/tui/app.py): each full collection walked all of it again, 13-14 of them per
    worker in a fast run (~4 s of CPU each worker)."""
    gc.collect()
    gc.freeze()


@pytest.hookimpl(tryfirst=True)  # before xdist's own hook turns the marks into groups
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Under ``--dist loadgroup`` (make test, make test-slow), tests that borrow one bring-up
    (a module- or session-scoped fixture of ours: a pod, a Ray head, a GKE or W&B emulator,
    a trained run) share a group and so a worker: split over two workers, each would bring
    up its own copy, which costs seconds to a minute and doubles the load while both run."""
    for item in items:
        info = getattr(item, "_fixtureinfo", None)
        if info is None:
            continue
        groups: set[str] = set()
        for name in info.names_closure:
            defs = info.name2fixturedefs.get(name)
            if not defs or defs[-1].scope not in _SHARED_SCOPES:
                continue
            fixture = defs[-1]
            if not getattr(fixture.func, "__module__", "").startswith("tests."):
                continue  # pytest's and plugins' own (tmp_path_factory, event loops)
            # a module-scoped fixture is one bring-up per module; a session-scoped one per run
            if fixture.scope == "module":
                groups.add(item.nodeid.split("::")[0])
            else:
                groups.add(f"{fixture.baseid or 'tests'}::{name}")
        if groups:  # one group per test (xdist would join several into a new name)
            item.add_marker(pytest.mark.xdist_group("+".join(sorted(groups))))


def pytest_terminal_summary(
    terminalreporter: pytest.TerminalReporter, config: pytest.Config
) -> None:
    """The shuffled order's seed, also under -q (pytest-randomly says it only in the header),
    so that a failure that depends on the order can be repeated."""
    if config.pluginmanager.hasplugin("randomly"):
        seed = config.getoption("randomly_seed")
        terminalreporter.write_line(
            f"test order: pytest-randomly seed {seed} (repeat it with"
            f' PYTEST_ARGS="-p randomly --randomly-seed={seed}")'
        )
