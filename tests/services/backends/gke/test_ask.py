"""Asking a GKE workload's trainers for a checkpoint now: only pods whose trainer names the
signal that asks (``PHANTOM_CHECKPOINT_SIGNAL``) are asked, only where the console can
signal a container (the emulator), and the answer is the coordinator's checkpoint. For real:
the emulator's GRPO workload, given the variable, saves a checkpoint at the step it reached
and trains on; one without it is refused, saying why."""

from __future__ import annotations

import asyncio
import json
import os
import queue
import shlex
import signal
import subprocess
import sys
import threading
import urllib.request
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from console.services.backends.gke import manifests as M
from console.services.backends.gke.ask import ASKED_LINE_RE, NO_SIGNAL, askable
from console.services.jobs.workload import WorkloadSpec
from console.wiring.settings import workload_defaults
from emulators.gke import client as gke_client
from emulators.gke.workload.grpo import ASKED_LINE
from tests.support.fixtures_gke import gke, xpk_jobset
from tests.support.gke_services import gke_config, gke_services
from tests.support.waiting import until

__all__ = ["gke"]


def _pod(name: str, workload: str, env: list[dict[str, str]], phase: str = "Running") -> Any:
    return {
        "metadata": {"name": name, "labels": {"jobset.sigs.k8s.io/jobset-name": workload}},
        "spec": {"containers": [{"name": "jax-tpu", "env": env}]},
        "status": {"phase": phase},
    }


def test_only_running_pods_whose_trainer_names_the_signal_are_askable() -> None:
    ask = [{"name": "PHANTOM_CHECKPOINT_SIGNAL", "value": "SIGUSR2"}]
    pods = {
        "a-0": _pod("a-0", "a", ask),
        "a-1": _pod("a-1", "a", []),
        "a-2": _pod("a-2", "a", ask, phase="Pending"),
        "b-0": _pod("b-0", "b", ask),
    }
    caches = SimpleNamespace(pods=SimpleNamespace(values=lambda: list(pods.values())))
    running, asked = askable(caches, "a")  # type: ignore[arg-type]
    assert sorted(running) == ["a-0", "a-1"]
    assert [(x.pod, x.container, x.signal) for x in asked] == [("a-0", "jax-tpu", "SIGUSR2")]


def test_the_workloads_answer_line_is_the_one_the_console_reads() -> None:
    saved = ASKED_LINE.format(signal="SIGUSR2", what="saved a checkpoint to /b/r/42", step=42)
    m = ASKED_LINE_RE.search(f"I1206 01:02:03 77 {saved}")
    assert m is not None and (m["path"], m["step"]) == ("/b/r/42", "42")
    other = ASKED_LINE.format(signal="SIGUSR2", what="the coordinator saves it", step=42)
    assert (m2 := ASKED_LINE_RE.search(other)) is not None and m2["path"] is None


@pytest.mark.slow
@pytest.mark.timeout(600)
async def test_the_emulators_grpo_workload_checkpoints_when_asked_and_trains_on(
    gke: gke_client.GkeInfo, tmp_path: Path
) -> None:
    config = gke_config(gke.run_dir)
    env = {"STEPS": "4000", "STEP_TIME": "0.2", "CHECKPOINT_PERIOD": "1000"}
    async with gke_services(config, tmp_path / "state") as (svc, _):
        plain = workload_defaults(config).but("plain", env=env)
        await svc.create_workload(plain, "test")

        def step(name: str) -> int:
            return max((c.last_step or 0 for c in svc.cadence() if c.run_id == name), default=0)

        await until(lambda: step("plain") >= 2, 120, "plain training")
        with pytest.raises(ValueError, match="trainer offers no way to be asked"):
            await svc.checkpoint("plain", "test", timeout_s=30)
        assert (await svc.delete_workload("plain", "test")).ok

        asks = {**env, "PHANTOM_CHECKPOINT_SIGNAL": "SIGUSR2"}
        await svc.create_workload(workload_defaults(config).but("asked", env=asks), "test")
        await until(lambda: step("asked") >= 2, 120, "asked training")
        res = await svc.checkpoint("asked", "test", timeout_s=60)
        assert res.ok, res.message
        (ckpt,) = res.data["checkpoints"]
        assert ckpt["run"] == "asked" and ckpt["step"] >= 2
        assert (Path(ckpt["uri"]) / "_CHECKPOINT_METADATA").is_file()  # complete, on storage
        assert len(res.per_host) == 8 and all(r.ok for r in res.per_host.values())
        await until(lambda: step("asked") > ckpt["step"] + 2, 60, "training on")
        rows = await svc.events(limit=100, kinds=["action"])
        assert [r.data["checkpoints"] for r in rows if r.data.get("action") == "checkpoint"] == [
            [ckpt]
        ]
        assert (await svc.delete_workload("asked", "test")).ok


# A trainer that takes SIGUSR2 as an ask, as the GRPO workload does: says when it listens,
# answers the ask and ends.
TRAINER = """
import signal, sys, time
def on_ask(signum, frame):
    print("asked", flush=True)
    sys.exit(0)
signal.signal(signal.SIGUSR2, on_ask)
print("listening", flush=True)
while True:
    time.sleep(1)
"""


