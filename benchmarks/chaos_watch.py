"""Chaos drill with the real `phantom watch` as the only watchdog, itself SIGKILLed.

    .venv/bin/python -m benchmarks.chaos_watch [--seed 1] [--kills 8] [--overlaps 2]
        [--watcher-kills 1] [--slices 1] [--run-cap 4] [--wandb-run-cap 0] [--wandb-kills 4]
        [--wandb-overlaps 1] [--wandb-watcher-kills 1] [--keep]
    make chaos-watch [CHAOS_SEED=1] [CHAOS_WATCH_ARGS="--kills 50 --slices 10 ..."]

Against the local pod emulator with real Ray: a user's session forms the cluster and submits
a Ray Tune sweep, then exits; `phantom watch` runs as a separate process (as in a container,
with its /metrics) and nothing else recovers. Seeded kills: a worker's VM, the head's, or the
whole slice (every host at once), each once the cluster is back; some followed by a second
kill 2-8 s later (an overlap: a host lost while the first loss is recovered); some with the
watcher SIGKILLed 1-6 s into the recovery and started again 0-3 s later, as systemd would.
With ``--wandb-run-cap N``, then a W&B phase on the same pod under the same watcher (its config
W&B online against the local W&B emulator from the start): a session submits seed 000's sweep
on W&B and exits, and the phase's own seeded kills (workers and the head, abrupt; overlaps,
the watcher SIGKILLed in a head's recovery) follow (``chaos_watch_wandb``).

Printed per run (last line one JSON object): kills by kind, overlaps, watcher kills, MTTR by
kind (the journal's), trials final, trials restarted from zero, steps lost past the last
checkpoint (an attempt resumed before its predecessor's last checkpoint), kills with no
journal row, incidents left open, the Prometheus preemption counters (each watcher's last
scrape, summed) against the hosts killed, and the longest journal row. Checks (exit 1 with
each failure named): every trial final, none restarted from zero, no step lost past a
checkpoint, every kill journaled, no incident left open, no recovery ended failed, the
watchers' preemption counters (summed over their lives) equal to the journal's lost hosts
(each host once per incident; short by at most those journaled between a life's last scrape
and its SIGKILL, which no scrape saw and its successor does not count again), the longest row under 16 KB, nothing left running; with
the W&B phase also its own figures (``wandb_*``: kills by kind in the phase, MTTR by kind, runs
final / run cap, runs restarted from zero, steps lost past a checkpoint, relaunches) and
checks (``chaos_watch_wandb``). Exit 2 for usage.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import functools
import json
import os
import random
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import urllib.request
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from benchmarks import chaos_wandb as cw
from benchmarks.chaos_report import brief, trial_restarts
from benchmarks.chaos_watch_plan import (
    HEAD,
    SLICE,
    TUNE,
    WANDB,
    WORKER,
    Kill,
    draw,
    kill_counts,
    lost_past_checkpoint,
    mttr_by_kind,
    phase_figures,
)
from benchmarks.pods import (
    PodInfo,
    daemon_pid,
    leftovers,
    pod_toml,
    preempt_host,
    start_pod,
    stop_pod,
)
from console.services.facade import Facade
from console.services.jobs.spec import SubmitSpec
from console.services.model import EventKind
from console.services.record.incidents import incident_of
from console.services.record.journal import Journal
from engine.sweep_tune import read_status

ROW_LIMIT = 16_000
# What counts as a recovery's end in the journal.
_ENDS = (EventKind.RECOVERED, EventKind.RECOVERY_FAILED)


@dataclass(frozen=True)
class WatchDrillSettings:
    seed: int = 1
    kills: int = 8  # first kills (an overlap's second kill comes on top)
    overlaps: int = 2  # of them followed by a second kill within 2-8 s
    watcher_kills: int = 1  # of them with the watcher SIGKILLed 1-6 s into the recovery
    slices: int = 1  # of them taking the whole slice
    run_cap: int = 4
    hosts: int = 4
    poll_s: float = 0.5
    trial_interval: int = 2048
    recovery_timeout_s: float = 600.0
    # > 0: then seed 000's sweep on W&B (``chaos_watch_wandb``) of this run cap, with kills
    # of its own: workers and the head, abrupt
    wandb_run_cap: int = 0
    wandb_kills: int = 4
    wandb_overlaps: int = 1
    wandb_watcher_kills: int = 1
    wandb_interval: int = 1024

    def trial_total(self) -> int:
        # the sweep trains through every kill: about one interval per kill, and margin
        # measured on a 2-core box: a kill and its recovery take about 2.5 intervals of a
        # trial's training; the trials must still be training at the last kill
        return self.trial_interval * (5 * (self.kills + self.overlaps) // 2 + 4)

    def wandb_total(self) -> int:
        # as the trials': about 5,120 steps of training per kill, and margin
        return self.wandb_interval * (5 * (self.wandb_kills + self.wandb_overlaps) + 4)


@dataclass
class WatchDrillResult:
    figures: dict[str, Any]
    problems: list[str]
    kills: list[Kill] = field(default_factory=list)


def schedule(s: WatchDrillSettings) -> list[tuple[str, bool, bool]]:
    """The Tune phase's seeded plan: for each first kill, its kind, whether a second kill
    overlaps it and whether the watcher is killed in its recovery (the counts as asked, in a
    drawn order)."""
    return draw(random.Random(s.seed), s.kills, s.overlaps, s.watcher_kills, [SLICE] * s.slices)


class WatchProcess:
    """One `phantom watch` life: its process, its output in files, its /metrics."""

    def __init__(self, argv: list[str], env: dict[str, str], out: Path) -> None:
        self.out = out
        with open(out, "w") as stdout, open(out.with_suffix(".err"), "w") as stderr:
            self.proc = subprocess.Popen(argv, env=env, stdout=stdout, stderr=stderr)

    def alive(self) -> bool:
        return self.proc.poll() is None

    def metrics_url(self) -> str | None:
        """Where this life serves /metrics, as its started line says (None: not started)."""
        if not self.out.exists():
            return None
        for line in self.out.read_text(errors="replace").splitlines():
            with contextlib.suppress(ValueError):
                record = json.loads(line)
                if isinstance(record, dict) and record.get("state") == "started":
                    url = record.get("metrics")
                    return url if isinstance(url, str) else None
        return None

    def kill(self) -> None:
        if self.alive():
            self.proc.send_signal(signal.SIGKILL)
        self.proc.wait(30)

    def stop(self) -> int:
        if self.alive():
            self.proc.send_signal(signal.SIGTERM)
        try:
            return self.proc.wait(180)
        except subprocess.TimeoutExpired:
            self.kill()
            return -9


class WatchDrill:
    def __init__(
        self, s: WatchDrillSettings, work: Path, say: Callable[[str], None] | None = None
    ) -> None:
        self.s = s
        self.work = work
        self.say = say or (lambda msg: None)
        self.t0 = time.monotonic()
        self.rng = random.Random(s.seed * 7919 + 1)
        self.pod: PodInfo | None = None
        self.kills: list[Kill] = []
        self.problems: list[str] = []
        self.watchers: list[WatchProcess] = []
        self.counted: list[float | None] = []  # each life's last count (None: no scrape)
        # losses journaled between a life's last scrape and its end: counted, never scraped
        self.unscraped: set[tuple[str, str]] = set()
        self.down = False  # the drill killed the watcher and has not started it again
        self.config = work / "phantom.toml"
        self.state = work / "state" / "phantom"
        self.journal_path = self.state / "journal.sqlite"
        self.sweep_id = f"chaos-watch-s{s.seed}"
        self.wandb = cw.WandbServer(work / "wandb-emu") if s.wandb_run_cap else None
        self.wandb_figures: dict[str, Any] = {}
        # what a phase does once a kill is fired (the W&B phase: its trainers marked killed)
        self.after_kill: Callable[[Kill], Awaitable[None]] | None = None

    def _say(self, msg: str) -> None:
        self.say(f"[chaos-watch {time.monotonic() - self.t0:7.1f}s] {msg}")

    # -- processes ---------------------------------------------------------------------------
    def env(self) -> dict[str, str]:
        env = {k: v for k, v in os.environ.items() if not k.startswith(("WANDB_", "XDG_"))}
        env.update(
            RAY_USAGE_STATS_ENABLED="0",
            WANDB_MODE="offline",
            WANDB_SILENT="true",
            WANDB_DIR=str(self.work / "wandb"),
            PHANTOM_NO_CONFIG_DISCOVERY="1",
            NO_GCE_CHECK="True",
            XDG_STATE_HOME=str(self.work / "state"),
            XDG_CONFIG_HOME=str(self.work / "config"),
            PYTHONUNBUFFERED="1",
        )
        return env

    def start_watcher(self) -> None:
        n = len(self.watchers)
        argv = [
            sys.executable,
            "-m",
            "console.cli",
            "--config",
            str(self.config),
            "watch",
            "--metrics",
            "127.0.0.1:0",  # each life's own port, read from its started line
        ]
        self.watchers.append(WatchProcess(argv, self.env(), self.work / f"watch-{n}.out"))

    def watcher_alive(self) -> None:
        """Raise when the watcher exited on its own (not killed by the drill)."""
        if self.watchers and not self.down and not self.watchers[-1].alive():
            w = self.watchers[-1]
            err = w.out.with_suffix(".err").read_text(errors="replace").strip().splitlines()
            raise RuntimeError(
                f"phantom watch exited ({w.proc.returncode}): {err[-1] if err else ''}"
            )

    def scrape(self) -> float | None:
        """The current watcher's phantom_preemptions_total, summed over its labels."""
        url = self.watchers[-1].metrics_url() if self.watchers else None
        if url is None:
            return None
        try:
            with urllib.request.urlopen(url, timeout=5) as resp:
                text = resp.read().decode()
        except OSError:
            return None
        return sum(
            float(line.rsplit(" ", 1)[1])
            for line in text.splitlines()
            if line.startswith("phantom_preemptions_total")
        )

    async def end_watcher_life(self, kill: bool) -> None:
        w = self.watchers[-1]
        before = await asyncio.to_thread(self.loss_pairs)
        self.counted.append(await asyncio.to_thread(self.scrape))
        await asyncio.to_thread(w.kill if kill else w.stop)
        self.unscraped |= await asyncio.to_thread(self.loss_pairs) - before

    # -- the journal -------------------------------------------------------------------------
    def loss_pairs(self) -> set[tuple[str, str]]:
        """What the exporter counts: each lost host once per incident, whichever rows say it."""
        kinds = (EventKind.PREEMPTED, EventKind.HOST_LOST)
        return {(incident_of(e) or f"row:{e.id}", e.host) for e in self.rows(kinds=kinds) if e.host}

    def rows(self, after: float = 0.0, kinds: Sequence[str] | None = None) -> list[Any]:
        with Journal(self.journal_path) as j:
            return [e for e in j.query(limit=1_000_000, kinds=kinds) if e.at >= after]

    async def until(self, check: Callable[[], bool], timeout_s: float, what: str) -> None:
        deadline = time.monotonic() + timeout_s
        while not await asyncio.to_thread(check):
            self.watcher_alive()
            if time.monotonic() > deadline:
                raise TimeoutError(f"no {what} within {timeout_s:.0f}s")
            await asyncio.sleep(0.5)

    def settled(self, since: float) -> bool:
        """A recovery ended after ``since`` and none is open (every start has its end)."""
        # One recovery runs at a time: the newest start-or-end row being an end means none
        # is open (a killed watcher's start is followed by its successor's own).
        rows = self.rows(since, kinds=(EventKind.RECOVERY_STARTED, *_ENDS))
        return bool(rows) and rows[-1].kind in _ENDS

    # -- the drill ---------------------------------------------------------------------------
    async def run(self) -> WatchDrillResult:
        run_dir = self.work / "pod"
        daemon: int | None = None
        try:
            self.pod = await start_pod(run_dir, hosts=self.s.hosts, ready_delay=0.2, timeout=180.0)
            daemon = daemon_pid(run_dir)
            if self.wandb is not None:
                self.wandb.start()  # its key in this env, by name: the watcher inherits it
            wandb = self.wandb.config() if self.wandb is not None else None
            self.config.write_text(pod_toml(self.pod, self.work, self.s.poll_s, wandb=wandb))
            await self.form_and_submit()
            self.start_watcher()
            try:
                await self.until(lambda: self.started_once(), 120, "watcher start")
                await self.wait_trials_running()
                await self.drill(schedule(self.s), TUNE, self.wait_trials_running)
                await self.wait_sweep()
                if self.wandb is not None:
                    from benchmarks.chaos_watch_wandb import wandb_phase

                    await wandb_phase(self)
            except Exception as exc:  # the drill's own failure: named, still cleaned up
                self.problems.append(f"aborted: {type(exc).__name__}: {exc}")
            finally:
                if self.watchers and self.watchers[-1].alive():
                    await self.end_watcher_life(kill=False)
        finally:
            try:
                if self.wandb is not None:
                    self.wandb.stop()
            finally:
                await stop_pod(run_dir)
        await self.nothing_left(run_dir, daemon)
        return self.result()

    def started_once(self) -> bool:
        out = self.watchers[-1].out
        return out.exists() and '"started"' in out.read_text(errors="replace")

    @contextlib.asynccontextmanager
    async def session(self) -> AsyncIterator[Facade]:
        """A user's console session on the drill's config and journal, closed on exit."""
        from console.config import load_config
        from console.wiring import make_services

        os.environ.update({k: v for k, v in self.env().items() if k.startswith("WANDB_")})
        cfg = load_config(str(self.config), discover=False)
        svc = make_services(cfg, state_dir=self.state, autostart_pod=False)
        try:
            await svc.start()
            yield svc
        finally:
            await svc.stop()
            svc.close_journal()

    async def form_and_submit(self) -> None:
        """A user's session: bootstrap, Ray up, the sweep submitted; then it exits."""
        async with self.session() as svc:
            for step in (svc.bootstrap, svc.ray_up):
                res = await step(actor="chaos")
                if not res.ok:
                    raise RuntimeError(f"bring-up: {res.action}: {res.message}")
            s = self.s
            job = await svc.submit(
                SubmitSpec(
                    mode="sweep",
                    sweep_kind="ppo_rl_study",
                    sweep_method="random",
                    run_cap=s.run_cap,
                    num_nodes=s.hosts,
                    agents_per_node=1,
                    tpu_per_task=0,
                    sweep_id=self.sweep_id,
                    sweep_args=(
                        f"--trial-timesteps {s.trial_total()} --checkpoint-every "
                        f"{s.trial_interval} --max-failures 100 --wandb offline"
                    ),
                ),
                actor="chaos",
            )
            self._say(f"sweep {self.sweep_id} submitted as {job.job_id}; the session exits")

    def trials(self) -> dict[str, dict[str, Any]]:
        assert self.pod is not None
        return read_status(f"{self.pod.bucket_uri}/sweeps", self.sweep_id)

    async def wait_trials_running(self) -> None:
        def started() -> bool:
            return any((t.get("step") or 0) > 0 for t in self.trials().values())

        await self.until(started, 600, "trial past its first checkpoint")

    async def fire(
        self,
        kind: str,
        overlap_of: int | None = None,
        phase: str = TUNE,
        busy: Sequence[int] = (),
    ) -> Kill:
        """Kill ``kind``; a worker is one of ``busy`` (host indices) when given."""
        assert self.pod is not None
        hosts = self.pod.hosts
        if kind == SLICE:
            target: int | str = "all"
            names = [h.name for h in hosts]
        elif kind == HEAD:
            target, names = 0, [hosts[0].name]
        else:
            i = self.rng.choice(list(busy)) if busy else self.rng.randrange(1, len(hosts))
            target, names = i, [hosts[i].name]
        kill = Kill(len(self.kills) + 1, kind, names, time.time(), overlap_of, phase=phase)
        self.kills.append(kill)
        await preempt_host(self.pod.run_dir, target)
        self._say(
            f"kill {kill.index} ({phase}): {kind} {','.join(names)}"
            + (f" (overlapping kill {overlap_of})" if overlap_of else "")
        )
        if self.after_kill is not None:
            await self.after_kill(kill)
        return kill

    async def drill(
        self,
        plan: Sequence[tuple[str, bool, bool]],
        phase: str,
        ready: Callable[[], Awaitable[None]],
        aim: Callable[[], Awaitable[Sequence[int]]] | None = None,
    ) -> None:
        """Each planned kill once the cluster is back and ``ready`` (training again); a
        worker kill takes one of the workers ``aim`` names, when it names any."""
        for kind, overlap, watcher in plan:
            busy = await aim() if aim is not None and kind == WORKER else ()
            first = await self.fire(kind, phase=phase, busy=busy)
            tasks = []
            if overlap:
                tasks.append(asyncio.create_task(self.overlap(first)))
            if watcher:
                tasks.append(asyncio.create_task(self.kill_watcher(first)))
            for t in tasks:
                await t
            since = self.kills[-1].at  # the recovery that ends after the last kill
            await self.until(
                functools.partial(self.settled, since),
                self.s.recovery_timeout_s,
                f"recovery after kill {first.index}",
            )
            await ready()

    async def overlap(self, first: Kill) -> None:
        await asyncio.sleep(self.rng.uniform(2.0, 8.0))
        kind = WORKER if first.kind != WORKER or self.rng.random() < 0.7 else HEAD
        await self.fire(kind, overlap_of=first.index, phase=first.phase)

    async def kill_watcher(self, first: Kill) -> None:
        await self.until(
            lambda: bool(self.rows(first.at, kinds=(EventKind.RECOVERY_STARTED,))),
            120,
            f"recovery started after kill {first.index}",
        )
        await asyncio.sleep(self.rng.uniform(1.0, 6.0))
        self.down = True
        await self.end_watcher_life(kill=True)
        first.watcher_killed = True
        self._say(f"watcher SIGKILLed in the recovery of kill {first.index}")
        await asyncio.sleep(self.rng.uniform(0.0, 3.0))
        self.start_watcher()
        self.down = False
        self._say("watcher started again")

    async def wait_sweep(self) -> None:
        total = self.s.trial_total()

        def done() -> bool:
            trials = self.trials()
            return len(trials) >= self.s.run_cap and all(
                t.get("final") and t.get("step") == total for t in trials.values()
            )

        try:
            await self.until(done, 1800, "sweep's end")
        except TimeoutError as exc:
            self.problems.append(f"{exc}: {brief(self.trials())}")

    async def nothing_left(self, run_dir: Path, daemon: int | None) -> None:
        left: list[int] = []
        for _ in range(60):
            left = leftovers(run_dir, daemon)
            if not left:
                return
            await asyncio.sleep(0.5)
        self.problems.append(f"left running after the drill: pids {left}")

    # -- figures -----------------------------------------------------------------------------
    def result(self) -> WatchDrillResult:
        figs: dict[str, Any] = {"seed": self.s.seed}
        figs["wall_s"] = round(time.monotonic() - self.t0, 1)
        figs.update(kill_counts(self.kills))
        try:
            self.journal_figures(figs)
        except Exception as exc:  # named, never a traceback instead of the figures
            self.problems.append(f"journal: cannot read it: {type(exc).__name__}: {exc}")
        trials = self.trials() if self.pod is not None else {}
        total = self.s.trial_total()
        final = [t for t in trials.values() if t.get("final") and t.get("step") == total]
        figs["run_cap"] = self.s.run_cap
        figs["trials_final"] = len(final)
        restarts = trial_restarts(trials)
        figs["trials_restarted_from_zero"] = len(restarts)
        figs["steps_lost_past_checkpoint"] = steps_lost(trials)
        figs["prometheus_preemptions_summed"] = sum(c or 0.0 for c in self.counted)
        unread = sum(c is None for c in self.counted)
        if unread:
            self.problems.append(f"/metrics not read at the end of {unread} watcher lives")
        elif not (
            0
            <= figs.get("preemptions_journaled", 0) - figs["prometheus_preemptions_summed"]
            <= len(self.unscraped)
        ):
            self.problems.append(
                f"/metrics phantom_preemptions_total summed over the watchers: "
                f"{figs['prometheus_preemptions_summed']:g}, the journal: "
                f"{figs.get('preemptions_journaled')} ({len(self.unscraped)} journaled between "
                "a life's last scrape and its end)"
            )
        figs["preemptions_unscraped"] = len(self.unscraped)
        if len(final) != self.s.run_cap:
            self.problems.append(f"{len(final)} of {self.s.run_cap} trials final: {brief(trials)}")
        self.problems += restarts
        if figs["steps_lost_past_checkpoint"]:
            self.problems.append(
                f"{figs['steps_lost_past_checkpoint']} steps lost past a checkpoint"
            )
        figs.update(self.wandb_figures)
        return WatchDrillResult(figs, self.problems, self.kills)

    def journal_figures(self, figs: dict[str, Any]) -> None:
        with Journal(self.journal_path) as j:
            rows = j.query(limit=1_000_000)
            recs = j.recoveries()
            longest = j.read("SELECT MAX(LENGTH(message) + LENGTH(data)) FROM events")[0][0]
        figs["journal_rows"] = len(rows)
        figs["longest_row_bytes"] = int(longest or 0)
        if figs["longest_row_bytes"] >= ROW_LIMIT:
            self.problems.append(f"the longest journal row is {longest} bytes (>= {ROW_LIMIT})")
        # every kill has a row naming each host it took (preempted, host_lost, or a notice)
        lost_kinds = {EventKind.PREEMPTED, EventKind.HOST_LOST, "head_lost"}
        unjournaled = 0
        for i, k in enumerate(self.kills):
            end = self.kills[i + 1].at if i + 1 < len(self.kills) else float("inf")
            seen = {e.host for e in rows if e.kind in lost_kinds and k.at <= e.at < end}
            if not set(k.hosts) & seen and not any(
                e.kind in lost_kinds and k.at <= e.at < end for e in rows
            ):
                unjournaled += 1
                self.problems.append(f"journal: no loss row for kill {k.index} ({k.kind})")
        figs["kills_not_journaled"] = unjournaled
        figs["preempted_rows"] = sum(1 for e in rows if e.kind == EventKind.PREEMPTED)
        figs["preemptions_journaled"] = len(self.loss_pairs())
        failed = [r for r in recs if r.ok is False]
        figs["recoveries"] = len(recs)
        figs["recoveries_failed"] = len(failed)
        for r in failed:
            self.problems.append(f"a recovery ended failed at {r.failed_step}: {r.trigger}")
        # incidents: each incident id seen on a row has its summary row
        ids = {str(e.data.get("incident")) for e in rows if e.data.get("incident")}
        summed = {str(e.data.get("incident")) for e in rows if e.kind == EventKind.INCIDENT}
        figs["incidents"] = len(ids)
        figs["incidents_left_open"] = len(ids - summed)
        if ids - summed:
            self.problems.append(f"incidents left open: {sorted(ids - summed)}")
        spans = [(r.started_at, r.ended_at, r.mttr_s if r.ok else None) for r in recs]
        figs["mttr_s_by_kind"] = mttr_by_kind(spans, self.kills)
        if any(k.phase == WANDB for k in self.kills):
            figs.update(phase_figures("wandb_", self.kills, spans, WANDB))


