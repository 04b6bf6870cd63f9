"""Seed 004 through the console's services (``wiring.make_services`` with provider gke) on the
GKE emulator: the whole loop (create -> Running -> Tunix metrics -> slice preempted -> JobSet
restart journaled -> resumed from the last checkpoint -> metrics go on with no step twice ->
Completed), a stall while the pods stay Running, a Pathways worker replaced behind the
JobSet's back, a quota stall reported with its fix, a Failed JobSet resubmitted, and bad
input refused by name with nothing created."""

from __future__ import annotations

import asyncio
import json
import os
import re
import signal
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from console.services.backends.gke.kube import Resource
from console.services.jobs.spec import SpecError, SubmitSpec
from console.services.jobs.workload import WorkloadSpec
from console.services.model import LogLine, LogStreamClosed, RunMetrics, Update
from console.wiring.settings import workload_defaults
from emulators.gke import client as gke_client
from tests.support.fixtures_gke import gke, gke_module
from tests.support.gke_services import (
    FAKE_TOKEN,
    events,
    gke_backend,
    gke_config,
    gke_services,
    trainer_pids,
)
from tests.support.waiting import until

__all__ = ["gke", "gke_module"]

CKPT = "gs://phantom-bucket/gpt-oss-20b/0/items"


def make_checkpoint(info: gke_client.GkeInfo) -> None:
    (info.bucket / "phantom-bucket" / "gpt-oss-20b" / "0" / "items").mkdir(
        parents=True, exist_ok=True
    )


def spec(config: Any, name: str, **kw: Any) -> WorkloadSpec:
    env = {"STEPS": "60", "STEP_TIME": "0.25", "CHECKPOINT_PERIOD": "10", **kw.pop("env", {})}
    return workload_defaults(config).but(name, env=env, **kw)


def latest_metrics(seen: list[Update], run_id: str) -> RunMetrics | None:
    found = [u for u in seen if isinstance(u, RunMetrics) and u.run_id == run_id]
    return found[-1] if found else None


def coordinator_logs(info: gke_client.GkeInfo, name: str) -> list[list[str]]:
    """The coordinator pods' logs as the kubelet wrote them (CRI files), oldest pod first."""
    out = []
    for d in sorted(
        (info.run_dir / "logs").glob(f"default_{name}-slice-job-0-0-*"),
        key=lambda p: min(f.stat().st_mtime for f in p.rglob("*.log")),
    ):
        lines = []
        for f in sorted((d / "jax-tpu").glob("*.log")):
            lines += [ln.split(" ", 3)[3] for ln in f.read_text().splitlines()]
        out.append(lines)
    return out


