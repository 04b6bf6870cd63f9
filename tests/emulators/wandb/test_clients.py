"""The real wandb SDK (with wandb-core) and the real `wandb` CLI against the W&B emulator.

Each client runs in its own process with a tmp HOME and WANDB_BASE_URL on 127.0.0.1;
a proxy trap proves that no client tried to reach any other host.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from tests.support.fixtures_wandb import (
    API_KEY,
    WRONG_KEY,
    WandbEmu,
    kill_group,
    run_client,
    wandb_emu,
)
from tests.support.waiting import wait_until

__all__ = ["wandb_emu"]

PY = sys.executable

TRAIN = textwrap.dedent(
    """
    import sys, time, wandb
    start, count, then = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3]
    run = wandb.init(
        project="resume", entity="lab", id="trainer-1", resume="allow",
        config={"alpha": 0.5},
        # history reaches the server each second; wandb-core takes an interval under 1 s
        # for its 15 s default (0.2 made this test wait 15 s for the first rows)
        settings=wandb.Settings(x_file_stream_transmit_interval=1),
    )
    print("resumed", run.resumed, flush=True)
    for i in range(count):
        run.log({"loss": float(start + i)})
    if then == "hang":  # wait to be SIGKILLed, like a preempted trainer
        time.sleep(600)  # sleep-noqa: a run that keeps running until killed
    run.finish()
    """
)

LIST_RUNS = textwrap.dedent(
    """
    import json, sys, wandb
    api = wandb.Api()
    runs = api.runs(sys.argv[1])
    out = []
    for r in runs:
        out.append({
            "id": r.id, "state": r.state, "config": r.config,
            "summary": {k: v for k, v in r.summary.items() if not k.startswith("_")},
            "steps": [h["_step"] for h in r.scan_history()],
            "loss": [h.get("loss") for h in r.history(pandas=False)],
        })
    print(json.dumps(out))
    """
)


def _history_lines(emu: WandbEmu, entity: str, project: str, run: str) -> int:
    data = emu.graphql(
        "query H($p: String!, $e: String!, $r: String!) "
        "{ project(name: $p, entityName: $e) { run(name: $r) { historyLineCount } } }",
        {"p": project, "e": entity, "r": run},
    )
    proj = data.get("project") or {}
    return int((proj.get("run") or {}).get("historyLineCount") or 0)


def test_init_resume_after_sigkill_continues_the_same_run(
    wandb_emu: WandbEmu, tmp_path: Path
) -> None:
    """A trainer SIGKILLed mid-run and started again with the same id continues that run:
    one run, history 0..5 without a gap, finished."""
    (tmp_path / "train.py").write_text(TRAIN)
    env = wandb_emu.env(tmp_path / "home")
    first = subprocess.Popen(
        [PY, "train.py", "0", "3", "hang"],
        env=env,
        cwd=tmp_path,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )
    try:
        wait_until(
            lambda: (
                first.poll() is not None
                or _history_lines(wandb_emu, "lab", "resume", "trainer-1") >= 3
            ),
            60,
            "the first trainer's 3 history rows at the emulator",
        )
        assert first.poll() is None, first.communicate()[0]
    finally:
        kill_group(first)  # SIGKILL the trainer and its wandb-core: no finish is sent
        first.wait()
    second = run_client([PY, "train.py", "3", "3", "finish"], env, tmp_path)
    assert second.returncode == 0, second.stderr
    assert "resumed True" in second.stdout
    listed = run_client([PY, "-c", LIST_RUNS, "lab/resume"], env, tmp_path)
    assert listed.returncode == 0, listed.stderr
    runs = json.loads(listed.stdout)
    assert [r["id"] for r in runs] == ["trainer-1"]
    (run,) = runs
    assert run["state"] == "finished"
    assert run["config"] == {"alpha": 0.5}
    assert run["steps"] == [0, 1, 2, 3, 4, 5]
    assert run["loss"] == [0.0, 1.0, 2.0, 3.0, 4.0, 5.0]
    assert run["summary"]["loss"] == 5.0
    assert wandb_emu.trap.seen == []


def test_wrong_api_key_gets_401_and_the_clients_own_error(
    wandb_emu: WandbEmu, tmp_path: Path
) -> None:
    env = wandb_emu.env(tmp_path / "home", api_key=WRONG_KEY, silent=False)
    init = run_client(
        [PY, "-c", "import wandb; wandb.init(project='denied', entity='lab')"], env, tmp_path
    )
    assert init.returncode != 0
    assert "CommError: user is not logged in" in init.stderr
    login = run_client(
        ["wandb", "login", "--host", wandb_emu.base_url, "--relogin", WRONG_KEY], env, tmp_path
    )
    assert login.returncode != 0
    assert f"Failed to authenticate with {wandb_emu.base_url}" in login.stderr
    assert WRONG_KEY not in login.stderr + login.stdout
    assert wandb_emu.graphql('{ project(name: "denied", entityName: "lab") { name } }') == {
        "project": None
    }
    assert wandb_emu.trap.seen == []


SWEEP_YAML = """\
program: train_sweep.py
method: grid
run_cap: 2
parameters:
  lr:
    values: [0.1, 0.01, 0.001]
  batch:
    value: 32
