"""What the Fleet screen renders: each cluster's latest published state, and its row.

The app keeps one ``ClusterView`` per cluster of the fleet, fed from that cluster's services
as they publish (``tui.messages.ClusterBridge``): the pod snapshot, the watchdog's status
and cadence are read back from the services' latest (no I/O), jobs and journal rows arrive
as updates. ``fleet_row`` turns a view into the row's cells; nothing here asks which
provider a cluster is on (its capabilities say whether it runs Ray or JobSets).
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

from console.screens.state import ago, middle_ellipsis, short_host
from console.services.capabilities import Capability
from console.services.ledger.prices import Pricing
from console.services.model import (
    CadenceVerdict,
    Event,
    EventKind,
    JobInfo,
    JobStatus,
    PodSnapshot,
    RecoveryStatus,
    RunCadence,
)
from console.services.record.incidents import Incident, group
from console.services.settings import ClusterIdentity

Cell = tuple[str, str]  # (text, rich style)
PREEMPTED_WIDTH = 12
EVENTS_KEPT = 2000  # journal rows kept per cluster: enough for its open incidents

# (key, label, width): the Fleet table's columns, most telling first (80 columns show the
# cluster, its place and whether it is whole; the rest scroll).
COLUMNS: tuple[tuple[str, str, int], ...] = (
    ("name", "CLUSTER", 12),
    ("provider", "PROV", 5),
    ("where", "ZONE/REGION", 13),
    ("accel", "ACCEL", 12),
    ("ready", "READY", 5),
    ("runs", "RAY/JOBSET", 10),
    ("jobs", "JOBS", 4),
    ("recoveries", "RECOV", 5),
    ("incidents", "OPEN", 4),
    ("preempted", "PREEMPTED", PREEMPTED_WIDTH),
    ("cadence", "CADENCE", 10),
    ("price", "SPOT $/H REGION", 22),
)


@dataclass
class ClusterView:
    """One cluster's latest state as the Fleet screen knows it."""

    identity: ClusterIdentity
    capabilities: frozenset[Capability]
    pricing: Pricing
    pod: PodSnapshot | None = None
    recovery: RecoveryStatus | None = None
    runs: dict[str, RunCadence] = field(default_factory=dict)
    jobs: dict[str, JobInfo] = field(default_factory=dict)
    events: deque[Event] = field(default_factory=lambda: deque(maxlen=EVENTS_KEPT))
    _seen_events: set[int] = field(default_factory=set)
    _journal: JournalCounts | None = None  # derived from ``events``, until they change
    # Moves on with every change made through the methods below: the Fleet screen redraws
    # only the rows whose version moved (ten clusters polling; one changed per publish).
    version: int = 0

    @property
    def name(self) -> str:
        return self.identity.name

    def set_pod(self, pod: PodSnapshot) -> None:
        self.pod = pod
        self.version += 1

    def set_recovery(self, recovery: RecoveryStatus) -> None:
        self.recovery = recovery
        self.version += 1

    def set_runs(self, runs: Iterable[RunCadence]) -> None:
        self.runs = {r.run_id: r for r in runs}
        self.version += 1

    def set_jobs(self, jobs: Iterable[JobInfo]) -> None:
        self.jobs = {j.job_id: j for j in jobs}
        self.version += 1

    def set_job(self, job: JobInfo) -> None:
        self.jobs[job.job_id] = job
        self.version += 1

    def add_events(self, events: Iterable[Event]) -> bool:
        """Journal rows (each once, by its id); True when one was new."""
        added = False
        for event in events:
            if event.id is not None:
                if event.id in self._seen_events:
                    continue
                self._seen_events.add(event.id)
            self.events.append(event)
            added = True
        if added:
            self._journal = None
            self.version += 1
        return added

    @property
    def journal(self) -> JournalCounts:
        """What the row counts from the journal, derived once per change of its rows (a
        cluster polls many times between two journal rows)."""
        if self._journal is None:
            self._journal = JournalCounts.of(self.events)
        return self._journal


