"""The Fleet screen under load: `python -m benchmarks.tui --fleet 10 [--hosts 256]`.

The real app runs headless at 160x48 over ``--fleet`` synthetic clusters (``BenchServices``,
each its own bus) of ``--hosts`` hosts each, on its Fleet screen. Every cluster publishes
``--pod-hz`` snapshots a second from its own thread (``--changes`` hosts changing in each), as
a fleet of pods polling at once. Measured: latency from a cluster's publish to the first
rendered frame after the app applied it to that cluster's row (the compositor's update
turned into terminal bytes, as for a real terminal); a publish that changed none of its row's
cells is on screen once applied (no frame comes for it), counted then and in
``unchanged_publishes``; an idle baseline (one snapshot a second across the fleet) in the
same run, and the ratio. Checked: no dropped state, every row's
READY and RAY cells equal its cluster's final snapshot once the feeds stop.
"""

from __future__ import annotations

import argparse
import asyncio
import threading
import time
from typing import Any

from textual._compositor import CompositorUpdate
from textual.screen import Screen

from benchmarks.tui import BenchServices, pct, rss_mb
from console.config import ClusterConfig, Config
from console.screens.fleet import FleetScreen
from console.screens.fleet_state import COLUMNS
from console.tui.app import PhantomApp, TuiSettings
from console.tui.messages import ClusterPolled
from console.widgets.fast_table import FastTable
from console.wiring.settings import service_settings

SEED = 7  # cluster i draws from Random(SEED + i): its own stream, the same every run
_READY = [key for key, _, _ in COLUMNS].index("ready")
_RAY = [key for key, _, _ in COLUMNS].index("runs")


class FleetRecorder:
    """Publish times per cluster waiting for a frame; resolved at each rendered frame."""

    def __init__(self, names: list[str]) -> None:
        self.lock = threading.Lock()
        self.published: dict[str, list[float]] = {n: [] for n in names}
        self.applied_upto = dict.fromkeys(names, 0)
        self.pending: list[tuple[str, float]] = []  # (cluster, publish time)
        self.ms: list[float] = []
        self.unchanged = 0  # publishes that left their row as it was drawn
        self.frames = 0

    def publish(self, name: str, at: float) -> None:
        with self.lock:
            self.published[name].append(at)

    def applied(self, name: str, at: float, *, unchanged: bool = False) -> None:
        """Every snapshot of ``name`` published up to ``at`` is now in its row.

        ``unchanged``: applying it changed none of the row's cells (the same hosts ready, the
        same Ray count...). With no earlier change of that row waiting for a frame, the screen
        already shows it: it is on screen now, and no frame will come for it (a frame is
        drawn only for what changed), so it is resolved at this instant rather than charged
        the wait for some other cluster's frame."""
        now = time.perf_counter()
        with self.lock:
            times, i = self.published[name], self.applied_upto[name]
            new = []
            while i < len(times) and times[i] <= at:
                new.append(times[i])
                i += 1
            self.applied_upto[name] = i
            if unchanged and all(n != name for n, _ in self.pending):
                self.ms.extend((now - t) * 1000 for t in new)
                self.unchanged += len(new)
            else:
                self.pending.extend((name, t) for t in new)

    def frame(self) -> None:
        now = time.perf_counter()
        self.frames += 1
        with self.lock:
            done, self.pending = self.pending, []
        self.ms.extend((now - t) * 1000 for _, t in done)


class FleetBenchApp(PhantomApp):
    recorder: FleetRecorder

    def on_cluster_polled(self, message: ClusterPolled) -> None:
        # Instead of the app's handler, which it calls: Textual runs the handler of every
        # class along the MRO unless the default is prevented.
        message.prevent_default()
        name = message.cluster
        screen = self.screen
        table = screen.query_one("#fleet", FastTable) if isinstance(screen, FleetScreen) else None
        before = table.row_cells(name) if table is not None else None
        super().on_cluster_polled(message)
        pod = self.fleet_state[name].pod
        if pod is not None:
            after = table.row_cells(name) if table is not None else None
            self.recorder.applied(name, pod.at, unchanged=before is not None and after == before)

    def _display(self, screen: Screen[Any], renderable: Any) -> None:
        if renderable is not None:
            if isinstance(renderable, CompositorUpdate):
                renderable.render_segments(self.console)  # what a terminal would be sent
            self.recorder.frame()
        super()._display(screen, renderable)


def cluster(i: int, hosts: int) -> BenchServices:
    """The ``i``-th synthetic cluster, changing hosts from its own seeded stream: with one
    seed for all, every cluster published the same pods in step, a fleet of clones."""
    services = BenchServices(hosts, lines_per_s=0, seed=SEED + i)
    config = Config(cluster=ClusterConfig(hosts=hosts, node_name=f"pod-{i}"), name=f"pod-{i}")
    services.settings = service_settings(config)
    return services