"""

TRAIN_SWEEP = """\
import wandb
run = wandb.init()
for i in range(3):
    run.log({"loss": run.config.lr * (3 - i)})
run.finish()
"""

# `wandb agent ARGS` as its console script runs it (wandb.cli.cli:cli), with the agent's poll
# of its queue (a class constant, 5 s, no setting) at 0.5 s: between two runs and after the
# last, the agent slept a whole poll before its next heartbeat, 15 of this test's 20 s.
AGENT = textwrap.dedent(
    """
    import sys
    from wandb.wandb_agent import Agent
    Agent.POLL_INTERVAL = 0.5
    from wandb.cli.cli import cli
    cli(["agent", *sys.argv[1:]], prog_name="wandb")
    """
)

SWEEP_RUNS = textwrap.dedent(
    """
    import json, sys, wandb
    api = wandb.Api()
    sweep = api.sweep(sys.argv[1])
    print(json.dumps({
        "state": sweep.state,
        "listed": [s.id for s in api.project("grid", entity="lab").sweeps()],
        "projects": [p.name for p in api.projects("lab")],
        "runs": sorted(
            [{"id": r.id, "state": r.state, "lr": r.config.get("lr"),
              "loss": r.summary.get("loss")} for r in sweep.runs],
            key=lambda r: -r["lr"],
        ),
    }))
    """
)


def _sweep_id(proc: subprocess.CompletedProcess[str]) -> str:
    m = re.search(r"wandb agent (\S+)", proc.stderr + proc.stdout)
    assert m, f"no sweep id in:\n{proc.stdout}\n{proc.stderr}"
    return m.group(1)


def test_wandb_sweep_and_agent_count_2(wandb_emu: WandbEmu, tmp_path: Path) -> None:
    """`wandb sweep` creates a grid sweep, `wandb agent --count 2` (the CLI's own code, its
    poll shortened: AGENT) runs two runs through heartbeats, `wandb.Api().sweep()` lists them finished; `--stop` / `--cancel` set the state."""
    (tmp_path / "sweep.yaml").write_text(SWEEP_YAML)
    (tmp_path / "train_sweep.py").write_text(TRAIN_SWEEP)
    env = wandb_emu.env(tmp_path / "home", silent=False)
    created = run_client(
        ["wandb", "sweep", "--entity", "lab", "--project", "grid", "sweep.yaml"], env, tmp_path
    )
    assert created.returncode == 0, created.stderr
    path = _sweep_id(created)
    assert path.startswith("lab/grid/")
    agent = run_client([PY, "-c", AGENT, "--count", "2", path], env, tmp_path, timeout=150)
    assert agent.returncode == 0, agent.stderr
    listed = run_client([PY, "-c", SWEEP_RUNS, path], env, tmp_path)
    assert listed.returncode == 0, listed.stderr
    got = json.loads(listed.stdout)
    assert [(r["state"], r["lr"]) for r in got["runs"]] == [("finished", 0.1), ("finished", 0.01)]
    assert [r["loss"] for r in got["runs"]] == [pytest.approx(0.1), pytest.approx(0.01)]
    assert got["state"] == "RUNNING"
    assert got["listed"] == [path.rsplit("/", 1)[1]]
    assert "grid" in got["projects"]

    stopped = run_client(["wandb", "sweep", "--stop", path], env, tmp_path)
    assert stopped.returncode == 0, stopped.stderr
    second = run_client(
        ["wandb", "sweep", "--entity", "lab", "--project", "grid", "sweep.yaml"], env, tmp_path
    )
    other = _sweep_id(second)
    cancelled = run_client(["wandb", "sweep", "--cancel", other], env, tmp_path)
    assert cancelled.returncode == 0, cancelled.stderr
    states = [
        wandb_emu.graphql(
            "query S($p: String!, $s: String!) "
            '{ project(name: $p, entityName: "lab") { sweep(sweepName: $s) { state } } }',
            {"p": "grid", "s": ref.rsplit("/", 1)[1]},
        )["project"]["sweep"]["state"]
        for ref in (path, other)
    ]
    assert states == ["FINISHED", "CANCELED"]
    assert wandb_emu.trap.seen == []


def test_bad_sweep_input_gets_the_clients_error(wandb_emu: WandbEmu, tmp_path: Path) -> None:
    """A malformed sweep config is refused naming the field; an unknown sweep id is named."""
    (tmp_path / "bad.yaml").write_text("method: annealing\nparameters:\n  lr: {values: [1]}\n")
    env = wandb_emu.env(tmp_path / "home", silent=False)
    bad = run_client(
        ["wandb", "sweep", "--entity", "lab", "--project", "grid", "bad.yaml"], env, tmp_path
    )
    assert bad.returncode != 0
    assert "method must be one of random, grid, bayes, got 'annealing'" in bad.stderr
    unknown = run_client(["wandb", "agent", "--count", "1", "lab/grid/nosuch"], env, tmp_path)
    assert unknown.returncode != 0
    assert "Sweep lab/grid/nosuch not found" in unknown.stderr
    assert wandb_emu.trap.seen == []


UPLOAD = textwrap.dedent(
    """
    import pathlib, wandb
    for step, content in ((10, "weights-at-10"), (20, "weights-at-20")):
        pathlib.Path("model.bin").write_text(content)
        run = wandb.init(project="art", entity="lab", id=f"train-{step}")
        art = wandb.Artifact("policy", type="model")
        art.add_file("model.bin")
        run.log_artifact(art, aliases=["latest", f"step-{step}"])
        run.finish()
    """
)

# Another process with another home (an empty artifact cache): the bytes come from the server.
DOWNLOAD = textwrap.dedent(
    """
    import json, pathlib, wandb
    out = {}
    run = wandb.init(project="art", entity="lab", id="eval")
    latest = run.use_artifact("policy:latest")
    root = latest.download(root="dl-latest")
    out["latest"] = [latest.version, pathlib.Path(root, "model.bin").read_text()]
    run.finish()
    old = wandb.Api().artifact("lab/art/policy:step-10")
    root = old.download(root="dl-10")
    out["step-10"] = [old.version, pathlib.Path(root, "model.bin").read_text(), sorted(old.aliases)]
    print(json.dumps(out))
    """
)


def test_log_artifact_then_use_and_download_by_alias(wandb_emu: WandbEmu, tmp_path: Path) -> None:
    """Two versions with `latest` and `step-N`: `latest` moves to the second, `step-10`
    still downloads the first one's bytes."""
    up = run_client([PY, "-c", UPLOAD], wandb_emu.env(tmp_path / "trainer"), tmp_path)
    assert up.returncode == 0, up.stderr
    reader = tmp_path / "reader"
    reader.mkdir()
    done = run_client([PY, "-c", DOWNLOAD], wandb_emu.env(tmp_path / "reader-home"), reader)
    assert done.returncode == 0, done.stderr
    got = json.loads(done.stdout.strip().splitlines()[-1])
    assert got["latest"] == ["v1", "weights-at-20"]
    assert got["step-10"] == ["v0", "weights-at-10", ["step-10"]]
    assert wandb_emu.trap.seen == []


