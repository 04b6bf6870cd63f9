"""Chaos on the local pod emulator: `preempt all` takes every host, in every front end.

The script verb, the TUI (its preempt goes through the same ``Facade.preempt``) and
`phantom pod preempt all` (straight to the emulator) must agree: every host is preempted
and the result names every one of them. In GCP-faithful mode any host takes the whole slice,
so even a single-host preempt reports every host.
"""

from __future__ import annotations

import io
import json
import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from console.cli import main
from console.config import parse_config
from console.script.main import script_main
from console.wiring import make_services
from console.wiring.control import LOCAL_POD_NICE
from console.wiring.pod import ensure_pod
from emulators.tpu_pod.client import PodInfo, pod_status
from tests.support.emulator_helpers import running_pod
from tests.support.fixtures_pod import ssh_run, stop_test_pod


def preempted(info: PodInfo) -> list[str]:
    return sorted(h.name for h in pod_status(info.run_dir).hosts if h.state == "PREEMPTED")


def names(info: PodInfo) -> list[str]:
    return sorted(h.name for h in info.hosts)


@pytest.fixture
def faithful_pod(tmp_path: Path) -> Iterator[PodInfo]:
    with running_pod(tmp_path / "faithful-pod", faithful=True) as info:
        yield info


@pytest.fixture(params=["default", "faithful"])
def either_pod(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[PodInfo]:
    """The default emulator and the GCP-faithful one."""
    with running_pod(tmp_path / "pod", faithful=request.param == "faithful") as info:
        yield info


async def test_preempt_all_through_the_services_takes_every_host(
    either_pod: PodInfo, tmp_path: Path
) -> None:
    info = either_pod
    svc = make_services(
        parse_config({"cluster": {"run_dir": str(info.run_dir)}}),
        state_dir=tmp_path / "state",
        autostart_pod=False,
    )
    try:
        result = await svc.preempt("all")
    finally:
        svc.close_journal()
    assert result.ok, result
    assert sorted(result.per_host) == names(info), result.per_host
    assert all(r.ok for r in result.per_host.values())
    assert preempted(info) == names(info)


def test_script_preempt_all_takes_every_host(
    pod: PodInfo, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "state"))
    script = tmp_path / "s.phantom"
    script.write_text("preempt all\n")
    out, err = io.StringIO(), io.StringIO()
    code = script_main(
        str(script),
        parse_config({"cluster": {"run_dir": str(pod.run_dir)}}),
        stdout=out,
        stderr=err,
    )
    assert code == 0, err.getvalue()
    lines = [json.loads(line) for line in out.getvalue().splitlines()]
    step = next(x for x in lines if x["type"] == "step" and x["action"] == "preempt")
    assert sorted(step["result"]["per_host"]) == names(pod), step
    assert preempted(pod) == names(pod)


async def test_faithful_single_host_preempt_reports_the_whole_slice(
    faithful_pod: PodInfo, tmp_path: Path
) -> None:
    svc = make_services(
        parse_config({"cluster": {"run_dir": str(faithful_pod.run_dir)}}),
        state_dir=tmp_path / "state",
        autostart_pod=False,
    )
    try:
        result = await svc.preempt("1")
    finally:
        svc.close_journal()
    assert sorted(result.per_host) == names(faithful_pod) == preempted(faithful_pod)


def test_phantom_pod_preempt_all_takes_every_host(
    either_pod: PodInfo, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["pod", "preempt", "all", "--run-dir", str(either_pod.run_dir), "--json"]) == 0
    after = json.loads(capsys.readouterr().out)
    assert sorted(h["name"] for h in after["hosts"] if h["state"] == "PREEMPTED") == names(
        either_pod
    )


def _nice_of(pid: int) -> int:
    return int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[16])


def test_the_console_starts_its_own_pod_at_the_lowest_cpu_priority(tmp_path: Path) -> None:
    """Busy emulated hosts must not take the frames of the console on the same cores: the
    pod the console starts runs niced, and so does every command of its hosts."""
    config = parse_config({"cluster": {"run_dir": str(tmp_path / "pod"), "hosts": 1}})
    mine = _nice_of(os.getpid())  # the console's own, whatever the shell gave it
    try:
        info = ensure_pod(config, autostart=True)
        assert _nice_of(os.getpid()) == mine  # it lowers the pod's priority, never its own
        assert _nice_of(info.pid) == LOCAL_POD_NICE == 19
        assert ssh_run(info, 0, "nice", check=True).stdout.strip() == "19"
    finally:
        stop_test_pod(tmp_path / "pod")
