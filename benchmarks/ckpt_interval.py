"""Checkpoint interval: the console's advice (Young/Daly) against the engine's default, on the
same seeded preemption schedule, as the ledger measures the badput of each.

    .venv/bin/python -m benchmarks.ckpt_interval [--seed 1] [--preemptions 4] [--mtbf 20]
        [--tail 10]

An emulated pod of one host; on it, over SSH, a real ``engine.train`` (PPO on CartPole, W&B
offline) checkpoints to the pod's bucket. The schedule says how many seconds each attempt
trains (from its first progress line) before its host is preempted **abruptly** (no notice,
so everything since the last checkpoint is lost: what makes the interval matter); the host is
then recreated and the same command started again, which resumes from the latest checkpoint.
After the last preemption the final attempt trains ``--tail`` seconds and the run ends.

Run 1 uses the engine's default interval. The console's advice is then taken as a submit takes
it (``ledger.live.LiveAdvisor``: the save cost from the trainer's log lines, the mean time
between preemptions from run 1's journal, the training rate from the checkpoints in its
storage), and run 2 replays the same schedule with ``--checkpoint-every auto`` and the advice
in its environment (the engine says what it chose).

The journal of each run is written as the console writes it: the loss rows by the
``Detector`` from TPU API polls, the submit / job-state / resubmission rows as the job
registry, watcher and watchdog write them. Measured from the ledger (``goodput.account`` over
the run's journal, the trainer's W&B run files as its steps): the redone work (seconds and
steps); the checkpoint overhead is the pauses the engine reported for its saves (each one
from the end of a learn call to the next one's first rollout), read as the advice reads them
(``advice.checkpoint_cost``'s parser); badput = redone + overhead. Printed: each run's figures,
each reclaim's redone seconds by the trainers' own lines, and ``advised / default`` with the
difference against its noise: where a reclaim lands in the checkpoint cycle is luck, so the
difference is weighed against two standard errors from the runs' per-reclaim spread (near
Young's optimum the expected badput is flat, and a few reclaims cannot tell two intervals
apart). The verdict (``advised_not_worse``, the ratio) is by the trainers' lines; the
ledger's ratio is printed beside it. The ledger reads the trainers' step lines
(``engine.contract.TRAINER_STEP``) and W&B run files only for runs those miss; when it read
run files alone, an abruptly reclaimed trainer's last points never landed (at seed 1 it saw
2,560 of the 5,632 redone steps). Last line: one JSON object.
"""

from __future__ import annotations

import argparse
import asyncio
import functools
import itertools
import json
import math
import random
import re
import shlex
import shutil
import statistics
import sys
import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import asyncssh

from benchmarks.pods import PodInfo, pod_status, preempt_host, start_pod, stop_pod
from benchmarks.zone_rates import observation
from console.config import Config
from console.services.backends.tpu_vm.tpu import GcpTpuProvider, local_client
from console.services.jobs.spec import SubmitSpec
from console.services.ledger.advice import Advice, NoAdvice, training_rate
from console.services.ledger.goodput import account, attempts
from console.services.ledger.live import LiveAdvisor
from console.services.ledger.steps import RunSteps, attribute, prefer_lines, read_lines, read_runs
from console.services.ledger.timeline import Cause
from console.services.model import Event, EventKind, JobStatus
from console.services.record.journal import ACTION, RECOVERED, Journal
from console.services.record.sink import EventSink
from console.services.recovery.detector import Detector
from console.wiring.settings import ledger_settings
from emulators.tpu_pod.client import async_recreate
from engine.contract import parse_checkpoint_saved
from engine.trainconfig import DEFAULT_CHECKPOINT_EVERY

REPO = Path(__file__).resolve().parent.parent
POLL_S = 0.2
# Small and fast: a PPO rollout of 128 steps, a progress line and a W&B point for each, so
# the ledger sees where an attempt got to within ~0.1 s of training.
TRAIN = (
    "--algo ppo --env CartPole-v1 --total-timesteps 100000000 --device cpu --torch-threads 1 "
    f"--hparams {shlex.quote(json.dumps({'n_steps': 128}))} --log-every 128 --eval-episodes 1 "
    "--wandb offline"
)
TRAINING_TIMEOUT_S = 180.0  # from launch to the first progress line, on a loaded machine