def steps_lost(trials: dict[str, dict[str, Any]]) -> int:
    """Steps an attempt redid before its predecessor's last checkpoint (0 when each resume
    starts at the last checkpoint), from each trial's status file."""
    return lost_past_checkpoint(
        [
            ((a.get("resumed_from_step") or 0), (a.get("last_step") or 0))
            for a in sorted(trial.get("attempts", []), key=lambda a: a.get("started_unix", 0))
        ]
        for trial in trials.values()
    )


def table(figs: dict[str, Any]) -> str:
    keys = [
        "kills",
        "kills_by_kind",
        "overlaps",
        "watcher_kills",
        "hosts_killed",
        "mttr_s_by_kind",
        "run_cap",
        "trials_final",
        "trials_restarted_from_zero",
        "steps_lost_past_checkpoint",
        "kills_not_journaled",
        "incidents",
        "incidents_left_open",
        "recoveries",
        "recoveries_failed",
        "preempted_rows",
        "prometheus_preemptions_summed",
        "preemptions_journaled",
        "preemptions_unscraped",
        "longest_row_bytes",
        "journal_rows",
        "wall_s",
    ]
    if "wandb_run_cap" in figs:
        keys += WANDB_KEYS
    return "\n".join(f"{k:32} {json.dumps(figs.get(k))}" for k in keys)


