"""Preemption rates per zone: do the ledger's estimates hold the true rates, and does
risk-aware failover pick the calmer zone?

    .venv/bin/python -m benchmarks.zone_rates [--seed 1] [--cycles 6]
        [--rates local-a:360,local-b:120,local-c:40]

A GCP-faithful emulated pod (4 hosts, zones local-a/b/c). Each zone is given a preemption
rate (reclaims per VM-hour; a reclaim takes the whole slice, as on GCP, so the slice is
reclaimed at ``rate x 4`` per hour up): while the slice is READY in a zone, a seeded Poisson
clock of that zone's rate preempts it through the emulator's own ``preempt``. The console's
parts do the rest as in production: the gcp provider's polls become observations, the
``Detector`` journals each loss (stamped with its zone) through the ``EventSink``, the
capacity loop gets the slice back (its tries journaled as capacity rows) and a
``recovered`` row closes each one, as the watchdog writes it.

Phase 1 (``--cycles`` rounds of eager-failover, its zone list started after the lost zone
so that each reclaim moves the slice to the next zone and every zone is lived in): the
journal's rates per zone, each with its exact 95% interval (``ledger.rates``), are printed
beside the configured ones. Phase 2: the capacity switches to ``failover = "risk-aware"``
and the slice is reclaimed once more: the order it chose (journaled with its reason) and the
zone it came back in are printed.

The rates are far above a real zone's (a few per VM-day) so a run takes minutes; only the
time scale differs. Last line: one JSON object with ``covered`` (every configured rate
inside its interval) and ``picked_calmest`` (risk-aware came back in the calmest zone, and
the journal's risk-aware row, read back, put that zone first).
"""

from __future__ import annotations

import argparse
import asyncio
import functools
import json
import random
import shutil
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from benchmarks.pods import preempt, start_pod, stop_pod
from console.config import CapacityConfig
from console.services.backends.tpu_vm.capacity import Attempt, Capacity
from console.services.backends.tpu_vm.node import NodeInfo
from console.services.backends.tpu_vm.tpu import GcpTpuProvider, local_client
from console.services.ledger.rates import (
    RiskOrder,
    journal_rates,
    order_event,
    rates_by_zone,
)
from console.services.model import LOST_STATES, Event, EventKind, HostState
from console.services.observation import HostObservation, Observation
from console.services.record.journal import Journal
from console.services.record.sink import EventSink
from console.services.recovery.detector import Detector

ZONES = ("local-a", "local-b", "local-c")
HOSTS = 4
POLL_S = 0.1


def parse_rates(text: str) -> dict[str, float]:
    out: dict[str, float] = {}
    for part in (p.strip() for p in text.split(",") if p.strip()):
        zone, _, value = part.partition(":")
        if zone not in ZONES:
            raise ValueError(f"--rates: unknown zone {zone!r}; zones are {', '.join(ZONES)}")
        try:
            out[zone] = float(value)
        except ValueError:
            raise ValueError(f"--rates: {part!r} is not ZONE:RATE (reclaims per VM-hour)") from None
        if out[zone] <= 0:
            raise ValueError(f"--rates: {zone}'s rate must be > 0, got {value}")
    missing = set(ZONES) - set(out)
    if missing:
        raise ValueError(f"--rates: give every zone a rate (missing {', '.join(sorted(missing))})")
    return out


def observation(node: NodeInfo | None, zone: str, at: float) -> Observation:
    """What a poll of the TPU API alone shows (no SSH, no Ray: the detector is not armed, so
    only hard losses are journaled)."""
    hosts = []
    for ep in node.endpoints if node else ():
        st = HostState.of(node.host_states.get(ep.index, "UNKNOWN")) if node else HostState.UNKNOWN
        hosts.append(
            HostObservation(
                name=ep.name,
                ip=ep.ip,
                index=ep.index,
                tpu_state=st,
                preempted_at=node.symptom_time(ep.index) if node and st in LOST_STATES else None,
            )
        )
    return Observation(
        at=at,
        hosts=tuple(hosts),
        head=hosts[0].name if hosts else "",
        node_state=HostState.of(node.state) if node else HostState.NOT_FOUND,
        accelerator_type=node.accelerator_type if node else "",
        zone=zone,
    )


