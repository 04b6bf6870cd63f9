"""GKE chaos drill: seeded disruptions of all five kinds (slice preemptions with and
without the pods' grace, pod crashes, OOM kills, node failures, evictions by a node's drain)
during a Tunix-style GRPO workload, some overlapping, with the real `phantom watch` as the
only watchdog (a separate process, as in a container), itself SIGKILLed mid-recovery and
started again.

    .venv/bin/python -m benchmarks.chaos_gke [--seed 1] [--count 6] [--overlaps 0]
        [--kills 0] [--period 10] [--step-time 0.25] [--grace 30] [--poll 0.5] [--keep]
    make chaos-gke [CHAOS_SEED=1] [CHAOS_COUNT=6] [CHAOS_GKE_ARGS="--overlaps 2 --kills 1"]

The GKE emulator (a temp run dir, one v5p-64 spot slice): a script submits the emulated GRPO
workload through the console's services and exits (``CHECKPOINT_PERIOD`` steps between
checkpoints, a checkpoint on SIGTERM); then `phantom watch --metrics` runs alone, and the
drill does to the cluster what ``plan`` drew, each at a drawn point of the checkpoint cycle,
and waits for training to resume and the watcher's incident to close:

* ``preempt-grace`` / ``preempt-abrupt``: the slice reclaimed, each pod given its
  terminationGracePeriodSeconds (``--grace``) before SIGKILL, or none;
* ``node-failure``: the VM under the coordinator's node or a worker's dies at once (its pods
  SIGKILLed, the node NotReady), then GKE repairs the slice;
* ``crash``: the coordinator's or a worker's container SIGKILLed (exit 137, reason Error);
* ``oom``: the OOM killer takes it (exit 137, reason OOMKilled);
* ``evict``: the pod's node cordoned and drained through the API, as `kubectl drain` does
  (PATCH spec.unschedulable, POST pods/NAME/eviction), uncordoned once the maintenance ends.

``--overlaps N``: N pod-level disruptions are followed 2-8 s later by a preemption or a node
failure while the JobSet restarts. ``--kills N``: N recoveries see the watcher SIGKILLed 1-6 s
in and started again 0-3 s later.

Nothing is recovered by hand. The coordinator (process 0) writes the checkpoints, so a
disruption makes the workload redo steps only when the coordinator gets no grace, at most
one checkpoint period; no resume may start before the newest checkpoint written ("steps lost
past the last checkpoint": 0).

Checks (each failure is named; exit 1): the workload Completed; its coordinator's attempts
stitch to every step 1..N exactly once, each resuming at a checkpoint; 0 steps lost past a
checkpoint; a graceful disruption alone redoes none; the journal holds each disruption's row;
no journal row a watcher printed is missing from the journal; no incident left open; the
watchers' Prometheus counters (summed over their lives, read just before each death) equal
the journal's preemptions and recoveries; nothing of the drill left running. Per run it
prints disruptions by kind, overlaps, watcher kills, MTTR by kind (the journal's incidents),
the workload's end, steps lost and redone, journal rows lost, incidents left open and the
counters against the disruptions. Last line: one JSON object. Exit 0 all checks hold, 1 a
check failed, 2 usage.
"""

from __future__ import annotations

import argparse
import asyncio
import calendar
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
    EVICT,
    FAMILIES,
    FAMILY,
    KINDS,
    NODE_FAILURE,
    OOM,
    PREEMPT_ABRUPT,
    PREEMPT_GRACE,
    Attempt,
    Shot,
    plan,
    read_attempts,
    stitch,
)
from benchmarks.chaos_gke_watcher import Watcher
from console.config import Config, parse_config
from console.services.model import Event, EventKind, IncidentOutcome
from console.services.record.incidents import incident_of
from console.services.record.journal import Journal
from console.wiring import make_services
from console.wiring.gke import LocalGkeControl
from console.wiring.settings import workload_defaults
from emulators.gke import client

