"""Emulator cost by pod size: ``pod up`` -> READY, daemon memory, status, preempt, down.

    python -m benchmarks.emulator_scale [--sizes 4,32,256] [--runs 3] [--faithful]

For each size, the median over ``--runs`` fresh pods (ready delay 0, so the figure
is the emulator's own work) of: up -> READY, the daemon's RSS and open fds at
READY, one ``status`` round trip, ``preempt all`` (abrupt) and ``down``. Ratios are
against the smallest size measured in the same run, next to a same-run baseline
(a bare Python process importing the daemon's libraries). The last line is JSON.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from emulators.tpu_pod.client import leftover_pids, pod_status, preempt, start_pod, stop_pod


def _rss_mb(pid: int) -> float:
    with open(f"/proc/{pid}/status") as fh:
        for line in fh:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    return 0.0


def _import_baseline() -> float:
    t0 = time.perf_counter()
    subprocess.run(
        [sys.executable, "-c", "import asyncssh, grpc, aiohttp, google.cloud.tpu_v2.types"],
        check=True,
    )
    return time.perf_counter() - t0


def one_run(run_dir: Path, hosts: int, faithful: bool) -> dict[str, float]:
    t0 = time.perf_counter()
    info = start_pod(
        run_dir, hosts=hosts, ssh_port=0, api_port=0, ready_delay=0.0, faithful=faithful
    )
    up = time.perf_counter() - t0
    try:
        rss = _rss_mb(info.pid)
        fds = len(os.listdir(f"/proc/{info.pid}/fd"))
        t1 = time.perf_counter()
        pod_status(run_dir)
        status = time.perf_counter() - t1
        t2 = time.perf_counter()
        preempt(run_dir, "all")
        gone = time.perf_counter() - t2
    finally:
        t3 = time.perf_counter()
        stop_pod(run_dir)
        down = time.perf_counter() - t3
        left = leftover_pids(run_dir)
        if left:
            raise RuntimeError(f"processes survived pod down: {left}")
    return {
        "up_to_ready_s": up,
        "rss_mb": rss,
        "fds": float(fds),
        "status_s": status,
        "preempt_all_s": gone,
        "down_s": down,
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="4,32,256", help="host counts, comma-separated")
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--faithful", action="store_true", help="external IPs too")
    args = parser.parse_args(argv)
    try:
        sizes = sorted({int(s) for s in args.sizes.split(",") if s.strip()})
    except ValueError:
        parser.error(f"--sizes: whole numbers, comma-separated, not {args.sizes!r}")
    if args.runs < 1 or not sizes or min(sizes) < 1:
        parser.error("--runs and every size must be >= 1")

    per_size: dict[int, dict[str, float]] = {}
    for hosts in sizes:
        runs = []
        for _ in range(args.runs):
            with tempfile.TemporaryDirectory(prefix="phscale") as tmp:
                runs.append(one_run(Path(tmp) / "pod", hosts, args.faithful))
        med = {k: statistics.median(r[k] for r in runs) for k in runs[0]}
        per_size[hosts] = med
        print(
            f"{hosts:>4} hosts: up->READY {med['up_to_ready_s']:.3f}s  RSS {med['rss_mb']:.0f} MB  "
            f"fds {med['fds']:.0f}  status {med['status_s'] * 1000:.1f} ms  "
            f"preempt all {med['preempt_all_s']:.3f}s  down {med['down_s']:.3f}s",
            file=sys.stderr,
        )
    base = per_size[sizes[0]]
    baseline = statistics.median(_import_baseline() for _ in range(args.runs))
    summary: dict[str, Any] = {
        "runs": args.runs,
        "faithful": args.faithful,
        "import_baseline_s": round(baseline, 3),
        "sizes": {
            str(n): {
                **{k: round(v, 4) for k, v in m.items()},
                "up_vs_import": round(m["up_to_ready_s"] / baseline, 2),
                f"up_vs_{sizes[0]}_hosts": round(m["up_to_ready_s"] / base["up_to_ready_s"], 2),
                f"rss_vs_{sizes[0]}_hosts": round(m["rss_mb"] / base["rss_mb"], 2),
            }
            for n, m in per_size.items()
        },
    }
    print(json.dumps(summary))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
