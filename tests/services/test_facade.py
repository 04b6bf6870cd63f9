"""The facade's ``Observer``: the backend's observation plus what only the console knows."""

from __future__ import annotations

from typing import cast

from console.services.backends.base import Backend
from console.services.facade import Observer
from console.services.jobs.registry import JobRegistry, SubmittedJob
from console.services.jobs.spec import SubmitSpec
from console.services.model import JobInfo, JobStatus
from console.services.observation import Observation
from console.services.record.journal import Journal


class _Cluster:
    """What the cluster reports: Ray's jobs, whose metadata has no W&B sweep id (the engine
    creates a W&B sweep after the job was submitted)."""

    def __init__(self, jobs: tuple[JobInfo, ...]) -> None:
        self.jobs = jobs

    async def observe(self) -> Observation:
        return Observation(at=1.0, hosts=(), head="w0", ray_reachable=True, jobs=self.jobs)


async def test_a_sweeps_job_carries_its_learned_sweep_id_so_a_recovery_owes_it() -> None:
    """Issue 45: what a recovery owes (job id -> sweep id, journaled before it acts) named no
    sweep: the watchdog's jobs came from Ray as they were, without the id the console learned
    from a W&B sweep's job (or had in a Tune sweep's spec)."""
    registry = JobRegistry(Journal(":memory:"))
    wandb = SubmitSpec(mode="sweep", sweep_backend="wandb", submission_id="wb")
    tune = SubmitSpec(mode="sweep", sweep_id="tune-1", submission_id="tu")
    plain = SubmitSpec(mode="single", submission_id="one")
    for spec in (wandb, tune, plain):
        registry.add(SubmittedJob(job_id=spec.submission_id, spec=spec, submitted_at=0.0))
    registry.update("wb", sweep_id="abc123")  # learned from the job's log
    jobs = tuple(JobInfo(job_id=j, status=JobStatus.RUNNING) for j in ("wb", "tu", "one"))
    obs = await Observer(cast(Backend, _Cluster(jobs)), registry).observe()
    assert {j.job_id: j.sweep_id for j in obs.jobs} == {"wb": "abc123", "tu": "tune-1", "one": ""}