@pytest.mark.slow
async def test_seed_004_loop_through_the_services(gke: gke_client.GkeInfo, tmp_path: Path) -> None:
    make_checkpoint(gke)
    config = gke_config(gke.run_dir)
    async with gke_services(config, tmp_path / "state") as (svc, seen):
        info = await svc.create_workload(spec(config, "grpo", maxtext_ckpt_path=CKPT), "test")
        assert info.job_id == "grpo" and info.status == "PENDING"
        follow: list[LogLine | LogStreamClosed] = []

        async def follow_all() -> None:
            async for item in svc.follow_logs("grpo"):
                follow.append(item)

        follower = asyncio.create_task(follow_all())
        await until(
            lambda: any(w.status == "RUNNING" for w in svc.snapshot().workloads), 30, "RUNNING"
        )

        def step() -> int:
            m = latest_metrics(seen, "grpo")
            return m.last_step or 0 if m else 0

        await until(lambda: step() >= 25, 40, "Tunix metrics up to step 25")
        cad = next(c for c in svc.cadence() if c.run_id == "grpo")
        assert cad.source == "tensorboard" and cad.state == "running" and not cad.stalled
        # No notice: the trainer is killed mid-step and resumes from its last periodic
        # checkpoint, so some steps are logged twice (as in life).
        await svc.preempt_slice("0", 0.0, "test")
        await until(lambda: events(seen, "jobset_restarted"), 40, "the JobSet restart journaled")
        await until(lambda: events(seen, "recovered"), 60, "the recovery verified")
        await until(
            lambda: any(w.status == "SUCCEEDED" for w in svc.snapshot().workloads), 90, "Completed"
        )
        await asyncio.wait_for(follower, 30)
        preempted = events(seen, "preempted")
        assert len(preempted) == 1 and preempted[0].host == "phantom-gke-np-0"
        assert preempted[0].data["detect_s"] >= 0
        restart = events(seen, "jobset_restarted")[0]
        assert restart.data["restarts"] == 1 and restart.host == "grpo"
        rec = svc.recovery_status()
        assert rec.ok and rec.mttr_s is not None and rec.detect_s is not None
        assert [s.name for s in rec.steps] == ["detect", "nodes", "release", "resubmit", "verify"]
        w = next(w for w in svc.snapshot().workloads if w.name == "grpo")
        assert (w.terminal_state, w.restarts, w.completed, w.owned) == (
            "Completed",
            1,
            "True",
            True,
        )
        await until(lambda: step() == 60, 20, "the last step's metrics")
        metrics = latest_metrics(seen, "grpo")
        assert metrics is not None
        for doc_name, series in metrics.series.items():
            steps = [s for s, _ in series]
            assert steps == sorted(set(steps)), f"{doc_name}: a step twice"
        assert [s for s, _ in metrics.series["rewards/mean"]][-60:] == list(range(1, 61))
        # ...while the event files do hold repeated steps: the dedup did real work.
        logs = coordinator_logs(gke, "grpo")
        assert len(logs) == 2
        restored = [ln for ln in logs[1] if "Restoring checkpoint from" in ln]
        assert len(restored) == 1
        resumed_at = int(re.search(r"\(step (\d+)\)", restored[0]).group(1))  # type: ignore[union-attr]
        last_before = max(
            int(m.group(1)) for ln in logs[0] if (m := re.match(r"completed step: (\d+),", ln))
        )
        assert resumed_at % 10 == 0 and resumed_at < last_before, (resumed_at, last_before)
        # The follow went from the first coordinator pod to its replacement, each line once.
        lines = [x.text for x in follow if isinstance(x, LogLine)]
        assert isinstance(follow[-1], LogStreamClosed) and follow[-1].job_status == "SUCCEEDED"
        assert lines == logs[0] + logs[1]
        # The HF token went to the cluster as a Secret, and nowhere else.
        journal = json.dumps([e.to_json() for e in await svc.events(limit=5000)])
        assert FAKE_TOKEN not in journal and FAKE_TOKEN not in "".join(lines)
        assert "hf_access_token: <set from $HF_TOKEN>" in "\n".join(logs[0])
        kinds = [e.kind for e in await svc.events(limit=5000)]
        assert {"preempted", "jobset_restarted", "recovery_started", "recovered"} <= set(kinds)


@pytest.mark.slow
async def test_a_workload_that_stops_writing_while_running_is_stalled(
    gke: gke_client.GkeInfo, tmp_path: Path
) -> None:
    config = gke_config(gke.run_dir)
    async with gke_services(config, tmp_path / "state") as (svc, seen):
        await svc.create_workload(spec(config, "quiet", env={"STEPS": "2000"}), "test")
        await until(
            lambda: any(c.run_id == "quiet" and (c.last_step or 0) >= 12 for c in svc.cadence()),
            60,
            "a steady cadence",
        )
        pids = trainer_pids(gke)
        assert pids, "the emulated trainer runs"
        for pid in pids:
            os.kill(pid, signal.SIGSTOP)
        try:
            await until(lambda: events(seen, "stalled"), 30, "the stall journaled")
            stall = events(seen, "stalled")[0]
            assert stall.data["run_id"] == "quiet" and stall.actor == "cadence"
            # Every pod still Running: only the metrics say something is wrong.
            w = next(w for w in svc.snapshot().workloads if w.name == "quiet")
            assert w.status == "RUNNING" and w.pods_running == 8
            await until(
                lambda: any("metrics stalled: quiet" in x for x in svc.snapshot().warnings),
                10,
                "the overview's warning",
            )
        finally:
            for pid in pids:
                os.kill(pid, signal.SIGCONT)
        await until(lambda: events(seen, "cadence_resumed"), 30, "the cadence back")
        res = await svc.delete_workload("quiet", "test")
        assert res.ok


