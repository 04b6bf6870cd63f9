"""`phantom watch` soak: many preemptions (workers, the head, the whole slice), the watcher's
resident memory, open file descriptors and threads after each recovery.

    .venv/bin/python -m benchmarks.watch_soak [--count 21] [--hosts 2] [--poll 0.5] [--keep]

A pod emulator with real Ray (temp dir, free ports), formed as a user would (bootstrap, Ray
up), then one real `phantom watch --metrics` process alone recovers every preemption, in
turn a worker, the head, the whole slice. After each recovery (its ``incident`` line on
stdout, result recovered) the watcher's /proc figures are read. The baseline is the sample
after the first recovery, so start-up costs (imports, connections) are not counted as growth.

Checks (exit 1 naming each failure): every preemption recovered; resident memory at the end
<= 1.2x the baseline; open fds and threads at the end no more than the baseline (+2 of
slack each for a poll's SSH connection or worker thread caught at the sample); /metrics
counted every recovery. Figures: a table, then one JSON object on the last line.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import queue
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from benchmarks.pods import PodInfo, pod_toml, preempt, start_pod, stop_pod
from console.config import load_config
from console.wiring import make_services

KINDS = ("worker", "head", "slice")
RSS_BOUND = 1.2
SLACK = 2


@dataclass(frozen=True)
class Sample:
    n: int
    kind: str
    mttr_s: float
    rss_mib: float
    fds: int
    threads: int


def proc_figures(pid: int) -> tuple[float, int, int]:
    """(resident MiB, open fds, threads) of ``pid`` from /proc."""
    rss_kib = threads = 0
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            rss_kib = int(line.split()[1])
        elif line.startswith("Threads:"):
            threads = int(line.split()[1])
    fds = len(os.listdir(f"/proc/{pid}/fd"))
    return rss_kib / 1024, fds, threads


class WatchProc:
    def __init__(self, config: Path, env: dict[str, str]) -> None:
        argv = [sys.executable, "-m", "console.cli", "--config", str(config), "watch"]
        self.proc = subprocess.Popen(
            [*argv, "--metrics", "127.0.0.1:0"],
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            text=True,
        )
        self.lines: queue.Queue[dict[str, Any] | None] = queue.Queue()
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for raw in self.proc.stdout:
            self.lines.put(json.loads(raw))
        self.lines.put(None)

    def next(self, check: Any, timeout_s: float, what: str) -> dict[str, Any]:
        deadline = time.monotonic() + timeout_s
        while True:
            left = deadline - time.monotonic()
            try:
                line = self.lines.get(timeout=max(0.1, left))
            except queue.Empty:
                raise TimeoutError(f"no {what} within {timeout_s:.0f}s") from None
            if line is None:
                raise RuntimeError(f"watch exited ({self.proc.wait()}) before {what}")
            if check(line):
                return line

    def stop(self) -> int:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
        try:
            return self.proc.wait(120)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            return self.proc.wait(30)


async def _form(config: Path, state: Path) -> None:
    svc = make_services(
        load_config(str(config), discover=False), state_dir=state, autostart_pod=False
    )
    try:
        await svc.start()
        for step in (svc.bootstrap, svc.ray_up):
            result = await step()
            if not result.ok:
                raise RuntimeError(f"{result.action}: {result.message}")
    finally:
        await svc.stop()
        svc.close_journal()


async def _ray_stop(config: Path, state: Path) -> None:
    svc = make_services(
        load_config(str(config), discover=False), state_dir=state, autostart_pod=False
    )
    try:
        await svc.teardown(actor="bench")
    finally:
        await svc.stop()
        svc.close_journal()


def _scrape(url: str) -> str:
    with urllib.request.urlopen(url, timeout=10) as resp:
        return resp.read().decode()


async def soak(count: int, hosts: int, poll_s: float, work: Path) -> dict[str, Any]:
    run_dir = work / "pod"
    pod: PodInfo = await start_pod(run_dir, hosts=hosts, ready_delay=0.2, timeout=180.0)
    config = work / "phantom.toml"
    config.write_text(pod_toml(pod, work, poll_s))
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PHANTOM_", "XDG_"))}
    env |= {
        "RAY_USAGE_STATS_ENABLED": "0",
        "WANDB_MODE": "offline",
        "NO_GCE_CHECK": "True",
        "PHANTOM_NO_CONFIG_DISCOVERY": "1",
        "XDG_STATE_HOME": str(work / "state"),
        "XDG_CONFIG_HOME": str(work / "config"),
        "PYTHONUNBUFFERED": "1",
    }
    state = work / "state" / "phantom"
    samples: list[Sample] = []
    failures: list[str] = []
    watcher: WatchProc | None = None
    t0 = time.monotonic()
    try:
        await _form(config, state)
        watcher = WatchProc(config, env)
        started = await asyncio.to_thread(
            watcher.next, lambda x: x.get("state") == "started", 180, "started"
        )
        metrics = started["metrics"]
        for n in range(1, count + 1):
            kind = KINDS[(n - 1) % len(KINDS)]
            target: int | str = hosts - 1 if kind == "worker" else 0 if kind == "head" else "all"
            await preempt(run_dir, target)
            try:
                summary = await asyncio.to_thread(
                    watcher.next,
                    lambda x: x.get("kind") == "incident" and x["data"].get("outcome"),
                    900,
                    f"preemption {n}'s incident",
                )
            except (TimeoutError, RuntimeError) as exc:
                failures.append(f"preemption {n} ({kind}): {exc}")
                break
            outcome = summary["data"]["outcome"]
            if outcome != "recovered":
                failures.append(f"preemption {n} ({kind}): {summary['data'].get('result')}")
                break
            rss, fds, threads = proc_figures(watcher.proc.pid)
            mttr = float(summary["data"].get("mttr_s") or 0.0)
            samples.append(Sample(n, kind, mttr, rss, fds, threads))
            print(
                f"{n:3d} {kind:6s} MTTR {mttr:6.1f}s  RSS {rss:7.1f} MiB  fds {fds:4d}  "
                f"threads {threads:3d}",
                flush=True,
            )
        text = await asyncio.to_thread(_scrape, metrics)
        counted = sum(
            float(line.rsplit(" ", 1)[1])
            for line in text.splitlines()
            if line.startswith("phantom_recovery_seconds_count")
        )
        if counted != len(samples):
            failures.append(f"/metrics counted {counted:g} recoveries, the journal {len(samples)}")
    finally:
        code = watcher.stop() if watcher is not None else None
        if code not in (None, 0):
            failures.append(f"watch exited {code} on SIGTERM")
        try:
            await _ray_stop(config, state)
        finally:
            await stop_pod(run_dir)
    out: dict[str, Any] = {
        "count": count,
        "recovered": len(samples),
        "hosts": hosts,
        "wall_s": round(time.monotonic() - t0, 1),
        "samples": [asdict(s) for s in samples],
    }
    if len(samples) < count and not failures:
        failures.append(f"only {len(samples)} of {count} preemptions recovered")
    if samples:
        first, last = samples[0], samples[-1]
        ratio = last.rss_mib / first.rss_mib
        out |= {
            "rss_first_mib": round(first.rss_mib, 1),
            "rss_end_mib": round(last.rss_mib, 1),
            "rss_ratio": round(ratio, 3),
            "fds_first": first.fds,
            "fds_end": last.fds,
            "fds_max": max(s.fds for s in samples),
            "threads_first": first.threads,
            "threads_end": last.threads,
            "threads_max": max(s.threads for s in samples),
        }
        if ratio > RSS_BOUND:
            failures.append(f"RSS at the end {ratio:.2f}x the first recovery's (> {RSS_BOUND}x)")
        if last.fds > first.fds + SLACK:
            failures.append(f"open fds grew {first.fds} -> {last.fds}")
        if last.threads > first.threads + SLACK:
            failures.append(f"threads grew {first.threads} -> {last.threads}")
    out["failures"] = failures
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="benchmarks.watch_soak", description=__doc__.split("\n")[0]
    )
    parser.add_argument("--count", type=int, default=21, help="preemptions (>= 20; default 21)")
    parser.add_argument("--hosts", type=int, default=2, help="pod hosts (default 2)")
    parser.add_argument("--poll", type=float, default=0.5, help="poll interval, s (default 0.5)")
    parser.add_argument("--keep", action="store_true", help="keep the work dir")
    args = parser.parse_args(argv)
    if args.count < 1 or args.hosts < 2 or args.poll <= 0:
        parser.error("--count >= 1, --hosts >= 2 (a worker and a head), --poll > 0")
    work = Path(tempfile.mkdtemp(prefix="phantom-watch-soak-"))
    try:
        out = asyncio.run(soak(args.count, args.hosts, args.poll, work))
    finally:
        if not args.keep:
            shutil.rmtree(work, ignore_errors=True)
    for f in out["failures"]:
        print(f"FAIL: {f}", file=sys.stderr)
    if out.get("rss_ratio") is not None:
        print(
            f"RSS {out['rss_first_mib']} -> {out['rss_end_mib']} MiB ({out['rss_ratio']}x after "
            f"the first recovery); fds {out['fds_first']} -> {out['fds_end']} (max "
            f"{out['fds_max']}); threads {out['threads_first']} -> {out['threads_end']} (max "
            f"{out['threads_max']}); {out['recovered']}/{out['count']} recovered in {out['wall_s']}s"
        )
    print(json.dumps(out))
    return 1 if out["failures"] else 0


if __name__ == "__main__":
    raise SystemExit(main())
