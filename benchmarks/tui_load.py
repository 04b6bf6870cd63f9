"""The TUI bench beside an emulated pod that trains on the same cores (``benchmarks.tui --load``).

    python -m benchmarks.tui --load [--hosts 1024] [--load-jobs 3] [--load-nice 0,19] [--repeat 5]

``make run`` puts the console beside its own emulated pod, whose hosts run Ray and training
on this machine's cores. Here, in one run and each in a fresh bench process (the console):

* ``quiet``: ``benchmarks.tui`` alone (``--hosts`` rows, 10k log lines/s);
* ``loaded_nice<N>``, for each N of ``--load-nice``: the same, while an emulated pod started
  at niceness N (the console's local wiring uses ``LOCAL_POD_NICE``) runs ``--load-jobs``
  real training jobs (``engine.train``, PPO on CartPole, torch on every core), one a host,
  started over SSH and training before the measured bench starts. 0 is how the pod ran
  before; the jobs' training steps per second show what the niceness costs them.

With ``--repeat N`` each condition is measured N times (the loaded ones on one pod bring-up,
the load training throughout), every run printed.

Printed: host-update p99 (``pod_p99_ms``), log p99, frames/s per condition, and each loaded
condition's p99 over the quiet one. Last line: one JSON object.
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
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from benchmarks.pods import PodInfo, start_pod, stop_pod
from console.wiring.control import LOCAL_POD_NICE

REPO = Path(__file__).resolve().parent.parent
STEP = re.compile(r"\[engine\] progress step=(\d+)")
KEYS = ("pod_p50_ms", "pod_p99_ms", "log_p99_ms", "p99_ms", "fps", "no_dropped_state")


class TrainingLoad:
    """``jobs`` training jobs on the hosts of ``pod``, each over its own SSH session; the
    newest training step each reported."""

    def __init__(self, pod: PodInfo, jobs: int) -> None:
        self.pod = pod
        self.jobs = jobs
        self.steps = [0] * jobs
        self._procs: list[asyncio.subprocess.Process] = []
        self._readers: list[asyncio.Task[None]] = []

    def command(self, i: int) -> str:
        storage = f"{self.pod.bucket_uri}/tui-load-{i}"
        return f"cd {shlex.quote(str(REPO))} && exec python -m engine.train " + " ".join(
            [
                "--algo ppo --env CartPole-v1 --device cpu --wandb disabled",
                "--total-timesteps 1000000000 --checkpoint-every 100000000 --log-every 2048",
                f"--seed {i} --storage {shlex.quote(storage)}",
            ]
        )

    async def start(self, timeout_s: float = 180.0) -> None:
        """Start every job; return once each has reported a training step."""
        for i in range(self.jobs):
            proc = await asyncio.create_subprocess_exec(
                *self.pod.ssh_argv(i, self.command(i)),
                stdin=asyncio.subprocess.DEVNULL,
                stdout=asyncio.subprocess.PIPE,
                stderr=asyncio.subprocess.STDOUT,
            )
            self._procs.append(proc)
            self._readers.append(asyncio.create_task(self._read(i, proc)))
        deadline = time.monotonic() + timeout_s
        while not all(self.steps):
            if any(p.returncode is not None for p in self._procs):
                raise RuntimeError("a training job of the load ended before it trained")
            if time.monotonic() > deadline:
                raise TimeoutError(f"the load's jobs did not train within {timeout_s:.0f}s")
            await asyncio.sleep(0.5)

    async def _read(self, i: int, proc: asyncio.subprocess.Process) -> None:
        assert proc.stdout is not None
        async for raw in proc.stdout:
            m = STEP.search(raw.decode(errors="replace"))
            if m:
                self.steps[i] = int(m.group(1))

    async def stop(self) -> None:
        for proc in self._procs:
            with contextlib.suppress(ProcessLookupError):
                proc.kill()
        for proc in self._procs:
            await proc.wait()
        for task in self._readers:
            task.cancel()


async def bench_process(bench_argv: list[str]) -> dict[str, Any]:
    """One ``benchmarks.tui`` run in a fresh process (the console), its JSON result."""
    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "benchmarks.tui",
        *bench_argv,
        stdout=asyncio.subprocess.PIPE,
        cwd=str(REPO),
    )
    out, _ = await proc.communicate()
    lines = out.decode().strip().splitlines()
    if not lines or not lines[-1].startswith("{"):
        raise RuntimeError(f"benchmarks.tui {' '.join(bench_argv)} printed no result")
    result: dict[str, Any] = json.loads(lines[-1])
    return result


async def repeated(bench_argv: list[str], name: str, repeat: int) -> list[dict[str, Any]]:
    """``repeat`` fresh bench processes one after the other, each reported as it ends."""
    out = []
    for i in range(repeat):
        load = os.getloadavg()[0]
        result = await bench_process(bench_argv)
        result["loadavg_1m"] = round(load, 2)
        out.append(result)
        report(name if repeat == 1 else f"{name} {i + 1}/{repeat}", result)
    return out


async def loaded(
    bench_argv: list[str], nice: int, jobs: int, repeat: int = 1
) -> list[dict[str, Any]]:
    work = Path(tempfile.mkdtemp(prefix="phantom-bench-tui-load-"))
    try:
        pod = await start_pod(work / "pod", hosts=jobs, ready_delay=0.0, nice=nice)
        load = TrainingLoad(pod, jobs)
        results = []
        try:
            await load.start()
            for i in range(repeat):
                steps0, t0 = sum(load.steps), time.perf_counter()
                (result,) = await repeated(bench_argv, "", 1)
                elapsed = time.perf_counter() - t0
                result["train_steps_per_s"] = round((sum(load.steps) - steps0) / elapsed, 1)
                name = f"loaded_nice{nice}" + ("" if repeat == 1 else f" {i + 1}/{repeat}")
                report(name, result)
                results.append(result)
        finally:
            await load.stop()
    finally:
        await stop_pod(work / "pod")
        shutil.rmtree(work, ignore_errors=True)
    return results


async def run(
    bench_argv: list[str], nices: list[int], jobs: int, repeat: int = 1
) -> dict[str, Any]:
    out: dict[str, Any] = {"load_jobs": jobs, "load_nice": nices, "bench_argv": bench_argv}
    runs: dict[str, list[dict[str, Any]]] = {"quiet": await repeated(bench_argv, "quiet", repeat)}
    for nice in nices:
        runs[f"loaded_nice{nice}"] = await loaded(bench_argv, nice, jobs, repeat)
    quiet = runs["quiet"][0]["pod_p99_ms"]
    for name, results in runs.items():
        keep = (*KEYS, "train_steps_per_s", "loadavg_1m")
        out[name] = {k: results[0].get(k) for k in keep if k in results[0]}
        if repeat > 1:
            out[name] = [{k: r.get(k) for k in keep if k in r} for r in results]
            out[f"{name}_p99_under_100ms"] = sum(r["p99_ms"] < 100 for r in results)
        elif name != "quiet" and quiet:
            out[f"{name}_pod_p99_over_quiet"] = round(results[0]["pod_p99_ms"] / quiet, 2)
    return out


def report(name: str, r: dict[str, Any]) -> None:
    if not name:
        return
    extra = f"  training {r['train_steps_per_s']} steps/s" if "train_steps_per_s" in r else ""
    load = f"  load {r['loadavg_1m']}" if "loadavg_1m" in r else ""
    print(
        f"{name:>18}: p99 {r['p99_ms']} ms  host-update p99 {r['pod_p99_ms']} ms  "
        f"(p50 {r['pod_p50_ms']})  log p99 {r['log_p99_ms']} ms  {r['fps']} fps  "
        f"full GCs {r.get('gc_full_collections')}{load}{extra}",
        file=sys.stderr,
        flush=True,
    )


def main(args: argparse.Namespace) -> int:
    try:
        nices = [int(x) for x in args.load_nice.split(",") if x.strip()]
    except ValueError:
        nices = []
    if not nices or not all(0 <= n <= 19 for n in nices) or args.load_jobs < 1:
        print(
            f"bench_tui: --load-nice {args.load_nice!r}: niceness 0..19, comma-separated "
            f"(the console uses {LOCAL_POD_NICE}); --load-jobs >= 1",
            file=sys.stderr,
        )
        return 2
    result = asyncio.run(run(bench_args(args), nices, args.load_jobs, args.repeat))
    print(json.dumps(result))
    return 0


def bench_args(args: argparse.Namespace) -> list[str]:
    """The argv of one fresh bench process with ``args``' settings."""
    return [
        "--seconds",
        str(args.seconds),
        "--baseline-seconds",
        str(args.baseline_seconds),
        "--hosts",
        str(args.hosts),
        "--lines-per-s",
        str(args.lines_per_s),
        "--pod-hz",
        str(args.pod_hz),
        "--changes",
        str(args.changes),
        "--ring",
        str(args.ring),
        *(["--no-gc-freeze"] if args.no_gc_freeze else []),
    ]