OFFLINE = textwrap.dedent(
    """
    import wandb
    run = wandb.init(project="off", entity="lab", id="offline-1", config={"a": 1})
    for i in range(4):
        run.log({"x": i})
    run.finish()
    """
)

SYNCED = textwrap.dedent(
    """
    import json, wandb
    run = wandb.Api().run("lab/off/offline-1")
    print(json.dumps([run.state, run.config, [h["x"] for h in run.scan_history()]]))
    """
)


def test_wandb_login_then_sync_of_an_offline_run(wandb_emu: WandbEmu, tmp_path: Path) -> None:
    """`wandb login --host` keeps the key in the tmp HOME's .netrc; `wandb sync` then
    uploads an offline run with those credentials (no WANDB_API_KEY)."""
    home = tmp_path / "home"
    env = wandb_emu.env(home, silent=False)
    del env["WANDB_API_KEY"]
    login = run_client(
        ["wandb", "login", "--host", wandb_emu.base_url, "--relogin", API_KEY], env, tmp_path
    )
    assert login.returncode == 0, login.stderr
    assert "127.0.0.1" in (home / ".netrc").read_text()
    assert API_KEY not in login.stdout + login.stderr
    offline = run_client([PY, "-c", OFFLINE], {**env, "WANDB_MODE": "offline"}, tmp_path)
    assert offline.returncode == 0, offline.stderr
    (run_dir,) = (home / "wandb" / "wandb").glob("offline-run-*-offline-1")
    synced = run_client(["wandb", "sync", str(run_dir)], env, tmp_path)
    assert synced.returncode == 0, synced.stderr
    assert "Finished syncing" in synced.stderr + synced.stdout
    listed = run_client([PY, "-c", SYNCED], env, tmp_path)
    assert listed.returncode == 0, listed.stderr
    assert json.loads(listed.stdout) == ["finished", {"a": 1}, [0, 1, 2, 3]]
    assert wandb_emu.trap.seen == []


