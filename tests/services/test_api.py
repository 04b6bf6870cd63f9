"""The service interface is declared once (``ConsoleServices``) and everything that stands for
it is held to it: the pending proxy forwards every coroutine by construction (a member it
neither forwards nor answers is an error at import), and ``make typecheck`` checks the
facade, the tests' fake and the TUI benchmark's stand-in against the Protocol, so a method
added to the interface and not to them fails the type check."""

from __future__ import annotations

import inspect
import shutil
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

import console.services.pending as pending
from console.services.api import ConsoleServices
from tests.support import REPO

MYPY = Path(sys.executable).with_name("mypy")


def test_the_pending_proxy_forwards_every_coroutine_of_the_interface() -> None:
    interface = pending._interface()
    for name, member in interface.items():
        mine = getattr(pending.PendingServices, name)
        if inspect.iscoroutinefunction(member) and name not in vars(pending.PendingServices):
            assert mine.__name__ == name  # made by _forwarding
    members = vars(pending.PendingServices)
    hand_written = [
        n
        for n in interface
        if n in members
        and getattr(members[n], "__qualname__", "PendingServices.").startswith("PendingServices.")
    ]
    # what answers before the services exist, and the lifecycle: never a plain forwarder
    assert set(hand_written) == {
        "settings", "start", "stop", "subscribe", "snapshot", "recovery_status", "cadence",
        "successor", "follow_logs", "set_auto_recovery", "preview_workload",
    }  # fmt: skip


def test_a_member_neither_forwarded_nor_answered_is_refused(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    class Proxy:
        pass

    class Wider(ConsoleServices):
        def extra_sync(self) -> int:
            return 1

    monkeypatch.setattr(pending, "ConsoleServices", Wider)
    with pytest.raises(TypeError, match=r"ConsoleServices\.extra_sync"):
        pending._forwarding(Proxy)


def test_make_typecheck_checks_the_fake_and_the_benchmark_stand_in() -> None:
    config = tomllib.loads((REPO / "pyproject.toml").read_text())["tool"]["mypy"]
    assert "tests.support.fake_services" in config["modules"]
    assert "benchmarks" in config["packages"]
    for path in ("tests/support/fake_services.py", "benchmarks/tui.py"):
        assert "-> ConsoleServices:" in (REPO / path).read_text(), path


@pytest.mark.slow
def test_a_method_added_to_the_interface_alone_fails_the_type_check(tmp_path: Path) -> None:
    """In a copy of the tree, one coroutine added to ``ConsoleServices`` and to nothing
    else: `mypy` (as `make typecheck` runs it) names the fake, the stand-in and the facade."""
    if not MYPY.exists():
        pytest.skip(f"mypy is not installed in this environment ({MYPY})")
    for package in ("console", "engine", "emulators", "benchmarks", "kubeprint"):
        shutil.copytree(
            REPO / package, tmp_path / package, ignore=shutil.ignore_patterns("__pycache__")
        )
    (tmp_path / "tests" / "support").mkdir(parents=True)
    shutil.copy(REPO / "tests" / "__init__.py", tmp_path / "tests")
    for path in (REPO / "tests" / "support").glob("*.py"):
        shutil.copy(path, tmp_path / "tests" / "support")
    shutil.copy(REPO / "pyproject.toml", tmp_path)
    if (REPO / ".mypy_cache").is_dir():  # the last `make typecheck`: only what changed is read
        shutil.copytree(REPO / ".mypy_cache", tmp_path / ".mypy_cache")
    api = tmp_path / "console" / "services" / "api.py"
    api.write_text(
        api.read_text()
        + "\n    async def added_alone(self, ref: str) -> str:\n"
        + '        """Declared here and nowhere else."""\n'
    )
    got = subprocess.run([str(MYPY)], cwd=tmp_path, capture_output=True, text=True, timeout=600)
    assert got.returncode == 1, got.stdout[-3000:] + got.stderr[-2000:]
    missing = [line for line in got.stdout.splitlines() if "protocol member" in line]
    named = {line.split('"')[1] for line in missing}
    assert {"FakeServices", "BenchServices", "Facade"} <= named, got.stdout[-3000:]
    assert "added_alone" in got.stdout and "PendingServices" not in named
