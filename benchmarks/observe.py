"""The cost of one poll of the pod at 4, 32 and 256 hosts: CPU, wall time, SSH sessions.

    .venv/bin/python -m benchmarks.observe [--hosts 4,32,256] [--polls 10]

For each size: an emulated pod (free ports, temp run dir, stopped at the end), the console's
services over it as `phantom` builds them (``make_services``), and ``--polls`` observations
of the pod after three warm-up polls (the first probes every host and opens the notice
watchers), each measured:

* ``cpu_ms``: the console process's CPU time (mean over the polls; the rest are medians) (TPU API call, SSH, parsing, diagnosis input);
* ``emulator_cpu_ms``: the emulator daemon's CPU time (the far side of every call);
* ``wall_ms``;
* ``sessions`` / ``connections``: SSH sessions (commands) and connections opened.

Twice per size, in the same run: ``planned`` (the product: ``ProbePlanner``, trouble plus a
round-robin batch) and ``every_host`` (a probe of every READY host in every poll, the way
polls worked before; the baseline). Ratios: each figure at the largest size over the
smallest, per mode.

No Ray runs here (a Ray node takes ~250 MB, so 256 of them do not fit this machine): the
GCS does not answer, and the Ray layer costs one failed call per poll at every size.
Last line: one JSON object.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from benchmarks.proc import cpu_s
from console.services.backends.tpu_vm.backend import TpuVmBackend
from console.services.backends.tpu_vm.probes import ProbePlanner
from console.wiring import make_services
from console.wiring.harness import MAX_HOSTS, pod_config, start_pod, stop_pod

WARMUP = 3
MODES = ("planned", "every_host")


async def measure(hosts: int, polls: int) -> dict[str, dict[str, float]]:
    work = Path(tempfile.mkdtemp(prefix="phantom-bench-observe-"))
    pod = await start_pod(work / "pod", hosts=hosts, ready_delay=0.0, timeout=300.0)
    out: dict[str, dict[str, float]] = {}
    try:
        for mode in MODES:
            svc = make_services(
                pod_config(pod, work), state_dir=work / f"state-{mode}", autostart_pod=False
            )
            try:
                backend = svc.backend
                assert isinstance(backend, TpuVmBackend)
                if mode == "every_host":
                    backend.observer.probes = ProbePlanner(batch=hosts)
                parts = backend.parts
                for _ in range(WARMUP):
                    await backend.observe()
                samples: dict[str, list[float]] = {
                    k: [] for k in ("cpu_ms", "emulator_cpu_ms", "wall_ms", "sessions", "conns")
                }
                for _ in range(polls):
                    s0 = parts.ssh.sessions_opened + parts.probe.sessions_opened
                    c0 = parts.ssh.connections_opened + parts.probe.connections_opened
                    e0, cpu0, t0 = cpu_s(pod.pid), time.process_time(), time.perf_counter()
                    obs = await backend.observe()
                    samples["wall_ms"].append((time.perf_counter() - t0) * 1000)
                    samples["cpu_ms"].append((time.process_time() - cpu0) * 1000)
                    samples["emulator_cpu_ms"].append((cpu_s(pod.pid) - e0) * 1000)
                    samples["sessions"].append(
                        parts.ssh.sessions_opened + parts.probe.sessions_opened - s0
                    )
                    samples["conns"].append(
                        parts.ssh.connections_opened + parts.probe.connections_opened - c0
                    )
                    bad = [h.name for h in obs.hosts if h.ssh_ok is False]
                    if len(obs.hosts) != hosts or bad:
                        raise RuntimeError(f"{hosts} hosts: poll saw {len(obs.hosts)}, bad {bad}")
                # CPU clocks tick in 10 ms: their mean over the polls; the rest, medians.
                out[mode] = {
                    k: round(
                        statistics.fmean(v) if k.endswith("cpu_ms") else statistics.median(v), 2
                    )
                    for k, v in samples.items()
                }
            finally:
                await svc.stop()
                svc.close_journal()
            print(f"{hosts:>4} hosts {mode:>10}: {out[mode]}", file=sys.stderr, flush=True)
    finally:
        await stop_pod(work / "pod")
        shutil.rmtree(work, ignore_errors=True)
    return out


async def bench(sizes: list[int], polls: int) -> dict[str, Any]:
    per_size = {n: await measure(n, polls) for n in sizes}
    lo, hi = sizes[0], sizes[-1]
    out: dict[str, Any] = {"hosts": sizes, "polls": polls}
    for mode in MODES:
        out[mode] = {str(n): per_size[n][mode] for n in sizes}
        for key in ("cpu_ms", "emulator_cpu_ms", "wall_ms", "sessions"):
            base = per_size[lo][mode][key]
            ratio = per_size[hi][mode][key] / base if base else float("nan")
            out[f"{mode}_{key}_{hi}_over_{lo}"] = round(ratio, 2)
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="bench_observe", description=__doc__.splitlines()[0])
    ap.add_argument("--hosts", default="4,32,256", help="comma-separated host counts")
    ap.add_argument("--polls", type=int, default=10, help="measured polls per size and mode")
    args = ap.parse_args(argv)
    try:
        sizes = sorted({int(x) for x in args.hosts.split(",") if x.strip()})
    except ValueError:
        print(f"bench_observe: --hosts {args.hosts!r}: comma-separated integers", file=sys.stderr)
        return 2
    if not sizes or sizes[0] < 1 or sizes[-1] > MAX_HOSTS or args.polls < 1:
        print(f"bench_observe: --hosts between 1 and {MAX_HOSTS}, --polls >= 1", file=sys.stderr)
        return 2
    os.environ.setdefault("NO_GCE_CHECK", "True")
    print(json.dumps(asyncio.run(bench(sizes, args.polls))))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
