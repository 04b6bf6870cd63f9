"""``WatchSeries``: what the console knows, as Prometheus series.

    phantom_preemptions_total{kind,zone}     hosts lost to preemption (kind: head | worker,
                                             or slice: a GKE slice, its nodes at once)
    phantom_recovery_seconds{kind}           MTTR of each finished recovery (histogram;
                                             kind: worker | head | slice)
    phantom_detect_seconds                   loss -> detection (histogram)
    phantom_hosts{state}                     hosts by TPU state, from the newest snapshot
    phantom_jobs{state}                      the console's jobs by status
    phantom_cadence_age_seconds{run}         seconds since each run last logged a metric
    phantom_goodput_ratio                    the ledger's goodput over the whole journal
    phantom_cost_dollars_total{kind}         spot spend, and what on-demand would have cost
    phantom_up                               1 while the poll loop is alive

Every series carries a ``cluster`` label (the cluster's name in its fleet) when the series
are made with one; ``FleetSeries`` serves several clusters' on one ``/metrics``.

Counted from the rows as they are journaled and published (a restarted watcher starts its
counters again, which Prometheus' ``rate``/``increase`` read as a reset). A preemption is
counted once per host and incident, whichever rows (notice, preempted, lost) report it, and
once across a watcher's restarts: a successor that resumes a recovery writes rows about
hosts its predecessor already counted, so it starts knowing the journal's (``counted``).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

from prometheus_client import (
    CollectorRegistry,
    Counter,
    Histogram,
    disable_created_metrics,
    generate_latest,
)
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from console.services.model import (
    Event,
    EventKind,
    HostState,
    IncidentOutcome,
    JobInfo,
    PodSnapshot,
    RunCadence,
    Update,
)
from console.services.record.incidents import INCIDENT, incident_of

# Rows that say a host's VM is gone (a notice alone is not a loss: it may be honoured).
_LOST = frozenset({EventKind.PREEMPTED, EventKind.HOST_LOST})
# Recoveries on a loaded 2-core box take seconds to minutes; real slices minutes to an hour.
RECOVERY_BUCKETS = (5.0, 10.0, 20.0, 30.0, 60.0, 120.0, 300.0, 600.0, 1200.0, 3600.0)
DETECT_BUCKETS = (0.5, 1.0, 2.0, 5.0, 10.0, 20.0, 30.0, 60.0, 120.0, 300.0)
_SEEN = 4096  # (incident, host) pairs remembered for the once-per-host count


def _loss_key(ev: Event) -> tuple[str, str]:
    """What a preemption is counted once per: its incident (else its row) and host."""
    return (incident_of(ev) or f"row:{ev.id}", ev.host or "")


def incident_kind(data: Mapping[str, Any], hosts_total: int) -> str:
    """What an incident's summary row says was lost: a whole slice (every host of a pod, or
    a GKE slice its rows name), the head, or workers."""
    hosts = data.get("hosts") or ()
    if data.get("slices") or (hosts_total > 1 and len(hosts) >= hosts_total):
        return "slice"
    return "head" if data.get("head") else "worker"


def _loss_kind(ev: Event) -> str:
    """ "slice" for a loss row that names its slice (GKE's: its host is the slice, lost
    whole), else "" (a host: the head or a worker)."""
    return "slice" if ev.data.get("slice") else ""


class WatchSeries(Collector):
    """Fed by ``offer`` (the bus callback: any thread, no I/O); scraped with ``render``."""

    def __init__(
        self,
        *,
        zone: str,
        hosts_total: int,
        alive_within_s: float,
        monotonic: Callable[[], float] = time.monotonic,
        clock: Callable[[], float] = time.time,
        cluster: str = "",
    ) -> None:
        self.cluster = cluster  # a label on every series ('' : none)
        self.zone = zone
        self.hosts_total = hosts_total
        self.alive_within_s = alive_within_s
        self._monotonic = monotonic
        self._clock = clock
        self._lock = threading.Lock()
        # Only the series listed above: no ``*_created`` beside each counter and histogram
        # (prometheus_client's switch is per process; the exporter is its only user here).
        disable_created_metrics()
        self.registry = CollectorRegistry(auto_describe=True)
        self.preemptions = Counter(
            "phantom_preemptions",
            "Hosts lost to preemption, once per host and incident",
            ("kind", "zone"),
            registry=self.registry,
        )
        self.recovery = Histogram(
            "phantom_recovery_seconds",
            "Time to recover (MTTR) of each recovery that succeeded",
            ("kind",),
            buckets=RECOVERY_BUCKETS,
            registry=self.registry,
        )
        self.detect = Histogram(
            "phantom_detect_seconds",
            "Time from a loss to its detection",
            buckets=DETECT_BUCKETS,
            registry=self.registry,
        )
        self._snapshot: PodSnapshot | None = None
        self._alive_at: float | None = None  # monotonic time of the newest snapshot
        self._jobs: dict[str, str] = {}
        self._cadence: dict[str, RunCadence] = {}
        self._counted: dict[tuple[str, str], None] = {}
        self._ledger: Mapping[str, Any] = {}
        self.registry.register(self)  # last: registering reads the state once

    # -- feeding ----------------------------------------------------------------------------------
    def offer(self, update: Update) -> None:
        """The bus callback."""
        if isinstance(update, PodSnapshot):
            with self._lock:
                self._snapshot = update
                self._alive_at = self._monotonic()
        elif isinstance(update, JobInfo):
            with self._lock:
                self._jobs[update.job_id] = str(update.status)
        elif isinstance(update, RunCadence):
            with self._lock:
                self._cadence[update.run_id] = update
        elif isinstance(update, Event):
            self._event(update)

    def counted(self, rows: Iterable[Event]) -> None:
        """Losses counted before this process (the journal's rows, oldest first): a row
        published later about the same host and incident is not counted again."""
        with self._lock:
            for ev in rows:
                if ev.kind in _LOST and ev.host:
                    self._remember(_loss_key(ev))

    def _remember(self, key: tuple[str, str]) -> bool:
        """False if ``key`` was counted already (the caller holds the lock)."""
        if key in self._counted:
            return False
        self._counted[key] = None
        if len(self._counted) > _SEEN:
            del self._counted[next(iter(self._counted))]
        return True

    def _event(self, ev: Event) -> None:
        if ev.kind in _LOST and ev.host:
            with self._lock:
                if not self._remember(_loss_key(ev)):
                    return
                kind = _loss_kind(ev) or ("head" if self._is_head(ev.host) else "worker")
            zone = str(ev.data.get("zone") or self.zone)
            self.preemptions.labels(kind=kind, zone=zone).inc()
        elif ev.kind == INCIDENT:
            d = ev.data
            mttr, detect = _num(d.get("mttr_s")), _num(d.get("detect_s"))
            if mttr is not None and d.get("outcome") == IncidentOutcome.RECOVERED:
                self.recovery.labels(kind=incident_kind(d, self.hosts_total)).observe(mttr)
            if detect is not None:
                self.detect.observe(detect)

    def _is_head(self, host: str) -> bool:
        snap = self._snapshot
        if snap is None:
            return host.endswith("-w0")
        return any(h.name == host and h.index == 0 for h in snap.hosts)

    def set_ledger(self, ledger: Mapping[str, Any]) -> None:
        """The ledger's numbers (``ledger.book``'s JSON), refreshed off the event path."""
        with self._lock:
            self._ledger = dict(ledger)

    # -- reading ----------------------------------------------------------------------------------
    def alive(self) -> bool:
        """The poll loop published a snapshot within ``alive_within_s``."""
        with self._lock:
            at = self._alive_at
        return at is not None and self._monotonic() - at <= self.alive_within_s

    def health(self) -> str:
        """Why /healthz says 503 ('' while alive)."""
        return "" if self.alive() else f"no poll finished within {self.alive_within_s:g}s"

    def families(self) -> list[Metric]:
        """Every series, labelled with the cluster's name when it has one."""
        families = list(self.registry.collect())
        if not self.cluster:
            return families
        return [_labelled(f, self.cluster) for f in families]

    def render(self) -> bytes:
        return render_families(self.families())

    def collect(self) -> Iterable[Metric]:
        """The gauges, from the newest state (prometheus_client calls it at each scrape)."""
        with self._lock:
            snap, jobs = self._snapshot, dict(self._jobs)
            cadence, ledger = list(self._cadence.values()), dict(self._ledger)
        up = GaugeMetricFamily("phantom_up", "1 while the console's poll loop is alive")
        up.add_metric([], 1.0 if self.alive() else 0.0)
        yield up
        hosts = GaugeMetricFamily("phantom_hosts", "Hosts by TPU state", labels=["state"])
        counts = dict.fromkeys((str(HostState.READY), str(HostState.PREEMPTED)), 0)
        for h in snap.hosts if snap is not None else ():
            counts[str(h.tpu_state)] = counts.get(str(h.tpu_state), 0) + 1
        for state, n in sorted(counts.items()):
            hosts.add_metric([str(state)], float(n))
        yield hosts
        by_state: dict[str, int] = {}
        for status in jobs.values():
            by_state[status] = by_state.get(status, 0) + 1
        job_family = GaugeMetricFamily("phantom_jobs", "Jobs by status", labels=["state"])
        for state, n in sorted(by_state.items()):
            job_family.add_metric([state], float(n))
        yield job_family
        age = GaugeMetricFamily(
            "phantom_cadence_age_seconds",
            "Seconds since each run last logged a metric",
            labels=["run"],
        )
        now = self._clock()
        for cad in cadence:
            if cad.last_at is not None:
                age.add_metric([cad.name or cad.run_id], max(0.0, now - cad.last_at))
        yield age
        goodput = GaugeMetricFamily(
            "phantom_goodput_ratio", "Productive time over wall time, over the whole journal"
        )
        ratio = _num(ledger.get("goodput"))
        if ratio is not None:
            goodput.add_metric([], ratio)
        yield goodput
        cost = CounterMetricFamily(
            "phantom_cost_dollars",
            "Dollars: what spot cost (spot), what on-demand would have for the same work",
            labels=["kind"],
        )
        money = ledger.get("money") or {}
        for kind, key in (("spot", "spot_usd"), ("on_demand", "on_demand_same_work_usd")):
            value = _num(money.get(key))
            if value is not None:
                cost.add_metric([kind], value)
        yield cost