# -- the schedule ---------------------------------------------------------------------------------
def schedule(seed: int, preemptions: int, mtbf_s: float, floor_s: float = 3.0) -> list[float]:
    """Seconds of training each attempt gets before its host is reclaimed: exponential with
    mean ``mtbf_s`` (Poisson reclaims, as the advice assumes), at least ``floor_s`` (a reclaim
    before the first step measures start-up, not the interval), to 0.1 s."""
    if preemptions < 1:
        raise ValueError(f"--preemptions must be >= 1, got {preemptions}")
    if not mtbf_s > floor_s:
        raise ValueError(f"--mtbf must be > {floor_s:g} s, got {mtbf_s:g}")
    rng = random.Random(seed)
    return [round(max(floor_s, rng.expovariate(1.0 / mtbf_s)), 1) for _ in range(preemptions)]


# -- the journal rows the console writes ----------------------------------------------------------
def submit_row(at: float, job: str, entrypoint: str, actor: str = "user") -> Event:
    """The submitter's action row (``jobs.registry``)."""
    return Event(
        at,
        ACTION,
        f"submitted {job}",
        actor=actor,
        data={"action": "submit", "ok": True, "job_id": job, "entrypoint": entrypoint},
    )


def state_row(at: float, job: str, old: str | None, new: str, entrypoint: str = "") -> Event:
    """The job watcher's transition row (``jobs.watcher.JobTransition.to_event``)."""
    return Event(
        at,
        EventKind.JOB_STATE,
        f"job {job} {old or 'new'} -> {new}",
        actor="jobs",
        data={"job_id": job, "old_status": old, "new_status": new, "entrypoint": entrypoint},
    )


def resubmit_row(at: float, old: str, new: str) -> Event:
    return Event(
        at,
        EventKind.JOB_RESUBMITTED,
        f"job {old} resubmitted as {new}",
        actor="watchdog",
        data={"old_job_id": old, "new_job_id": new},
    )


# -- the measurement ------------------------------------------------------------------------------
@dataclass
class Run:
    """One run's record: its journal rows, the trainer's run files and log lines."""

    name: str
    interval: int  # env steps between checkpoints, as the engine said it chose
    rows: list[Event]
    runs: list[RunSteps]
    lines: list[str]
    end: float
    chose: str = ""  # the engine's own line about the interval (auto)
    preemptions: int = 0
    per_attempt: list[list[str]] = field(default_factory=list)  # each attempt's log lines


_PROGRESS = re.compile(r"\[engine\] progress step=(?P<step>\d+)/")
_RESUMING = re.compile(r"\[engine\] resuming \S+ from checkpoint \S+ at step (?P<step>\d+)")


def redone_per_reclaim(per_attempt: Sequence[Sequence[str]]) -> list[int]:
    """Steps redone at each reclaim by the trainers' own lines (a cross-check of the ledger's
    count): each attempt's last progress step less the step the next one resumed at. Within
    one rollout (the progress line's granularity) of the truth."""
    redone = []
    for before, after in itertools.pairwise(per_attempt):
        reached = [int(m["step"]) for m in map(_PROGRESS.search, before) if m]
        resumed = [int(m["step"]) for m in map(_RESUMING.search, after) if m]
        if reached:
            redone.append(max(0, reached[-1] - (resumed[0] if resumed else 0)))
    return redone


def trainers_redone(per_attempt: Sequence[Sequence[str]]) -> int:
    return sum(redone_per_reclaim(per_attempt))


def spread(per_reclaim_s: Sequence[float]) -> float:
    """Standard error of a run's redone total as an estimate of its expectation: where a
    reclaim lands in the checkpoint cycle is luck, so each reclaim's redone work is one
    draw (sample standard deviation times sqrt(n)); 0 with fewer than two reclaims."""
    if len(per_reclaim_s) < 2:
        return 0.0
    return statistics.stdev(per_reclaim_s) * math.sqrt(len(per_reclaim_s))


