"""`phantom watch` refuses bad input before anything runs: each a clear message naming the
fix, exit 2, no traceback, nothing left listening, no journal written."""

from __future__ import annotations

import socket
import subprocess
from pathlib import Path

import pytest

from console.config import parse_config
from console.wiring import watcher_lease
from tests.support.watcher import phantom_argv, state_dir, watch_env


def _run(tmp_path: Path, *args: str, config: str = "") -> subprocess.CompletedProcess[str]:
    argv = ["watch", *args]
    if config:
        (tmp_path / "c.toml").write_text(config)
        argv = ["--config", str(tmp_path / "c.toml"), *argv]
    return subprocess.run(
        phantom_argv(*argv), env=watch_env(tmp_path), capture_output=True, text=True, timeout=60
    )


def _refused(proc: subprocess.CompletedProcess[str], tmp_path: Path) -> None:
    assert proc.returncode == 2, proc.stderr
    assert "Traceback" not in proc.stderr and proc.stdout == ""
    assert not (state_dir(tmp_path) / "journal.sqlite").exists(), "something was run"


def test_a_metrics_port_in_use(tmp_path: Path) -> None:
    with socket.socket() as held:
        held.bind(("127.0.0.1", 0))
        held.listen()
        port = held.getsockname()[1]
        proc = _run(tmp_path, "--metrics", f"127.0.0.1:{port}")
    _refused(proc, tmp_path)
    assert f"--metrics 127.0.0.1:{port}: cannot listen there" in proc.stderr
    assert "address already in use" in proc.stderr


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        ("nope", "expected ADDR:PORT or PORT"),
        ("127.0.0.1:99999", "expected ADDR:PORT or PORT"),
        ("example.com:9464", "is not an IP address"),
    ],
)
def test_a_bad_metrics_address(tmp_path: Path, value: str, expected: str) -> None:
    proc = _run(tmp_path, "--metrics", value)
    _refused(proc, tmp_path)
    assert "argument --metrics" in proc.stderr and expected in proc.stderr


def test_an_apprise_url_apprise_rejects(tmp_path: Path) -> None:
    proc = _run(
        tmp_path, config='[[alerts.notify]]\nname = "ops"\nurl = "nosuchservice://127.0.0.1/x"\n'
    )
    _refused(proc, tmp_path)
    assert "alerts.notify[0] (ops).url: apprise does not accept this nosuchservice:// URL" in (
        proc.stderr
    )


def test_a_second_watcher_on_the_same_cluster(tmp_path: Path) -> None:
    # The first watcher's claim, as `phantom watch` takes it (the same state dir and pod).
    lease = watcher_lease(parse_config({}), state_dir=state_dir(tmp_path))
    assert lease.try_acquire()
    try:
        proc = _run(tmp_path)
    finally:
        lease.release()
    _refused(proc, tmp_path)
    assert "another watcher already runs for phantom-pod" in proc.stderr
    assert "one watcher per cluster" in proc.stderr