def test_the_wrapper_of_a_workload_that_takes_asks_passes_the_signal_on() -> None:
    """The ask reaches the container's main process, xpk's wrapper; before it passed on
    SIGTERM alone, so SIGUSR2 ended it (exit 140, a restart code: the JobSet restarted and
    the pods the console was reading vanished). Run the wrapper for real, signal it as the
    kubelet does: the trainer answers and the wrapper lives on."""
    command = f"{shlex.quote(sys.executable)} -c {shlex.quote(TRAINER)}"
    spec = WorkloadSpec(name="asked", command=command, env={"PHANTOM_CHECKPOINT_SIGNAL": "SIGUSR2"})
    script = M.standard_jobset(spec)["spec"]["replicatedJobs"][0]["template"]["spec"]["template"][
        "spec"
    ]["containers"][0]["command"]
    assert script[:2] == ["bash", "-c"]
    # Started as the kubelet starts a container: every signal at its default. The test's
    # process ignores SIGUSR2 meanwhile, as a pytest worker can after in-process engine code
    # (the ask's `installed()` leaves it ignored): a shell cannot trap a signal it was started
    # ignoring, so without the reset the ask never reached the trainer (this test timed out).
    # The reset is coreutils' `env --default-signal`, not a preexec_fn: Python run in a fork of
    # this multithreaded worker can abort on another test's gRPC state.
    previous = signal.signal(signal.SIGUSR2, signal.SIG_IGN)
    try:
        proc = subprocess.Popen(
            ["env", "--default-signal", *script],
            stdout=subprocess.PIPE,
            text=True,
            start_new_session=True,
        )
    finally:
        signal.signal(signal.SIGUSR2, previous)
    seen: queue.Queue[str] = queue.Queue()
    assert proc.stdout is not None
    out = proc.stdout
    threading.Thread(target=lambda: [seen.put(line.strip()) for line in out], daemon=True).start()
    threading.Thread(target=lambda: seen.put(f"wrapper exited {proc.wait()}"), daemon=True).start()
    try:
        while (line := seen.get(timeout=60)) != "listening":
            assert not line.startswith("wrapper exited"), line
        proc.send_signal(signal.SIGUSR2)
        while (line := seen.get(timeout=60)) != "asked":
            assert not line.startswith("wrapper exited"), line  # 140 before the fix
        assert proc.poll() is None  # the wrapper waits for its trainer as before
    finally:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
        out.close()


def test_a_workload_without_the_ask_keeps_xpks_wrapper_byte_for_byte() -> None:
    spec = WorkloadSpec(name="plain", command="bash run.sh")
    assert M.wrapped(spec) == M.XPK_WRAPPER.format(command="bash run.sh")
    bad = WorkloadSpec(name="bad", command="x", env={"PHANTOM_CHECKPOINT_SIGNAL": "USR2; rm"})
    problems = bad.validate()
    assert "SIGUSR2" in problems["env.PHANTOM_CHECKPOINT_SIGNAL"]
    assert M.wrapped(bad) == M.XPK_WRAPPER.format(command="x")  # never into the script


def post_jobset(info: gke_client.GkeInfo, jobset: dict[str, Any]) -> None:
    req = urllib.request.Request(
        f"{info.server}/apis/jobset.x-k8s.io/v1alpha2/namespaces/default/jobsets",
        data=json.dumps(jobset).encode(),
        headers={"Content-Type": "application/json"},
        method="POST",
    )
    with urllib.request.urlopen(req, timeout=10) as resp:
        assert resp.status == 201


@pytest.mark.slow
@pytest.mark.timeout(300)
async def test_an_ask_that_ends_the_pods_says_they_are_gone_and_does_not_crash(
    gke: gke_client.GkeInfo, tmp_path: Path
) -> None:
    """A JobSet made elsewhere (xpk's own wrapper: SIGTERM passed on, nothing else) whose
    trainer names the ask: the signal ends each wrapper, the JobSet restarts and replaces
    every pod while the console waits for answers. The ask reports each pod gone and why;
    it raised NotFound reading a replaced pod's log before."""
    env = {
        "BASE_OUTPUT_DIRECTORY": "gs://phantom-bucket/maxtext-runs",
        "RUN_NAME": "xpk-asked",
        "STEPS": "4000",
        "STEP_TIME": "0.2",
        "CHECKPOINT_PERIOD": "1000",
        "PHANTOM_CHECKPOINT_SIGNAL": "SIGUSR2",
    }
    await asyncio.to_thread(
        post_jobset, gke, xpk_jobset("xpk-asked", "bash run_gptoss_20b_rl.sh", env=env)
    )
    config = gke_config(gke.run_dir)
    async with gke_services(config, tmp_path / "state") as (svc, _):

        def step() -> int:
            runs = [c.last_step or 0 for c in svc.cadence() if c.run_id == "xpk-asked"]
            return max(runs, default=0)

        await until(lambda: step() >= 2, 120, "xpk-asked training")
        res = await svc.checkpoint("xpk-asked", "test", timeout_s=60)
        assert not res.ok and res.data["checkpoints"] == [] and res.data["late"] == []
        gone = res.data["gone"]
        assert len(gone) == 8 and len(res.per_host) == 8, res.message
        assert {g["host"] for g in gone} == set(res.per_host)
        for g in gone:
            assert g["why"].startswith(
                ("deleted before it answered", "its container ended by SIGUSR2 (exit 140)")
            ), g
            assert res.per_host[g["host"]].error == g["why"]
        assert "8 gone before answering" in res.message


def test_a_real_cluster_says_why_it_cannot_ask() -> None:
    assert "real GKE cluster" in NO_SIGNAL and "checkpoint_period" in NO_SIGNAL
