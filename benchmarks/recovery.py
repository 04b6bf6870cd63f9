"""Recovery benchmark: time to detect, MTTR (worker and head), and SSH fan-out scaling.

    .venv/bin/python -m benchmarks.recovery [--repeat 2] [--pairs 3] [--poll 0.5]
        [--rejoin-parallelism N] [--orphans alongside|first]
    .venv/bin/python -m benchmarks.recovery --gcp [--repeat 2] [--poll 0.5]

Against the local emulator with real Ray (temp run dir, free ports, everything stopped at the
end): bring the pod up through ``ClusterServices`` (bootstrap, Ray on 4 hosts, tunnel, a real
``engine.train`` job checkpointing to the pod's bucket), then ``--repeat`` times preempt a
worker and let the watchdog recover on its own, then ``--pairs`` times preempt the head (full
rebuild and job resubmission), each after a cold bring-up.

* ``detect_s``: median of the watchdog's time to detect (its first observation of the loss
  minus the preemption time the TPU API reports), in seconds;
* ``mttr_worker_s`` / ``mttr_head_s``: detection -> verified cluster (4 live Ray nodes, the
  tunnel up, resubmitted jobs RUNNING), median over the worker runs / the head run;
* baselines measured in the same run: ``bringup_s`` (bootstrap + Ray up + tunnel from a bare
  pod, by hand) with ``mttr_head_over_bringup``; ``join_by_hand_s`` (median of ``--repeat``
  times one worker's ``ray start`` into the running cluster, until the head lists it alive) with
  ``mttr_worker_over_join``; and ``detect_over_poll`` (detect time in poll intervals);
* training back, not just the cluster, in ``--pairs`` paired samples taken alternately: a
  cold one (bring-up as above + submit -> the job's first training step, its ``[engine]
  progress`` line as the console reads it from the job's logs; after the first, from a torn
  down cluster, whose job resumes from the checkpoints as the head's does) and right after
  it a head preemption (-> the resubmitted job's first step past the one it resumed at).
  ``first_step_pairs`` lists each pair and its ratio, ``first_step_head_over_cold`` is the
  median ratio (goal <= 1.0) with ``first_step_ratio_range``; ``cold_first_step_s`` /
  ``head_first_step_s`` / ``mttr_head_s`` are medians;
* ``rejoin_parallelism`` / ``orphans``: how the head's recovery rejoined the workers (as the
  console's local wiring sets it unless ``--rejoin-parallelism`` says otherwise, 0: all at
  once) and stopped the dead cluster's Ray (beside the head's rebuild, as the console's plan
  does, unless ``--orphans first`` stops it before), to compare in the same conditions;
* ``step_s``: each recovery step's time in the last worker and the head recovery;
* ``fanout_32_over_1``: from ``bench_fanout`` (the same command on 32 vs 1 emulated hosts,
  fresh connections; near 1 means the fan-out is parallel).

``--gcp``: the gcp code path against the GCP-faithful emulator (``provider = "gcp"``, a GCP
user's SSH key, SSH to the external IPs): the by-hand bring-up, then ``--repeat`` times the
whole slice is preempted and the watchdog deletes and creates the node, trusts the new host
keys, bootstraps, forms Ray, re-opens the tunnel and resubmits the job. Reports
``mttr_slice_s`` (median, detection -> verified) against ``bringup_s`` measured in the same
run (``mttr_slice_over_bringup``); the emulated node is READY ``--ready-delay`` s after its
CreateNode (a real v4-32 takes minutes: add them to the figure).

Last line: one JSON object.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import re
import shlex
import shutil
import statistics
import sys
import tempfile
import textwrap
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

from benchmarks import fanout as bench_fanout
from benchmarks.pods import (
    PodInfo,
    gcp_config,
    gcp_user_key,
    pod_config,
    preempt,
    start_pod,
    stop_pod,
)
from console.config import Config
from console.services.backends.tpu_vm.backend import TpuVmBackend
from console.services.backends.tpu_vm.ray import alive_by_ip
from console.services.facade import Facade
from console.services.jobs.spec import SubmitSpec
from console.services.model import JobStatus, RecoveryStatus, Update
from console.services.recovery.runner import Plan
from console.wiring import make_services

SLEEPER = textwrap.dedent(
    """
    import time
    print("training started", flush=True)
    while True:
        print("tick", flush=True)
        time.sleep(1.0)
    """
)
# The real engine for the main run: what a user waits for is its next training step. Long
# enough to train through every preemption; teardown stops it.
TRAIN_ARGS = (
    "--algo ppo --total-timesteps 10000000 --checkpoint-every 1024 --log-every 256 "
    f"--hparams {shlex.quote(json.dumps({'n_steps': 256}))} --run-name bench-recovery "
    "--eval-episodes 2 --wandb disabled --device cpu --torch-threads 1"
)
# The engine's own lines (engine.trainer, engine.metrics), as benchmarks.chaos_logs reads them.
_RESUMING = re.compile(r"\[engine\] resuming \S+ from checkpoint \S+ at step (?P<step>\d+)")
_PROGRESS = re.compile(r"\[engine\] progress step=(?P<step>\d+)/")


def _config(pod: PodInfo, work: Path, poll_s: float) -> Config:
    return pod_config(
        pod,
        work,
        recovery={"poll_interval_s": poll_s, "ready_timeout_s": 180.0},
        source="<bench_recovery>",
    )


def _project(work: Path) -> Path:
    wd = work / "proj"
    (wd / "engine").mkdir(parents=True, exist_ok=True)
    (wd / "engine" / "__init__.py").write_text("")
    (wd / "engine" / "train.py").write_text(SLEEPER)
    return wd


def _log(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


async def _next_recovery(
    finished: list[RecoveryStatus], n: int, timeout_s: float
) -> RecoveryStatus:
    deadline = time.monotonic() + timeout_s
    while len(finished) < n:
        if time.monotonic() > deadline:
            raise TimeoutError(f"no recovery finished within {timeout_s:.0f}s")
        await asyncio.sleep(0.1)
    return finished[n - 1]


async def bench_recovery(
    repeat: int,
    poll_s: float,
    keep: bool = False,
    pairs_n: int = 3,
    rejoin_parallelism: int | None = -1,
    orphans: str = "default",
) -> dict[str, Any]:
    work = Path(tempfile.mkdtemp(prefix="phantom-bench-recovery-"))
    run_dir = work / "pod"
    pod = await start_pod(run_dir, hosts=4, ssh_port=0, api_port=0, ready_delay=0.2, timeout=180.0)
    svc: Facade | None = None
    try:
        svc = make_services(
            _config(pod, work, poll_s),
            state_dir=work / "state",
            autostart_pod=False,
        )
        finished: list[RecoveryStatus] = []

        def on_update(u: Update) -> None:
            new = not finished or finished[-1].started_at != getattr(u, "started_at", None)
            if isinstance(u, RecoveryStatus) and u.outcome is not None and new:
                finished.append(u)

        backend = svc.backend
        assert isinstance(backend, TpuVmBackend)
        if rejoin_parallelism != -1:  # to compare with what the console's wiring sets
            backend.rejoin_parallelism = rejoin_parallelism
        rejoin_parallelism = backend.rejoin_parallelism
        runner = svc.watchdog.runner
        if orphans != "default":
            until = "workers" if orphans == "alongside" else ""
            runner.plan = Plan(
                tuple(
                    replace(s, overlap_until=until) if s.name == "orphans" else s
                    for s in runner.plan.steps
                )
            )
        orphans = next(
            "alongside" if s.overlap_until else "first"
            for s in runner.plan.steps
            if s.name == "orphans"
        )
        svc.subscribe(on_update)
        await svc.start()
        jobs_seen: set[str] = set()
        cold_first_step, bringup, bringup_steps, job_id = await _cold_sample(svc, jobs_seen)
        await _running(svc, job_id)

        # As many samples as worker recoveries: `ray start` waits for its node in 1 s steps
        # (Ray's GlobalStateAccessor::GetNode), so both sides land on ~2 s or ~3 s here and
        # a single baseline sample made the ratio swing between 0.8 and 1.7.
        joins = [await _join_by_hand(svc, pod.hosts[-1].name) for _ in range(repeat)]
        join_by_hand = statistics.median(joins)
        _log(f"one worker joining the running cluster by hand: {join_by_hand:.1f}s {joins}")

        detects: list[float] = []
        worker_mttrs: list[float] = []
        step_times: dict[str, dict[str, float]] = {}
        for i in range(repeat):
            host = pod.hosts[1 + i % (len(pod.hosts) - 1)].name
            await svc.preempt(host, actor="bench")
            status = await _next_recovery(finished, len(finished) + 1, 600)
            if not status.ok or status.mttr_s is None:
                raise RuntimeError(f"worker recovery {i + 1} failed: {status.result_text}")
            if status.detect_s is not None:
                detects.append(status.detect_s)
            worker_mttrs.append(status.mttr_s)
            step_times["worker"] = _step_times(status)
            _log(f"worker {host}: detect {status.detect_s}s, MTTR {status.mttr_s:.1f}s")
            _log(f"  steps: {step_times['worker']}")

        # Paired samples, alternating: the machine's load drifts over a run (and other work
        # shares its cores), so each head sample is set against the cold one just before it.
        pairs: list[tuple[float, float]] = []
        head_mttrs: list[float] = []
        for i in range(pairs_n):
            if i:
                await svc.teardown(actor="bench")  # disarms the watchdog; ray_up arms it
                cold_first_step, _, _, job_id = await _cold_sample(svc, jobs_seen)
                await _running(svc, job_id)
            t_head = time.perf_counter()
            n = len(finished) + 1
            await svc.preempt(pod.hosts[0].name, actor="bench")
            resumed = asyncio.create_task(_first_new_step(svc, set(jobs_seen), 900))
            status = await _next_recovery(finished, n, 900)
            if not status.ok or status.mttr_s is None:
                resumed.cancel()
                raise RuntimeError(f"head recovery {i + 1} failed: {status.result_text}")
            seen, step, new_job = await resumed
            jobs_seen.update(j.job_id for j in await svc.list_jobs())
            head_first_step = seen - t_head
            if status.detect_s is not None:
                detects.append(status.detect_s)
            head_mttrs.append(status.mttr_s)
            step_times["head"] = _step_times(status)
            pairs.append((cold_first_step, head_first_step))
            _log(f"head: detect {status.detect_s}s, MTTR {status.mttr_s:.1f}s")
            _log(f"  steps: {step_times['head']}")
            _log(
                f"pair {i + 1}: head preemption -> the resumed job's first new step ({step}, "
                f"{new_job}): {head_first_step:.1f}s; cold {cold_first_step:.1f}s; ratio "
                f"{head_first_step / cold_first_step:.3f}"
            )
        await svc.teardown(actor="bench")
    finally:
        if svc is not None:
            await svc.stop()
            svc.close_journal()
        await stop_pod(run_dir)
        if keep:
            _log(f"kept {work} (journal: {work / 'state' / 'journal.sqlite'})")
        else:
            shutil.rmtree(work, ignore_errors=True)
    detect = statistics.median(detects) if detects else float("nan")
    ratios = [h / c for c, h in pairs]
    mttr_head = statistics.median(head_mttrs)
    return {
        "poll_interval_s": poll_s,
        "repeat": repeat,
        "rejoin_parallelism": rejoin_parallelism,
        "orphans": orphans,
        "bringup_s": round(bringup, 2),
        "detect_s": round(detect, 3),
        "detect_over_poll": round(detect / poll_s, 3),
        "mttr_worker_s": round(statistics.median(worker_mttrs), 2),
        "mttr_worker_samples_s": [round(x, 2) for x in worker_mttrs],
        "mttr_head_s": round(mttr_head, 2),
        "mttr_head_over_bringup": round(mttr_head / bringup, 3),
        "mttr_head_samples_s": [round(x, 2) for x in head_mttrs],
        "cold_first_step_s": round(statistics.median(c for c, _ in pairs), 2),
        "head_first_step_s": round(statistics.median(h for _, h in pairs), 2),
        "first_step_head_over_cold": round(statistics.median(ratios), 3),
        "first_step_pairs": [
            {"cold_s": round(c, 2), "head_s": round(h, 2), "ratio": round(h / c, 3)}
            for c, h in pairs
        ],
        "first_step_ratio_range": [round(min(ratios), 3), round(max(ratios), 3)],
        "join_by_hand_s": round(join_by_hand, 2),
        "join_by_hand_samples_s": [round(x, 2) for x in joins],
        "mttr_worker_over_join": round(statistics.median(worker_mttrs) / join_by_hand, 3),
        "step_s": {"bringup": bringup_steps, **step_times},
    }


async def _cold_sample(
    svc: Facade, jobs_seen: set[str]
) -> tuple[float, float, dict[str, float], str]:
    """Cold bring-up (bootstrap + Ray up + tunnel) + submit -> the job's first training step:
    (seconds to that step, bring-up seconds, bring-up seconds by step, the job's id)."""
    t_cold = time.perf_counter()
    bringup, bringup_steps = await _bring_up(svc)
    _log(f"bring-up (bootstrap + ray up + tunnel): {bringup:.1f}s {bringup_steps}")
    job = await svc.submit(SubmitSpec(train_args=TRAIN_ARGS))
    seen, step, _ = await _first_new_step(svc, set(jobs_seen), 600)
    jobs_seen.add(job.job_id)
    cold_first_step = seen - t_cold
    _log(f"cold bring-up + submit -> first step ({step}): {cold_first_step:.1f}s")
    return cold_first_step, bringup, bringup_steps, job.job_id


async def _first_new_step(svc: Facade, old: set[str], timeout_s: float) -> tuple[float, int, str]:
    """When (perf_counter) the console first sees a job not in ``old`` log a training step
    beyond the one it started or resumed at, that step and the job. Polls through the
    recovery: the jobs API is away while the head is rebuilt."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        with contextlib.suppress(Exception):  # no tunnel, no head yet, a job just gone
            for job in await svc.list_jobs():
                if job.job_id in old:
                    continue
                step = _new_step(await svc.job_logs(job.job_id))
                if step is not None:
                    return time.perf_counter(), step, job.job_id
        await asyncio.sleep(0.25)
    raise TimeoutError(f"no job logged a new training step within {timeout_s:.0f}s")


def _new_step(logs: str) -> int | None:
    """The first progress step past the step the trainer resumed at (0: from scratch)."""
    m = _RESUMING.search(logs)
    start = int(m["step"]) if m else 0
    for p in _PROGRESS.finditer(logs, m.end() if m else 0):
        if int(p["step"]) > start:
            return int(p["step"])
    return None


def _step_times(status: RecoveryStatus) -> dict[str, float]:
    return {s.name: round(s.elapsed_s, 2) for s in status.steps if s.state != "skipped"}


async def _join_by_hand(svc: Facade, host: str) -> float:
    """The baseline for a worker's MTTR: one worker joining the running cluster by hand.

    With the watchdog held off, stop Ray on ``host``, wait until the head lists its node
    dead, then time ``ray start --address=<head>`` on it (over SSH) until the head lists it
    alive again: what a user types to put one node back.
    """
    backend = svc.backend
    assert isinstance(backend, TpuVmBackend)
    ray = backend.parts.ray
    ip = next(ep.ip for ep in ray.workers if ep.name == host)
    svc.watchdog.set_auto(False, actor="bench", journal=False)
    try:
        await ray.stop([host])
        deadline = time.monotonic() + 120
        while alive_by_ip(await ray.nodes()).get(ip, 0):
            if time.monotonic() > deadline:
                raise TimeoutError(f"{host}'s Ray node still alive 120s after ray stop")
            await asyncio.sleep(0.2)
        ep = next(ep for ep in ray.workers if ep.name == host)
        t0 = time.perf_counter()
        res = await ray.ssh.run_one(host, f"{ray.worker_command(ep)} 2>&1")
        if not res.ok:
            raise RuntimeError(f"ray start on {host} failed: {res.error}")
        await ray.wait_alive([ip], 120.0)
        return time.perf_counter() - t0
    finally:
        svc.watchdog.set_auto(True, actor="bench", journal=False)


async def _bring_up(svc: Facade) -> tuple[float, dict[str, float]]:
    """bootstrap + Ray up + tunnel by hand, from a bare pod: seconds, in total and by step."""
    steps: dict[str, float] = {}
    for step in (svc.bootstrap, svc.ray_up, svc.open_tunnel):
        t0 = time.perf_counter()
        res = await step()
        if not res.ok:
            raise RuntimeError(f"{res.action} failed: {res.message}")
        steps[res.action] = round(time.perf_counter() - t0, 2)
    return sum(steps.values()), steps


async def _running(svc: Facade, job_id: str, timeout_s: float = 180.0) -> None:
    deadline = time.monotonic() + timeout_s
    while (await svc.job_status(job_id)).status is not JobStatus.RUNNING:
        if time.monotonic() > deadline:
            raise TimeoutError(f"job {job_id} not RUNNING after {timeout_s:.0f}s")
        await asyncio.sleep(0.5)


async def bench_gcp(
    repeat: int, poll_s: float, ready_delay: float, keep: bool = False
) -> dict[str, Any]:
    """Whole-slice preemptions through the gcp code path (see the module doc)."""
    work = Path(tempfile.mkdtemp(prefix="phantom-bench-gcp-"))
    run_dir = work / "pod"
    key = gcp_user_key(work / "google_compute_engine")
    pod = await start_pod(
        run_dir,
        hosts=4,
        faithful=True,
        ssh_user="phantom-user",
        ssh_key=key,
        ready_delay=ready_delay,
        timeout=180.0,
    )
    svc: Facade | None = None
    try:
        cfg = gcp_config(
            pod,
            work,
            ray={"num_cpus": 1, "object_store_mb": 100},  # four nodes on this machine's cores
            recovery={"poll_interval_s": poll_s, "ready_timeout_s": 180.0},
            extra={
                "bootstrap": {"command": 'python -c "import ray, sys; print(sys.version)"'},
                "storage": {"uri": pod.bucket_uri},
            },
            source="<bench_recovery --gcp>",
        )
        svc = make_services(cfg, state_dir=work / "state", working_dir=_project(work))
        finished: list[RecoveryStatus] = []

        def on_update(u: Update) -> None:
            new = not finished or finished[-1].started_at != getattr(u, "started_at", None)
            if isinstance(u, RecoveryStatus) and u.outcome is not None and new:
                finished.append(u)

        svc.subscribe(on_update)
        await svc.start()
        bringup, _ = await _bring_up(svc)
        _log(f"gcp path bring-up (bootstrap + ray up + tunnel): {bringup:.1f}s")
        job = await svc.submit(SubmitSpec(train_args="--algo ppo --total-timesteps 1000"))
        await _running(svc, job.job_id)
        detects: list[float] = []
        mttrs: list[float] = []
        for i in range(repeat):
            await preempt(run_dir, "all")
            status = await _next_recovery(finished, i + 1, 900)
            if not status.ok or status.mttr_s is None:
                raise RuntimeError(f"whole-slice recovery {i + 1} failed: {status.result_text}")
            if status.detect_s is not None:
                detects.append(status.detect_s)
            mttrs.append(status.mttr_s)
            _log(f"slice {i + 1}: detect {status.detect_s}s, MTTR {status.mttr_s:.1f}s")
        await svc.teardown(actor="bench")
    finally:
        if svc is not None:
            await svc.stop()
            svc.close_journal()
        await stop_pod(run_dir)
        if keep:
            _log(f"kept {work} (journal: {work / 'state' / 'journal.sqlite'})")
        else:
            shutil.rmtree(work, ignore_errors=True)
    mttr = statistics.median(mttrs)
    return {
        "mode": "gcp",
        "poll_interval_s": poll_s,
        "ready_delay_s": ready_delay,
        "repeat": repeat,
        "bringup_s": round(bringup, 2),
        "detect_s": round(statistics.median(detects), 3) if detects else None,
        "mttr_slice_s": round(mttr, 2),
        "mttr_slice_samples_s": [round(x, 2) for x in mttrs],
        "mttr_slice_over_bringup": round(mttr / bringup, 3),
    }


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="bench_recovery", description=__doc__.splitlines()[0])
    ap.add_argument("--repeat", type=int, default=2, help="worker preemptions (median)")
    ap.add_argument(
        "--pairs", type=int, default=3, help="paired cold / head-preemption first-step samples"
    )
    ap.add_argument(
        "--rejoin-parallelism",
        type=int,
        default=-1,
        help="concurrent `ray start`s when a recovery rejoins workers (0: all at once; "
        "default: what the console's local wiring sets)",
    )
    ap.add_argument(
        "--orphans",
        choices=("default", "alongside", "first"),
        default="default",
        help="a head recovery's stop of the dead cluster's Ray: beside the head's rebuild or "
        "before it (default: what the console's plan does, alongside)",
    )
    ap.add_argument("--poll", type=float, default=0.5, help="recovery.poll_interval_s")
    ap.add_argument("--fanout-repeat", type=int, default=3, help="samples per fan-out point")
    ap.add_argument("--skip-fanout", action="store_true", help="recovery figures only")
    ap.add_argument("--keep", action="store_true", help="keep the work dir and its journal")
    ap.add_argument("--gcp", action="store_true", help="whole-slice MTTR through the gcp code path")
    ap.add_argument(
        "--ready-delay", type=float, default=0.2, help="--gcp: emulated CreateNode -> READY (s)"
    )
    args = ap.parse_args(argv)
    if (
        args.repeat < 1
        or args.pairs < 1
        or args.poll <= 0
        or args.fanout_repeat < 1
        or args.rejoin_parallelism < -1
    ):
        print(
            "bench_recovery: --repeat >= 1, --pairs >= 1, --poll > 0, --fanout-repeat >= 1",
            file=sys.stderr,
        )
        return 2
    os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
    os.environ.setdefault("WANDB_MODE", "offline")
    os.environ.setdefault("WANDB_SILENT", "true")
    os.environ.setdefault("NO_GCE_CHECK", "True")
    if args.gcp:
        if args.ready_delay < 0:
            print("bench_recovery: --ready-delay >= 0", file=sys.stderr)
            return 2
        gcp = asyncio.run(bench_gcp(args.repeat, args.poll, args.ready_delay, args.keep))
        print(json.dumps(gcp))
        return 0
    rejoin = None if args.rejoin_parallelism == 0 else args.rejoin_parallelism
    out = asyncio.run(
        bench_recovery(args.repeat, args.poll, args.keep, args.pairs, rejoin, args.orphans)
    )
    if not args.skip_fanout:
        # After the recovery runs, so the two never compete for the same cores.
        fan, _ = asyncio.run(bench_fanout.bench([1, 4, 32], "sleep 0.5", args.fanout_repeat))
        cold = fan["sleep 0.5"]["cold"]
        out["fanout_s"] = {str(n): round(v, 4) for n, v in cold.items()}
        out["fanout_32_over_1"] = round(cold[32] / cold[1], 3)
    print(json.dumps(out))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
