"""GKE chaos drill: seeded slice preemptions (with and without the pods' termination grace),
node failures and container crashes during a GRPO workload; the console's watchdog alone
recovers.

    .venv/bin/python -m benchmarks.chaos_gke [--seed 1] [--count 6] [--period 10]
        [--step-time 0.25] [--grace 30] [--poll 0.5] [--keep]
    make chaos-gke [CHAOS_SEED=1] [CHAOS_COUNT=6] [CHAOS_GKE_ARGS="--period 5"]

The GKE emulator (a temp run dir, one v5p-64 spot slice) and the console's services over it
(``wiring.make_services``, as ``phantom`` builds them, no Textual): the console submits the
emulated GRPO workload (``CHECKPOINT_PERIOD`` steps between checkpoints, a checkpoint on
SIGTERM), then the drill does to the cluster what ``plan`` drew, one event at a time, each at
a drawn point of the checkpoint cycle, and waits for training to resume:

* ``preempt-grace``: the slice reclaimed, each pod SIGTERMed and given its
  terminationGracePeriodSeconds (``--grace``) before SIGKILL;
* ``preempt-abrupt``: the slice reclaimed with no grace (SIGKILL at once);
* ``node-failure``: the VM under the coordinator's node or a worker's dies at once (its pods
  SIGKILLed, the node Ready=Unknown), then GKE repairs the slice (the other nodes shut down
  with their pods' grace);
* ``crash``: the coordinator's or a worker's container is SIGKILLed (exit 137).

Nothing is recovered by hand: the JobSet restarts itself and the watchdog waits for the
nodes and verifies. The coordinator (process 0) writes the checkpoints, so an event loses
steps only when the coordinator gets no grace: ``preempt-abrupt``, and a node failure or a
crash that hits the coordinator; every other event must lose none.

Checks (each failure is named; exit 1): the workload Completed, its coordinator's attempts
(its own ``completed step`` and ``Restoring checkpoint`` lines) stitch to every step 1..N
exactly once, one attempt per event, each resuming at a checkpoint; steps lost per event at
most one checkpoint period, 0 when the coordinator had its grace; the journal holds each
event (``jobset_restarted``, and ``preempted`` for a preemption) and an incident summary
for each preemption and node failure; nothing of the drill left running. MTTR per event is
the journal's incident's (a crash opens none: the JobSet restarts itself, the console
journals the restart); ``resume_s`` is the drill's own, from the event to the first new
step. Last line: one JSON object. Exit 0 all checks hold, 1 a check failed, 2 usage.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import math
import os
import shutil
import statistics
import sys
import tempfile
import time
import urllib.parse
import urllib.request
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from benchmarks.chaos_gke_plan import (
    COORDINATOR,
    CRASH,
    KINDS,
    NODE_FAILURE,
    PREEMPT_ABRUPT,
    PREEMPT_GRACE,
    Attempt,
    Shot,
    plan,
    read_attempts,
    stitch,
)
from console.config import Config, parse_config
from console.services.facade import Facade
from console.services.model import Event, EventKind, JobStatus
from console.wiring import make_services
from console.wiring.gke import LocalGkeControl
from console.wiring.settings import workload_defaults
from emulators.gke import client

NAME = "grpo-chaos"
WRAPPER_POLL_S = 5.5  # xpk's wrapper: `while kill -0 $PID; do sleep 5; done` (+ a step)
# Daemon flags: the controllers' back-offs short (the defaults are the real 10 s ones).
FAST = ["--job-backoff", "0.01", "--crash-backoff", "0.2", "--schedule-retry", "0.5"]


class DrillAborted(Exception):
    """The drill cannot go on (training that never resumes, a workload that never ends)."""


# -- the drill -------------------------------------------------------------------------------------
@dataclass(frozen=True)
class DrillSettings:
    seed: int = 1
    count: int = 6
    period: int = 10  # CHECKPOINT_PERIOD
    step_time: float = 0.25
    grace_s: int = 30  # the pods' terminationGracePeriodSeconds
    poll_s: float = 0.5
    recreate_delay: float = 1.0
    repair_after: float = 1.0

    def shots(self) -> list[Shot]:
        return plan(self.seed, self.count)

    def total(self) -> int:
        # A shot lands within two periods of where training resumed; then a tail. With its
        # grace the coordinator runs on until xpk's wrapper passes SIGTERM on (it polls its
        # child every 5 s): those steps too, or the run could end before the last shot.
        on = sum(s.graceful for s in self.shots()) * math.ceil(WRAPPER_POLL_S / self.step_time)
        return self.period * (2 * self.count + 3) + on


@dataclass
class ShotRecord:
    shot: Shot
    at: float = 0.0  # wall clock, as the journal dates rows
    victim: str = ""  # the slice, node or pod hit
    slice: str = ""  # a node failure's slice (the journal's rows name the slice)
    reached: int = 0  # the coordinator's step when it was sent
    resume_s: float | None = None
    steps_lost: int | None = None
    resumed_at: int | None = None
    mttr_s: float | None = None
    detect_s: float | None = None
    restart_s: float | None = None  # the journal's job_state rows: Running -> ... -> Running
    journal: list[str] = field(default_factory=list)


@dataclass
class DrillResult:
    figures: dict[str, Any]
    table: str
    problems: list[str]
    records: list[ShotRecord]


class Drill:
    def __init__(self, s: DrillSettings, work: Path, say: Callable[[str], None]) -> None:
        self.s = s
        self.work = work
        self.run_dir = work / "gke"
        self.say = say
        self.t0 = time.monotonic()
        self.records: list[ShotRecord] = []
        self.problems: list[str] = []
        self.svc: Facade | None = None
        self.server = ""
        self.final: JobStatus | None = None

    def _say(self, msg: str) -> None:
        self.say(f"[chaos-gke {time.monotonic() - self.t0:6.1f}s] {msg}")

    def _config(self) -> Config:
        return parse_config(
            {
                "cluster": {"provider": "gke"},
                "gke": {"run_dir": str(self.run_dir), "hf_token_env": ""},
                "recovery": {"poll_interval_s": self.s.poll_s, "ready_timeout_s": 120.0},
            },
            source="<chaos-gke drill>",
        )

    async def run(self) -> DrillResult:
        config = self._config()
        control = LocalGkeControl(config)
        shots = "; ".join(x.describe() for x in self.s.shots())
        self._say(f"plan (seed {self.s.seed}): {shots}")
        try:
            up = await control.up(1, recreate_delay=self.s.recreate_delay, extra_args=FAST)
            self.server = str(client.status(self.run_dir).server)  # type: ignore[union-attr]
            self._say(f"GKE emulator up: {up['server']}, slice {up['slices'][0]['name']}")
            self.svc = make_services(config, state_dir=self.work / "state", autostart_pod=False)
            try:
                await self.svc.start()
                await self._phase()
                await self._journal()
            except DrillAborted as exc:
                self.problems.append(f"aborted: {exc}")
            except Exception as exc:  # the drill's own failure: reported, still cleaned up
                self.problems.append(f"aborted: {type(exc).__name__}: {exc}")
            finally:
                await self.svc.stop()
                self.svc.close_journal()
        finally:
            await control.down()
        self._nothing_left()
        return self._result()

    # -- the workload and the shots ---------------------------------------------------------
    async def _phase(self) -> None:
        assert self.svc is not None
        s = self.s
        env = {
            "STEPS": str(s.total()),
            "STEP_TIME": f"{s.step_time:g}",
            "CHECKPOINT_PERIOD": str(s.period),
        }
        spec = workload_defaults(self._config()).but(
            NAME,
            env=env,
            max_restarts=s.count + 2,
            termination_grace_s=s.grace_s,
        )
        await self.svc.create_workload(spec, "chaos")
        self._say(f"workload {NAME}: {s.total()} steps, checkpoint every {s.period}")
        await self._until(lambda: self._current().reached >= s.period, 120, "the first checkpoint")
        for shot in s.shots():
            await self._fire(shot)
        await self._until(self._ended, 300, "the workload's end")
        self._say(f"workload {self.final}")
        if self.final is not JobStatus.SUCCEEDED:
            self.problems.append(f"workload ended {self.final}, not SUCCEEDED")

    def _attempts(self) -> list[Attempt]:
        return read_attempts(self.run_dir, NAME)

    def _current(self) -> Attempt:
        attempts = self._attempts()
        return attempts[-1] if attempts else Attempt("", "")

    def _ended(self) -> bool:
        assert self.svc is not None
        for w in self.svc.snapshot().workloads:
            if w.name == NAME and w.status in (JobStatus.SUCCEEDED, JobStatus.FAILED):
                self.final = JobStatus(w.status)
                return not self.svc.watchdog.running or w.status == JobStatus.SUCCEEDED
        return False

    async def _fire(self, shot: Shot) -> None:
        p = self.s.period
        before = self._current()
        target = (max(before.reached, p) // p + 1) * p + max(1, min(p - 1, round(shot.cycle * p)))
        target = min(target, self.s.total() - 1)
        await self._until(lambda: self._current().reached >= target, 120, f"step {target}")
        rec = ShotRecord(shot)
        n_attempts = len(self._attempts())
        rec.reached = self._current().reached
        rec.at = time.time()
        t0 = time.monotonic()
        if shot.kind in (PREEMPT_GRACE, PREEMPT_ABRUPT):
            grace = float(self.s.grace_s) if shot.kind == PREEMPT_GRACE else 0.0
            rec.victim = client.preempt_slice(self.run_dir, 0, grace_s=grace)["slice"]
        else:
            pod = self._pod(coordinator=shot.target == COORDINATOR)
            if shot.kind == NODE_FAILURE:
                node = pod["spec"]["nodeName"]
                failure = client.fail_node(self.run_dir, node, self.s.repair_after)
                rec.victim, rec.slice = failure["node"], failure["slice"]
            else:
                rec.victim = client.crash_container(self.run_dir, pod["metadata"]["name"])["pod"]
        self.records.append(rec)
        self._say(f"event {shot.describe()} -> {rec.victim} at step {rec.reached}")

        def resumed() -> bool:
            attempts = self._attempts()
            last = attempts[-1] if len(attempts) > n_attempts else None
            return last is not None and (last.reached > last.start or last.done)

        await self._until(resumed, 180, f"training resumed after event {shot.index}")
        rec.resume_s = time.monotonic() - t0
        # the watchdog's recovery (if any) done before the next shot: one incident each
        await self._until(lambda: not self._recovering(), 180, "the watchdog's recovery")
        self._say(f"  resumed after {rec.resume_s:.1f}s")

    def _recovering(self) -> bool:
        assert self.svc is not None
        return bool(self.svc.watchdog.running)

    def _pod(self, coordinator: bool) -> dict[str, Any]:
        """A Running pod of the workload's current attempt: the coordinator or a worker."""
        sel = urllib.parse.quote(f"jobset.sigs.k8s.io/jobset-name={NAME}")
        url = f"{self.server}/api/v1/namespaces/default/pods?labelSelector={sel}"
        with urllib.request.urlopen(url, timeout=10) as resp:
            pods = json.loads(resp.read())["items"]
        running = [
            p
            for p in pods
            if (p.get("status") or {}).get("phase") == "Running"
            and not p["metadata"].get("deletionTimestamp")
        ]
        idx = "batch.kubernetes.io/job-completion-index"
        mine = [p for p in running if (p["metadata"]["labels"].get(idx) == "0") == coordinator]
        if not mine:
            raise DrillAborted(f"no Running {'coordinator' if coordinator else 'worker'} pod")
        return sorted(mine, key=lambda p: p["metadata"]["name"])[-1 if coordinator else 0]

    async def _until(self, check: Callable[[], bool], timeout_s: float, what: str) -> None:
        deadline = time.monotonic() + timeout_s
        while not check():
            if time.monotonic() > deadline:
                raise DrillAborted(f"no {what} within {timeout_s:.0f}s")
            await asyncio.sleep(0.2)

    # -- afterwards --------------------------------------------------------------------------
    async def _journal(self) -> None:
        """Each event in the journal, and the MTTR of the incident it opened."""
        assert self.svc is not None
        await self.svc.sink.flush()
        rows = await self.svc.events(limit=100_000)
        incidents = [e for e in rows if e.kind == EventKind.INCIDENT]
        for i, rec in enumerate(self.records):
            end = self.records[i + 1].at if i + 1 < len(self.records) else float("inf")
            window = [e for e in rows if rec.at <= e.at < end]
            rec.journal = sorted({str(e.kind) for e in window if e.kind != EventKind.ACTION})
            want = [(EventKind.JOBSET_RESTARTED, NAME)]
            if rec.shot.kind in (PREEMPT_GRACE, PREEMPT_ABRUPT):
                want.append((EventKind.PREEMPTED, rec.victim))
            elif rec.shot.kind == NODE_FAILURE:  # the node unknown, then its slice deleted
                want += [(EventKind.HOST_UNKNOWN, rec.slice), (EventKind.HOST_LOST, rec.slice)]
            for kind, host in want:
                if not any(e.kind == kind and e.host == host for e in window):
                    self.problems.append(
                        f"journal: no {kind} row ({host}) for event {rec.shot.describe()}"
                    )
            rec.restart_s = _back_running(window)
            inc = _incident(incidents, rec.at, end)
            if inc is not None:
                rec.mttr_s, rec.detect_s = (
                    _num(inc.data.get("mttr_s")),
                    _num(inc.data.get("detect_s")),
                )
            elif rec.shot.kind != CRASH:
                self.problems.append(f"journal: no incident for event {rec.shot.describe()}")

    def _nothing_left(self) -> None:
        left: list[int] = []
        for _ in range(40):
            left = client.leftover_pids(self.run_dir)
            if not left and client.status(self.run_dir) is None:
                return
            time.sleep(0.25)
        self.problems.append(f"left running after the drill: pids {left} or the emulator")

    def _result(self) -> DrillResult:
        s = self.s
        attempts = self._attempts()
        steps, gaps = stitch(attempts)
        self.problems += gaps
        if steps != list(range(1, s.total() + 1)):
            dup = sorted({x for x in steps if steps.count(x) > 1})
            missing = sorted(set(range(1, s.total() + 1)) - set(steps))
            self.problems.append(
                f"final record: {len(steps)} steps, not 1..{s.total()} each once "
                f"(twice: {dup[:10]}, missing: {missing[:10]})"
            )
        if len(attempts) != len(self.records) + 1:
            self.problems.append(
                f"{len(attempts)} coordinator attempts for {len(self.records)} events (one each)"
            )
        for i, rec in enumerate(self.records):
            if i + 1 >= len(attempts):
                break
            before, after = attempts[i], attempts[i + 1]
            rec.resumed_at, rec.steps_lost = after.start, before.reached - after.start
            bound = 0 if rec.shot.graceful else s.period
            if not 0 <= rec.steps_lost <= bound:
                self.problems.append(
                    f"event {rec.shot.describe()}: {rec.steps_lost} steps lost (reached "
                    f"{before.reached}, resumed at {after.start}); at most {bound}"
                )
            if after.start % s.period and after.start != before.reached:
                self.problems.append(
                    f"event {rec.shot.describe()}: resumed at step {after.start}, neither a "
                    f"periodic checkpoint nor the step it reached ({before.reached})"
                )
        figs = figures(self.records, s, steps, self.final, time.monotonic() - self.t0)
        figs["problems"] = len(self.problems)
        return DrillResult(figs, table(self.records), self.problems, self.records)