@pytest.mark.slow
async def test_a_pathways_worker_replaced_by_its_job_is_noticed(
    gke: gke_client.GkeInfo, tmp_path: Path
) -> None:
    config = gke_config(gke.run_dir)
    async with gke_services(config, tmp_path / "state") as (svc, seen):
        pw = spec(config, "pw", template="pathways", env={"STEPS": "2000"})
        await svc.create_workload(pw, "test")
        await until(
            lambda: any(w.name == "pw" and w.status == "RUNNING" for w in svc.snapshot().workloads),
            40,
            "the Pathways workload Running",
        )
        await svc.preempt_slice("phantom-gke-np-0", 2.0, "test")
        await until(lambda: events(seen, "worker_replaced"), 60, "the replacement noticed")
        ev = events(seen, "worker_replaced")[0]
        assert ev.host == "pw" and ev.data["restarts"] == 0 and ev.data["replaced"] >= 1
        assert "while the JobSet reports no restart (restarts still 0)" in ev.message
        w = next(w for w in svc.snapshot().workloads if w.name == "pw")
        assert w.restarts == 0 and w.template == "pathways"
        assert not events(seen, "jobset_restarted")


@pytest.mark.slow
async def test_a_quota_stall_is_reported_with_its_fix(
    gke: gke_client.GkeInfo, tmp_path: Path
) -> None:
    config = gke_config(gke.run_dir, pending_quota_s=2.0, recovery={"ready_timeout_s": 30})
    async with gke_services(config, tmp_path / "state") as (svc, seen):
        await svc.create_workload(spec(config, "starved", env={"STEPS": "2000"}), "test")
        await until(
            lambda: any(w.status == "RUNNING" for w in svc.snapshot().workloads), 30, "RUNNING"
        )
        gke_client.set_quota_stall(gke.run_dir, True)
        await svc.preempt_slice("0", 1.0, "test")
        await until(lambda: events(seen, "quota_pending"), 40, "the quota stall journaled")
        msg = events(seen, "quota_pending")[0].message
        assert "8 pod(s) Pending" in msg and "0/1 nodes are available" in msg
        assert "raise the TPU quota" in msg and "the console cannot fix this" in msg
        await until(lambda: events(seen, "recovery_failed"), 40, "the recovery giving up")
        failed = events(seen, "recovery_failed")[0]
        assert failed.data["step"] == "nodes" and "raise the TPU quota" in failed.message
        assert any("the console cannot fix this" in x for x in svc.snapshot().warnings)


@pytest.mark.slow
async def test_a_failed_jobset_is_resubmitted_and_resumes(
    gke: gke_client.GkeInfo, tmp_path: Path
) -> None:
    config = gke_config(gke.run_dir)
    async with gke_services(config, tmp_path / "state") as (svc, seen):
        await svc.create_workload(
            spec(config, "fragile", max_restarts=0, env={"STEPS": "40"}), "test"
        )
        await until(
            lambda: any(c.run_id == "fragile" and (c.last_step or 0) >= 12 for c in svc.cadence()),
            40,
            "steps past the first checkpoint",
        )
        await svc.preempt_slice("0", 0.0, "test")
        await until(lambda: events(seen, "jobset_failed"), 40, "ReachedMaxRestarts")
        assert events(seen, "jobset_failed")[0].data["reason"] == "ReachedMaxRestarts"
        await until(lambda: events(seen, "job_resubmitted"), 40, "the resubmission")
        assert events(seen, "job_resubmitted")[0].message == (
            "workload fragile failed, resubmitted under the same run name (resumes from its "
            "checkpoints)"
        )
        await until(
            lambda: any(w.status == "SUCCEEDED" for w in svc.snapshot().workloads), 60, "Completed"
        )
        logs = coordinator_logs(gke, "fragile")
        assert any("Restoring checkpoint from" in ln for ln in logs[-1])


