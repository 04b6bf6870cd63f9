"""Capacity benchmark: time to get a preempted slice back, per failover strategy, under the
same seeded stockout schedule.

    .venv/bin/python -m benchmarks.capacity [--seeds 1,2] [--mean 180]

For each seed: a stockout schedule for zones local-a/b/c is drawn (``seeded_windows``: mean
``--mean`` s windows), shifted so that local-a's first window starts just after start-up (the
preempted zone has no capacity, for about ``--mean`` s); then, for each strategy, a fresh
GCP-faithful emulator runs that exact schedule, the whole slice is preempted as the window
opens, and the gcp provider's capacity loop (the product's ``[capacity]`` defaults: backoff
10 s doubling to 120 s, 3 tries per zone for same-zone) gets the slice back. Measured:
preemption -> the node READY again (``recover_s``), the zone it came back in and the tries.
The emulated CreateNode is instant: add a real slice's creation time to each figure.
Last line: one JSON object with ``same_zone_over_eager`` (median recover time ratio).
"""

from __future__ import annotations

import argparse
import asyncio
import functools
import json
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from benchmarks.pods import (
    preempt,
    seeded_windows,
    start_pod,
    stop_pod,
    zone_stocked_out,
)
from console.config import CapacityConfig
from console.services.backends.tpu_vm.capacity import Capacity
from console.services.backends.tpu_vm.tpu import GcpTpuProvider, local_client

ZONES = ("local-a", "local-b", "local-c")
LEAD_S = 3.0  # the preempted zone's stockout opens this long after start-up


def schedule_for(seed: int, mean: float) -> list[str]:
    """``--stockout`` arguments: the seed's windows, shifted so local-a's first opens at
    LEAD_S (the windows of every zone move together: the same schedule, seen earlier)."""
    windows = seeded_windows(seed, ZONES, mean, horizon=3600.0)
    shift = windows["local-a"][0].start - LEAD_S
    out = []
    for zone, ws in windows.items():
        for w in ws:
            start, end = w.start - shift, w.end - shift
            if end > 0:
                out.append(f"{zone}:{max(0.0, start):.3f}-{end:.3f}")
    return out


async def _window_opens(run_dir: Path, zone: str, timeout_s: float = 120.0) -> None:
    for _ in range(int(timeout_s / 0.05)):
        if await asyncio.to_thread(zone_stocked_out, run_dir, zone):
            return
        await asyncio.sleep(0.05)
    raise TimeoutError(f"{zone}'s stockout did not open within {timeout_s:.0f}s")


async def run_strategy(strategy: str, stockouts: list[str], work: Path) -> dict[str, Any]:
    run_dir = work / f"pod-{strategy}"
    pod = await start_pod(run_dir, hosts=4, faithful=True, stockouts=stockouts, timeout=120.0)
    provider = GcpTpuProvider(
        pod.project,
        pod.zone,
        pod.node_name,
        poll_interval_s=0.5,
        accelerator_type=pod.accelerator_type,
        client_factory=functools.partial(local_client, pod.tpu_api),
    )
    capacity = Capacity(provider, CapacityConfig(zones=ZONES, failover=strategy))  # type: ignore[arg-type]
    provider.capacity = capacity
    try:
        await provider.get_node()
        await _window_opens(run_dir, "local-a")
        t0 = time.monotonic()
        await preempt(run_dir, "all")
        await provider.recreate()
        await provider.wait_ready(600.0)
        recover = time.monotonic() - t0
    finally:
        await provider.close()
        await stop_pod(run_dir)
    return {
        "recover_s": round(recover, 1),
        "zone": provider.zone,
        "attempts": [a.to_json() for a in capacity.attempts],
    }


async def bench(seeds: list[int], mean: float) -> dict[str, Any]:
    work = Path(tempfile.mkdtemp(prefix="phantom-bench-capacity-"))
    results: dict[str, list[dict[str, Any]]] = {"eager-failover": [], "same-zone": []}
    try:
        for seed in seeds:
            stockouts = schedule_for(seed, mean)
            print(f"seed {seed}: stockouts {stockouts[:4]}", file=sys.stderr, flush=True)
            for strategy in results:
                r = await run_strategy(strategy, stockouts, work)
                r["seed"] = seed
                results[strategy].append(r)
                print(
                    f"  {strategy}: {r['recover_s']}s, back in {r['zone']} after "
                    f"{len(r['attempts'])} tries",
                    file=sys.stderr,
                    flush=True,
                )
    finally:
        shutil.rmtree(work, ignore_errors=True)
    med = {s: statistics.median(r["recover_s"] for r in rs) for s, rs in results.items()}
    return {
        "seeds": seeds,
        "stockout_mean_s": mean,
        "recover_s": {s: [r["recover_s"] for r in rs] for s, rs in results.items()},
        "zones": {s: [r["zone"] for r in rs] for s, rs in results.items()},
        "median_recover_s": med,
        "same_zone_over_eager": round(med["same-zone"] / max(med["eager-failover"], 0.01), 1),
    }


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m benchmarks.capacity", description=__doc__)
    ap.add_argument("--seeds", default="1,2", help="comma-separated schedule seeds")
    ap.add_argument("--mean", type=float, default=180.0, help="mean stockout length, seconds")
    args = ap.parse_args(argv)
    try:
        seeds = [int(s) for s in args.seeds.split(",") if s.strip()]
    except ValueError:
        ap.error(f"--seeds {args.seeds!r}: comma-separated integers, e.g. 1,2")
    if not seeds or args.mean <= 0:
        ap.error("--seeds needs at least one seed and --mean must be > 0")
    print(json.dumps(asyncio.run(bench(seeds, args.mean))))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
