"""The terminal is the product's: no `phantom` command lets a third party's warning through.

Every command runs as a user starts it (its own process, the `phantom` entry point) with
``PYTHONWARNINGS=always``, so a warning Python would show once, or hide as a
DeprecationWarning, is raised wherever it happens; stderr must hold no ``...Warning`` line.
What a dependency says lands in the debug log instead (the first test, with a stand-in
dependency that warns and logs at import: the same whatever versions are installed)."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from emulators.tpu_pod.client import pod_status
from tests.script.test_e2e import FAKE_KEY, ROOT, assert_pod_gone, child_env, phantom_argv
from tests.script.test_e2e import write_config as pod_config

WARNING_LINE = re.compile(r"\b[A-Za-z]*Warning\b")

NOISY_DEPENDENCY = """
import logging, os, warnings
warnings.warn("old_api() is deprecated", DeprecationWarning, stacklevel=1)
warnings.warn("this build is experimental", UserWarning, stacklevel=1)
logging.getLogger("noisy.sub").warning("token in a url: %s", os.environ["WANDB_API_KEY"])
"""

OURS_AND_THEIRS = """
import logging, sys
from pathlib import Path
from console import debuglog
debuglog.install(Path(sys.argv[1]))
import noisy_dependency
logging.getLogger("console.services.x").warning("the product's own warning")
logging.getLogger("console.services.x").info("below the threshold")
"""


def quiet_env(tmp_path: Path) -> dict[str, str]:
    return {**child_env(tmp_path), "PYTHONWARNINGS": "always"}


def run(tmp_path: Path, *args: str, stdin: str = "") -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        phantom_argv(*args),
        cwd=ROOT,
        env=quiet_env(tmp_path),
        input=stdin,
        capture_output=True,
        text=True,
        timeout=240,
    )


def warning_lines(stderr: str) -> list[str]:
    return [line for line in stderr.splitlines() if WARNING_LINE.search(line)]


def test_a_dependencys_warnings_and_logs_go_to_the_debug_log_with_secrets_masked(
    tmp_path: Path,
) -> None:
    (tmp_path / "noisy_dependency.py").write_text(NOISY_DEPENDENCY)
    log = tmp_path / "state" / "phantom" / "debug.log"
    env = {**quiet_env(tmp_path), "PYTHONPATH": os.pathsep.join([str(tmp_path), str(ROOT)])}
    proc = subprocess.run(
        [sys.executable, "-c", OURS_AND_THEIRS, str(log)],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == 0, proc.stderr
    assert proc.stderr == "the product's own warning\n"  # ours, as before; theirs, not a line
    text = log.read_text()
    assert "DeprecationWarning: old_api() is deprecated" in text
    assert "UserWarning: this build is experimental" in text
    assert "WARNING noisy.sub: token in a url: " in text
    assert "the product's own warning" in text and "below the threshold" not in text
    assert FAKE_KEY not in text


def test_a_quiet_command_writes_no_debug_log(tmp_path: Path) -> None:
    proc = run(tmp_path, "--help")
    assert proc.returncode == 0 and proc.stderr == ""
    assert not (tmp_path / "state" / "phantom" / "debug.log").exists()


# Every command that runs with no cluster up: the helps, and the reads and writes that need
# only the disk (status without a pod fails, clearly: that path imports the most).
NO_CLUSTER = [
    ["--help"],
    ["--version"],
    ["--script-help"],
    *[
        [cmd, "--help"]
        for cmd in ("status", "watch", "serve", "mcp", "report", "trust", "init", "pod", "gke")
    ],
    ["wandb", "--help"],
    ["init", "{tmp}/config.toml"],
    ["report", "--format", "json", "--journal", "{tmp}/journal.sqlite"],
    ["status", "--json"],
    ["pod", "status"],
    ["gke", "status"],
    ["wandb", "status"],
]


@pytest.mark.parametrize("args", NO_CLUSTER, ids=" ".join)
def test_no_command_without_a_cluster_prints_a_warning(tmp_path: Path, args: list[str]) -> None:
    proc = run(tmp_path, *[a.format(tmp=tmp_path) for a in args])
    assert "Traceback" not in proc.stderr, proc.stderr
    assert warning_lines(proc.stderr) == [], proc.stderr


@pytest.mark.timeout(300)
def test_no_command_against_the_pod_emulator_prints_a_warning(tmp_path: Path) -> None:
    """pod up, a script, status, one watch pass, an MCP session's end and pod down: the
    commands that import the clients (asyncssh, gRPC, Ray's) and start the daemons."""
    cfg = str(pod_config(tmp_path, hosts=2))
    run_dir = tmp_path / "pod"
    steps = [
        ["pod", "up", "--run-dir", str(run_dir), "--hosts", "2", "--ssh-port", "0"],
        ["--config", cfg, "--script", "-"],
        ["--config", cfg, "status", "--json"],
        ["--config", cfg, "watch", "--once"],
        ["--config", cfg, "mcp"],
        ["pod", "down", "--run-dir", str(run_dir)],
    ]
    seen: dict[str, subprocess.CompletedProcess[str]] = {}
    try:
        for args in steps:
            script = "wait-ready --timeout 2m\nstatus\n" if "--script" in args else ""
            proc = run(tmp_path, *args, stdin=script)
            seen[" ".join(args[2:] if args[0] == "--config" else args[:2])] = proc
            assert proc.returncode == 0, (args, proc.stderr)
    finally:
        assert_pod_gone(run_dir)
    assert pod_status(run_dir) is None
    leaks = {cmd: warning_lines(p.stderr) for cmd, p in seen.items() if warning_lines(p.stderr)}
    assert leaks == {}