def measure(run: Run) -> dict[str, Any]:
    """The run's badput as the ledger counts it (module docstring)."""
    rows = sorted(run.rows, key=lambda e: e.at)
    progress = attribute(run.runs, attempts(rows))
    ledger = account(
        rows, ledger_settings(Config()).pricing, start=rows[0].at, end=run.end, progress=progress
    )
    (job,) = ledger.units
    saves = [s.seconds for s in map(parse_checkpoint_saved, run.lines) if s is not None]
    redone_s = job.seconds[Cause.REDONE]
    overhead_s = sum(saves)
    # each reclaim's redone steps in seconds of training at the trainers' own rate
    rate = training_rate(run.lines)
    per_reclaim = redone_per_reclaim(run.per_attempt)
    per_reclaim_s = [n / rate for n in per_reclaim] if rate else []
    return {
        "interval_steps": run.interval,
        "preemptions": run.preemptions,
        "attempts": len(job.members),
        "wall_s": round(job.wall_s, 2),
        "steps_known": job.steps_known,
        "redone_s": round(redone_s, 3),
        "redone_steps": job.redone_steps,
        "trainers_redone_steps": sum(per_reclaim),
        "redone_per_reclaim_s": [round(x, 2) for x in per_reclaim_s],
        "redone_se_s": round(spread(per_reclaim_s), 3),
        "saves": len(saves),
        "checkpoint_s": round(overhead_s, 3),
        "badput_s": round(redone_s + overhead_s, 3),
        # the same with the trainers' own redone work (their stderr lines, written at once,
        # where a reclaimed trainer's last W&B points may never reach its run file)
        "badput_trainers_s": round(sum(per_reclaim_s) + overhead_s, 3),
        "ledger_seconds": {str(c): round(v, 2) for c, v in job.seconds.items() if v > 0},
        # a cross-check, sensitive to the machine's load: where training got to in the end
        # (the schedule gives both runs the same seconds of training)
        "final_step": max((p.step for r in run.runs for p in r.points), default=0),
    }


def compare(default: dict[str, Any], advised: dict[str, Any]) -> dict[str, Any]:
    """``advised / default`` badput by the trainers' own lines (the ledger's beside it), and
    whether their difference stands out of the luck of where the reclaims landed (two
    standard errors of the difference, ``spread``)."""
    d, a = default["badput_trainers_s"], advised["badput_trainers_s"]
    noise = 2.0 * math.hypot(default.get("redone_se_s", 0.0), advised.get("redone_se_s", 0.0))
    ledger = advised["badput_s"] / default["badput_s"] if default["badput_s"] > 0 else None
    return {
        "advised_over_default": round(a / d, 3) if d > 0 else None,
        "advised_not_worse": a <= d,
        "difference_s": round(a - d, 3),
        "difference_2se_s": round(noise, 3),
        "within_noise": abs(a - d) <= noise,
        "ledger_advised_over_default": None if ledger is None else round(ledger, 3),
    }


def report(result: dict[str, Any]) -> list[str]:
    """The human lines (stderr); the JSON object is the last line of stdout."""
    out = [f"schedule (s of training before each abrupt reclaim): {result['schedule_s']}"]
    if result.get("advice"):
        out.append(f"advice after the default run: {result['advice']}")
    for name in ("default", "advised"):
        r = result.get(name)
        if r is None:
            continue
        out.append(
            f"{name}: every {r['interval_steps']} steps, {r['preemptions']} reclaims: badput "
            f"{r['badput_trainers_s']:.2f}s = redone {r['badput_trainers_s'] - r['checkpoint_s']:.2f}s "
            f"({r['trainers_redone_steps']} steps, the trainers' lines) + checkpoints "
            f"{r['checkpoint_s']:.2f}s ({r['saves']} saves); by the ledger {r['badput_s']:.2f}s "
            f"(redone {r['redone_s']:.2f}s, {r['redone_steps']} steps) in {r['wall_s']:.0f}s; "
            f"reached step {r['final_step']}"
        )
        if r.get("redone_per_reclaim_s"):
            out.append(
                f"  {name} redone per reclaim (s): {r['redone_per_reclaim_s']}, "
                f"s.e. of the total {r['redone_se_s']:.2f}s"
            )
    if result.get("advised_over_default") is not None:
        verdict = "not worse" if result["advised_not_worse"] else "WORSE"
        out.append(
            f"advised / default badput (the trainers' lines): "
            f"{result['advised_over_default']:.2f} ({verdict}); difference "
            f"{result['difference_s']:+.2f}s against a noise of ±{result['difference_2se_s']:.2f}s "
            "(2 s.e.: where the reclaims land): "
            + ("within it" if result["within_noise"] else "beyond it")
        )
    if result.get("ledger_advised_over_default") is not None:
        out.append(
            "advised / default badput by the ledger (W&B run files): "
            f"{result['ledger_advised_over_default']:.2f}"
        )
    return out


