"""Isolation in a fleet: detection in pod B while pod A's TPU API is held, against nothing held.

    .venv/bin/python -m benchmarks.fleet_isolation [--rounds 5] [--poll 1.0] [--hold 60]

Two emulated 2-host pods in their own zones (free ports, a temp run dir and state dir each,
stopped at the end), and one process holding the services of both as `phantom watch` over a
fleet holds them: ``console.wiring.fleet.fleet_services`` over a ``[[clusters]]`` fleet, both
started on one event loop (auto recovery off: detection alone is measured). Each round, in
turn with nothing held (``free``) and with every call of pod A's TPU API held ``--hold``
seconds (the emulator's slow-api fault: A's polls hang until their budget runs out, again
and again), pod B's last worker is preempted abruptly; the figure is from the moment B's TPU
API says PREEMPTED (the emulator's ``preempt`` event) to B's journal ``preempted`` row, then
the worker is recreated before the next round. The order of the two alternates by round.

Goal (issue 47): median held / median free <= 1.2.
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

from benchmarks.detect import _api_said, _listening, _recreate, _row
from benchmarks.pods import start_pod, stop_pod
from console.config.fleet import parse_fleet
from console.services.backends.tpu_vm.backend import TpuVmBackend
from console.services.model import Event, EventKind, Update
from emulators.tpu_pod import client as pod_client

NAMES = ("pod-a", "pod-b")
ZONES = ("local-a", "local-b")
HOSTS = 2
SETTLE_POLLS = 3  # polls of A's held API before B's preemption: A is stuck in them by then


def fleet_data(work: Path, poll_s: float) -> dict[str, Any]:
    return {
        "ssh": {"connect_timeout_s": 5.0, "retries": 1},
        "wandb": {"mode": "offline", "dir": str(work / "wandb")},
        "recovery": {"poll_interval_s": poll_s, "auto": False},
        "clusters": [
            {
                "name": name,
                "cluster": {
                    "provider": "local",
                    "zone": zone,
                    "node_name": name,
                    "hosts": HOSTS,
                    "run_dir": str(work / name),
                },
            }
            for name, zone in zip(NAMES, ZONES, strict=True)
        ],
    }


class LoopLag:
    """How late the event loop wakes a 10 ms sleep: the worst delay since ``reset``. Held
    calls of A that blocked the loop (rather than waiting on it) would show here."""

    TICK_S = 0.01

    def __init__(self) -> None:
        self.worst_s = 0.0

    def reset(self) -> None:
        self.worst_s = 0.0

    async def run(self) -> None:
        loop = asyncio.get_running_loop()
        while True:
            t0 = loop.time()
            await asyncio.sleep(self.TICK_S)
            self.worst_s = max(self.worst_s, loop.time() - t0 - self.TICK_S)


async def measure(rounds: int, poll_s: float, hold_s: float) -> dict[str, Any]:
    from console.wiring.fleet import fleet_services

    work = Path(tempfile.mkdtemp(prefix="phantom-bench-fleet-"))
    os.environ["XDG_STATE_HOME"] = str(work / "state")  # the fleet's state dirs go there
    figures: dict[str, list[float]] = {"free": [], "held": []}
    lags: dict[str, list[float]] = {"free": [], "held": []}
    lag = LoopLag()
    lag_task = asyncio.create_task(lag.run())
    a_dir, b_dir = work / NAMES[0], work / NAMES[1]
    try:
        pods = [
            await start_pod(
                work / name,
                hosts=HOSTS,
                ready_delay=0.0,
                timeout=600.0,
                extra_args=["--zone", zone, "--node-name", name],
            )
            for name, zone in zip(NAMES, ZONES, strict=True)
        ]
        pod_b = pods[1]
        fleet = parse_fleet(fleet_data(work, poll_s), source="<fleet isolation bench>")
        services = fleet_services(fleet)
        a, b = services[NAMES[0]], services[NAMES[1]]
        rows: dict[str, Event] = {}

        def on_update(u: Update) -> None:
            if isinstance(u, Event) and u.kind == EventKind.PREEMPTED:
                rows.setdefault(f"{u.kind}/{u.host}", u)

        b.subscribe(on_update)
        backend_b = b.backend
        assert isinstance(backend_b, TpuVmBackend)
        try:
            await asyncio.gather(a.start(), b.start())
            await _listening(backend_b, HOSTS, 600.0)
            index = HOSTS - 1
            worker = pod_b.hosts[index].name
            for i in range(rounds):
                order = ("free", "held") if i % 2 == 0 else ("held", "free")
                for condition in order:
                    if condition == "held":
                        await pod_client.async_fault(a_dir, "all", "slow-api", seconds=hold_s)
                    else:
                        await pod_client.async_clear_faults(a_dir)
                    # A moment into B's interval, after A's polls are stuck (or free) a while.
                    lag.reset()
                    await asyncio.sleep(poll_s * (SETTLE_POLLS + 0.3 + 0.4 * (i % 2)))
                    rows.clear()
                    t_call = time.time()
                    info = await pod_client.async_preempt(b_dir, index)
                    ev = await _row(rows, EventKind.PREEMPTED, worker, 60.0)
                    said = _api_said(info.events, worker) or t_call
                    figures[condition].append(max(0.0, ev.at - said))
                    lags[condition].append(lag.worst_s)
                    print(
                        f"round {i + 1} {condition:>4}: pod-b detected in "
                        f"{figures[condition][-1]:.3f}s (loop late {lag.worst_s:.3f}s at worst)",
                        file=sys.stderr,
                        flush=True,
                    )
                    await _recreate(b, backend_b, [worker], HOSTS)
            await pod_client.async_clear_faults(a_dir)
        finally:
            await pod_client.async_clear_faults(a_dir)
            await asyncio.gather(a.stop(), b.stop())
            a.close_journal()
            b.close_journal()
    finally:
        lag_task.cancel()
        for run_dir in (a_dir, b_dir):
            await stop_pod(run_dir)
        shutil.rmtree(work, ignore_errors=True)
    free, held = statistics.median(figures["free"]), statistics.median(figures["held"])
    worst_free, worst_held = max(figures["free"]), max(figures["held"])
    return {
        "free_s": round(free, 3),
        "held_s": round(held, 3),
        "held_over_free": round(held / free, 2) if free > 0 else None,
        # the tail beside the medians: one slow round in either condition shows here
        "worst_free_s": round(worst_free, 3),
        "worst_held_s": round(worst_held, 3),
        # how late the loop woke a 10 ms sleep, at worst, in each round's window
        "loop_late_free_s": round(max(lags["free"]), 3),
        "loop_late_held_s": round(max(lags["held"]), 3),
        "free_all": [round(x, 3) for x in figures["free"]],
        "held_all": [round(x, 3) for x in figures["held"]],
    }


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="bench_fleet_isolation", description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=5, help="preemptions in each condition")
    ap.add_argument("--poll", type=float, default=1.0, help="the poll interval, seconds")
    ap.add_argument("--hold", type=float, default=60.0, help="seconds each held call of A waits")
    args = ap.parse_args(argv)
    if args.rounds < 1 or args.poll <= 0 or args.hold <= 0:
        print("bench_fleet_isolation: --rounds >= 1, --poll > 0, --hold > 0", file=sys.stderr)
        return 2
    os.environ.setdefault("NO_GCE_CHECK", "True")
    result = asyncio.run(measure(args.rounds, args.poll, args.hold))
    print(f"{'pod-b detection':>16} {'median':>8} {'worst':>8}  each")
    for cond in ("free", "held"):
        each = " ".join(f"{x:.3f}" for x in result[f"{cond}_all"])
        print(
            f"{'A ' + cond:>16} {result[f'{cond}_s']:>7.3f}s "
            f"{result[f'worst_{cond}_s']:>7.3f}s  {each}"
        )
    print(f"{'held / free':>16} {result['held_over_free']:>8}  (goal <= 1.2)")
    print(
        f"{'loop late':>16} free {result['loop_late_free_s']:.3f}s, "
        f"held {result['loop_late_held_s']:.3f}s (worst wake of a 10 ms sleep)"
    )
    print(json.dumps({"poll_s": args.poll, "hold_s": args.hold, "rounds": args.rounds, **result}))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
