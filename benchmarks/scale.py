"""Scale benchmark: a pod's bring-up and a worker's VM recovery at 4 and 256 hosts.

    .venv/bin/python -m benchmarks.scale [--hosts 4,256]

For each size: an emulated pod (free ports, temp run dir, stopped at the end) and the
console's services over it as `phantom` builds them (the watchdog held off, so each step is
timed on its own), then:

* ``bootstrap_s``: the bootstrap fan-out over every host (``svc.bootstrap``, one wave at the
  default ``ssh.parallelism``), fresh connections;
* ``detect_s``: a worker preempted -> the next observation names it lost (polled at once,
  as a dropped connection makes the console do);
* ``recreate_s`` / ``ready_s`` / ``rejoin_bootstrap_s``: the recovery's VM steps for that
  worker through the backend (recreate, wait until READY, bootstrap the fresh VM);
* ``poll_ms``: one observation of the whole pod afterwards.

Ratios: each figure at the largest size over the smallest, in the same run. The bootstrap
command is ``python3 -c "import sys"`` (the fan-out's own cost: the product's default, an
import of Ray on each host, would spend 256 CPU-seconds of this 2-core machine on imports).
Ray itself is not started: a Ray node takes ~250 MB, so 256 of them do not fit this
machine's 24 GiB; the Ray steps are measured at 4 hosts by ``benchmarks.recovery``.
Last line: one JSON object.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import shutil
import sys
import tempfile
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

from benchmarks.pods import MAX_HOSTS, pod_config, preempt, start_pod, stop_pod
from console.services.backends.tpu_vm.backend import TpuVmBackend
from console.services.recovery.classify import HostCondition
from console.services.recovery.diagnosis import diagnose
from console.wiring import make_services

BOOTSTRAP = 'python3 -c "import sys"'


async def measure(hosts: int) -> dict[str, float]:
    work = Path(tempfile.mkdtemp(prefix="phantom-bench-scale-"))
    pod = await start_pod(work / "pod", hosts=hosts, ready_delay=0.2, timeout=300.0)
    out: dict[str, float] = {}
    try:
        cfg = replace(pod_config(pod, work, recovery={"auto": False}), bootstrap_command=BOOTSTRAP)
        svc = make_services(cfg, state_dir=work / "state", autostart_pod=False)
        backend = svc.backend
        assert isinstance(backend, TpuVmBackend)
        try:
            await svc.start()
            t0 = time.perf_counter()
            res = await svc.bootstrap()
            out["bootstrap_s"] = time.perf_counter() - t0
            if not res.ok:
                raise RuntimeError(f"bootstrap failed: {res.message}")

            worker = pod.hosts[-1].name
            t0 = time.perf_counter()
            await preempt(pod.run_dir, len(pod.hosts) - 1)
            while True:
                obs = await backend.observe()
                if diagnose(obs).conditions.get(worker) is HostCondition.LOST:
                    break
                if time.perf_counter() - t0 > 60:
                    raise TimeoutError(f"{worker} not seen lost within 60s")
            out["detect_s"] = time.perf_counter() - t0

            for name, step in (
                ("recreate_s", backend.recreate([worker])),
                ("ready_s", backend.wait_hosts_ready([worker], 120.0)),
                ("rejoin_bootstrap_s", backend.bootstrap([worker])),
            ):
                t0 = time.perf_counter()
                res = await step
                out[name] = time.perf_counter() - t0
                if not res.ok:
                    raise RuntimeError(f"{name[:-2]} failed: {res.message}")
            t0 = time.perf_counter()
            await backend.observe()
            out["poll_ms"] = (time.perf_counter() - t0) * 1000
        finally:
            await svc.stop()
            svc.close_journal()
    finally:
        await stop_pod(work / "pod")
        shutil.rmtree(work, ignore_errors=True)
    return {k: round(v, 3) for k, v in out.items()}


async def bench(sizes: list[int]) -> dict[str, Any]:
    results: dict[str, Any] = {}
    for n in sizes:
        results[str(n)] = await measure(n)
        print(f"{n:4d} hosts: {results[str(n)]}", file=sys.stderr, flush=True)
    lo, hi = results[str(min(sizes))], results[str(max(sizes))]
    ratios = {f"{k}_{max(sizes)}_over_{min(sizes)}": round(hi[k] / lo[k], 2) for k in lo if lo[k]}
    return {"hosts": sizes, **results, **ratios}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m benchmarks.scale", description=__doc__)
    ap.add_argument("--hosts", default="4,256", help="comma-separated pod sizes")
    args = ap.parse_args(argv)
    try:
        sizes = sorted({int(s) for s in args.hosts.split(",") if s.strip()})
    except ValueError:
        ap.error(f"--hosts {args.hosts!r}: comma-separated integers, e.g. 4,256")
    if not sizes or sizes[0] < 2 or sizes[-1] > MAX_HOSTS:
        ap.error(f"--hosts: sizes between 2 and {MAX_HOSTS}")
    print(json.dumps(asyncio.run(bench(sizes))))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