# -- the drill ------------------------------------------------------------------------------------
class Drill:
    """One run on its own pod: launches, reclaims, recreates, journals."""

    def __init__(self, work: Path, name: str, pod: PodInfo, env: dict[str, str]) -> None:
        self.work, self.name, self.pod, self.env = work, name, pod, env
        self.journal = Journal(work / "journal.sqlite")
        self.sink = EventSink(self.journal, lambda _u: None)
        self.detector = Detector(self.sink, clock=time.time)
        self.provider = GcpTpuProvider(
            pod.project,
            pod.zone,
            pod.node_name,
            poll_interval_s=POLL_S,
            accelerator_type=pod.accelerator_type,
            client_factory=functools.partial(local_client, pod.tpu_api),
        )
        self.storage = str(pod.bucket / name)
        self.wandb_dir = work / "wandb"
        self.wandb_dir.mkdir(parents=True, exist_ok=True)
        self.logs: list[Path] = []

    def command(self, every: str) -> str:
        log_path = self.work / f"attempt-{len(self.logs)}.log"
        self.logs.append(log_path)
        env = {
            "PYTHONPATH": str(REPO),
            "WANDB_MODE": "offline",
            "WANDB_SILENT": "true",
            "WANDB_DIR": str(self.wandb_dir),
            **self.env,
        }
        argv = [
            sys.executable, "-m", "engine.train", *shlex.split(TRAIN),
            "--run-name", f"ckpt-{self.name}", "--storage", self.storage,
            "--checkpoint-every", every,
        ]  # fmt: skip
        assigns = " ".join(f"{k}={shlex.quote(v)}" for k, v in env.items())
        # only the trainer goes to the background, every stream of it redirected: the SSH
        # session then ends at once (it lasts while anything holds its stdout)
        return (
            f"cd {shlex.quote(str(REPO))} || exit 1; nohup env {assigns} {shlex.join(argv)} "
            f"> {shlex.quote(str(log_path))} 2>&1 < /dev/null &"
        )

    async def poll(self) -> None:
        node = await self.provider.get_node()
        await self.detector.update(observation(node, self.provider.zone, time.time()))

    async def launch(self, every: str) -> float:
        """Start the trainer on the host; returns when it logged its first step."""
        self.pod = await pod_status(self.pod.run_dir) or self.pod  # the host key changed
        cmd = self.command(every)
        async with asyncssh.connect(**self.pod.asyncssh_options(0)) as conn:
            await asyncio.wait_for(conn.run(cmd, check=True), 30.0)
        log_path, deadline = self.logs[-1], time.monotonic() + TRAINING_TIMEOUT_S
        while "[engine] progress step=" not in _read(log_path):
            if time.monotonic() > deadline:
                raise RuntimeError(f"{self.name}: no training step:\n{_read(log_path)[-2000:]}")
            await self.poll()
            await asyncio.sleep(POLL_S)
        return time.monotonic()

    async def train_for(self, seconds: float, since: float) -> None:
        while time.monotonic() < since + seconds:
            await self.poll()
            await asyncio.sleep(min(POLL_S, max(0.0, since + seconds - time.monotonic())))

    async def reclaim(self) -> None:
        """Abrupt reclaim of the host; returns once the detector journaled the loss."""
        before = self._losses()
        await preempt_host(self.pod.run_dir, 0, notice_s=0.0)
        deadline = time.monotonic() + 30.0
        while self._losses() == before:
            if time.monotonic() > deadline:
                raise RuntimeError(f"{self.name}: the reclaim was never journaled")
            await self.poll()
            await self.sink.flush()
            await asyncio.sleep(POLL_S)

    def _losses(self) -> int:
        return len(self.journal.query(1_000_000, kinds=list(_LOSS)))

    async def run(self, every: str, plan: Sequence[float], tail_s: float) -> Run:
        entry = f"python -m engine.train {TRAIN} --checkpoint-every {every}"
        job = f"{self.name}-1"
        self.sink.emit_soon(submit_row(time.time(), job, entry))
        await self.poll()
        for i, seconds in enumerate([*plan, tail_s]):
            self.sink.emit_soon(state_row(time.time(), job, None, JobStatus.RUNNING, entry))
            started = await self.launch(every)
            if i > 0:  # the watchdog's last check: the resubmitted job trains again
                self.sink.emit_soon(Event(time.time(), RECOVERED, f"{job} trains again"))
            await self.train_for(seconds, started)
            if i == len(plan):
                break
            await self.reclaim()
            self.sink.emit_soon(state_row(time.time(), job, JobStatus.RUNNING, JobStatus.LOST))
            await async_recreate(self.pod.run_dir, 0, wait=True)
            old, job = job, f"{self.name}-{i + 2}"
            self.sink.emit_soon(submit_row(time.time(), job, entry, actor="watchdog"))
            self.sink.emit_soon(resubmit_row(time.time(), old, job))
        end = time.time()
        await self.sink.flush()
        lines = [ln for p in self.logs for ln in _read(p).splitlines()]
        chose = next((ln for ln in lines if "[engine] checkpoint every " in ln), "")
        return Run(
            self.name,
            _interval(every, self.env),
            self.journal.query(1_000_000),
            # the trainers' step lines first (exact after a SIGKILL), run files for the rest
            prefer_lines(read_lines(lines), read_runs(self.wandb_dir)),
            lines,
            end,
            chose=chose.strip(),
            preemptions=len(plan),
            per_attempt=[_read(p).splitlines() for p in self.logs],
        )

    async def close(self) -> None:
        await self.provider.close()
        self.sink.close()
        self.journal.close()


