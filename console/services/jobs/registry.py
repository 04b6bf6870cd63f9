"""What this console submitted, and the one way it submits: through the backend, recorded.

``JobRegistry`` keeps every submission's spec in the journal (a ``SubmissionRegistry`` over
table ``jobs``, plus which job replaced which and the sweep id once known), so a job lost with
a preempted head is resubmitted with the same spec (sweeps with the same sweep id) even after
a console restart.
``Submitter`` is used by the facade (a user's or a script's submit) and by the recovery's
resubmit step alike: submit through the backend, remember, journal, publish.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import json
import logging
import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

from console.services.jobs.spec import META_SWEEP_ID, SubmitSpec, new_job_id
from console.services.jobs.submissions import SubmissionRegistry, Table
from console.services.model import (
    ACTIVE_JOBS,
    ActionResult,
    HostResult,
    JobInfo,
    SubmissionState,
    Update,
)
from console.services.record.journal import Journal
from console.services.record.sink import EventSink
from engine.contract import SWEEP_ID_RE

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class SubmittedJob:
    job_id: str
    spec: SubmitSpec
    submitted_at: float
    actor: str = ""
    resubmitted_from: str = ""
    superseded_by: str = ""
    sweep_id: str = ""  # learned from the job (metadata or its log) when the spec had none
    state: SubmissionState = SubmissionState.SUBMITTED

    def __post_init__(self) -> None:
        if not isinstance(self.state, SubmissionState):  # read back from the database
            object.__setattr__(self, "state", SubmissionState(self.state))

    @property
    def known_sweep_id(self) -> str:
        """A sweep's id: its spec's, else the one learned from the job ("" when neither)."""
        return (self.spec.sweep_id or self.sweep_id) if self.spec.mode == "sweep" else ""

    def relaunch_spec(self) -> SubmitSpec:
        """The spec to submit again: same everything, the sweep id pinned, a fresh job id."""
        spec = dataclasses.replace(self.spec, submission_id="")
        if self.known_sweep_id:
            spec = spec.with_sweep_id(self.known_sweep_id)
        return spec


def _spec(data: dict[str, Any]) -> SubmitSpec:
    known = {f.name for f in dataclasses.fields(SubmitSpec)}
    return SubmitSpec(**{k: v for k, v in data.items() if k in known})


def _row(job: SubmittedJob) -> tuple[Any, ...]:
    spec = dataclasses.asdict(job.spec)
    spec["runtime_env"] = dict(job.spec.runtime_env)
    return (
        job.job_id,
        json.dumps(spec, default=str),
        float(job.submitted_at),
        job.actor,
        job.resubmitted_from,
        job.superseded_by,
        job.sweep_id,
        str(job.state),
    )


def _job(data: dict[str, Any]) -> SubmittedJob:
    return SubmittedJob(**{**data, "spec": _spec(json.loads(data["spec"]))})


JOBS: Table[SubmittedJob] = Table(
    name="jobs",
    columns=(
        "job_id",
        "spec",
        "submitted_at",
        "actor",
        "resubmitted_from",
        "superseded_by",
        "sweep_id",
        "state",
    ),
    to_row=_row,
    from_row=_job,
)


class JobRegistry(SubmissionRegistry[SubmittedJob]):
    """Submitted Ray jobs and their specs (table ``jobs``): the submission registry plus
    which job replaced which. A ``jobs.json`` from an older phantom is imported once."""

    def __init__(self, journal: Journal, legacy_json: Path | None = None) -> None:
        super().__init__(journal, JOBS)
        if legacy_json is not None and legacy_json.exists():
            self._import_legacy(legacy_json)

    def add(self, job: SubmittedJob) -> None:
        """Record ``job``; a resubmission also marks the job it replaces, atomically."""
        with self.journal.transaction() as db:
            self._insert(db, job, replace=True)
            if job.resubmitted_from:
                db.execute(
                    "UPDATE jobs SET superseded_by = ? WHERE job_id = ?",
                    (job.job_id, job.resubmitted_from),
                )

    def remove(self, job_id: str) -> None:
        with self.journal.transaction() as db:
            db.execute("DELETE FROM jobs WHERE job_id = ?", (job_id,))
            db.execute("UPDATE jobs SET superseded_by = '' WHERE superseded_by = ?", (job_id,))

    def current(self) -> list[SubmittedJob]:
        """Jobs not replaced by a resubmission, oldest first."""
        return [j for j in self.all() if not j.superseded_by]

    def _import_legacy(self, path: Path) -> None:
        try:
            raw = json.loads(path.read_text(encoding="utf-8"))
            rows = list(raw.get("jobs", []))
        except (OSError, ValueError, AttributeError) as exc:
            log.warning("job registry %s unreadable (%s); not imported", path, exc)
            return
        for row in rows:
            try:
                job = SubmittedJob(
                    job_id=str(row["job_id"]),
                    spec=_spec(row["spec"]),
                    submitted_at=float(row.get("submitted_at", 0.0)),
                    actor=str(row.get("actor", "")),
                    resubmitted_from=str(row.get("resubmitted_from", "")),
                    superseded_by=str(row.get("superseded_by", "")),
                    sweep_id=str(row.get("sweep_id", "")),
                )
            except (KeyError, TypeError, ValueError) as exc:
                log.warning("job registry %s: skipping a bad row (%s)", path, exc)
                continue
            if job.job_id not in self:
                with self.journal.transaction() as db:
                    self._insert(db, job, replace=False)
        path.replace(path.with_name(path.name + ".imported"))


# The spec with the checkpoint advice of the moment in its env (``ledger.live``).
Advise = Callable[[SubmitSpec], Awaitable[SubmitSpec]]


class JobsApi(Protocol):
    """The part of ``backends.base.Backend`` a submitter uses (declared here, below the
    backends: the facade hands its backend in)."""

    async def submit(self, spec: SubmitSpec) -> JobInfo: ...

    async def job_status(self, job_id: str) -> JobInfo: ...

    async def job_logs(self, job_id: str) -> str: ...


class Submitter:
    def __init__(
        self,
        backend: JobsApi,
        registry: JobRegistry,
        sink: EventSink,
        publish: Callable[[Update], None],
        *,
        clock: Callable[[], float] = time.time,
        poll_budget_s: float = 10.0,
        advise: Advise | None = None,
    ) -> None:
        self.backend = backend
        self.registry = registry
        self._sink = sink
        self._publish = publish
        self._clock = clock
        self.poll_budget_s = poll_budget_s
        # The checkpoint advice of each job it submits (``ledger.live``), when one is wired.
        self.advise = advise

    async def submit(self, spec: SubmitSpec, actor: str, resubmitted_from: str = "") -> JobInfo:
        """Submit through the backend; the registry, the journal and the bus hear of it.

        The job's id is chosen and recorded (pending) before the cluster is asked, so a
        console killed in between neither loses the job nor submits it twice: the next
        attempt sends the same id, and a cluster that already has it is taken at its word.
        """
        t0 = time.monotonic()
        if not spec.submission_id:
            spec = dataclasses.replace(spec, submission_id=new_job_id(spec.mode, self._clock()))
        if self.advise is not None:
            try:
                spec = await self.advise(spec)
            except Exception as exc:  # advice, never a reason not to submit
                log.warning("job %s: no checkpoint advice: %s", spec.submission_id, exc)
        self.registry.add(
            SubmittedJob(
                job_id=spec.submission_id,
                spec=spec,
                submitted_at=self._clock(),
                actor=actor,
                resubmitted_from=resubmitted_from,
                sweep_id=spec.sweep_id,
                state=SubmissionState.PENDING,
            )
        )
        try:
            info = await self._send(spec)
        except Exception as exc:
            if not resubmitted_from:  # nothing reached the cluster: forget it
                self.registry.remove(spec.submission_id)
            await self._sink.record(
                ActionResult(
                    action="submit",
                    ok=False,
                    elapsed_s=time.monotonic() - t0,
                    message=f"submit failed: {exc}",
                    data={"entrypoint": spec.entrypoint(), "mode": spec.mode},
                ),
                actor,
            )
            raise
        await self._recorded(info, spec, actor, resubmitted_from, time.monotonic() - t0)
        return info

    async def _send(self, spec: SubmitSpec) -> JobInfo:
        """Ask the cluster; a job it already has under this id (an earlier attempt that
        got through) counts as submitted."""
        try:
            info = await self.backend.submit(spec)
        except Exception:
            there = await self._on_cluster(spec.submission_id)
            if there is None:
                raise
            log.info("job %s was already on the cluster: adopted", spec.submission_id)
            info = there
        self.registry.mark(info.job_id, SubmissionState.SUBMITTED)
        return info

    async def _on_cluster(self, job_id: str) -> JobInfo | None:
        try:
            return await self.backend.job_status(job_id)
        except Exception:
            return None

    async def _recorded(
        self, info: JobInfo, spec: SubmitSpec, actor: str, resubmitted_from: str, elapsed: float
    ) -> None:
        data: dict[str, Any] = {
            "job_id": info.job_id,
            "mode": spec.mode,
            "entrypoint": spec.entrypoint(),
        }
        if resubmitted_from:
            data["resubmitted_from"] = resubmitted_from
        if spec.sweep_id:
            data["sweep_id"] = spec.sweep_id
        what = f"resubmitted {resubmitted_from} as" if resubmitted_from else "submitted"
        await self._sink.record(
            ActionResult(
                action="submit",
                ok=True,
                elapsed_s=elapsed,
                message=f"{what} job {info.job_id}: {spec.entrypoint()}",
                data=data,
            ),
            actor,
        )
        self._publish(info)

    async def resubmit(self, job_ids: Sequence[str]) -> ActionResult:
        """The recovery's step: submit each lost job again with its recorded spec.

        Idempotent, also across a console killed mid-way: a job already replaced is not
        submitted twice; a replacement recorded but not yet accepted is sent again under the
        same id."""
        t0 = time.monotonic()
        per_job: dict[str, HostResult] = {}
        mapping: dict[str, str] = {}
        for old in job_ids:
            sub = self.registry.get(old)
            if sub is None:
                per_job[old] = HostResult(
                    host=old, ok=False, error=f"job {old}: no spec recorded, cannot resubmit"
                )
                continue
            try:
                new = await self._replacement(sub)
            except Exception as exc:
                per_job[old] = HostResult(host=old, ok=False, error=f"job {old}: {exc}")
                continue
            mapping[old] = new
            per_job[old] = HostResult(host=old, ok=True, stdout_tail=new)
        ok = bool(per_job) and all(r.ok for r in per_job.values())
        return ActionResult(
            action="resubmit",
            ok=ok,
            elapsed_s=time.monotonic() - t0,
            per_host=per_job,
            message=", ".join(f"{o} -> {n}" for o, n in mapping.items())
            or f"resubmit: {sum(r.ok for r in per_job.values())}/{len(per_job)} jobs ok",
            data={"resubmitted": mapping},
        )

    async def _replacement(self, sub: SubmittedJob) -> str:
        """The job carrying ``sub`` on now: the newest of its resubmission chain when that
        one is still on the cluster, else a new submission of it. A recovery runs this only
        when the head was lost, so a replacement the head no longer knows went down with an
        earlier head (a head lost again, or a watcher killed after resubmitting, whose
        successor rebuilt the head): it is submitted again, never taken as done."""
        first = sub
        seen = {sub.job_id}
        while sub.superseded_by and sub.superseded_by not in seen:
            new = self.registry.get(sub.superseded_by)
            if new is None:
                return sub.superseded_by
            if new.state != SubmissionState.SUBMITTED:
                info = await self._send(new.spec)  # recorded, never confirmed: same id again
                await self._recorded(info, new.spec, "watchdog", sub.job_id, 0.0)
                return info.job_id
            seen.add(new.job_id)
            sub = new
        if sub is not first and await self._on_cluster(sub.job_id) is not None:
            return sub.job_id  # sent to this head already (an earlier attempt of this step)
        info = await self.submit(sub.relaunch_spec(), "watchdog", resubmitted_from=sub.job_id)
        return info.job_id

    async def learn_sweep_id(self, job: JobInfo) -> None:
        """A sweep submitted without an id gets one from the engine: remember it, so a
        relaunch resumes the same sweep."""
        sub = self.registry.get(job.job_id)
        if sub is None or sub.spec.mode != "sweep" or sub.known_sweep_id:
            return
        sweep_id = job.metadata.get(META_SWEEP_ID, "")
        if not sweep_id and job.status in ACTIVE_JOBS:
            with contextlib.suppress(Exception):
                async with asyncio.timeout(self.poll_budget_s):
                    m = SWEEP_ID_RE.search(await self.backend.job_logs(job.job_id))
                sweep_id = m.group(1) if m else ""
        if sweep_id:
            self.registry.update(job.job_id, sweep_id=sweep_id)