class Drill:
    def __init__(self, run_dir: Path, journal: Journal, rates: dict[str, float], seed: int) -> None:
        self.run_dir = run_dir
        self.journal = journal
        self.rates = rates
        self.rng = random.Random(seed)
        self.sink = EventSink(journal, lambda _u: None)
        self.detector = Detector(self.sink, clock=time.time)
        self.orders: list[RiskOrder] = []
        self.provider: GcpTpuProvider | None = None
        # When the slice's exposure began: its create returned (the ledger counts VM-hours
        # from the capacity row on; a VM is reclaimable while it boots)
        self.exposed_since = time.monotonic()

    async def poll(self) -> NodeInfo | None:
        assert self.provider is not None
        node = await self.provider.get_node()
        await self.detector.update(observation(node, self.provider.zone, time.time()))
        return node

    async def reclaim_after_a_stint(self) -> str:
        """Let the slice live its zone's Poisson time, preempt it, see the loss journaled;
        returns the zone it was lost in."""
        assert self.provider is not None
        zone = self.provider.zone
        stint = self.rng.expovariate(self.rates[zone] * HOSTS / 3600.0)
        until = self.exposed_since + stint
        while time.monotonic() < until:
            await self.poll()
            await asyncio.sleep(min(POLL_S, max(0.0, until - time.monotonic())))
        await preempt(self.run_dir, "all")
        for _ in range(int(30 / POLL_S)):
            node = await self.poll()
            if node is None or node.state == HostState.PREEMPTED:
                break
            await asyncio.sleep(POLL_S)
        await self.sink.flush()
        return zone

    async def recover(self) -> None:
        assert self.provider is not None
        await self.provider.recreate()
        await self.provider.wait_ready(120.0)
        await self.poll()
        await self.sink.emit(
            Event(time.time(), EventKind.RECOVERED, f"recovered in {self.provider.zone}")
        )

    def on_attempt(self, attempt: Attempt) -> None:
        if attempt.ok:
            self.exposed_since = time.monotonic()
        self.sink.emit_soon(
            Event(time.time(), EventKind.CAPACITY, attempt.text, data=attempt.to_json())
        )

    def on_order(self, order: RiskOrder) -> None:
        self.orders.append(order)
        self.sink.emit_soon(order_event(order, time.time()))


