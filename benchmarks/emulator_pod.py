"""Benchmark the emulator: `pod up` -> READY, and preempt -> last process gone.

    python -m benchmarks.emulator_pod [--runs 3] [--hosts 4] [--procs 50] [--with-ray]

Each figure is the median over ``--runs`` fresh pods, next to a baseline
measured in the same run: for start-up, a bare Python process importing the
daemon's libraries; for the kill, SIGKILL + reap of the same number of
processes by known pid (no /proc scan). The last line is one JSON object.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from emulators.tpu_pod.client import PodInfo, leftover_pids, preempt, start_pod, stop_pod
from emulators.tpu_pod.layout import DEFAULT_READY_DELAY
from emulators.tpu_pod.procs import find_marked, marker_value


def _ssh(info: PodInfo, host: int, command: str) -> str:
    result = subprocess.run(
        info.ssh_argv(host, command), capture_output=True, text=True, timeout=300
    )
    if result.returncode != 0:
        raise RuntimeError(f"ssh to host {host} failed: {result.stderr.strip()[-500:]}")
    return result.stdout


def _import_baseline() -> float:
    t0 = time.perf_counter()
    subprocess.run(
        [sys.executable, "-c", "import asyncssh, grpc, google.cloud.tpu_v2.types"], check=True
    )
    return time.perf_counter() - t0


def _kill_baseline(n: int) -> float:
    procs = [subprocess.Popen(["sleep", "1000"]) for _ in range(n)]
    t0 = time.perf_counter()
    for p in procs:
        os.kill(p.pid, signal.SIGKILL)
    for p in procs:
        p.wait()
    return time.perf_counter() - t0


def _start_ray_head(info: PodInfo) -> None:
    """A real Ray head on host 2, so the kill is timed with Ray's daemons on the host.
    Every port is free or 0: other Ray clusters may share this machine."""
    host = info.hosts[2]
    _ssh(
        info,
        2,
        f"ray start --head --node-ip-address={host.ip} --port={_free_port(host.ip)} "
        f"--include-dashboard=false --ray-client-server-port={_free_port(host.ip)} "
        "--num-cpus=1 --object-store-memory=78643200 --dashboard-agent-listen-port=0 "
        "--node-manager-port=0 --object-manager-port=0 --min-worker-port=0 "
        '--max-worker-port=0 --temp-dir="${TMPDIR:-/tmp}/ray" --disable-usage-stats',
    )


def _free_port(ip: str) -> int:
    with socket.socket() as s:
        s.bind((ip, 0))
        port: int = s.getsockname()[1]
        return port


def one_run(
    run_dir: Path, hosts: int, ready_delay: float, n_procs: int, with_ray: bool
) -> dict[str, float]:
    t0 = time.perf_counter()
    info = start_pod(run_dir, hosts=hosts, ssh_port=0, api_port=0, ready_delay=ready_delay)
    up = time.perf_counter() - t0
    try:
        if with_ray:
            _start_ray_head(info)
        _ssh(
            info,
            2,
            f"for i in $(seq {n_procs}); do setsid sleep 1000 </dev/null >/dev/null 2>&1 & done",
        )
        prefix = marker_value(info.run_id, info.hosts[2].name)
        victims = len(find_marked(prefix))
        t1 = time.perf_counter()
        after = preempt(run_dir, 2)
        while find_marked(prefix):  # verify from outside the daemon too
            pass
        gone = time.perf_counter() - t1
        event = after.events[-1]
        return {
            "up_to_ready_s": up,
            "preempt_to_gone_s": gone,
            "daemon_kill_s": float(event["kill_seconds"]),
            "victims": float(victims),
        }
    finally:
        stop_pod(run_dir)
        left = leftover_pids(run_dir)
        if left:
            raise RuntimeError(f"processes survived pod down: {left}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--hosts", type=int, default=4)
    parser.add_argument("--procs", type=int, default=50, help="detached processes on host 2")
    parser.add_argument("--ready-delay", type=float, default=DEFAULT_READY_DELAY)
    parser.add_argument("--with-ray", action="store_true", help="also run a Ray node on host 2")
    args = parser.parse_args(argv)
    if args.runs < 1 or args.procs < 1:
        parser.error("--runs and --procs must be >= 1")

    results: list[dict[str, float]] = []
    for i in range(args.runs):
        with tempfile.TemporaryDirectory(prefix="phbench") as tmp:
            r = one_run(Path(tmp) / "pod", args.hosts, args.ready_delay, args.procs, args.with_ray)
        results.append(r)
        print(
            f"run {i + 1}: up->READY {r['up_to_ready_s']:.3f}s, preempt->gone "
            f"{r['preempt_to_gone_s']:.3f}s ({int(r['victims'])} processes)",
            file=sys.stderr,
        )
    import_base = statistics.median(_import_baseline() for _ in range(args.runs))
    kill_base = statistics.median(_kill_baseline(args.procs) for _ in range(args.runs))

    def med(key: str) -> float:
        return statistics.median(r[key] for r in results)

    up, gone = med("up_to_ready_s"), med("preempt_to_gone_s")
    summary: dict[str, Any] = {
        "runs": args.runs,
        "hosts": args.hosts,
        "ready_delay_s": args.ready_delay,
        "with_ray": args.with_ray,
        "up_to_ready_s": round(up, 3),
        "up_overhead_s": round(up - args.ready_delay, 3),
        "import_baseline_s": round(import_base, 3),
        "up_overhead_vs_import": round((up - args.ready_delay) / import_base, 2),
        "preempt_victims": int(med("victims")),
        "preempt_to_gone_s": round(gone, 4),
        "daemon_kill_s": round(med("daemon_kill_s"), 4),
        "kill_by_pid_baseline_s": round(kill_base, 4),
        "preempt_vs_kill_by_pid": round(gone / kill_base, 2),
    }
    print(json.dumps(summary))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
