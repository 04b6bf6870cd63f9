"""Chaos drill: seeded preemptions of the head and of workers, with and without notice, during
a single training job and then during a Ray Tune sweep; the console's watchdog alone recovers.

    .venv/bin/python -m benchmarks.chaos [--seed 1] [--count 6] [--run-cap 6]
        [--notice-grace 30] [--poll 0.5] [--wandb-run-cap 0] [--keep]
    make chaos [CHAOS_SEED=1] [CHAOS_COUNT=6] [CHAOS_ARGS="--run-cap 4"]

Against the local pod emulator with real Ray (temp dir, free ports): the console's services
bring the pod up (bootstrap, Ray on every host, tunnel) with auto recovery on, then submit
``engine.train`` (a known checkpoint interval) and, once it is done, a Ray Tune sweep (run cap
``--run-cap``), both as a user would. During each, the preemptions ``chaos_report.plan``
drew for it: the emulator takes the head's or a worker's VM as a spot reclaim does, abruptly
(every process SIGKILLed) or with notice (metadata ``instance/preempted`` TRUE, SIGTERM, then
SIGKILL after ``--notice-grace``), at a drawn point of the victim trainer's checkpoint cycle.
Nothing recovers by hand: the drill only waits for the watchdog. With ``--wandb-run-cap N``,
then seed 000's sweep on W&B (``chaos_wandb``): a worker, then the head preempted.

Checks (each failure is named; exit 1): every preemption journaled (``preempted``, and
``preemption_notice`` with notice) and recovered (``recovered``, result ok); every trainer a
preemption interrupted resumed, losing at most one checkpoint interval, and with notice
resuming at exactly the step its notice checkpoint names; no run restarted from step 0 after
it had a checkpoint (trainer lines, and each trial's status file); every trial of the run
cap final at its total; the single job at exactly its ``--total-timesteps``; no process of
the drill (Ray, jobs, the emulator and its SSH servers) left running afterwards; and the
ledger against the drill's ground truth (``chaos_ledger``, as ``phantom report --format json
--logs --runs`` reads the drill's journal and the trainers' logs): each job's redone steps
within 2% of what the trainers' own lines say (SIGKILLed ones too), each incident's recovery seconds within 1 s of the
watchdog's MTTR, each job's causes summing to its wall time. The phases themselves (submit,
shots, the job's end) are ``chaos_phases``.

Figures (from what the trainers logged, see ``chaos_logs``; MTTR from the watchdog; the
ledger's figures beside the ground truth under ``"ledger"``): last line one JSON object,
before it the tables. Exit 0 all checks hold, 1 a check failed, 2 usage.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import logging
import os
import shutil
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from benchmarks import chaos_phases as phases
from benchmarks import chaos_wandb as cw
from benchmarks.chaos_ledger import JobTruth, LedgerCheck, read_ledger, read_trainers, watchdog_mttr
from benchmarks.chaos_ledger import check as check_ledger
from benchmarks.chaos_logs import Attempt, TrainerLogs
from benchmarks.chaos_report import (
    HEAD,
    JOB,
    SWEEP,
    Loss,
    Shot,
    ShotRecord,
    attribute,
    figures,
    plan,
    problems_of_losses,
    restarts_from_zero,
    table,
    target_step,
)
from benchmarks.pods import (
    PodInfo,
    daemon_pid,
    leftovers,
    pod_config,
    preempt_host,
    start_pod,
    stop_pod,
)
from console.services.facade import Facade
from console.services.model import TERMINAL_JOBS, JobStatus, RecoveryStatus, Update
from console.wiring import make_services

TAIL_S = 0.25  # how often the trainers' log files are read


class DrillAborted(Exception):
    """The drill cannot go on (a recovery that never ends, a job that never starts)."""


@dataclass(frozen=True)
class DrillSettings:
    seed: int = 1
    count: int = 6
    run_cap: int = 6
    notice_grace_s: float = 30.0
    poll_s: float = 0.5  # the watchdog's recovery.poll_interval_s
    job_interval: int = 2048  # the single job's --checkpoint-every
    # each trial's --checkpoint-every: several progress lines per interval (a trial logs
    # every rollout of up to 1024 steps), so a shot can land mid-interval
    trial_interval: int = 4096
    hosts: int = 4
    phases: tuple[str, ...] = (JOB, SWEEP)
    # > 0: then a sweep on W&B (``chaos_wandb``) of this run cap, a worker and the head shot
    wandb_run_cap: int = 0
    wandb_interval: int = 1024

    def shots(self) -> list[Shot]:
        extra = cw.wandb_shots(self.count + 1) if self.wandb_run_cap else []
        return (plan(self.seed, self.count) if self.count else []) + extra

    def wandb_total(self) -> int:
        return self.wandb_interval * 4

    def job_total(self) -> int:
        # long enough that every shot finds it running: a shot lands within two intervals
        # of the step its trainer resumed at, so k shots within 2k intervals; one more
        # interval of margin, no more: every step past the last shot is only waited for
        return self.job_interval * (2 * sum(s.phase == JOB for s in self.shots()) + 1)

    def trial_total(self) -> int:
        # As the job's. A trial on a host no shot took trains on through the others'
        # recoveries; measured, the last of three sweep shots found its trainer at 2.25-4.19
        # intervals (5 drills: its target is one interval past the step reached after the
        # previous recovery); at 9 intervals the sweep then trained 40-80 s (of a 270-430 s
        # drill) only to be waited for; at 7 the trials still had 2.8 intervals to go.
        return self.trial_interval * (2 * sum(s.phase == SWEEP for s in self.shots()) + 1)

    @property
    def job_run(self) -> str:
        return f"chaos-job-s{self.seed}"

    @property
    def sweep_id(self) -> str:
        return f"chaos-sweep-s{self.seed}"


@dataclass
class DrillResult:
    figures: dict[str, Any]
    table: str
    problems: list[str]
    notes: list[str] = field(default_factory=list)
    records: list[ShotRecord] = field(default_factory=list)
    losses: list[Loss] = field(default_factory=list)


class Drill:
    """One drill: its pod, the console's services over it, and what was seen."""

    def __init__(
        self, settings: DrillSettings, work: Path, say: Callable[[str], None] | None = None
    ) -> None:
        self.s = settings
        self.work = work
        self.shots = settings.shots()
        self.say = say or (lambda msg: None)
        self.t0 = time.monotonic()
        self.records: list[ShotRecord] = []
        self.recoveries: list[RecoveryStatus] = []
        self.problems: list[str] = []
        self.notes: list[str] = []  # worth knowing, not a failed check
        self.svc: Facade | None = None
        self.pod: PodInfo | None = None
        self.logs = TrainerLogs(work / "trainer-logs", {})
        self._poll_lock = asyncio.Lock()
        self._polled = asyncio.Event()
        self.job_final_step: int | None = None
        self.trials_final = 0
        self.wandb = cw.WandbServer(work / "wandb-emu") if settings.wandb_run_cap else None
        self.wandb_sweep_id = ""
        self.wandb_figures: dict[str, Any] = {}
        self.runs_dir = work / "engine-wandb"  # WANDB_DIR of the job and the sweep
        self.truths: list[JobTruth] = []  # each phase's job, for the ledger check
        self.config: Any = None

    # -- the whole drill ------------------------------------------------------------------
    async def run(self) -> DrillResult:
        run_dir = self.work / "pod"
        self._say(f"plan (seed {self.s.seed}): " + "; ".join(_describe(s) for s in self.shots))
        daemon: int | None = None
        try:
            self.pod = await start_pod(run_dir, hosts=self.s.hosts, ready_delay=0.2, timeout=180.0)
            daemon = daemon_pid(run_dir)
            if self.wandb is not None:
                self.wandb.start()
            self.logs.sandboxes = {h.name: Path(h.sandbox) for h in self.pod.hosts}
            self.config = self._config()
            self.svc = make_services(self.config, state_dir=self.work / "state")
            self.svc.subscribe(self._on_update)
            try:
                await self._phases()
            finally:
                try:
                    await self._journal_checks()
                finally:
                    await self.svc.stop()
                    self.svc.close_journal()
        finally:
            if self.wandb is not None:
                self.wandb.stop()
            await stop_pod(run_dir)  # every process of every host, and the emulator
        await self._nothing_left(run_dir, daemon)
        return self._result()

    async def _phases(self) -> None:
        assert self.svc is not None
        tail: asyncio.Task[None] | None = None
        try:
            await self.svc.start()
            await self._bring_up()
            tail = asyncio.create_task(self._tail(), name="chaos-tail")
            if JOB in self.s.phases:
                await phases.job_phase(self)
            if SWEEP in self.s.phases:
                await phases.sweep_phase(self)
            if self.wandb is not None:
                await cw.run_wandb_phase(self)
        except DrillAborted as exc:
            self.problems.append(f"aborted: {exc}")
        except Exception as exc:  # the drill's own failure: reported, still cleaned up
            self.problems.append(f"aborted: {type(exc).__name__}: {exc}")
        finally:
            if tail is not None:
                tail.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await tail

    def _config(self) -> Any:
        assert self.pod is not None
        return pod_config(
            self.pod,
            self.work,
            recovery={
                "poll_interval_s": self.s.poll_s,
                "ready_timeout_s": 180.0,
                "notice_grace_s": self.s.notice_grace_s,
            },
            wandb=None if self.wandb is None else self.wandb.config(),
            source="<chaos drill>",
        )

    def _say(self, msg: str) -> None:
        self.say(f"[chaos {time.monotonic() - self.t0:6.1f}s] {msg}")

    def _on_update(self, u: Update) -> None:
        if not isinstance(u, RecoveryStatus) or u.outcome is None:
            return
        if not self.recoveries or self.recoveries[-1].started_at != u.started_at:
            self.recoveries.append(u)

    async def _bring_up(self) -> None:
        assert self.svc is not None
        for step in (self.svc.bootstrap, self.svc.ray_up, self.svc.open_tunnel):
            res = await step(actor="chaos")
            if not res.ok:
                raise DrillAborted(f"bring-up: {res.action} failed: {res.message}")
        self._say("pod up: Ray on every host, tunnel open, watchdog on")

    async def _tail(self) -> None:
        while True:
            try:
                await self.poll_logs()
            except Exception as exc:  # keep reading: a missed poll only delays a line
                self._say(f"reading the trainers' logs: {type(exc).__name__}: {exc}")
            await asyncio.sleep(TAIL_S)

    async def poll_logs(self) -> None:
        async with self._poll_lock:  # one reader at a time: file offsets are shared
            chunks = await asyncio.to_thread(self.logs.read_new)
            self.logs.ingest(chunks)
        self._polled.set()

    async def _next_poll(self, timeout_s: float = 1.0) -> None:
        """Until the trainers' logs were read once more (or ``timeout_s``)."""
        self._polled.clear()
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(timeout_s):
                await self._polled.wait()

    # -- the phases (``chaos_phases``) --------------------------------------------------
    def _env(self) -> dict[str, Any]:
        # a trainer starting while its previous attempt writes a notice checkpoint waits
        # for it at most this long
        return {"env_vars": {"PHANTOM_NOTICE_GRACE_S": f"{self.s.notice_grace_s:g}"}}

    # -- one preemption -------------------------------------------------------------------
    def _running(self, prefix: str, host: str | None = None) -> list[Attempt]:
        """Trainers of ``prefix`` runs that are open and spoke lately (past their start)."""
        return self.logs.running(prefix, host)

    def _choose(self, shot: Shot, prefix: str) -> tuple[str, Attempt | None]:
        """The victim host, and the trainer whose progress times the shot."""
        assert self.pod is not None
        head = self.pod.hosts[0].name
        running = self._running(prefix)
        if shot.kind == HEAD:
            victim = head
        else:
            busy = sorted({a.host for a in running if a.host != head})
            candidates = busy or [h.name for h in self.pod.hosts[1:]]
            victim = candidates[min(int(shot.pick * len(candidates)), len(candidates) - 1)]
        on_victim = [a for a in running if a.host == victim]
        pool = on_victim or running
        return victim, (max(pool, key=lambda a: a.reached) if pool else None)

    async def _fire(self, shot: Shot, prefix: str, interval: int) -> None:
        assert self.pod is not None
        deadline = time.monotonic() + 300
        victim, ref = self._choose(shot, prefix)
        while time.monotonic() < deadline:
            victim, ref = self._choose(shot, prefix)
            if ref is None:
                await asyncio.sleep(0.5)
                continue
            # past the run's first checkpoint: a resume from step 0 would then be a failure
            target = target_step(max(ref.reached, interval), interval, shot.cycle)
            while ref.open and ref.reached < target and time.monotonic() < deadline:
                await self._next_poll()
            if ref.reached >= target:
                break
        rec = ShotRecord(shot=shot, host=victim, at=time.time())
        if ref is not None:
            rec.reference, rec.reference_step = f"{ref.run}@{ref.host}", ref.reached
        self.records.append(rec)
        n_before = len(self.recoveries)
        index = next(h.index for h in self.pod.hosts if h.name == victim)
        grace = self.s.notice_grace_s if shot.notice else 0.0
        asked_at = time.time()
        status = await preempt_host(self.pod.run_dir, index, notice_s=grace)
        rec.gone_at = time.time()
        if shot.notice:
            # The emulator's own stamp, when the status still has it. The watchdog may have
            # recreated the host (its jobs done with the notice) before the preempt call
            # returns, and a recreated VM has no notice: then the time it was asked for,
            # a few ms before the metadata turned (never after it).
            stamped = next((h.notice_at for h in status.hosts if h.name == victim), None)
            rec.notice_at = stamped if stamped is not None else asked_at
        await self.poll_logs()  # everything the victim's trainers wrote before they died
        rec.killed = [a.run for a in self.logs.kill(victim, rec.gone_at)]
        self._say(
            f"preemption {shot.index}/{len(self.shots)}: {_describe(shot)} -> {victim} "
            f"({rec.reference or 'no trainer'} at step {rec.reference_step}); "
            f"gone after {rec.gone_at - rec.at:.1f}s"
        )
        await self._recovered(rec, n_before)

    async def _recovered(self, rec: ShotRecord, n_before: int) -> None:
        """Wait for the watchdog's recovery of ``rec`` (never touching anything ourselves)."""
        deadline = time.monotonic() + 900
        while rec.recovery is None:
            for st in self.recoveries[n_before:]:
                if st.started_at is not None and st.started_at < rec.at:
                    continue  # began before this preemption: not its recovery
                if st.ok:
                    rec.recovery = st
                    break
                if all(f.started_at != st.started_at for f in rec.failed_recoveries):
                    rec.failed_recoveries.append(st)
                    self.problems.append(
                        f"preemption {rec.shot.index}: a recovery ended {st.result_text!r}"
                    )
            if time.monotonic() > deadline:
                raise DrillAborted(f"preemption {rec.shot.index}: no recovery within 900s")
            await asyncio.sleep(0.2)
        st = rec.recovery
        self._say(
            f"  recovered by the watchdog: MTTR {_round(st.mttr_s)}s, detect {_round(st.detect_s)}s"
        )

    async def _job_end(self, job_id: str) -> Any:
        """The job's last successor, once it has ended (or stays ended, not resubmitted)."""
        assert self.svc is not None
        deadline = time.monotonic() + 1800
        ended_since: float | None = None
        while True:
            latest = self.svc.successor(job_id)
            try:
                info = await self.svc.job_status(latest)
            except Exception as exc:  # the head is being replaced: ask again
                info = None
                self._say(f"  job status of {latest}: {exc}")
            if info is not None and info.status == JobStatus.SUCCEEDED:
                return info
            # ended, and no recovery on the way to resubmit it
            ended = info is not None and info.status in {*TERMINAL_JOBS, JobStatus.LOST}
            if ended and not self.svc.watchdog.running:
                ended_since = ended_since or time.monotonic()
                if time.monotonic() - ended_since > 60:
                    return info
            else:
                ended_since = None
            if time.monotonic() > deadline:
                raise DrillAborted(f"job {latest} did not end within 1800s")
            await asyncio.sleep(2.0)

    async def _until(self, check: Callable[[], bool], timeout_s: float, what: str) -> None:
        deadline = time.monotonic() + timeout_s
        while not check():
            if time.monotonic() > deadline:
                raise DrillAborted(f"no {what} within {timeout_s:.0f}s")
            await asyncio.sleep(0.5)

    # -- after ----------------------------------------------------------------------------
    async def _journal_checks(self) -> None:
        """Each preemption and each recovery is in the console's journal."""
        assert self.svc is not None
        kinds = ["preempted", "preemption_notice", "recovered"]
        events = await self.svc.events(limit=100_000, kinds=kinds)
        for i, rec in enumerate(self.records):
            end = self.records[i + 1].at if i + 1 < len(self.records) else float("inf")
            seen = {(e.kind, e.host) for e in events if rec.at <= e.at < end}
            # A notice is the preemption's own row, journaled while the VM still runs; the
            # VM's end ("preempted") is journaled only if a poll saw it PREEMPTED before the
            # recovery replaced it, which is not guaranteed: counted, not required.
            lost = "preemption_notice" if rec.shot.notice else "preempted"
            for kind, host in ((lost, rec.host), ("recovered", "")):
                if not any(k == kind and (not host or h == host) for k, h in seen):
                    self.problems.append(
                        f"journal: no {kind} event for preemption {rec.shot.index} "
                        f"({rec.shot.kind} {rec.host}, {rec.shot.mode})"
                    )
            if rec.shot.notice and ("preempted", rec.host) not in seen:
                self.notes.append(
                    f"journal: preemption {rec.shot.index} ({rec.shot.kind} {rec.host}) has "
                    "its preemption_notice row but no preempted row: the recovery replaced "
                    "the VM before a poll saw it PREEMPTED"
                )

    async def _nothing_left(self, run_dir: Path, daemon: int | None) -> None:
        for _ in range(60):  # the pod's processes may take a moment to be reaped
            left = leftovers(run_dir, daemon)
            if not left:
                break
            await asyncio.sleep(0.5)
        if left:
            self.problems.append(f"left running after the drill: {_cmdlines(left)}")

    def _result(self) -> DrillResult:
        s = self.s
        intervals = {f"{s.job_run}": s.job_interval, f"{s.sweep_id}-": s.trial_interval}
        if self.wandb_sweep_id:
            intervals[f"{self.wandb_sweep_id}-"] = s.wandb_interval
        losses, problems = attribute(self.records, self.logs, intervals)
        problems += problems_of_losses(self.records, losses)
        problems += restarts_from_zero(self.logs.runs())
        ledger = self._ledger_check(losses)
        if ledger is not None:
            problems += ledger.problems
            self.notes += ledger.notes
        problems = self.problems + problems
        figs = figures(
            self.records,
            losses,
            trials_final=self.trials_final,
            run_cap=s.run_cap,
            job_final_step=self.job_final_step,
            job_total=s.job_total(),
            intervals=intervals,
            problems=problems,
            wall_s=time.monotonic() - self.t0,
            seed=s.seed,
        )
        figs["notes"] = len(self.notes)
        if ledger is not None:
            figs["ledger"] = ledger.figures()
        figs.update(self.wandb_figures)
        if self.wandb_figures:
            figs.update(
                cw.wandb_figures(self.records, losses, self.logs.runs(), f"{self.wandb_sweep_id}-")
            )
        labels = {s.job_run: "job", f"{s.sweep_id}-": "trial "}
        text = table(figs, self.records, losses, labels)
        return DrillResult(
            figs,
            text if ledger is None else f"{text}\n\n{ledger.table()}",
            problems,
            self.notes,
            self.records,
            losses,
        )

    def _ledger_check(self, losses: Sequence[Loss]) -> LedgerCheck | None:
        """The ledger of the drill's journal against what the drill knows (``chaos_ledger``)."""
        if not self.truths or self.config is None:
            return None
        journal = self.work / "state" / "journal.sqlite"
        try:
            ledger = read_ledger(self.config, journal, self.runs_dir, self.logs.mirror, time.time())
            mttr = watchdog_mttr(journal)
            trainers = read_trainers(self.runs_dir)
        except Exception as exc:  # named, never a traceback instead of the drill's figures
            failed = LedgerCheck(self.truths)
            failed.problems.append(f"ledger: cannot read it: {type(exc).__name__}: {exc}")
            return failed
        return check_ledger(ledger, mttr, trainers, losses, self.truths)


