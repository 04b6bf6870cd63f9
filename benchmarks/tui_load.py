"""The TUI bench beside an emulated pod that trains on the same cores (``benchmarks.tui --load``).

    python -m benchmarks.tui --load [--hosts 1024] [--load-jobs 3] [--load-nice 0,19]

``make run`` puts the console beside its own emulated pod, whose hosts run Ray and training
on this machine's cores. Here, in one run and each in a fresh bench process (the console):

* ``quiet``: ``benchmarks.tui`` alone (``--hosts`` rows, 10k log lines/s);
* ``loaded_nice<N>``, for each N of ``--load-nice``: the same, while an emulated pod started
  at niceness N (the console's local wiring uses ``LOCAL_POD_NICE``) runs ``--load-jobs``
  real training jobs (``engine.train``, PPO on CartPole, torch on every core), one a host,
  started over SSH and training before the measured bench starts. 0 is how the pod ran
  before; the jobs' training steps per second show what the niceness costs them.

Printed: host-update p99 (``pod_p99_ms``), log p99, frames/s per condition, and each loaded
condition's p99 over the quiet one. Last line: one JSON object.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
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


async def loaded(bench_argv: list[str], nice: int, jobs: int) -> dict[str, Any]:
    work = Path(tempfile.mkdtemp(prefix="phantom-bench-tui-load-"))
    try:
        pod = await start_pod(work / "pod", hosts=jobs, ready_delay=0.0, nice=nice)
        load = TrainingLoad(pod, jobs)
        try:
            await load.start()
            steps0, t0 = sum(load.steps), time.perf_counter()
            result = await bench_process(bench_argv)
            elapsed = time.perf_counter() - t0
            result["train_steps_per_s"] = round((sum(load.steps) - steps0) / elapsed, 1)
        finally:
            await load.stop()
    finally:
        await stop_pod(work / "pod")
        shutil.rmtree(work, ignore_errors=True)
    return result


async def run(bench_argv: list[str], nices: list[int], jobs: int) -> dict[str, Any]:
    out: dict[str, Any] = {"load_jobs": jobs, "load_nice": nices, "bench_argv": bench_argv}
    runs: dict[str, dict[str, Any]] = {"quiet": await bench_process(bench_argv)}
    report("quiet", runs["quiet"])
    for nice in nices:
        name = f"loaded_nice{nice}"
        runs[name] = await loaded(bench_argv, nice, jobs)
        report(name, runs[name])
    quiet = runs["quiet"]["pod_p99_ms"]
    for name, r in runs.items():
        out[name] = {k: r.get(k) for k in (*KEYS, "train_steps_per_s") if k in r}
        if name != "quiet" and quiet:
            out[f"{name}_pod_p99_over_quiet"] = round(r["pod_p99_ms"] / quiet, 2)
    return out


def report(name: str, r: dict[str, Any]) -> None:
    extra = f"  training {r['train_steps_per_s']} steps/s" if "train_steps_per_s" in r else ""
    print(
        f"{name:>14}: host-update p99 {r['pod_p99_ms']} ms  (p50 {r['pod_p50_ms']})  "
        f"log p99 {r['log_p99_ms']} ms  {r['fps']} fps{extra}",
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
    bench_argv = [
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
    result = asyncio.run(run(bench_argv, nices, args.load_jobs))
    print(json.dumps(result))
    return 0