def _num(value: object) -> float | None:
    return float(value) if isinstance(value, int | float) and not isinstance(value, bool) else None


class FleetSeries:
    """Several clusters' series on one ``/metrics`` (each family once, every cluster's
    samples in it, told apart by their ``cluster`` label); alive while every cluster's poll
    loop is."""

    def __init__(self, members: Sequence[WatchSeries]) -> None:
        self.members = tuple(members)
        self.alive_within_s = max(m.alive_within_s for m in self.members)

    def alive(self) -> bool:
        return all(m.alive() for m in self.members)

    def health(self) -> str:
        return "; ".join(f"{m.cluster}: {why}" for m in self.members if (why := m.health()))

    def render(self) -> bytes:
        merged: dict[str, Metric] = {}
        for member in self.members:
            for family in member.families():
                into = merged.get(family.name)
                if into is None:
                    into = merged[family.name] = Metric(
                        family.name, family.documentation, family.type, family.unit
                    )
                into.samples.extend(family.samples)
        return render_families(list(merged.values()))


class _Families(Collector):
    def __init__(self, families: Sequence[Metric]) -> None:
        self._families = families

    def collect(self) -> Iterable[Metric]:
        return iter(self._families)


def render_families(families: Sequence[Metric]) -> bytes:
    """The exposition text of ``families`` as they are."""
    registry = CollectorRegistry(auto_describe=False)
    registry.register(_Families(families))
    return generate_latest(registry)


def _labelled(family: Metric, cluster: str) -> Metric:
    out = Metric(family.name, family.documentation, family.type, family.unit)
    out.samples = [s._replace(labels={"cluster": cluster, **s.labels}) for s in family.samples]
    return out