async def test_a_follow_started_the_moment_create_returns_follows_the_workload(
    gke_module: gke_client.GkeInfo,
) -> None:
    # create_workload returned before the watch brought the JobSet: a follow started at once
    # found no workload in the caches, took it for one already gone and ended at once, LOST
    # (seed 004's follow failed so under load).
    config = gke_config(gke_module.run_dir)
    make_checkpoint(gke_module)
    async with gke_backend(gke_module, config) as (backend, _):
        await backend.create_workload(spec(config, "prompt", maxtext_ckpt_path=CKPT), "test")
        try:
            assert backend.caches is not None and backend.caches.jobsets.get("prompt") is not None
            assert (await backend.job_status("prompt")).status == "PENDING"
            stream = backend.follow_logs("prompt")
            try:
                first = await asyncio.wait_for(anext(stream), 60)
            finally:
                await stream.aclose()
            assert isinstance(first, LogLine), first
        finally:
            await backend.delete_workload("prompt")


async def test_bad_input_is_refused_by_name_and_creates_nothing(
    gke_module: gke_client.GkeInfo,
) -> None:
    config = gke_config(gke_module.run_dir)
    async with gke_backend(gke_module, config) as (backend, _):
        missing = spec(config, "no-ckpt", maxtext_ckpt_path="gs://phantom-bucket/absent/0/items")
        with pytest.raises(SpecError) as err:
            await backend.create_workload(missing, "test")
        assert (
            "gs://phantom-bucket/absent/0/items does not exist"
            in err.value.problems["maxtext_ckpt_path"]
        )
        inline = spec(config, "inline", env={"HF_READ": FAKE_TOKEN})
        with pytest.raises(SpecError) as err:
            await backend.create_workload(inline, "test")
        assert "do not inline a secret" in err.value.problems["env.HF_READ"]
        assert FAKE_TOKEN not in str(err.value)
        with pytest.raises(SpecError) as err:
            await backend.create_workload(spec(config, "img", image="gcr.io/p/Max Text"), "test")
        assert "image" in err.value.problems
        unset = spec(config, "unset-var", env={"WANDB_API_KEY": "$PHANTOM_TEST_UNSET"})
        with pytest.raises(SpecError) as err:
            await backend.create_workload(unset, "test")
        assert "$PHANTOM_TEST_UNSET is not set" in err.value.problems["env.WANDB_API_KEY"]

        class Unchecked(WorkloadSpec):
            """A value our validation would refuse, to show the API server's refusal is
            translated too (the dry run is the last net before anything is stored)."""

            def validate(self) -> dict[str, str]:
                return {}

        broken = Unchecked(**{**spec(config, "broken").__dict__, "termination_grace_s": -5})
        with pytest.raises(SpecError) as err:
            await backend.create_workload(broken, "test")
        assert any("terminationGracePeriodSeconds" in k for k in err.value.problems), (
            err.value.problems
        )
        api, _, _ = await backend._ensure()
        for name in ("no-ckpt", "inline", "img", "unset-var", "broken"):
            for kind in (Resource.JOBSETS, Resource.SECRETS):
                listed = await api.list(kind)
                assert name not in {
                    o["metadata"]["name"].removesuffix("-phantom-env") for o in listed.items
                }
        assert backend.registry.all() == []


async def test_provider_gke_has_no_tpu_vm_actions(
    gke_module: gke_client.GkeInfo, tmp_path: Path
) -> None:
    config = gke_config(gke_module.run_dir)
    async with gke_services(config, tmp_path / "state") as (svc, _):
        with pytest.raises(ValueError, match=r"\(gke\) has no TPU VMs or Ray"):
            await svc.ray_up("test")
        with pytest.raises(ValueError, match="runs workloads"):
            await svc.submit(SubmitSpec(), "test")
        snap = await svc.refresh()
        assert snap.provider == "gke" and len(snap.hosts) == 8
        assert {h.pool for h in snap.hosts} == {"phantom-gke-np-0"}
        assert snap.tpu_state == "READY" and snap.accelerator_type == "v5p-64 (2x4x4) x1"
        pv = svc.preview_workload(spec(config, "peek"))
        assert pv.command_line.startswith("xpk workload create")
        assert replace(pv, manifest={}).console_url.endswith("/peek/details?project=phantom-local")