def _incident(incidents: Sequence[Event], start: float, end: float) -> Event | None:
    for e in incidents:
        opened = _num(e.data.get("opened_at"))
        if opened is not None and start <= opened < end:
            return e
    return None


def _back_running(rows: Sequence[Event]) -> float | None:
    """From the workload leaving RUNNING to RUNNING again, as its job_state rows say."""
    left = back = None
    for e in sorted(rows, key=lambda e: e.at):
        if e.kind != EventKind.JOB_STATE or e.data.get("job_id") != NAME:
            continue
        if left is None and e.data.get("old_status") == JobStatus.RUNNING:
            left = e.at
        elif left is not None and e.data.get("new_status") == JobStatus.RUNNING:
            back = e.at
            break
    return None if left is None or back is None else back - left


def _num(v: Any) -> float | None:
    return float(v) if isinstance(v, int | float) and not isinstance(v, bool) else None


def _stats(values: Sequence[float | int | None]) -> dict[str, Any]:
    got = [v for v in values if v is not None]
    if not got:
        return {"n": 0}
    return {
        "n": len(got),
        "max": round(max(got), 2),
        "median": round(statistics.median(got), 2),
        "values": [round(v, 2) for v in got],
    }


def figures(
    records: Sequence[ShotRecord],
    s: DrillSettings,
    steps: Sequence[int],
    final: JobStatus | None,
    wall_s: float,
) -> dict[str, Any]:
    pre = [r for r in records if r.shot.kind.startswith("preempt")]
    graceful = [r for r in records if r.shot.graceful]
    abrupt = [r for r in records if not r.shot.graceful]
    return {
        "seed": s.seed,
        "events": len(records),
        "by_kind": {k: sum(r.shot.kind == k for r in records) for k in KINDS},
        "preemptions_survived": sum(r.resume_s is not None for r in pre),
        "preemptions": len(pre),
        "checkpoint_period": s.period,
        "steps_lost_with_grace": _stats([r.steps_lost for r in graceful]),
        "steps_lost_without_grace": _stats([r.steps_lost for r in abrupt]),
        "mttr_s": _stats([r.mttr_s for r in records]),
        "mttr_s_by_kind": {
            k: _stats([r.mttr_s for r in records if r.shot.kind == k]) for k in KINDS
        },
        "restart_s": _stats([r.restart_s for r in records]),
        "resume_s": _stats([r.resume_s for r in records]),
        "final_step": max(steps) if steps else 0,
        "total_steps": s.total(),
        "workload": str(final) if final else None,
        "wall_s": round(wall_s, 1),
    }