async def run(work: Path, rates: dict[str, float], seed: int, cycles: int) -> dict[str, Any]:
    run_dir = work / "pod"
    journal = Journal(work / "journal.sqlite")
    # a slice READY 0.2 s after its create: the exposure starts when the create returns
    pod = await start_pod(run_dir, hosts=HOSTS, faithful=True, ready_delay=0.2, timeout=120.0)
    drill = Drill(run_dir, journal, rates, seed)
    provider = GcpTpuProvider(
        pod.project,
        pod.zone,
        pod.node_name,
        poll_interval_s=POLL_S,
        accelerator_type=pod.accelerator_type,
        client_factory=functools.partial(local_client, pod.tpu_api),
    )
    drill.provider = provider
    cap = Capacity(provider, CapacityConfig(zones=ZONES, failover="eager-failover", backoff_s=0.5))
    cap.on_attempt = drill.on_attempt
    cap.on_order = drill.on_order
    provider.capacity = cap
    t0 = time.time()
    try:
        await drill.poll()
        drill.exposed_since = time.monotonic()
        journal.record_event(Event(t0, EventKind.RECOVERED, f"watching the slice in {pod.zone}"))
        for n in range(1, cycles * len(ZONES) + 1):
            zone = await drill.reclaim_after_a_stint()
            print(f"  reclaim {n} in {zone}", file=sys.stderr, flush=True)
            # eager-failover tries the zones in list order, the lost one last: starting the
            # list after the lost zone makes the slice go round them all in turn
            i = ZONES.index(zone)
            cap.zones = (*ZONES[i + 1 :], *ZONES[: i + 1])
            await drill.recover()
        cap.zones = ZONES
        end = time.time()
        estimated = rates_by_zone(
            journal_rates(
                journal,
                now=end,
                hosts=HOSTS,
                default_zone=pod.zone,
                accelerator=pod.accelerator_type,
                zones=ZONES,
            )
        )
        # phase 2: risk-aware, one more reclaim
        cap.risk = lambda _zones, _hosts: estimated
        cap.cfg = CapacityConfig(zones=ZONES, failover="risk-aware", backoff_s=0.5)
        await preempt(run_dir, "all")
        await drill.poll()
        await drill.recover()
        await drill.sink.flush()
        journaled = _journaled_order(journal)
    finally:
        await provider.close()
        await stop_pod(run_dir)
        drill.sink.close()
        journal.close()
    table = {}
    for zone in ZONES:
        r = estimated[zone]
        lo, hi = r.interval
        table[zone] = {
            "configured": rates[zone],
            "estimated": None if r.rate is None else round(r.rate, 2),
            "low": round(lo, 2),
            "high": round(hi, 2),
            "preemptions": r.preemptions,
            "vm_hours": round(r.vm_hours, 4),
            "covered": lo <= rates[zone] <= hi,
        }
    calmest = min(ZONES, key=lambda z: rates[z])
    order = drill.orders[-1] if drill.orders else None
    return {
        "seed": seed,
        "cycles": cycles,
        "wall_s": round(time.time() - t0, 1),
        "rates_per_vm_hour": table,
        "risk_order": list(order.zones) if order else [],
        "risk_reason": order.reason if order else "",
        # what a user reads later: the row the choice left in the journal
        "journaled_order": journaled.data.get("order", []) if journaled else [],
        "journaled_message": journaled.message if journaled else "",
        "calmest": calmest,
        "came_back_in": provider.zone,
        "covered": all(row["covered"] for row in table.values()),
        "picked_calmest": provider.zone == calmest
        and journaled is not None
        and journaled.data.get("order", [None])[0] == calmest,
    }


def _journaled_order(journal: Journal) -> Event | None:
    """The newest risk-aware choice as the journal holds it (``rates.order_event``)."""
    rows = journal.query(limit=1000, kinds=[EventKind.CAPACITY])
    chosen = [e for e in rows if e.data.get("failover") == "risk-aware"]
    return chosen[-1] if chosen else None


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m benchmarks.zone_rates", description=__doc__)
    ap.add_argument("--seed", type=int, default=1, help="seed of the reclaim clocks")
    ap.add_argument("--cycles", type=int, default=6, help="rounds through the three zones")
    ap.add_argument(
        "--rates",
        default="local-a:360,local-b:120,local-c:40",
        help="reclaims per VM-hour per zone, ZONE:RATE,...",
    )
    args = ap.parse_args(argv)
    try:
        rates = parse_rates(args.rates)
    except ValueError as exc:
        ap.error(str(exc))
    if args.cycles < 1:
        ap.error(f"--cycles must be >= 1, got {args.cycles}")
    work = Path(tempfile.mkdtemp(prefix="phantom-bench-zone-rates-"))
    try:
        result = asyncio.run(run(work, rates, args.seed, args.cycles))
    finally:
        shutil.rmtree(work, ignore_errors=True)
    for zone, row in result["rates_per_vm_hour"].items():
        print(
            f"{zone}: configured {row['configured']:g}/VM-h, estimated {row['estimated']}/VM-h "
            f"[{row['low']}, {row['high']}] 95% ({row['preemptions']} in {row['vm_hours']} VM-h)"
            f"{'' if row['covered'] else '  NOT COVERED'}",
            file=sys.stderr,
        )
    print(f"journaled: {result['journaled_message'] or 'NO risk-aware row'}", file=sys.stderr)
    print(
        f"came back in {result['came_back_in']} (calmest configured: {result['calmest']})",
        file=sys.stderr,
    )
    print(json.dumps(result))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