NAME = "grpo-chaos"
WRAPPER_POLL_S = 5.5  # xpk's wrapper: `while kill -0 $PID; do sleep 5; done` (+ a step)
# Daemon flags: the controllers' back-offs short (the defaults are the real 10 s ones).
FAST = ["--job-backoff", "0.01", "--crash-backoff", "0.2", "--schedule-retry", "0.5"]
_LOST = (EventKind.PREEMPTED, EventKind.HOST_LOST)
# The row each kind must leave in the journal (beside the JobSet's restart).
_ROW = {
    "crash": EventKind.POD_CRASHED,
    OOM: EventKind.POD_OOM_KILLED,
    EVICT: EventKind.POD_EVICTED,
}


class DrillAborted(Exception):
    """The drill cannot go on (training that never resumes, a workload that never ends)."""


# -- the drill -------------------------------------------------------------------------------------
@dataclass(frozen=True)
class DrillSettings:
    seed: int = 1
    count: int = 6
    overlaps: int = 0
    kills: int = 0
    period: int = 10  # CHECKPOINT_PERIOD
    step_time: float = 0.25
    grace_s: int = 30  # the pods' terminationGracePeriodSeconds
    poll_s: float = 0.5
    # A slice's nodes back this long after a preemption (a recovery lasts at least this: a
    # watcher SIGKILL 1-6 s in lands inside it).
    recreate_delay: float = 6.0
    repair_after: float = 1.0
    drain_for: float = 2.0  # a drained node's maintenance: uncordoned this long after

    def shots(self) -> list[Shot]:
        return plan(self.seed, self.count, self.overlaps, self.kills)

    def total(self) -> int:
        # A shot lands within two periods of where training resumed; then a tail. With its
        # grace the coordinator runs on until xpk's wrapper passes SIGTERM on (it polls its
        # child every 5 s): those steps too, or the run could end before the last shot.
        shots = self.shots()
        graceful = sum(d.graceful for s in shots for d in s.disruptions())
        on = graceful * math.ceil(WRAPPER_POLL_S / self.step_time)
        return self.period * (2 * len(shots) + 3) + on