_LOSS = {EventKind.PREEMPTED, EventKind.HOST_LOST, EventKind.HEAD_LOST}


def _interval(every: str, env: dict[str, str]) -> int:
    from engine.contract import CHECKPOINT_ADVICE_STEPS

    if every == "auto" and CHECKPOINT_ADVICE_STEPS in env:
        return int(env[CHECKPOINT_ADVICE_STEPS])
    return DEFAULT_CHECKPOINT_EVERY if every == "auto" else int(every)


def _read(path: Path) -> str:
    try:
        return path.read_text(errors="replace")
    except FileNotFoundError:
        return ""


async def _one(
    work: Path, name: str, every: str, env: dict[str, str], plan: Sequence[float], tail_s: float
) -> tuple[Run, Advice | NoAdvice | None]:
    """One run on a fresh pod; for the default run, the advice taken from it at the end."""
    await asyncio.to_thread(work.mkdir, parents=True)
    pod = await start_pod(work / "pod", hosts=1, ready_delay=0.2, timeout=120.0)
    drill = Drill(work, name, pod, env)
    advice = None
    try:
        run = await drill.run(every, plan, tail_s)
        if every != "auto":
            lines = run.lines

            async def logs() -> list[str]:
                return lines

            advisor = LiveAdvisor(drill.journal, drill.storage, hosts=1, job_logs=logs)
            advice = await advisor.advise(SubmitSpec(train_args="--checkpoint-every auto"))
    finally:
        await drill.close()
        await stop_pod(work / "pod")
    return run, advice


async def bench(
    work: Path, seed: int, preemptions: int, mtbf_s: float, tail_s: float
) -> dict[str, Any]:
    plan = schedule(seed, preemptions, mtbf_s)
    result: dict[str, Any] = {"seed": seed, "schedule_s": plan, "tail_s": tail_s}
    print("\n".join(report(result)), file=sys.stderr, flush=True)
    default_run, advice = await _one(
        work / "default", "default", str(DEFAULT_CHECKPOINT_EVERY), {}, plan, tail_s
    )
    result["default"] = measure(default_run)
    result["advice"] = advice.render() if advice is not None else ""
    print(f"default: {json.dumps(result['default'])}", file=sys.stderr, flush=True)
    if not isinstance(advice, Advice):
        result["error"] = "no advice from the default run"
        return result
    advised_run, _ = await _one(work / "advised", "advised", "auto", advice.env(), plan, tail_s)
    result["advised"] = measure(advised_run)
    result["engine_chose"] = advised_run.chose
    result.update(compare(result["default"], result["advised"]))
    return result


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m benchmarks.ckpt_interval", description=__doc__)
    ap.add_argument("--seed", type=int, default=1, help="seed of the reclaim schedule")
    ap.add_argument("--preemptions", type=int, default=4, help="abrupt reclaims per run")
    ap.add_argument("--mtbf", type=float, default=20.0, help="mean s of training between them")
    ap.add_argument("--tail", type=float, default=10.0, help="s trained after the last one")
    args = ap.parse_args(argv)
    try:
        schedule(args.seed, args.preemptions, args.mtbf)
    except ValueError as exc:
        ap.error(str(exc))
    if args.tail < 1:
        ap.error(f"--tail must be >= 1 s, got {args.tail:g}")
    work = Path(tempfile.mkdtemp(prefix="phantom-bench-ckpt-"))
    try:
        result = asyncio.run(bench(work, args.seed, args.preemptions, args.mtbf, args.tail))
    finally:
        shutil.rmtree(work, ignore_errors=True)
    print("\n".join(report(result)), file=sys.stderr)
    print(json.dumps(result))
    return 0 if "error" not in result else 1


if __name__ == "__main__":
    raise SystemExit(main())
