"""Shared test setup: isolated XDG dirs, offline W&B, no Ray usage stats, pod fixtures."""

from __future__ import annotations

import atexit
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

# The emulator pod fixtures (`pod`, `ray_pod`) live in tests/support/fixtures_pod.py.
pytest_plugins = ["tests.support.fixtures_pod"]


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