@dataclass(frozen=True)
class JournalCounts:
    recoveries: int
    open_incidents: int
    last_preemption: Event | None

    @classmethod
    def of(cls, events: Sequence[Event]) -> JournalCounts:
        return cls(
            recoveries=sum(1 for e in events if e.kind == EventKind.RECOVERED),
            open_incidents=len(open_incidents(events)),
            last_preemption=max(
                (e for e in events if e.kind == EventKind.PREEMPTED),
                key=lambda e: e.at,
                default=None,
            ),
        )


def fleet_row(view: ClusterView, now: float, *, current: bool = False) -> tuple[Cell, ...]:
    """The cells of ``view``'s row (``current``: the cluster the other screens show)."""
    pod = view.pod
    ident = view.identity
    recovering = view.recovery is not None and view.recovery.active
    if pod is None or not pod.hosts:
        ready: Cell = ("-", "dim")
        whole = True
    else:
        n = pod.ready_hosts
        whole = n == len(pod.hosts)
        ready = (f"{n}/{len(pod.hosts)}", "bold green" if whole else "bold red")
    name_style = "bold magenta" if recovering else ("bold" if whole else "bold red")
    return (
        (("▸ " if current else "  ") + ident.name, name_style),
        (ident.provider, "dim"),
        ((pod.zone if pod is not None and pod.zone else "") or ident.location or "-", ""),
        (view.pricing.accelerator_type or ident.accelerator_type or "-", ""),
        ready,
        _runs_cell(view),
        _jobs_cell(view.jobs.values()),
        _recoveries_cell(view.journal.recoveries, recovering),
        _open_cell(view.journal.open_incidents),
        _preempted_cell(view.journal.last_preemption, now, pod),
        _cadence_cell(view.runs.values()),
        price_cell(view.pricing),
    )


def _runs_cell(view: ClusterView) -> Cell:
    pod = view.pod
    if pod is None or not pod.hosts:
        return ("-", "dim")
    if Capability.RAY in view.capabilities:
        alive, total = pod.ray_alive, len(pod.hosts)
        return (f"ray {alive}/{total}", "green" if alive == total else "yellow")
    if Capability.WORKLOADS in view.capabilities:
        running = sum(1 for w in pod.workloads if w.status == JobStatus.RUNNING)
        failed = any(w.status == JobStatus.FAILED for w in pod.workloads)
        style = "red" if failed else ("green" if running else "dim")
        return (f"jobset {running}/{len(pod.workloads)}", style)
    return ("-", "dim")


def _jobs_cell(jobs: Iterable[JobInfo]) -> Cell:
    running = sum(1 for j in jobs if j.status == JobStatus.RUNNING)
    return (str(running), "green" if running else "dim")


def _recoveries_cell(done: int, recovering: bool) -> Cell:
    if recovering:
        return (f"{done}+⟳", "bold magenta")
    return (str(done), "" if done else "dim")


def open_incidents(events: Iterable[Event]) -> list[Incident]:
    return [i for i in group(events) if isinstance(i, Incident) and i.open]


def _open_cell(n: int) -> Cell:
    return (str(n), "bold yellow" if n else "dim")


def _preempted_cell(last: Event | None, now: float, pod: PodSnapshot | None) -> Cell:
    if last is None:
        return ("never", "dim")
    when = ago(now, last.at)
    width = PREEMPTED_WIDTH - len(when) - 1
    host = short_host(last.host, pod.node_name if pod is not None else "")
    return (f"{when} {middle_ellipsis(host, width)}".strip() if host else when, "yellow")


def _cadence_cell(runs: Iterable[RunCadence]) -> Cell:
    runs = list(runs)
    if not runs:
        return ("-", "dim")
    stalled = sum(1 for r in runs if r.verdict is CadenceVerdict.STALLED)
    if stalled:
        return (f"STALLED {stalled}", "bold red")
    if any(r.verdict is CadenceVerdict.STALE for r in runs):
        return ("stale", "yellow")
    return (f"ok {len(runs)}", "green")


def hourly(pricing: Pricing) -> float | None:
    """The slice's spot price per hour (None: no price for it)."""
    if pricing.rate is None:
        return None
    return pricing.chips * pricing.rate.spot


def price_cell(pricing: Pricing) -> Cell:
    per_h = hourly(pricing)
    if per_h is None:
        return (f"no price {pricing.region}".strip(), "dim")
    return (f"${per_h:,.2f} {pricing.region}".strip(), "")