def feed(
    name: str,
    services: BenchServices,
    recorder: FleetRecorder,
    stop: threading.Event,
    hz: float,
    changes: int,
    offset: float,
) -> None:
    period = 1.0 / hz
    next_at = time.perf_counter() + offset * period  # the clusters' polls not in lockstep
    stop.wait(max(0.0, next_at - time.perf_counter()))
    while not stop.is_set():
        snapshot = services.next_pod(changes)
        recorder.publish(name, snapshot.at)
        services.bus.publish(snapshot)
        next_at += period
        stop.wait(max(0.0, next_at - time.perf_counter()))


async def _phase(
    fleet: dict[str, BenchServices],
    recorder: FleetRecorder,
    seconds: float,
    hz: float,
    changes: int,
) -> None:
    stop = threading.Event()
    n = len(fleet)
    feeders = [
        threading.Thread(target=feed, args=(name, s, recorder, stop, hz, changes, i / n))
        for i, (name, s) in enumerate(fleet.items())
    ]
    for t in feeders:
        t.start()
    await asyncio.sleep(seconds)
    stop.set()
    for t in feeders:
        t.join()


async def run_fleet(args: argparse.Namespace) -> dict[str, Any]:
    fleet = {f"pod-{i}": cluster(i, args.hosts) for i in range(args.fleet)}
    recorder = FleetRecorder(list(fleet))
    first = next(iter(fleet.values()))
    app = FleetBenchApp(
        first,  # type: ignore[arg-type]
        clock=time.perf_counter,
        settings=TuiSettings(tick_s=None, cursor_blink=False, gc_freeze=not args.no_gc_freeze),
        fleet=fleet,  # type: ignore[arg-type]
    )
    app.recorder = recorder
    result: dict[str, Any] = {
        "clusters": args.fleet,
        "hosts_per_cluster": args.hosts,
        "pod_hz_per_cluster": args.pod_hz,
        "changes_per_snapshot": args.changes,
        "seconds": args.seconds,
    }
    async with app.run_test(size=(160, 48)) as pilot:
        await pilot.pause()
        await app.workers.wait_for_complete()
        assert isinstance(app.screen, FleetScreen)
        # Baseline: one snapshot a second across the whole fleet (each cluster in turn).
        await _phase(fleet, recorder, args.baseline_seconds, 1.0 / args.fleet, args.changes)
        await pilot.pause(0.2)
        baseline, recorder.ms = recorder.ms, []
        frames0, t0 = recorder.frames, time.perf_counter()
        await _phase(fleet, recorder, args.seconds, args.pod_hz, args.changes)
        elapsed = time.perf_counter() - t0
        # Drain: every cluster's last snapshot applied to its row.
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            await pilot.pause(0.05)
            views = app.fleet_state
            if all(views[n].pod is not None and views[n].pod.at == s.pod.at for n, s in fleet.items()):  # type: ignore[union-attr]  # fmt: skip
                break
        await pilot.pause(0.2)
        table = app.screen.query_one("#fleet")
        dropped = 0
        for name, services in fleet.items():
            cells = table.cell_texts(name)  # type: ignore[attr-defined]
            pod = services.pod
            ready = f"{pod.ready_hosts}/{len(pod.hosts)}"
            ray = f"ray {pod.ray_alive}/{len(pod.hosts)}"
            dropped += (cells[_READY], cells[_RAY]) != (ready, ray)
        result.update(
            {
                "p50_ms": pct(recorder.ms, 0.5),
                "p99_ms": pct(recorder.ms, 0.99),
                # the same figures by the single-cluster bench's names (its --repeat report)
                "pod_p50_ms": pct(recorder.ms, 0.5),
                "pod_p99_ms": pct(recorder.ms, 0.99),
                "log_p99_ms": None,
                "baseline_p50_ms": pct(baseline, 0.5),
                "baseline_p99_ms": pct(baseline, 0.99),
                "samples": len(recorder.ms),
                "unchanged_publishes": recorder.unchanged,
                "baseline_samples": len(baseline),
                "snapshots_published": sum(len(v) for v in recorder.published.values()),
                "fps": round((recorder.frames - frames0) / elapsed, 1),
                "rss_mb": round(rss_mb(), 1),
                "dropped_rows": dropped,
            }
        )
        await app._stop_services()
    base, p99 = result["baseline_p99_ms"], result["p99_ms"]
    result["p99_vs_idle"] = round(p99 / base, 2) if base and p99 else None
    result["no_dropped_state"] = result["dropped_rows"] == 0
    return result
