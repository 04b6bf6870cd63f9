"""Asking a GKE workload's trainers for a checkpoint now: only pods whose trainer names the
signal that asks (``PHANTOM_CHECKPOINT_SIGNAL``) are asked, only where the console can
signal a container (the emulator), and the answer is the coordinator's checkpoint. For real:
the emulator's GRPO workload, given the variable, saves a checkpoint at the step it reached
and trains on; one without it is refused, saying why."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from console.services.backends.gke.ask import ASKED_LINE_RE, NO_SIGNAL, askable
from console.wiring.settings import workload_defaults
from emulators.gke import client as gke_client
from emulators.gke.workload.grpo import ASKED_LINE
from tests.support.fixtures_gke import gke
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


def test_a_real_cluster_says_why_it_cannot_ask() -> None:
    assert "real GKE cluster" in NO_SIGNAL and "checkpoint_period" in NO_SIGNAL
