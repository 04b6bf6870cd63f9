"""`phantom mcp` over stdio stopped by a signal, through the SDK's real stdio client: an
agent host stopping its servers sends SIGTERM (with the session, and stdin, still open);
the server ends its session, stops its services and exits 0 saying so, instead of dying of
the signal with its pollers, watchers and any recovery left as they were."""

from __future__ import annotations

import os
import shlex
import signal
import subprocess
import sys
from pathlib import Path

import pytest
from mcp import ClientSession, StdioServerParameters, stdio_client

from benchmarks.pods import pod_toml
from emulators.tpu_pod.client import PodInfo
from tests.support import REPO
from tests.support.mcp_client import body, mcp_env
from tests.support.waiting import until


def _config(pod: PodInfo, tmp_path: Path) -> Path:
    path = tmp_path / "phantom.toml"
    path.write_text(pod_toml(pod, tmp_path, poll_s=0.5, extra="auto = false\n"))
    return path


def _exited(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    return False


@pytest.mark.timeout(300)
async def test_sigterm_over_stdio_stops_the_services_and_exits_0(
    quiet_pod: PodInfo, tmp_path: Path
) -> None:
    config = _config(quiet_pod, tmp_path)
    pidfile, rcfile, errfile = tmp_path / "pid", tmp_path / "rc", tmp_path / "stderr"
    argv = [sys.executable, "-m", "console.cli", "--config", str(config), "mcp"]
    # bash stays the client's child (it writes the server's exit code); the server is its
    # child, the pid the signal goes to, on bash's stdin (``<&0``: a background command's
    # is /dev/null otherwise).
    line = (
        f"{shlex.join(argv)} <&0 2>{shlex.quote(str(errfile))} & pid=$!; "
        f"echo $pid >{shlex.quote(str(pidfile))}; wait $pid; echo $? >{shlex.quote(str(rcfile))}"
    )
    params = StdioServerParameters(
        command="bash", args=["-c", line], env=mcp_env(tmp_path), cwd=str(REPO)
    )
    async with (
        stdio_client(params) as (read, write),
        ClientSession(read, write) as session,
    ):
        await session.initialize()
        status = await session.call_tool("status", {})
        assert not status.is_error, body(status)
        pid = int(pidfile.read_text())
        # The session (and the server's stdin) stays open: only the signal may end it.
        os.kill(pid, signal.SIGTERM)
        await until(lambda: rcfile.exists() and rcfile.read_text().strip() != "", 120,
                    "the server to exit after the signal")  # fmt: skip
    stderr = errfile.read_text().splitlines()
    assert rcfile.read_text().strip() == "0", stderr[-40:]
    assert stderr[-1] == "phantom mcp: stopped", stderr[-40:]
    assert not any("Traceback" in s for s in stderr), stderr[-40:]
    assert _exited(pid)


@pytest.mark.timeout(300)
def test_stdin_at_eof_from_the_start_ends_the_server(quiet_pod: PodInfo, tmp_path: Path) -> None:
    """stdin the loop cannot watch (/dev/null, a regular file) is read the SDK's way: its
    EOF ends the session at once, services stopped, exit 0 (it must not wait forever)."""
    config = _config(quiet_pod, tmp_path)
    argv = [sys.executable, "-m", "console.cli", "--config", str(config), "mcp"]
    done = subprocess.run(
        argv, cwd=REPO, env=mcp_env(tmp_path), stdin=subprocess.DEVNULL,
        capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert done.stderr.splitlines()[-1] == "phantom mcp: stopped", done.stderr
