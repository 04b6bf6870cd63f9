"""A preemption notice keeps the trainer's W&B run's end, on the W&B emulator.

A spot VM's shutdown sends SIGTERM to every process of the host (the pod emulator's
notice does the same: ``emulators/tpu_pod/procs.signal_targets``), so wandb-core, in its
own session, gets it too and dies with the rows it had not sent. The trainer still
checkpoints, and its run on the server then has the notice step's row and summary and
ends ``preempted``; the same command resumes the same run id to its total.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

from engine.exit_codes import EX_PREEMPTED
from engine.tracking import wandb_run_id
from tests.support.engine_helpers import engine_env, kill, notice_from_log
from tests.support.fixtures_wandb import WandbEmu, run_client, wandb_emu
from tests.support.waiting import wait_until

__all__ = ["wandb_emu"]

ARGS = [
    "--algo", "ppo", "--env", "CartPole-v1", "--n-envs", "2", "--total-timesteps", "4096",
    "--checkpoint-every", "100000", "--run-name", "noticed-wb", "--wandb", "online",
    "--wandb-project", "notice", "--wandb-entity", "lab", "--log-every", "256",
    "--eval-episodes", "0", "--hparams", '{"n_steps": 128}',
]  # fmt: skip

READ = textwrap.dedent(
    """
    import json, sys, wandb
    api = wandb.Api()
    run = api.run(sys.argv[1])
    rows = [r for r in run.scan_history() if "global_step" in r]
    print(json.dumps({
        "state": run.state,
        "summary": {k: v for k, v in run.summary.items() if not k.startswith("_")},
        "steps": [int(r["global_step"]) for r in rows],
        "runs": [r.id for r in api.runs("lab/notice")],
    }))
    """
)


def _descendants(pid: int) -> list[int]:
    """Every process under ``pid`` (wandb-core sits there, in a session of its own)."""
    children: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            stat = Path(f"/proc/{entry}/stat").read_text()
        except OSError:
            continue
        ppid = int(stat.rsplit(")", 1)[1].split()[1])
        children.setdefault(ppid, []).append(int(entry))
    out, todo = [], [pid]
    while todo:
        for child in children.get(todo.pop(), []):
            out.append(child)
            todo.append(child)
    return out


def _env(emu: WandbEmu, tmp_path: Path) -> dict[str, str]:
    return {**engine_env(tmp_path), **emu.env(tmp_path / "home")}


def _read(emu: WandbEmu, tmp_path: Path, run_id: str) -> dict:
    done = run_client(
        [sys.executable, "-c", READ, f"lab/notice/{run_id}"], _env(emu, tmp_path), tmp_path
    )
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout.strip().splitlines()[-1])


def test_sigterm_to_every_process_keeps_the_runs_end_and_resume_continues_it(
    wandb_emu: WandbEmu, tmp_path: Path
) -> None:
    env = _env(wandb_emu, tmp_path)
    log = tmp_path / "first.log"
    with open(log, "w") as fh:
        proc = subprocess.Popen(
            [sys.executable, "-m", "engine.train", *ARGS],
            cwd=tmp_path,
            env=env,
            stdout=subprocess.PIPE,
            stderr=fh,
            text=True,
            start_new_session=True,
        )
    core: list[int] = []
    try:
        wait_until(
            lambda: proc.poll() is not None or "progress step=" in log.read_text(),
            180,
            "training with a W&B run",
        )
        assert proc.poll() is None, log.read_text()[-3000:]
        core = _descendants(proc.pid)
        assert core, "no wandb-core under the trainer"
        for pid in [proc.pid, *core]:  # the host's shutdown: everyone at once
            os.kill(pid, signal.SIGTERM)
        proc.communicate(timeout=180)
    finally:
        kill(proc)
        for pid in core:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
    text = log.read_text()
    assert proc.returncode == EX_PREEMPTED, text[-3000:]
    notice = notice_from_log(text)
    assert notice is not None, text[-3000:]
    step = notice["step"]

    run_id = wandb_run_id("noticed-wb", "notice")
    got = _read(wandb_emu, tmp_path, run_id)
    assert got["state"] == "preempted", got
    assert got["summary"]["preempted_at_step"] == step
    assert got["summary"]["num_timesteps"] == step
    assert got["steps"][-1] == step
    assert got["runs"] == [run_id]

    again = subprocess.run(
        [sys.executable, "-m", "engine.train", *ARGS],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
        start_new_session=True,
    )
    assert again.returncode == 0, again.stderr[-3000:]
    assert json.loads(again.stdout.strip().splitlines()[-1])["resumed_from_step"] == step
    after = _read(wandb_emu, tmp_path, run_id)
    assert after["state"] == "finished"
    assert after["runs"] == [run_id]  # the same run, continued
    assert after["steps"][-1] == 4096
    assert [s for s in after["steps"] if s > step]  # rows past the notice, same run
    assert wandb_emu.trap.seen == []
