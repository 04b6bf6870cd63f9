"""The watch drill's W&B phase: seed 000's sweep on W&B with the real `phantom watch` alone.

After the Tune phase, on the same pod and under the same watcher (its config W&B online
against the local W&B emulator from the start, the key read by name from
``chaos_wandb.KEY_ENV``): a user's session submits the sweep with the W&B backend
(``chaos_wandb.sweep_spec``: no sweep id, the engine creates the sweep) and exits. The
watcher learns the sweep id from the job and keeps it in the journal's jobs table; the drill
waits for it there before the first kill. Then the phase's seeded kills
(``chaos_watch_plan.wandb_plan``): workers (one with a run training on it) and the head,
abrupt (a run trains in its agent's own process, which cannot honour a notice once its
raylet is gone: ``chaos_wandb``), some overlapped, the watcher SIGKILLed 1-6 s into a head's
recovery (the one that relaunches the agents) and started again; nothing else recovers.

Checked (each failure named, the drill exits 1): every recovery of a head kill owed the
sweep's job in the journal, whose jobs table holds its sweep id (what a restarted watcher
relaunches from); every relaunch carries that id; the sweep ended SUCCEEDED, FINISHED at its
run cap through ``wandb.Api()`` with every run finished and its final weights downloadable by
``latest`` and ``step-N`` (``chaos_wandb.check_sweep``); and from the trainers' own lines
(``chaos_logs``): no run restarted from step 0 after a checkpoint, no step lost past one.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from pathlib import Path
from typing import TYPE_CHECKING

from benchmarks import chaos_wandb as cw
from benchmarks.chaos_logs import TrainerLogs
from benchmarks.chaos_report import restarts_from_zero
from benchmarks.chaos_watch_plan import (
    HEAD,
    SLICE,
    WANDB,
    Kill,
    lost_past_checkpoint,
    wandb_plan,
)
from console.services.jobs.registry import JobRegistry, SubmittedJob
from console.services.model import TERMINAL_JOBS, EventKind, JobStatus
from console.services.record.journal import Journal

if TYPE_CHECKING:
    from benchmarks.chaos_watch import WatchDrill

TAIL_S = 0.25  # how often the trainers' log files are read
END_S = 60.0  # a sweep job ended other than SUCCEEDED, and no relaunch since: given up


class WandbPhase:
    """One W&B phase of a watch drill: its job, its sweep, its trainers' lines."""

    def __init__(self, drill: WatchDrill) -> None:
        assert drill.pod is not None
        self.drill = drill
        self.hosts = [h.name for h in drill.pod.hosts]
        sandboxes = {h.name: Path(h.sandbox) for h in drill.pod.hosts}
        self.logs = TrainerLogs(drill.work / "trainer-logs", sandboxes)
        self._lock = asyncio.Lock()
        self.job_id = ""
        self.sweep_id = ""
        self.first_kill = len(drill.kills)  # the phase's kills come after the Tune phase's

    @property
    def prefix(self) -> str:
        return f"{self.sweep_id}-"

    # -- the trainers' lines ---------------------------------------------------------------
    async def poll(self) -> None:
        async with self._lock:  # one reader at a time: file offsets are shared
            chunks = await asyncio.to_thread(self.logs.read_new)
            self.logs.ingest(chunks)

    async def tail(self) -> None:
        while True:
            try:
                await self.poll()
            except Exception as exc:  # keep reading: a missed poll only delays a line
                self.drill._say(f"reading the trainers' logs: {type(exc).__name__}: {exc}")
            await asyncio.sleep(TAIL_S)

    async def after_kill(self, kill: Kill) -> None:
        """The killed hosts' trainers ended (what they wrote before is read first)."""
        await self.poll()
        gone = time.time()
        for host in kill.hosts:
            self.logs.kill(host, gone)

    def busy_workers(self) -> list[int]:
        return [i for i, h in enumerate(self.hosts) if i and self.logs.running(self.prefix, h)]

    async def aim(self) -> list[int]:
        """The workers a run trains on (waited for: a kill elsewhere would hit no run)."""
        await self.drill.until(
            lambda: bool(self.busy_workers()), 600, "a W&B run's progress on a worker"
        )
        return self.busy_workers()

    async def ready(self) -> None:
        """A run trains again (its trainer spoke since the recovery ended)."""
        since = time.time()
        await self.drill.until(
            lambda: any(a.last_seen_at > since for a in self.logs.running(self.prefix)),
            600,
            "a W&B run's progress after the recovery",
        )

    # -- the journal -----------------------------------------------------------------------
    def chain(self) -> list[SubmittedJob]:
        """The sweep's job and each relaunch of it, oldest first (the journal's jobs table)."""
        with Journal(self.drill.journal_path) as j:
            registry = JobRegistry(j)
            out: list[SubmittedJob] = []
            job = registry.get(self.job_id)
            while job is not None and job.job_id not in {x.job_id for x in out}:
                out.append(job)
                job = registry.get(job.superseded_by) if job.superseded_by else None
        return out

    def learned(self) -> bool:
        chain = self.chain()
        self.sweep_id = chain[0].known_sweep_id if chain else ""
        return bool(self.sweep_id)

    def last_state(self) -> tuple[str, str]:
        """The newest job of the chain and its last state the watcher journaled."""
        last = self.chain()[-1].job_id
        rows = self.drill.rows(kinds=(EventKind.JOB_STATE,))
        states = [str(e.data.get("new_status")) for e in rows if e.data.get("job_id") == last]
        return last, states[-1] if states else ""

    async def job_end(self) -> tuple[str, str]:
        """The chain's end: its newest job SUCCEEDED, or ended otherwise with no relaunch
        (nor a recovery under way) for ``END_S``."""
        deadline = time.monotonic() + 1800
        seen: tuple[tuple[str, str], float] | None = None
        while True:
            self.drill.watcher_alive()
            last, state = await asyncio.to_thread(self.last_state)
            if state == JobStatus.SUCCEEDED:
                return last, state
            open_ = not await asyncio.to_thread(self.drill.settled, 0.0)
            if state in TERMINAL_JOBS and not open_:
                if seen is None or seen[0] != (last, state):
                    seen = ((last, state), time.monotonic())
                elif time.monotonic() - seen[1] > END_S:
                    return last, state
            else:
                seen = None
            if time.monotonic() > deadline:
                raise TimeoutError(f"W&B sweep job {last} did not end within 1800s ({state})")
            await asyncio.sleep(2.0)

    def owed_problems(self) -> tuple[int, list[str]]:
        """Each recovery of the phase owed the sweep's job in the journal (its sweep id in
        the jobs table); one that followed a head kill must have. (count owing, problems)"""
        kills = self.drill.kills
        ids = {j.job_id: j.known_sweep_id for j in self.chain()}
        problems: list[str] = []
        owing = 0
        with Journal(self.drill.journal_path) as j:
            for rec in j.recoveries():
                kill = next((k for k in reversed(kills) if k.at <= rec.started_at), None)
                if kill is None or kill.phase != WANDB:
                    continue
                owed = {job: sid for job, sid in j.owed(rec).items() if job in ids}
                owing += bool(owed)
                for job, sid in owed.items():
                    if ids[job] != self.sweep_id or sid != self.sweep_id:
                        problems.append(
                            f"the recovery of kill {kill.index} owed {job} with sweep id "
                            f"{sid!r} (the jobs table: {ids[job]!r}), not {self.sweep_id}"
                        )
                if not owed and kill.kind in (HEAD, SLICE):
                    problems.append(
                        f"the recovery of kill {kill.index} ({kill.kind}) owed no job of the "
                        f"sweep in the journal ({sorted(j.owed(rec))})"
                    )
        return owing, problems

    # -- the phase -------------------------------------------------------------------------
    async def run(self) -> None:
        drill, s = self.drill, self.drill.s
        assert drill.wandb is not None
        total = s.wandb_total()
        async with drill.session() as svc:
            spec = cw.sweep_spec(s.wandb_run_cap, total, s.wandb_interval)
            job = await svc.submit(spec, actor="chaos")
        self.job_id = job.job_id
        drill._say(f"W&B sweep submitted as {job.job_id} ({spec.sweep_args}); the session exits")
        await drill.until(self.learned, 300, "the W&B sweep id in the journal")
        drill._say(
            f"the watcher learned W&B sweep {self.sweep_id}: "
            f"{cw.sweep_url(drill.wandb.base_url, self.sweep_id)}"
        )
        # past a checkpoint: a run's resume from step 0 is then a failure
        await drill.until(
            lambda: any(a.saved for a in self.logs.running(self.prefix)),
            600,
            "a W&B run past its first checkpoint",
        )
        plan = wandb_plan(s.seed, s.wandb_kills, s.wandb_overlaps, s.wandb_watcher_kills)
        drill._say(
            "W&B phase plan: "
            + "; ".join(f"{k}{'+overlap' * o}{'+watcher' * w}" for k, o, w in plan)
        )
        await drill.drill(plan, WANDB, self.ready, self.aim)
        last, state = await self.job_end()
        self.check(last, state)
        problems, final = await cw.check_sweep(
            drill.wandb, self.sweep_id, drill.work, s.wandb_run_cap, total
        )
        drill.problems.extend(f"W&B phase: {p}" for p in problems)
        drill.wandb_figures["wandb_runs_final"] = final
        drill._say(f"W&B sweep {state}: {final}/{s.wandb_run_cap} runs finished")

    def check(self, last: str, state: str) -> None:
        drill, s = self.drill, self.drill.s
        problems: list[str] = []
        if state != JobStatus.SUCCEEDED:
            problems.append(f"the sweep's job {last} ended {state or 'unseen'}")
        chain = self.chain()
        for job in chain[1:]:
            if job.spec.sweep_id != self.sweep_id:
                problems.append(f"relaunched as {job.job_id} with sweep id {job.spec.sweep_id!r}")
        heads = [k for k in drill.kills[self.first_kill :] if k.kind in (HEAD, SLICE)]
        if heads and len(chain) < 2:
            problems.append(f"{len(heads)} head kills and the sweep's job was never relaunched")
        owing, owed = self.owed_problems()
        problems += owed
        runs = {r: a for r, a in self.logs.runs().items() if r.startswith(self.prefix)}
        restarts = restarts_from_zero(runs)
        lost = lost_past_checkpoint(
            [(a.start_step, a.saved or 0) for a in attempts] for attempts in runs.values()
        )
        problems += restarts
        if lost:
            problems.append(f"{lost} steps lost past a checkpoint")
        drill.problems.extend(f"W&B phase: {p}" for p in problems)
        drill.wandb_figures.update(
            {
                "wandb_sweep_id": self.sweep_id,
                "wandb_run_cap": s.wandb_run_cap,
                "wandb_runs_final": 0,
                "wandb_runs_restarted_from_zero": len(restarts),
                "wandb_steps_lost_past_checkpoint": lost,
                "wandb_trainer_attempts": sum(len(a) for a in runs.values()),
                "wandb_relaunches": len(chain) - 1,
                "wandb_owed_recoveries": owing,
            }
        )


async def wandb_phase(drill: WatchDrill) -> None:
    """The phase on ``drill``'s pod, under its watcher (see the module's docstring)."""
    phase = WandbPhase(drill)
    drill.wandb_figures.update({"wandb_run_cap": drill.s.wandb_run_cap, "wandb_runs_final": 0})
    tail = asyncio.create_task(phase.tail(), name="chaos-watch-wandb-tail")
    drill.after_kill = phase.after_kill
    try:
        await phase.run()
    finally:
        drill.after_kill = None
        tail.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await tail
