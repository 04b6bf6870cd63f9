"""The console reads W&B online (issue 21, item 4): runs logged by the real wandb SDK to the
W&B emulator, read back through the real ``wandb.Api()`` by `phantom status --json` (a
subprocess, config pointing at the emulator) and by the pollers' tracker; a run whose
history stops is stalled by the usual rule; a slow or stopped W&B server is stale within
the deadline and the command still exits."""

from __future__ import annotations

import contextlib
import json
import socket
import subprocess
import sys
import textwrap
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from console.services.cadence.sources import OnlineRunSource
from console.services.cadence.tracker import CadenceTracker
from emulators.tpu_pod.client import start_pod
from tests.script.test_e2e import ROOT, assert_pod_gone, child_env, phantom_argv, write_config
from tests.support.fixtures_wandb import API_KEY, WandbEmu, kill_group, set_delay, wandb_emu
from tests.support.waiting import wait_until

__all__ = ["wandb_emu"]

KEY_ENV = "PHANTOM_TEST_WANDB_KEY"  # the console reads the key by this name, from its env
ENTITY, PROJECT = "lab", "cadence"

# A trainer: logs a row every INTERVAL s until PAUSE exists, then stays alive without
# logging (its run stays "running": the history just stops), until STOP exists.
WRITER = textwrap.dedent(
    """
    import os, sys, time, pathlib
    import wandb
    name, interval, pause, stop = sys.argv[1], float(sys.argv[2]), *map(pathlib.Path, sys.argv[3:5])
    run = wandb.init(entity=sys.argv[5], project=sys.argv[6], name=name)
    step = 0
    while not pause.exists():
        run.log({"loss": 1.0 / (step + 1)})
        step += 1
        print(step, flush=True)
        time.sleep(interval)  # sleep-noqa: the writer's logging pace, not a wait
    while not stop.exists():
        time.sleep(0.1)  # sleep-noqa: a stalled writer idles, alive, until told
    os._exit(0)
    """
)


@dataclass
class Writer:
    proc: subprocess.Popen[str]
    pause: Path
    stop: Path


@contextlib.contextmanager
def writer(emu: WandbEmu, tmp_path: Path, name: str, interval: float) -> Iterator[Writer]:
    home = tmp_path / f"home-{name}"
    env = emu.env(home)
    (tmp_path / "writer.py").write_text(WRITER)
    w = Writer(
        subprocess.Popen(
            [
                sys.executable,
                str(tmp_path / "writer.py"),
                name,
                str(interval),
                str(tmp_path / f"{name}.pause"),
                str(tmp_path / f"{name}.stop"),
                ENTITY,
                PROJECT,
            ],
            env=env,
            cwd=tmp_path,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            start_new_session=True,
        ),
        tmp_path / f"{name}.pause",
        tmp_path / f"{name}.stop",
    )
    try:
        yield w
    finally:
        w.stop.touch()
        kill_group(w.proc)
        w.proc.communicate(timeout=30)


def history_lines(emu: WandbEmu, name: str) -> int:
    data = emu.graphql(
        "query($e: String!, $p: String!) { project(name: $p, entityName: $e) {"
        " runs { edges { node { displayName historyLineCount } } } } }",
        {"e": ENTITY, "p": PROJECT},
    )
    project = data.get("project") or {}
    for edge in (project.get("runs") or {}).get("edges") or []:
        if edge["node"]["displayName"] == name:
            return int(edge["node"]["historyLineCount"] or 0)
    return 0


def online_config(tmp_path: Path, base_url: str) -> Path:
    cfg = write_config(tmp_path, hosts=2)
    text = cfg.read_text().replace(
        'mode = "offline"',
        f'mode = "online"\nentity = "{ENTITY}"\nproject = "{PROJECT}"\n'
        f'base_url = "{base_url}"\napi_key_env = "{KEY_ENV}"',
    )
    cfg.write_text(text)
    return cfg


def status_json(cfg: Path, tmp_path: Path, *extra: str) -> tuple[dict[str, Any], str]:
    env = {**child_env(tmp_path), KEY_ENV: API_KEY}
    proc = subprocess.run(
        phantom_argv("--config", str(cfg), "status", "--json", *extra),
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,  # a status call that waited on a hung W&B server would never return
    )
    assert API_KEY not in proc.stdout and API_KEY not in proc.stderr
    assert proc.returncode == 0, proc.stderr[-3000:]
    (line,) = proc.stdout.splitlines()
    return json.loads(line), proc.stderr


def online(snap: dict[str, Any]) -> list[dict[str, Any]]:
    return [c for c in snap["cadence"] if c["source"] == "online"]


@pytest.fixture
def pod_run_dir(tmp_path: Path) -> Iterator[Path]:
    run_dir = tmp_path / "pod"
    try:
        start_pod(run_dir, hosts=2, ssh_port=0, api_port=0, ready_delay=0.2, timeout=120)
        yield run_dir
    finally:
        assert_pod_gone(run_dir)


