"""The stockout drill (issue 16), through the console on the GCP-faithful emulator.

A training job checkpoints into the bucket; the whole slice is preempted and its zone has no
capacity, nor has the next one. With the default ``eager-failover`` the watchdog deletes the
preempted node, tries the next zone (a stockout, journaled), creates the slice in the third, trusts the new VMs' keys, bootstraps them, forms Ray on
their new addresses, re-opens the tunnel and resubmits the job, which resumes from its
checkpoint and ends at exactly its total. Every try is journaled with its reason, and a
watcher lists every zone throughout: never two nodes for the pod.
"""

from __future__ import annotations

import asyncio
import contextlib
import re
from pathlib import Path

import pytest

from benchmarks.pods import gcp_config, gcp_user_key
from console.services.backends.tpu_vm.backend import TpuVmBackend
from console.services.backends.tpu_vm.tpu import local_client
from console.services.jobs.spec import SubmitSpec
from console.services.model import RecoveryStatus
from console.wiring import make_services
from emulators.tpu_pod import client as pod_client
from tests.support.emulator_helpers import running_pod
from tests.support.waiting import until
from tests.test_gcp_e2e import Recorder, job_in, project

# The slice is preempted within a second or two of the first checkpoint (5000): the job still
# has most of its steps to go (20,000: ~7 s of PPO here, 55,000 took ~20 s; the preemption
# needs a second), and the resumed job trains only those.
TOTAL = 25_000
TRAIN = (
    f"--algo ppo --total-timesteps {TOTAL} --checkpoint-every 5000 --device cpu "
    "--eval-episodes 1 --run-name capdrill"
)


@pytest.mark.slow
@pytest.mark.e2e
@pytest.mark.timeout(1200)
async def test_stockout_drill_eager_failover_resumes_in_the_next_zone(tmp_path: Path) -> None:
    key = gcp_user_key(tmp_path / "google_compute_engine")
    # two hosts: a head and a worker show Ray re-formed on new addresses as four would, at
    # half the bootstrap and raylets on CI's two cores
    with running_pod(
        tmp_path / "pod", hosts=2, faithful=True, ssh_user="alice", ssh_key=key
    ) as pod:
        cfg = gcp_config(
            pod,
            tmp_path,
            ray={"num_cpus": 2, "object_store_mb": 100},
            recovery={"poll_interval_s": 1.0},
            extra={
                "bootstrap": {"command": 'python -c "import ray"'},
                "storage": {"uri": pod.bucket_uri},
                "capacity": {"zones": ["local-a", "local-b", "local-c"], "backoff_s": 2.0},
            },
        )
        svc = make_services(cfg, state_dir=tmp_path / "state", working_dir=project(tmp_path))
        assert isinstance(svc.backend, TpuVmBackend)
        rec = Recorder()
        svc.subscribe(rec)
        api = local_client(pod.tpu_api)
        counts: list[int] = []

        async def never_two() -> None:
            while True:
                pager = await api.list_nodes(parent=f"projects/{pod.project}/locations/-")
                mine = [n.name async for n in pager if n.name.endswith("/nodes/phantom-pod")]
                assert len(mine) <= 1, f"two nodes for one pod: {mine}"
                counts.append(len(mine))
                await asyncio.sleep(0.2)  # sleep-noqa: a sampler of an invariant

        watcher: asyncio.Task[None] | None = None
        try:
            await svc.start()
            for step in (svc.bootstrap, svc.ray_up, svc.open_tunnel):
                res = await step()
                assert res.ok, res.message
            watcher = asyncio.create_task(never_two())
            job = await svc.submit(SubmitSpec(train_args=TRAIN))

            async def checkpointed() -> bool:
                logs = await svc.job_logs(job.job_id)
                status = (await svc.job_status(job.job_id)).status
                assert status in ("PENDING", "RUNNING"), f"{status}: {logs[-3000:]}"
                return "checkpoint step=" in logs

            await until(checkpointed, 300, "the job's first checkpoint")
            for zone in ("local-a", "local-b"):  # three minutes without capacity
                await asyncio.to_thread(pod_client.set_zone, pod.run_dir, zone, None, 180.0)
            await asyncio.to_thread(pod_client.preempt, pod.run_dir, "all")

            await until(lambda: bool(rec.recoveries()), 600, "the watchdog's recovery")
            done = rec.recoveries()[0]
            steps = {s.name: (s.state, s.message) for s in done.steps}
            assert done.ok, steps

            # The slice came back in local-c, on its own addresses and keys.
            moved = await asyncio.to_thread(pod_client.pod_status, pod.run_dir)
            assert moved is not None and moved.zone == "local-c"
            parts = svc.backend.parts
            assert [ep.ip for ep in parts.endpoints] == [h.ip for h in moved.hosts]
            assert {ep.ip for ep in parts.endpoints}.isdisjoint(h.ip for h in pod.hosts)
            tried = [e.data for e in rec.events("capacity")]
            assert [(t["zone"], t["ok"]) for t in tried] == [("local-b", False), ("local-c", True)]
            assert "no more capacity in the zone" in tried[0]["reason"]
            shown = {  # what the recovery screen showed on the recreate step meanwhile
                step.message
                for u in rec.updates
                if isinstance(u, RecoveryStatus)
                for step in u.steps
                if step.name == "recreate"
            }
            assert any(m.startswith("no capacity in local-b (attempt 1") for m in shown), shown
            rows = [e for e in await svc.events(limit=2000) if e.kind == "capacity"]
            assert [r.data["zone"] for r in rows] == ["local-b", "local-c"]  # journaled

            # The job resumed from its checkpoint and ended at exactly its total.
            (resub,) = rec.events("job_resubmitted")
            new_id = resub.data["new_job_id"]
            await until(lambda: job_in(svc, new_id, {"SUCCEEDED", "FAILED"}), 600, "the job")
            logs = await svc.job_logs(new_id)
            assert (await svc.job_status(new_id)).status == "SUCCEEDED", logs[-3000:]
            resumed = re.search(r"resuming capdrill from checkpoint \S+ at step (\d+)", logs)
            assert resumed and int(resumed.group(1)) > 0, logs[-3000:]
            assert f"step={TOTAL}" in logs
            assert counts and max(counts) == 1
        finally:
            if watcher is not None:
                watcher.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await watcher
            await api.transport.close()
            await svc.stop()
            svc.close_journal()
