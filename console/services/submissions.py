"""What this console submitted, and the one way it submits: through the backend, recorded.

``JobRegistry`` keeps every submission's spec in ``<state dir>/jobs.json`` (which job
replaced which, the sweep id once known), so a job lost with a preempted head is resubmitted
with the same spec (sweeps with the same sweep id) even after a console restart.
``Submitter`` is used by the facade (a user's or a script's submit) and by the recovery's
resubmit step alike: submit through the backend, remember, journal, publish.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import json
import logging
import re
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from console.services.backends.base import Backend
from console.services.events import EventSink
from console.services.model import ACTIVE_JOBS, ActionResult, HostResult, JobInfo, Update
from console.services.submit import META_SWEEP_ID, SubmitSpec

log = logging.getLogger(__name__)

# The engine's own lines naming its sweep (engine.sweep and the W&B agent launcher).
_SWEEP_ID_RE = re.compile(r"(?:W&B sweep|starting sweep|resuming sweep) ([A-Za-z0-9_.-]+)")


@dataclass(frozen=True)
class SubmittedJob:
    job_id: str
    spec: SubmitSpec
    submitted_at: float
    actor: str = ""
    resubmitted_from: str = ""
    superseded_by: str = ""
    sweep_id: str = ""  # learned from the job (metadata or its log) when the spec had none

    def relaunch_spec(self) -> SubmitSpec:
        """The spec to submit again: same everything, the sweep id pinned, a fresh job id."""
        spec = dataclasses.replace(self.spec, submission_id="")
        sweep_id = self.spec.sweep_id or self.sweep_id
        if spec.mode == "sweep" and sweep_id:
            spec = spec.with_sweep_id(sweep_id)
        return spec


class JobRegistry:
    """Submitted jobs and their specs, persisted as JSON (atomic replace) in the state dir.

    Specs keep secrets as ``$NAME`` references (``SubmitSpec`` refuses inline secrets), so
    the file never holds a key.
    """

    def __init__(self, path: Path) -> None:
        self.path = path
        self._jobs: dict[str, SubmittedJob] = {}
        self._load()

    def _load(self) -> None:
        try:
            raw = json.loads(self.path.read_text(encoding="utf-8"))
        except FileNotFoundError:
            return
        except (OSError, ValueError) as exc:
            log.warning("job registry %s unreadable (%s); starting empty", self.path, exc)
            return
        known = {f.name for f in dataclasses.fields(SubmitSpec)}
        for row in raw.get("jobs", []):
            try:
                spec = SubmitSpec(**{k: v for k, v in row["spec"].items() if k in known})
                job = SubmittedJob(
                    job_id=str(row["job_id"]),
                    spec=spec,
                    submitted_at=float(row.get("submitted_at", 0.0)),
                    actor=str(row.get("actor", "")),
                    resubmitted_from=str(row.get("resubmitted_from", "")),
                    superseded_by=str(row.get("superseded_by", "")),
                    sweep_id=str(row.get("sweep_id", "")),
                )
            except (KeyError, TypeError, ValueError) as exc:
                log.warning("job registry %s: skipping a bad row (%s)", self.path, exc)
                continue
            self._jobs[job.job_id] = job

    def _save(self) -> None:
        rows = []
        for job in self._jobs.values():
            row = dataclasses.asdict(job)
            row["spec"] = dataclasses.asdict(job.spec)
            row["spec"]["runtime_env"] = dict(job.spec.runtime_env)
            rows.append(row)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        tmp = self.path.with_suffix(".tmp")
        tmp.write_text(json.dumps({"jobs": rows}, indent=1, default=str), encoding="utf-8")
        tmp.replace(self.path)

    def add(self, job: SubmittedJob) -> None:
        self._jobs[job.job_id] = job
        if job.resubmitted_from in self._jobs:
            old = self._jobs[job.resubmitted_from]
            self._jobs[old.job_id] = dataclasses.replace(old, superseded_by=job.job_id)
        self._save()

    def update(self, job_id: str, **changes: Any) -> None:
        if job_id in self._jobs:
            self._jobs[job_id] = dataclasses.replace(self._jobs[job_id], **changes)
            self._save()

    def get(self, job_id: str) -> SubmittedJob | None:
        return self._jobs.get(job_id)

    def __contains__(self, job_id: object) -> bool:
        return job_id in self._jobs

    def current(self) -> list[SubmittedJob]:
        """Jobs not replaced by a resubmission, oldest first."""
        jobs = [j for j in self._jobs.values() if not j.superseded_by]
        return sorted(jobs, key=lambda j: j.submitted_at)

    def all(self) -> list[SubmittedJob]:
        return sorted(self._jobs.values(), key=lambda j: j.submitted_at)


class Submitter:
    def __init__(
        self,
        backend: Backend,
        registry: JobRegistry,
        sink: EventSink,
        publish: Callable[[Update], None],
        *,
        clock: Callable[[], float] = time.time,
        poll_budget_s: float = 10.0,
    ) -> None:
        self.backend = backend
        self.registry = registry
        self._sink = sink
        self._publish = publish
        self._clock = clock
        self.poll_budget_s = poll_budget_s

    async def submit(self, spec: SubmitSpec, actor: str, resubmitted_from: str = "") -> JobInfo:
        """Submit through the backend; the registry, the journal and the bus hear of it."""
        t0 = time.monotonic()
        try:
            info = await self.backend.submit(spec)
        except Exception as exc:
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
        self.registry.add(
            SubmittedJob(
                job_id=info.job_id,
                spec=spec,
                submitted_at=self._clock(),
                actor=actor,
                resubmitted_from=resubmitted_from,
                sweep_id=spec.sweep_id,
            )
        )
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
                elapsed_s=time.monotonic() - t0,
                message=f"{what} job {info.job_id}: {spec.entrypoint()}",
                data=data,
            ),
            actor,
        )
        self._publish(info)
        return info

    async def resubmit(self, job_ids: Sequence[str]) -> ActionResult:
        """The recovery's step: submit each lost job again with its recorded spec.

        Idempotent: a job an earlier attempt already replaced is not submitted twice."""
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
            if sub.superseded_by:
                mapping[old] = sub.superseded_by
                per_job[old] = HostResult(host=old, ok=True, stdout_tail=sub.superseded_by)
                continue
            try:
                info = await self.submit(sub.relaunch_spec(), "watchdog", resubmitted_from=old)
            except Exception as exc:
                per_job[old] = HostResult(host=old, ok=False, error=f"job {old}: {exc}")
                continue
            mapping[old] = info.job_id
            per_job[old] = HostResult(host=old, ok=True, stdout_tail=info.job_id)
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

    async def learn_sweep_id(self, job: JobInfo) -> None:
        """A sweep submitted without an id gets one from the engine: remember it, so a
        relaunch resumes the same sweep."""
        sub = self.registry.get(job.job_id)
        if sub is None or sub.spec.mode != "sweep" or sub.spec.sweep_id or sub.sweep_id:
            return
        sweep_id = job.metadata.get(META_SWEEP_ID, "")
        if not sweep_id and job.status in ACTIVE_JOBS:
            with contextlib.suppress(Exception):
                async with asyncio.timeout(self.poll_budget_s):
                    m = _SWEEP_ID_RE.search(await self.backend.job_logs(job.job_id))
                sweep_id = m.group(1) if m else ""
        if sweep_id:
            self.registry.update(job.job_id, sweep_id=sweep_id)
