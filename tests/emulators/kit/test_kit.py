"""The emulator kit against a real daemon process: the toy emulator (``toy.py``) is a
daemon, client and CLI made of nothing but the kit, as the pod, GKE and W&B ones are."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from emulators.kit import control
from emulators.kit.layout import read_pid
from tests.emulators.kit import toy
from tests.support.waiting import wait_until


@pytest.fixture
def run_dir(tmp_path: Path) -> Iterator[Path]:
    """A run dir whose daemon is stopped (or killed) whatever the test did."""
    run = tmp_path / "run"
    yield run
    pid = read_pid(toy.layout(run).pid_file)
    toy.stop(run, timeout=2.0)
    if pid and control.pid_alive(pid) and control.is_our_daemon(pid, toy.MODULE, run):
        os.kill(pid, 9)


def cli(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = toy.main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def test_up_status_down_through_the_kit_cli(
    run_dir: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code, out, _ = cli(capsys, "up", "--run-dir", str(run_dir))
    assert code == 0
    pid = read_pid(toy.layout(run_dir).pid_file)
    assert pid and control.pid_alive(pid)
    assert control.is_our_daemon(pid, toy.MODULE, run_dir)
    assert out.strip() == f"toy  pid {pid}  run dir {run_dir}"

    code, out, _ = cli(capsys, "status", "--run-dir", str(run_dir), "--json")
    assert code == 0 and f'"pid": {pid}' in out

    code, _, err = cli(capsys, "down", "--run-dir", str(run_dir))
    assert (code, err.strip()) == (0, f"toy emulator for {run_dir} stopped")
    assert not control.pid_alive(pid)
    assert not toy.layout(run_dir).pid_file.exists()

    code, out, err = cli(capsys, "status", "--run-dir", str(run_dir))
    assert (code, out) == (1, "")
    assert err.strip() == f"no toy emulator is running for {run_dir}; start one with `toy up`"
    code, _, err = cli(capsys, "down", "--run-dir", str(run_dir))
    assert (code, err.strip()) == (0, f"no toy emulator was running for {run_dir}")


def test_bad_usage_is_exit_2_naming_the_flag(capsys: pytest.CaptureFixture[str]) -> None:
    code, _, err = cli(capsys, "up", "--timeout", "-1")
    assert code == 2
    assert "--timeout: must be >= 0 seconds, got -1.0" in err
    assert "Traceback" not in err


def test_a_second_up_while_one_runs_is_refused_and_leaves_the_first(
    run_dir: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    first = toy.start(run_dir)
    code, _, err = cli(capsys, "up", "--run-dir", str(run_dir))
    assert code == 1
    assert err.strip() == f"error: the toy emulator is already running for {run_dir}"

    # A second daemon started behind the client's back cannot take the control socket.
    lay = toy.layout(run_dir)
    argv = [sys.executable, "-m", toy.MODULE, "serve", "--run-dir", str(run_dir)]
    proc = control.spawn(argv, lay, {**os.environ, "PYTHONPATH": str(toy.ROOT)})
    with pytest.raises(toy.ToyError, match="already running for"):
        control.wait_up(
            proc,
            lambda: None,
            30.0,
            lambda _c: toy.ToyError(control.daemon_error(lay)),
            lambda: AssertionError("the second daemon did not exit"),
        )
    assert proc.returncode == 1
    status = toy.status(run_dir)
    assert status is not None and status["pid"] == first["pid"]
    assert read_pid(lay.pid_file) == first["pid"]


def test_a_stale_pid_file_after_a_crash(run_dir: Path, capsys: pytest.CaptureFixture[str]) -> None:
    pid = toy.start(run_dir)["pid"]
    with pytest.raises(toy.ToyNotRunning, match="closed the connection"):
        toy.request(run_dir, {"op": "crash"})
    wait_until(lambda: not control.pid_alive(pid), 10, "the crashed daemon gone")
    lay = toy.layout(run_dir)
    assert read_pid(lay.pid_file) == pid  # nobody cleaned up

    assert toy.status(run_dir) is None
    code, _, err = cli(capsys, "down", "--run-dir", str(run_dir))
    assert (code, err.strip()) == (0, f"no toy emulator was running for {run_dir}")
    code, _, _ = cli(capsys, "up", "--run-dir", str(run_dir))
    assert code == 0
    new_pid = read_pid(lay.pid_file)
    assert new_pid and new_pid != pid and control.pid_alive(new_pid)


def test_stop_by_pid_when_the_control_socket_is_gone(run_dir: Path) -> None:
    pid = toy.start(run_dir)["pid"]
    assert toy.request(run_dir, {"op": "deaf"})["pid"] == pid
    assert toy.status(run_dir) is None and control.pid_alive(pid)
    # No socket answers: the pid file finds it, and it is SIGKILLed once the wait is over.
    assert toy.stop(run_dir, timeout=0.5)
    assert not control.pid_alive(pid)


def test_terminate_by_pid(run_dir: Path) -> None:
    pid = toy.start(run_dir)["pid"]
    control.terminate(pid, timeout=10.0)
    assert not control.pid_alive(pid)


def test_terminate_returns_once_a_daemon_that_ignores_sigterm_is_gone(run_dir: Path) -> None:
    """SIGKILL is not instant: ``terminate`` (a W&B ``down``) returns only once it is gone."""
    pid = toy.start(run_dir)["pid"]
    toy.request(run_dir, {"op": "stubborn"})
    control.terminate(pid, timeout=0.2)
    assert not control.pid_alive(pid)


def test_a_reused_pid_is_not_ours_and_is_never_killed(run_dir: Path) -> None:
    """A pid file naming some other live process (the pid was reused) kills nothing."""
    other = subprocess.Popen(["cat"], stdin=subprocess.PIPE)
    try:
        lay = toy.layout(run_dir)
        run_dir.mkdir()
        lay.pid_file.write_text(f"{other.pid}\n")
        assert not control.is_our_daemon(other.pid, toy.MODULE, run_dir)
        assert toy.stop(run_dir, timeout=0.2) is False
        assert other.poll() is None
    finally:
        other.kill()
        other.wait()