@pytest.mark.slow  # a pod, two trainers, history in 15 s batches, `phantom status` x N: ~90 s
@pytest.mark.timeout(400)
def test_status_lists_online_runs_and_marks_the_one_whose_history_stops(
    wandb_emu: WandbEmu, tmp_path: Path, pod_run_dir: Path
) -> None:
    cfg = online_config(tmp_path, wandb_emu.base_url)
    with (
        writer(wandb_emu, tmp_path, "steady", 1.0) as steady,
        writer(wandb_emu, tmp_path, "stops", 1.0) as stops,
    ):
        wait_until(
            lambda: (
                history_lines(wandb_emu, "steady") >= 2 and history_lines(wandb_emu, "stops") >= 2
            ),
            90,
            "both trainers' first rows at the emulator",
        )
        snap, _ = status_json(cfg, tmp_path)
        runs = {c["name"]: c for c in online(snap)}
        assert set(runs) == {"steady", "stops"}, snap["cadence"]
        for run in runs.values():
            assert run["verdict"] == "ok" and run["state"] == "running", json.dumps(run)
            assert run["last_step"] >= 1 and run["median_interval_s"] > 0
        stops.pause.touch()  # its history stops; the process (and its run) stays alive
        paused_at = history_lines(wandb_emu, "stops")

        cads: dict[str, Any] = {}

        def stalled() -> bool:
            cads.update({c["name"]: c for c in online(status_json(cfg, tmp_path)[0])})
            return bool(cads["stops"]["verdict"] == "stalled")

        wait_until(stalled, 120, "the paused run marked stalled", step=0)
        gone_quiet = cads["stops"]
        # the rule: silence > stall_factor (5) x median interval + the source's lag (15 s:
        # wandb-core sends history to the server every 15 s, the default online_lag_s)
        assert gone_quiet["seconds_since"] > 5 * gone_quiet["median_interval_s"] + 15.0
        assert gone_quiet["last_step"] >= paused_at - 2
        assert cads["steady"]["verdict"] == "ok", cads["steady"]
        assert steady.proc.poll() is None and stops.proc.poll() is None
    assert wandb_emu.trap.seen == []


@pytest.mark.timeout(300)
def test_status_marks_a_slow_or_stopped_wandb_server_stale_and_exits(
    wandb_emu: WandbEmu, tmp_path: Path, pod_run_dir: Path
) -> None:
    with socket.socket() as sock:  # a port where no W&B server listens (a stopped one)
        sock.bind(("127.0.0.1", 0))
        down_url = f"http://127.0.0.1:{sock.getsockname()[1]}"
    down_cfg = online_config(tmp_path, down_url)
    snap, _ = status_json(down_cfg, tmp_path, "--cadence-deadline", "3")
    (entry,) = online(snap)
    assert entry["verdict"] == "stale" and "3s" in entry["stale"], entry

    slow_cfg = online_config(tmp_path, wandb_emu.base_url)
    set_delay(wandb_emu.base_url, API_KEY, 30.0)
    try:
        snap, _ = status_json(slow_cfg, tmp_path, "--cadence-deadline", "3")
    finally:
        set_delay(wandb_emu.base_url, API_KEY, 0.0)
    (entry,) = online(snap)
    assert entry["verdict"] == "stale" and "3s" in entry["stale"], entry


@pytest.mark.slow  # history reaches the server in 15 s batches: ~40 s
@pytest.mark.timeout(180)
def test_the_pollers_tracker_marks_a_slow_server_stale_without_waiting_for_it(
    wandb_emu: WandbEmu, tmp_path: Path
) -> None:
    """What the Cadence screen and the watchdog get: the tracker's poll returns by its
    deadline while the W&B server hangs, the run keeps its last numbers marked stale, and
    the run is read again once the server answers."""
    source = OnlineRunSource(
        PROJECT,
        ENTITY,
        base_url=wandb_emu.base_url,
        api_key_env=KEY_ENV,
        environ={KEY_ENV: API_KEY},
        timeout_s=60,
    )
    source.prepare()
    tracker = CadenceTracker([source], stall_factor=3, source_deadline_s=30)
    with writer(wandb_emu, tmp_path, "tracked", 0.3) as w:
        wait_until(lambda: history_lines(wandb_emu, "tracked") >= 3, 90, "the writer's rows")
        first = {c.name: c for c in tracker.poll()}["tracked"]
        assert first.verdict == "ok" and first.last_step is not None
        w.pause.touch()
        tracker.source_deadline_s = 1.0
        set_delay(wandb_emu.base_url, API_KEY, 8.0)
        try:
            blind = {c.name: c for c in tracker.poll()}["tracked"]
            assert blind.verdict == "stale" and "online cadence: no answer" in blind.stale
            assert blind.last_step == first.last_step  # the last numbers, marked stale
            assert "online" in tracker.errors
        finally:
            set_delay(wandb_emu.base_url, API_KEY, 0.0)
        tracker.source_deadline_s = 30.0

        seen: dict[str, Any] = {}

        def back() -> bool:
            seen.update({c.name: c for c in tracker.poll()})
            return "online" not in tracker.errors

        wait_until(back, 90, "the online source read again")
        assert seen["tracked"].verdict != "stale", seen["tracked"]
    assert wandb_emu.trap.seen == []