def _round(value: float | None) -> float | None:
    return None if value is None else round(value, 2)


def _describe(shot: Shot) -> str:
    return f"#{shot.index} {shot.phase} {shot.kind} {shot.mode} @{shot.cycle:.2f}"


def _cmdlines(pids: Sequence[int]) -> str:
    out = []
    for pid in pids:
        try:
            argv = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode()
        except OSError:
            argv = "?"
        out.append(f"{pid} {argv[:120]}")
    return "; ".join(out)


async def run_drill(
    settings: DrillSettings, work: Path | None = None, say: Callable[[str], None] | None = None
) -> DrillResult:
    """Run one drill in ``work`` (a fresh temp dir, removed after, when None)."""
    own = work is None
    path = Path(tempfile.mkdtemp(prefix="phantom-chaos-")) if work is None else work
    path.mkdir(parents=True, exist_ok=True)
    try:
        return await Drill(settings, path, say).run()
    finally:
        if own:
            shutil.rmtree(path, ignore_errors=True)


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="benchmarks.chaos", description=__doc__.splitlines()[0])
    ap.add_argument("--seed", type=int, default=1, help="draws the plan (default 1)")
    ap.add_argument("--count", type=int, default=6, help="preemptions (default 6)")
    ap.add_argument("--run-cap", type=int, default=6, help="the sweep's run cap (default 6)")
    ap.add_argument("--notice-grace", type=float, default=30.0, help="notice, s (default 30)")
    ap.add_argument("--poll", type=float, default=0.5, help="recovery.poll_interval_s")
    ap.add_argument(
        "--wandb-run-cap",
        type=int,
        default=0,
        help="then a sweep on the W&B emulator of this run cap, a worker and the head "
        "preempted (benchmarks.chaos_wandb; default 0: none)",
    )
    ap.add_argument("--keep", action="store_true", help="keep the work dir (journal, logs)")
    args = ap.parse_args(argv)
    bad = [
        f"{flag} must be {rule}"
        for flag, ok, rule in (
            ("--count", args.count >= 1 or (args.count == 0 and args.wandb_run_cap), ">= 1"),
            ("--run-cap", args.run_cap >= 1, ">= 1"),
            ("--notice-grace", args.notice_grace > 0, "> 0"),
            ("--poll", args.poll > 0, "> 0"),
            ("--wandb-run-cap", args.wandb_run_cap >= 0, ">= 0"),
        )
        if not ok
    ]
    if bad:
        print(f"benchmarks.chaos: {'; '.join(bad)}", file=sys.stderr)
        return 2
    for name, value in (
        ("RAY_USAGE_STATS_ENABLED", "0"),
        ("WANDB_MODE", "offline"),
        ("WANDB_SILENT", "true"),
        ("NO_GCE_CHECK", "True"),
    ):
        os.environ.setdefault(name, value)
    settings = DrillSettings(
        seed=args.seed,
        count=args.count,
        run_cap=args.run_cap,
        notice_grace_s=args.notice_grace,
        poll_s=args.poll,
        wandb_run_cap=args.wandb_run_cap,
        phases=(JOB, SWEEP) if args.count else (),  # --count 0: the W&B phase alone
    )
    work = Path(tempfile.mkdtemp(prefix="phantom-chaos-")) if args.keep else None
    import ray  # noqa: F401  (its logger first, then quieter: job uploads log at INFO)

    logging.getLogger("ray").setLevel(logging.WARNING)

    def say(msg: str) -> None:
        print(msg, file=sys.stderr, flush=True)

    result = asyncio.run(run_drill(settings, work, say))
    for note in result.notes:
        print(f"note: {note}", file=sys.stderr)
    for problem in result.problems:
        print(f"FAILED: {problem}", file=sys.stderr)
    if work is not None:
        print(f"kept {work} (journal: {work / 'state' / 'journal.sqlite'})", file=sys.stderr)
    print(result.table)
    print(json.dumps(result.figures))
    return 1 if result.problems else 0


if __name__ == "__main__":
    raise SystemExit(main())