def table(records: Sequence[ShotRecord]) -> str:
    def num(v: float | int | None) -> str:
        return "-" if v is None else f"{v:.1f}" if isinstance(v, float) else str(v)

    cols = ("event", "grace", "at", "resumed", "lost", "MTTR s", "restart s", "resume s")
    head = f"{cols[0]:<30} " + " ".join(f"{c:>9}" for c in cols[1:]) + "  journal"
    lines = [head, "-" * len(head)]
    for r in records:
        cells = (
            "yes" if r.shot.graceful else "no",
            r.reached,
            r.resumed_at,
            r.steps_lost,
            r.mttr_s,
            r.restart_s,
            r.resume_s,
        )
        row = " ".join(f"{c if isinstance(c, str) else num(c):>9}" for c in cells)
        lines.append(f"{r.shot.describe():<30} {row}  {','.join(r.journal)}")
    return "\n".join(lines)


async def run_drill(
    settings: DrillSettings, work: Path | None = None, say: Callable[[str], None] | None = None
) -> DrillResult:
    """One drill in ``work`` (a fresh temp dir, removed after, when None)."""
    own = work is None
    path = Path(tempfile.mkdtemp(prefix="phantom-chaos-gke-")) if work is None else work
    try:
        return await Drill(settings, path, say or (lambda _m: None)).run()
    finally:
        if own:
            shutil.rmtree(path, ignore_errors=True)


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="benchmarks.chaos_gke", description=__doc__.splitlines()[0])
    ap.add_argument("--seed", type=int, default=1, help="draws the plan (default 1)")
    ap.add_argument("--count", type=int, default=6, help="events (default 6)")
    ap.add_argument("--period", type=int, default=10, help="checkpoint period, steps (10)")
    ap.add_argument("--step-time", type=float, default=0.25, help="seconds a step (0.25)")
    ap.add_argument("--grace", type=int, default=30, help="pods' termination grace, s (30)")
    ap.add_argument("--poll", type=float, default=0.5, help="recovery.poll_interval_s")
    ap.add_argument("--keep", action="store_true", help="keep the work dir (journal, logs)")
    args = ap.parse_args(argv)
    bad = [
        f"{flag} must be {rule}"
        for flag, ok, rule in (
            ("--count", args.count >= 1, ">= 1"),
            ("--period", args.period >= 2, ">= 2"),
            ("--step-time", args.step_time > 0, "> 0"),
            ("--grace", args.grace >= 1, ">= 1"),
            ("--poll", args.poll > 0, "> 0"),
        )
        if not ok
    ]
    if bad:
        print(f"benchmarks.chaos_gke: {'; '.join(bad)}", file=sys.stderr)
        return 2
    os.environ.setdefault("NO_GCE_CHECK", "True")
    settings = DrillSettings(
        seed=args.seed,
        count=args.count,
        period=args.period,
        step_time=args.step_time,
        grace_s=args.grace,
        poll_s=args.poll,
    )
    work = Path(tempfile.mkdtemp(prefix="phantom-chaos-gke-")) if args.keep else None

    def say(msg: str) -> None:
        print(msg, file=sys.stderr, flush=True)

    result = asyncio.run(run_drill(settings, work, say))
    for problem in result.problems:
        print(f"FAILED: {problem}", file=sys.stderr)
    if work is not None:
        print(f"kept {work} (journal: {work / 'state' / 'journal.sqlite'})", file=sys.stderr)
    print(result.table)
    print(json.dumps(result.figures))
    return 1 if result.problems else 0


if __name__ == "__main__":
    raise SystemExit(main())