@dataclass
class ShotRecord:
    shot: Shot  # this disruption (an overlap is its own record)
    at: float = 0.0  # wall clock, as the journal dates rows
    victim: str = ""  # the slice, node or pod hit
    slice: str = ""  # a node failure's slice (the journal's rows name the slice)
    reached: int = 0  # the coordinator's step when it was sent
    overlapping: bool = False  # sent while the one before was being recovered
    resume_s: float | None = None
    mttr_s: float | None = None
    detect_s: float | None = None
    watcher_killed: bool = False
    killed_mid_recovery: bool = False
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
        self.state = work / "state"
        self.say = say
        self.t0 = time.monotonic()
        self.records: list[ShotRecord] = []
        self.problems: list[str] = []
        self.server = ""
        self.final = ""
        self.watcher: Watcher | None = None
        self.rows: list[Event] = []
        self.transitions: list[tuple[int, int, int]] = []  # (at attempt, redone, lost past ckpt)
        self._uncordons: list[asyncio.Future[None]] = []

    def _say(self, msg: str) -> None:
        self.say(f"[chaos-gke {time.monotonic() - self.t0:6.1f}s] {msg}")

    def _settings(self) -> dict[str, Any]:
        return {
            "cluster": {"provider": "gke"},
            "gke": {"run_dir": str(self.run_dir), "hf_token_env": ""},
            "recovery": {"poll_interval_s": self.s.poll_s, "ready_timeout_s": 120.0},
        }

    def _config(self) -> Config:
        return parse_config(self._settings(), source="<chaos-gke drill>")

    def _config_file(self) -> Path:
        path = self.work / "phantom.toml"
        lines = []
        for table, keys in self._settings().items():
            lines.append(f"[{table}]")
            lines += [f"{k} = {json.dumps(v)}" for k, v in keys.items()]
        path.write_text("\n".join(lines) + "\n")
        return path

    def _env(self) -> dict[str, str]:
        env = {k: v for k, v in os.environ.items() if not k.startswith(("PHANTOM_", "XDG_"))}
        return env | {
            "NO_GCE_CHECK": "True",
            "RAY_USAGE_STATS_ENABLED": "0",
            "WANDB_MODE": "offline",
            "PHANTOM_NO_CONFIG_DISCOVERY": "1",
            "XDG_STATE_HOME": str(self.state),
            "XDG_CONFIG_HOME": str(self.work / "config"),
            "PYTHONUNBUFFERED": "1",
        }

    async def run(self) -> DrillResult:
        config = self._config()
        control = LocalGkeControl(config)
        shots = "; ".join(x.describe() for x in self.s.shots())
        self._say(f"plan (seed {self.s.seed}): {shots}")
        try:
            up = await control.up(1, recreate_delay=self.s.recreate_delay, extra_args=FAST)
            self.server = str(client.status(self.run_dir).server)  # type: ignore[union-attr]
            self._say(f"GKE emulator up: {up['server']}, slice {up['slices'][0]['name']}")
            try:
                await self._submit(config)
                self.watcher = Watcher(self._config_file(), self._env())
                life = await asyncio.to_thread(self.watcher.start)
                self._say(f"phantom watch up (pid {life.pid}, {life.metrics_url})")
                await self._phase()
            except DrillAborted as exc:
                self.problems.append(f"aborted: {exc}")
            except Exception as exc:  # the drill's own failure: reported, still cleaned up
                self.problems.append(f"aborted: {type(exc).__name__}: {exc}")
            finally:
                if self.watcher is not None:
                    code = await asyncio.to_thread(self.watcher.stop)
                    if code not in (None, 0):
                        self.problems.append(f"phantom watch exited {code} on SIGTERM")
            self._journal()
        finally:
            await control.down()
        self._nothing_left()
        return self._result()

    # -- the workload and the shots ---------------------------------------------------------
    async def _submit(self, config: Config) -> None:
        """A script's submission: the console's services up, the workload created, down."""
        s = self.s
        env = {
            "STEPS": str(s.total()),
            "STEP_TIME": f"{s.step_time:g}",
            "CHECKPOINT_PERIOD": str(s.period),
        }
        spec = workload_defaults(config).but(
            NAME,
            env=env,
            max_restarts=sum(len(x.disruptions()) for x in s.shots()) + 2,
            termination_grace_s=s.grace_s,
        )
        svc = make_services(config, state_dir=self.state / "phantom", autostart_pod=False)
        try:
            await svc.start()
            await svc.create_workload(spec, "chaos")
        finally:
            await svc.stop()
            svc.close_journal()
        self._say(f"workload {NAME}: {s.total()} steps, checkpoint every {s.period}")

    async def _phase(self) -> None:
        s = self.s
        await self._until(lambda: self._current().reached >= s.period, 120, "the first checkpoint")
        for shot in s.shots():
            await self._fire(shot)
        if self._uncordons:
            await asyncio.gather(*self._uncordons)
        await self._until(self._ended, 300, "the workload's end")
        self._say(f"workload {self.final}")
        if self.final != "Completed":
            self.problems.append(f"workload ended {self.final or 'never'}, not Completed")
        await self._until(lambda: not self._open_incidents(), 180, "the watcher's incidents closed")

    def _attempts(self) -> list[Attempt]:
        return read_attempts(self.run_dir, NAME)

    def _current(self) -> Attempt:
        attempts = self._attempts()
        return attempts[-1] if attempts else Attempt("", "")

    def _jobset(self) -> dict[str, Any]:
        url = f"{self.server}/apis/jobset.x-k8s.io/v1alpha2/namespaces/default/jobsets/{NAME}"
        with urllib.request.urlopen(url, timeout=10) as resp:
            got: dict[str, Any] = json.loads(resp.read())
        return got

    def _ended(self) -> bool:
        self.final = str((self._jobset().get("status") or {}).get("terminalState") or "")
        return bool(self.final)

    def _open_incidents(self) -> list[str]:
        assert self.watcher is not None
        return self.watcher.open_incidents()

    async def _fire(self, shot: Shot) -> None:
        p = self.s.period
        before = self._current()
        target = (max(before.reached, p) // p + 1) * p + max(1, min(p - 1, round(shot.cycle * p)))
        target = min(target, self.s.total() - 1)
        await self._until(lambda: self._current().reached >= target, 120, f"step {target}")
        t0, first = time.monotonic(), time.time()
        assert self.watcher is not None
        mark = len(self.watcher.snapshot())  # the recovery this shot opens: a line after it
        rec = await self._send(shot)
        if shot.overlap is not None:
            await asyncio.sleep(shot.overlap_after)  # the plan's gap, 2-8 s
            second = await self._send(shot.overlap)
            second.overlapping = True
        if shot.kill_after is not None:
            await self._kill_watcher(shot, rec, mark)
        last = self.records[-1].at

        def resumed() -> bool:
            attempts = self._attempts()
            if not attempts:
                return False
            a = attempts[-1]
            return _cri_epoch(a.first_at) > last and (a.reached > a.start or a.done)

        await self._until(resumed, 240, f"training resumed after {shot.describe()}")
        rec.resume_s = time.monotonic() - t0
        # the watcher's incident(s) closed before the next shot (unless the plan overlaps)
        await self._until(lambda: not self._open_incidents(), 240, "the watcher's incidents")
        self._say(f"  resumed after {rec.resume_s:.1f}s (first sent {first:.1f})")

    async def _send(self, shot: Shot) -> ShotRecord:
        rec = ShotRecord(shot)
        rec.reached = self._current().reached
        rec.at = time.time()
        if shot.kind in (PREEMPT_GRACE, PREEMPT_ABRUPT):
            grace = float(self.s.grace_s) if shot.kind == PREEMPT_GRACE else 0.0
            rec.victim = (await asyncio.to_thread(client.preempt_slice, self.run_dir, 0, grace))[
                "slice"
            ]
        elif shot.kind == NODE_FAILURE:
            node = self._node(coordinator=shot.target == COORDINATOR)
            failure = await asyncio.to_thread(
                client.fail_node, self.run_dir, node, self.s.repair_after
            )
            rec.victim, rec.slice = failure["node"], failure["slice"]
        elif shot.kind == EVICT:
            pod = self._pod(coordinator=shot.target == COORDINATOR)
            rec.victim = await asyncio.to_thread(self._drain, pod["spec"]["nodeName"])
            self._uncordons.append(asyncio.ensure_future(self._uncordon(rec.victim)))
        else:
            pod = self._pod(coordinator=shot.target == COORDINATOR)["metadata"]["name"]
            kill = client.oom_kill if shot.kind == OOM else client.crash_container
            rec.victim = (await asyncio.to_thread(kill, self.run_dir, pod))["pod"]
        self.records.append(rec)
        self._say(f"disruption {shot.kind} ({shot.target}) -> {rec.victim} at step {rec.reached}")
        return rec

    async def _kill_watcher(self, shot: Shot, rec: ShotRecord, mark: int) -> None:
        """SIGKILL the watcher ``kill_after`` s into the recovery it started, up again
        ``restart_after`` s later."""
        assert self.watcher is not None and shot.kill_after is not None
        w = self.watcher
        started = await asyncio.to_thread(
            w.wait_line,
            lambda x: x.get("kind") == "recovery_started",
            120,
            "the watcher's recovery",
            mark,
        )
        await asyncio.sleep(max(0.0, started["at"] + shot.kill_after - time.time()))
        recovering = bool(self._open_incidents())
        await asyncio.to_thread(w.kill)
        rec.watcher_killed, rec.killed_mid_recovery = True, recovering
        self._say(
            f"  watcher SIGKILLed {shot.kill_after:.1f}s into its recovery "
            f"({'open' if recovering else 'already closed'})"
        )
        await asyncio.sleep(shot.restart_after)
        life = await asyncio.to_thread(w.start)
        self._say(f"  watcher up again (pid {life.pid})")

    def _drain(self, node: str) -> str:
        """`kubectl drain NODE` through the API: cordon, evict each pod on it; uncordoned
        ``drain_for`` s later (the maintenance done). Returns the node."""
        base = f"{self.server}/api/v1"
        _http("PATCH", f"{base}/nodes/{node}", {"spec": {"unschedulable": True}}, merge=True)
        sel = urllib.parse.quote(f"spec.nodeName={node}")
        pods = _http("GET", f"{base}/pods?fieldSelector={sel}")["items"]
        for p in pods:
            ns, name = p["metadata"]["namespace"], p["metadata"]["name"]
            body = {
                "apiVersion": "policy/v1",
                "kind": "Eviction",
                "metadata": {"name": name, "namespace": ns},
            }
            _http("POST", f"{base}/namespaces/{ns}/pods/{name}/eviction", body)

        return node

    async def _uncordon(self, node: str) -> None:
        await asyncio.sleep(self.s.drain_for)  # the node's maintenance
        body = {"spec": {"unschedulable": None}}
        await asyncio.to_thread(_http, "PATCH", f"{self.server}/api/v1/nodes/{node}", body, True)

    def _workload_pods(self) -> list[dict[str, Any]]:
        sel = urllib.parse.quote(f"jobset.sigs.k8s.io/jobset-name={NAME}")
        pods: list[dict[str, Any]] = _http(
            "GET", f"{self.server}/api/v1/namespaces/default/pods?labelSelector={sel}"
        )["items"]
        return pods

    def _pod(self, coordinator: bool) -> dict[str, Any]:
        """A Running pod of the workload's current attempt: the coordinator or a worker."""
        running = [
            p
            for p in self._workload_pods()
            if (p.get("status") or {}).get("phase") == "Running"
            and not p["metadata"].get("deletionTimestamp")
        ]
        idx = "batch.kubernetes.io/job-completion-index"
        mine = [p for p in running if (p["metadata"]["labels"].get(idx) == "0") == coordinator]
        if not mine:
            raise DrillAborted(f"no Running {'coordinator' if coordinator else 'worker'} pod")
        return sorted(mine, key=lambda p: p["metadata"]["name"])[-1 if coordinator else 0]

    def _node(self, coordinator: bool) -> str:
        """A Ready node: the one under a Running pod of the workload (the coordinator's or a
        worker's) when there is one (an overlap may find the JobSet between attempts), else
        any Ready node of the slice."""
        try:
            return str(self._pod(coordinator)["spec"]["nodeName"])
        except DrillAborted:
            pass
        nodes = _http("GET", f"{self.server}/api/v1/nodes")["items"]
        ready = [
            n["metadata"]["name"]
            for n in nodes
            if (n["metadata"].get("labels") or {}).get("cloud.google.com/gke-tpu-accelerator")
            and any(
                c["type"] == "Ready" and c["status"] == "True"
                for c in n["status"].get("conditions") or []
            )
            and not n["spec"].get("unschedulable")
        ]
        if not ready:
            raise DrillAborted("no Ready node of the slice for a node failure")
        return sorted(ready)[0]

    async def _until(self, check: Callable[[], bool], timeout_s: float, what: str) -> None:
        deadline = time.monotonic() + timeout_s
        while not check():
            if time.monotonic() > deadline:
                raise DrillAborted(f"no {what} within {timeout_s:.0f}s")
            await asyncio.sleep(0.2)

    # -- afterwards --------------------------------------------------------------------------
    def _journal(self) -> None:
        """Each disruption in the journal, and the MTTR of the incident it opened."""
        path = self.state / "phantom" / "journal.sqlite"
        if not path.exists():
            self.problems.append(f"no journal at {path}")
            return
        with Journal(path) as journal:
            self.rows = journal.after(0, limit=1_000_000)
        rows = self.rows
        incidents = [e for e in rows if e.kind == EventKind.INCIDENT]
        for i, rec in enumerate(self.records):
            end = self.records[i + 1].at if i + 1 < len(self.records) else float("inf")
            window = [e for e in rows if rec.at <= e.at < end]
            rec.journal = sorted({str(e.kind) for e in window if e.kind != EventKind.ACTION})
            nxt = self.records[i + 1] if i + 1 < len(self.records) else None
            # an overlapped disruption shares its window with the one that follows it
            shared = nxt is not None and nxt.overlapping
            want: list[tuple[EventKind, str]] = []
            # A restart while no watcher ran is not journaled by the next one (it starts from
            # the JobSet as it finds it): only a window the watcher lived through must hold it.
            dead = rec.watcher_killed or (i > 0 and self.records[i - 1].watcher_killed)
            if not shared and not dead:
                want.append((EventKind.JOBSET_RESTARTED, NAME))
            if rec.shot.kind in (PREEMPT_GRACE, PREEMPT_ABRUPT):
                want.append((EventKind.PREEMPTED, rec.victim))
            elif rec.shot.kind == NODE_FAILURE:  # the node unknown, then its slice deleted
                want += [(EventKind.HOST_UNKNOWN, rec.slice), (EventKind.HOST_LOST, rec.slice)]
            elif rec.shot.kind in _ROW and not rec.overlapping:
                want.append((_ROW[rec.shot.kind], ""))
            scope = window
            if shared:  # to the end of the overlapping one's window
                after = self.records[i + 2].at if i + 2 < len(self.records) else float("inf")
                scope = [e for e in rows if rec.at <= e.at < after]
            # The pair restarts the JobSet at least once, not once each: a preemption or
            # node failure that lands while the pods of the restart the first one caused
            # are still Pending (the old ones Terminating in their grace) fails no Job, so
            # the JobSet has nothing to restart again. Its row may lie in the pair's span.
            pair = [e for e in rows if self.records[i - 1].at <= e.at < end] if i else window
            for kind, host in want:
                where = pair if rec.overlapping and kind == EventKind.JOBSET_RESTARTED else scope
                if not any(e.kind == kind and (not host or e.host == host) for e in where):
                    self.problems.append(
                        f"journal: no {kind} row{f' ({host})' if host else ''} for "
                        f"#{rec.shot.index} {rec.shot.kind}"
                    )
            inc = _incident(incidents, rec.at, end)
            if inc is not None:
                rec.mttr_s, rec.detect_s = (
                    _num(inc.data.get("mttr_s")),
                    _num(inc.data.get("detect_s")),
                )

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
        for i in range(len(attempts) - 1):
            before, after = attempts[i], attempts[i + 1]
            redone = before.reached - after.start
            past = max(0, before.saved - after.start)
            self.transitions.append((i + 2, redone, past))
            if past:
                self.problems.append(
                    f"attempt {i + 2} resumed at step {after.start}, before the checkpoint at "
                    f"step {before.saved} attempt {i + 1} wrote: {past} steps lost past it"
                )
            if not 0 <= redone <= s.period:
                self.problems.append(
                    f"attempt {i + 2}: {redone} steps redone (reached {before.reached}, "
                    f"resumed at {after.start}); at most {s.period}"
                )
            if after.start % s.period and after.start != before.reached:
                self.problems.append(
                    f"attempt {i + 2} resumed at step {after.start}, neither a periodic "
                    f"checkpoint nor the step it reached ({before.reached})"
                )
        self._graceful_redo_none(attempts)
        figs = figures(self, steps, time.monotonic() - self.t0)
        self.problems += check_figures(figs)
        figs["problems"] = len(self.problems)
        return DrillResult(figs, table(self.records), self.problems, self.records)

    def _graceful_redo_none(self, attempts: Sequence[Attempt]) -> None:
        """A graceful disruption alone (no overlap, one new attempt after it) redoes no step."""
        for i, rec in enumerate(self.records):
            nxt = self.records[i + 1] if i + 1 < len(self.records) else None
            if rec.overlapping or (nxt is not None and nxt.overlapping) or not rec.shot.graceful:
                continue
            end = nxt.at if nxt is not None else float("inf")
            began = [
                j for j, a in enumerate(attempts) if j and rec.at < _cri_epoch(a.first_at) < end
            ]
            if len(began) != 1:
                continue
            j = began[0]
            redone = attempts[j - 1].reached - attempts[j].start
            if redone:
                self.problems.append(
                    f"#{rec.shot.index} {rec.shot.kind} ({rec.shot.target}) gave the "
                    f"coordinator its grace, yet {redone} steps were redone"
                )


def _http(method: str, url: str, body: Any = None, merge: bool = False) -> Any:
    ctype = "application/merge-patch+json" if merge else "application/json"
    data = json.dumps(body).encode() if body is not None else None
    req = urllib.request.Request(url, data=data, method=method, headers={"Content-Type": ctype})
    with urllib.request.urlopen(req, timeout=10) as resp:
        return json.loads(resp.read())


def _cri_epoch(stamp: str) -> float:
    """A CRI log line's RFC 3339 timestamp (nanoseconds, Z) as epoch seconds."""
    if not stamp:
        return 0.0
    head, _, frac = stamp.rstrip("Z").partition(".")
    secs = calendar.timegm(time.strptime(head, "%Y-%m-%dT%H:%M:%S"))
    return secs + float(f"0.{frac or 0}")


def _incident(incidents: Sequence[Event], start: float, end: float) -> Event | None:
    for e in incidents:
        opened = _num(e.data.get("opened_at"))
        if opened is not None and start <= opened < end:
            return e
    return None


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


def _incident_family(drill: Drill, opened: float) -> str:
    """The kind of the newest disruption sent at or before an incident opened."""
    sent = [r for r in drill.records if r.at <= opened + 0.5]
    return FAMILY[sent[-1].shot.kind] if sent else "none"


def figures(drill: Drill, steps: Sequence[int], wall_s: float) -> dict[str, Any]:
    s, records, rows = drill.s, drill.records, drill.rows
    incidents = [e for e in rows if e.kind == EventKind.INCIDENT and e.data.get("outcome")]
    mttr: dict[str, list[float | None]] = {f: [] for f in FAMILIES}
    for inc in incidents:
        fam = _incident_family(drill, _num(inc.data.get("opened_at")) or inc.at)
        mttr.setdefault(fam, []).append(_num(inc.data.get("mttr_s")))
    opened = {incident_of(e) for e in rows if incident_of(e)}
    closed = {incident_of(e) for e in incidents}
    printed = {int(r["id"]) for r in drill.watcher.rows()} if drill.watcher else set()
    journaled = {e.id for e in rows}
    lost_pairs = {(incident_of(e) or f"row:{e.id}", e.host) for e in rows if e.kind in _LOST}
    recovered = sum(e.data.get("outcome") == IncidentOutcome.RECOVERED for e in incidents)
    lives = drill.watcher.lives if drill.watcher else []
    counters = {
        "phantom_preemptions_total": sum(
            x.counters.get("phantom_preemptions_total", 0.0) for x in lives
        ),
        "phantom_recovery_seconds_count": sum(
            x.counters.get("phantom_recovery_seconds_count", 0.0) for x in lives
        ),
    }
    by_family = {f: sum(r.shot.family == f for r in records) for f in FAMILIES}
    losses = by_family["slice-preemption"] + by_family["node-failure"]
    return {
        "seed": s.seed,
        "disruptions": len(records),
        "by_kind": by_family,
        "by_drill_kind": {k: sum(r.shot.kind == k for r in records) for k in KINDS},
        "overlaps": sum(r.overlapping for r in records),
        "watcher_kills": sum(r.watcher_killed for r in records),
        "watcher_kills_mid_recovery": sum(r.killed_mid_recovery for r in records),
        "watcher_lives": len(lives),
        "mttr_s_by_kind": {k: _stats(v) for k, v in mttr.items()},
        "resume_s": _stats([r.resume_s for r in records]),
        "workload": drill.final or None,
        "workload_completed": drill.final == "Completed",
        "final_step": max(steps) if steps else 0,
        "total_steps": s.total(),
        "checkpoint_period": s.period,
        "steps_lost_past_checkpoint": sum(t[2] for t in drill.transitions),
        "steps_redone": _stats([t[1] for t in drill.transitions]),
        "attempts": len(drill.transitions) + 1,
        "journal_rows": len(rows),
        "journal_rows_printed": len(printed),
        "journal_rows_lost": len(printed - journaled),
        "incidents": len(opened),
        "incidents_left_open": len(opened - closed),
        "counters": counters,
        "counters_expected": {
            "phantom_preemptions_total": len(lost_pairs),
            "phantom_recovery_seconds_count": recovered,
        },
        "host_losses_sent": losses,
        "wall_s": round(wall_s, 1),
    }


def check_figures(figs: dict[str, Any]) -> list[str]:
    """What the figures themselves must say (beside the drill's own checks)."""
    out = []
    if figs["journal_rows_lost"]:
        out.append(f"{figs['journal_rows_lost']} journal rows a watcher printed are not in it")
    if figs["incidents_left_open"]:
        out.append(f"{figs['incidents_left_open']} incidents left open")
    for name, want in figs["counters_expected"].items():
        got = figs["counters"][name]
        if got != want:
            out.append(f"/metrics {name} summed over the watchers: {got:g}, the journal: {want}")
    return out


def table(records: Sequence[ShotRecord]) -> str:
    def num(v: float | int | None) -> str:
        return "-" if v is None else f"{v:.1f}" if isinstance(v, float) else str(v)

    cols = ("disruption", "grace", "overlap", "at", "watcher", "MTTR s", "resume s")
    head = f"{cols[0]:<32} " + " ".join(f"{c:>8}" for c in cols[1:]) + "  journal"
    lines = [head, "-" * len(head)]
    for r in records:
        who = "killed" if r.watcher_killed else "-"
        cells = (
            "yes" if r.shot.graceful else "no",
            "yes" if r.overlapping else "-",
            r.reached,
            who,
            r.mttr_s,
            r.resume_s,
        )
        row = " ".join(f"{c if isinstance(c, str) else num(c):>8}" for c in cells)
        name = f"#{r.shot.index} {r.shot.kind} {r.shot.target}"
        lines.append(f"{name:<32} {row}  {','.join(r.journal)}")
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
    ap.add_argument("--count", type=int, default=6, help="disruptions (default 6)")
    ap.add_argument("--overlaps", type=int, default=0, help="of them overlapping (default 0)")
    ap.add_argument("--kills", type=int, default=0, help="watcher SIGKILLs (default 0)")
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
            ("--overlaps", 0 <= args.overlaps <= args.count // 2, "0..count/2"),
            ("--kills", args.kills >= 0, ">= 0"),
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
        overlaps=args.overlaps,
        kills=args.kills,
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
        print(
            f"kept {work} (journal: {work / 'state' / 'phantom' / 'journal.sqlite'})",
            file=sys.stderr,
        )
    print(result.table)
    print(json.dumps(result.figures))
    return 1 if result.problems else 0


if __name__ == "__main__":
    raise SystemExit(main())