IN_PROCESS_AGENT = textwrap.dedent(
    """
    import json, wandb
    config = {"method": "random", "run_cap": 2, "parameters": {"alpha": {"min": 0.0, "max": 1.0}}}
    sid = wandb.sweep(config, project="seed", entity="lab")
    def one():
        run = wandb.init()
        run.mark_preempting()  # as engine/sweep_wandb.py does
        run.log({"r": run.config.alpha})
        run.finish()
    wandb.agent(sid, function=one, project="seed", entity="lab", count=3)
    sweep = wandb.Api().sweep(f"lab/seed/{sid}")
    print(json.dumps([sweep.state, [(r.state, r.config["alpha"]) for r in sweep.runs]]))
    """
)


@pytest.mark.slow
def test_in_process_agent_stops_at_run_cap(wandb_emu: WandbEmu, tmp_path: Path) -> None:
    """The engine's way: wandb.sweep(dict) and wandb.agent(function=...) with runs marked
    preempting; a random sweep with run_cap 2 ends the agent before its count of 3."""
    done = run_client([PY, "-c", IN_PROCESS_AGENT], wandb_emu.env(tmp_path / "home"), tmp_path)
    assert done.returncode == 0, done.stderr
    state, runs = json.loads(done.stdout.strip().splitlines()[-1])
    assert state == "FINISHED"
    assert [r[0] for r in runs] == ["finished", "finished"]
    assert all(0.0 <= r[1] <= 1.0 for r in runs)
    assert wandb_emu.trap.seen == []


def test_no_client_process_outlives_the_tests(wandb_emu: WandbEmu) -> None:
    """wandb-core and agent children were all in the killed process groups."""
    marker = wandb_emu.base_url.encode()
    left = []
    for pid in os.listdir("/proc"):
        if not pid.isdigit():
            continue
        try:
            env = Path(f"/proc/{pid}/environ").read_bytes()
        except OSError:
            continue
        if marker in env and int(pid) != os.getpid():
            left.append(int(pid))
    assert left == [], f"wandb client processes still alive: {left}"