# The W&B phase's own figures, when it ran.
WANDB_KEYS = [
    "wandb_kills",
    "wandb_kills_by_kind",
    "wandb_overlaps",
    "wandb_watcher_kills",
    "wandb_hosts_killed",
    "wandb_mttr_s_by_kind",
    "wandb_sweep_id",
    "wandb_run_cap",
    "wandb_runs_final",
    "wandb_runs_restarted_from_zero",
    "wandb_steps_lost_past_checkpoint",
    "wandb_trainer_attempts",
    "wandb_relaunches",
    "wandb_owed_recoveries",
]


async def run_watch_drill(
    s: WatchDrillSettings, work: Path | None = None, say: Callable[[str], None] | None = None
) -> WatchDrillResult:
    own = work is None
    path = Path(tempfile.mkdtemp(prefix="phantom-chaos-watch-")) if work is None else work
    path.mkdir(parents=True, exist_ok=True)
    try:
        return await WatchDrill(s, path, say).run()
    finally:
        if own:
            shutil.rmtree(path, ignore_errors=True)


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="benchmarks.chaos_watch", description=__doc__.splitlines()[0])
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--kills", type=int, default=8, help="first kills (default 8)")
    ap.add_argument("--overlaps", type=int, default=2, help="of them overlapped (default 2)")
    ap.add_argument("--watcher-kills", type=int, default=1, help="watcher SIGKILLs (default 1)")
    ap.add_argument("--slices", type=int, default=1, help="whole-slice kills (default 1)")
    ap.add_argument("--run-cap", type=int, default=4, help="the sweep's run cap (default 4)")
    ap.add_argument(
        "--wandb-run-cap",
        type=int,
        default=0,
        help="then seed 000's sweep on the W&B emulator, of this run cap (default 0: none)",
    )
    ap.add_argument("--wandb-kills", type=int, default=4, help="its first kills (default 4)")
    ap.add_argument("--wandb-overlaps", type=int, default=1, help="of them overlapped (default 1)")
    ap.add_argument(
        "--wandb-watcher-kills", type=int, default=1, help="watcher SIGKILLs in it (default 1)"
    )
    ap.add_argument("--keep", action="store_true", help="keep the work dir")
    args = ap.parse_args(argv)
    bad = [
        f"{flag} must be {rule}"
        for flag, ok, rule in (
            ("--kills", args.kills >= 1, ">= 1"),
            ("--overlaps", 0 <= args.overlaps <= args.kills, "between 0 and --kills"),
            ("--watcher-kills", 0 <= args.watcher_kills <= args.kills, "between 0 and --kills"),
            ("--slices", 0 <= args.slices <= args.kills, "between 0 and --kills"),
            ("--run-cap", args.run_cap >= 1, ">= 1"),
            ("--wandb-run-cap", args.wandb_run_cap >= 0, ">= 0"),
            ("--wandb-kills", args.wandb_kills >= 1, ">= 1"),
            (
                "--wandb-overlaps",
                0 <= args.wandb_overlaps <= args.wandb_kills,
                "between 0 and --wandb-kills",
            ),
            (
                "--wandb-watcher-kills",
                0 <= args.wandb_watcher_kills <= args.wandb_kills,
                "between 0 and --wandb-kills",
            ),
        )
        if not ok
    ]
    if bad:
        print(f"benchmarks.chaos_watch: {'; '.join(bad)}", file=sys.stderr)
        return 2
    for name, value in (("RAY_USAGE_STATS_ENABLED", "0"), ("NO_GCE_CHECK", "True")):
        os.environ.setdefault(name, value)
    s = WatchDrillSettings(
        seed=args.seed,
        kills=args.kills,
        overlaps=args.overlaps,
        watcher_kills=args.watcher_kills,
        slices=args.slices,
        run_cap=args.run_cap,
        wandb_run_cap=args.wandb_run_cap,
        wandb_kills=args.wandb_kills,
        wandb_overlaps=args.wandb_overlaps,
        wandb_watcher_kills=args.wandb_watcher_kills,
    )
    work = Path(tempfile.mkdtemp(prefix="phantom-chaos-watch-")) if args.keep else None

    def say(msg: str) -> None:
        print(msg, file=sys.stderr, flush=True)

    result = asyncio.run(run_watch_drill(s, work, say))
    for problem in result.problems:
        print(f"FAILED: {problem}", file=sys.stderr)
    if work is not None:
        print(f"kept {work}", file=sys.stderr)
    print(table(result.figures))
    print(json.dumps(result.figures))
    with contextlib.suppress(Exception):
        sys.stdout.flush()
    return 1 if result.problems else 0


if __name__ == "__main__":
    raise SystemExit(main())
