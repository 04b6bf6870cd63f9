"""Incidents: a preemption (or any loss) and the recovery it caused, as one record.

The journal keeps every row; an incident ties them together without a schema change. While
an incident is open, each row the console journals about it carries the incident's id in
``data["incident"]``: the loss rows, the detector's follow-on rows (a worker's Ray node
down while the head is rebuilt, TPU state changes, jobs lost with the head), every recovery
step and the resubmissions. When the recovery ends, one summary row of kind ``incident``
(the same id; trigger, detect time, MTTR, result, steps, jobs resubmitted, steps lost where
a row reported them) is journaled and published through the event sink like any row.

``IncidentTracker`` does the stamping; the event sink runs it in its one writer thread, so
rows are stamped in the order they are journaled. ``group`` is the reader's side: rows in,
incidents and the rows that belong to none out, in time order.

An incident opens on a loss or a trouble row (``OPENING_KINDS``, a TPU state change to
PREEMPTED) or on a recovery starting; it closes with ``recovered``/``recovery_failed``. A
trouble row that no recovery follows (a poll that saw a Ray node down once, auto recovery
off) lets its incident lapse after ``LAPSE_S`` without rows: it is not summarised.
"""

from __future__ import annotations

import collections
import time
from collections.abc import Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from console.services.model import (
    CAUSE_OF_KIND,
    Event,
    EventKind,
    HostState,
    IncidentCause,
    IncidentOutcome,
    JobStatus,
)
from console.services.record.journal import (
    ACTION,
    RECOVERED,
    RECOVERY_FAILED,
    RECOVERY_STARTED,
    Journal,
)

INCIDENT = EventKind.INCIDENT  # the summary row's kind
# A GKE pod's own failure: its JobSet restarts by itself, so no recovery may follow.
SELF_HEALING = frozenset({EventKind.POD_CRASHED, EventKind.POD_OOM_KILLED, EventKind.POD_EVICTED})
KEY = "incident"  # where a row carries its incident id (``data[KEY]``)
# Rows that start an incident when none is open: losses first, then the softer trouble the
# watchdog recovers (a Ray node down, a duplicate node, an unreachable host), GKE's own.
LOSS_KINDS = (
    EventKind.PREEMPTION_NOTICE,
    EventKind.PREEMPTED,
    EventKind.HOST_LOST,
    EventKind.HEAD_LOST,
    EventKind.HEAD_FAILED,
)
OPENING_KINDS = frozenset(
    {
        *LOSS_KINDS,
        EventKind.RAY_NODE_DOWN,
        EventKind.DUPLICATE_RAY_NODE,
        EventKind.HOST_UNREACHABLE,
        EventKind.SSH_DOWN,
        EventKind.JOBSET_FAILED,
        EventKind.WORKER_REPLACED,
        EventKind.POD_CRASHED,  # a GKE pod's own failure, by its cause
        EventKind.POD_OOM_KILLED,
        EventKind.POD_EVICTED,
        RECOVERY_STARTED,
    }
)
_ENDS = (RECOVERED, RECOVERY_FAILED)
# A recovery's end row by its kind, for a row that does not say how it ended (none the
# runner writes; a journal's older rows were given it when migrated).
_ENDED: dict[str, IncidentOutcome] = {
    RECOVERED: IncidentOutcome.RECOVERED,
    RECOVERY_FAILED: IncidentOutcome.FAILED,
}
# Never part of an incident: what a user did (other than recovering), switches, summaries,
# the alerts sent about it.
_NOT_MEMBERS = frozenset({INCIDENT, EventKind.WATCHDOG, EventKind.ALERT})
LAPSE_S = 180.0
_WORDS = {
    "preemption_notice": "preemption notice",
    "head_lost": "head lost",
    "host_lost": "host lost",
}


def incident_of(event: Event) -> str:
    """The id of the incident ``event`` belongs to (summary rows included), or ""."""
    value = event.data.get(KEY)
    return value if isinstance(value, str) else ""


def new_id(at: float, taken: Collection[str] = (), cluster: str = "") -> str:
    """Readable, by the second the incident opened, then its cluster: a fleet's clusters
    open incidents in the same second, each its own (``inc-20261206-134500-pod-b``). One
    that opens in the same second as an earlier one of its cluster (a slice preempted again
    just after it came back) gets ``-2``, ``-3`` before the cluster's name, which starts
    with a letter, so no count and name read as another cluster's id; ids sort by time
    across the fleet. A journal's ids from before (no cluster) are read as they are."""
    base = "inc-" + time.strftime("%Y%m%d-%H%M%S", time.gmtime(at))
    tail = f"-{cluster}" if cluster else ""
    iid, n = base + tail, 1
    while iid in taken:
        n += 1
        iid = f"{base}-{n}{tail}"
    return iid


def opens(kind: str, data: Mapping[str, Any]) -> bool:
    if kind in OPENING_KINDS:
        return True
    return kind == EventKind.STATE_CHANGE and str(data.get("to", "")) == HostState.PREEMPTED


def member(event: Event) -> bool:
    """Whether a row written while an incident is open belongs to it: everything but what a
    user did meanwhile (the watchdog's own actions, a resubmission's submit, belong)."""
    if event.kind in _NOT_MEMBERS:
        return False
    if event.kind == ACTION:
        action = str(event.data.get("action", ""))
        return action.startswith("recovery.") or event.actor == "watchdog"
    return True


# -- the summary -----------------------------------------------------------------------------------
def summarize(incident_id: str, rows: Sequence[Event]) -> dict[str, Any]:
    """What the incident's rows say, as the summary row's ``data``."""
    rows = sorted(rows, key=_order)
    started = next((e for e in rows if e.kind == RECOVERY_STARTED), None)
    end = next((e for e in reversed(rows) if e.kind in _ENDS), None)
    # The cause, not the first symptom: a head seen unreachable a poll before its VM is
    # seen PREEMPTED was preempted.
    loss = min(
        (e for e in rows if e.kind in LOSS_KINDS),
        key=lambda e: LOSS_KINDS.index(e.kind),
        default=None,
    )
    first = loss or next((e for e in rows if opens(e.kind, e.data)), rows[0] if rows else None)
    trigger = first.message if first is not None else ""
    steps: list[dict[str, Any]] = []
    resubmitted: dict[str, str] = {}
    folded: dict[str, int] = {}
    hosts: list[str] = []
    slices: list[str] = []
    steps_lost: int | None = None
    detect = _num(started.data.get("detect_s")) if started is not None else None
    for e in rows:
        action = str(e.data.get("action", "")) if e.kind == ACTION else ""
        if action.startswith("recovery."):
            steps.append(
                {
                    "step": action.removeprefix("recovery."),
                    "state": str(e.data.get("state") or ("ok" if e.data.get("ok") else "failed")),
                    "duration_s": _num(e.data.get("duration_s")),
                }
            )
        elif e.kind == EventKind.JOB_RESUBMITTED:
            old, new = e.data.get("old_job_id"), e.data.get("new_job_id")
            if old and new:
                resubmitted[str(old)] = str(new)
        elif e.kind not in (RECOVERY_STARTED, *_ENDS):
            folded[e.kind] = folded.get(e.kind, 0) + 1
        if e.kind in LOSS_KINDS[:3] and e.host and e.host not in hosts:
            hosts.append(e.host)
        lost_slice = e.data.get("slice") if e.kind in LOSS_KINDS[:3] else None
        if isinstance(lost_slice, str) and lost_slice and lost_slice not in slices:
            slices.append(lost_slice)
        if detect is None and e.kind in LOSS_KINDS:
            detect = _num(e.data.get("detect_s"))
        lost = _num(e.data.get("steps_lost"))
        if lost is not None:
            steps_lost = (steps_lost or 0) + int(lost)
    failed_step = ""
    if end is None:
        outcome = IncidentOutcome.RECOVERING if started is not None else IncidentOutcome.NO_RECOVERY
    else:  # the recovery runner writes how it ended (older rows got it when migrated)
        outcome = IncidentOutcome(str(end.data.get("outcome", _ENDED[end.kind])))
        if outcome is IncidentOutcome.FAILED:
            failed_step = str(end.data.get("step") or "?")
    return {
        KEY: incident_id,
        "trigger": trigger,
        "trigger_kind": first.kind if first is not None else "",
        "cause": CAUSE_OF_KIND.get(first.kind, IncidentCause.OTHER)
        if first is not None
        else IncidentCause.OTHER,
        "host": first.host if first is not None else "",
        "hosts": hosts,
        # GKE's loss rows name their slice (its nodes go and come back together): what was
        # lost was the slice, whatever share of the cluster's hosts it is
        "slices": slices,
        "head": any(e.kind in (EventKind.HEAD_LOST, EventKind.HEAD_FAILED) for e in rows),
        "opened_at": rows[0].at if rows else None,
        "ended_at": end.at if end is not None else None,
        "detect_s": detect,
        "mttr_s": _num(end.data.get("mttr_s")) if end is not None else None,
        "result": result_text(outcome, failed_step),  # for people; readers take the outcome
        "outcome": outcome,
        "failed_step": failed_step,
        "steps": steps,
        "resubmitted": resubmitted,
        "steps_lost": steps_lost,
        "folded": folded,
        "rows": len(rows),
    }


def result_text(outcome: str, failed_step: str = "") -> str:
    """How an incident ended, in words."""
    return f"failed at {failed_step}" if outcome == IncidentOutcome.FAILED else str(outcome)


def summary_text(data: Mapping[str, Any]) -> str:
    """One line for a person: what happened, and how it ended."""
    kind = str(data.get("trigger_kind") or INCIDENT)
    what = _WORDS.get(kind, kind.replace("_", " "))
    if data.get("head") and not what.startswith("head"):
        what = "head " + what
    hosts = data.get("hosts") or ([data["host"]] if data.get("host") else [])
    if hosts:
        what += f" ({', '.join(str(h) for h in hosts)})"
    outcome = str(data.get("outcome", ""))
    result = result_text(outcome, str(data.get("failed_step", "")))
    mttr = _num(data.get("mttr_s"))
    if outcome == IncidentOutcome.RECOVERED and mttr is not None:
        result = f"recovered in {mttr:.1f}s"
    parts = [f"{what}: {result}"]
    resub = data.get("resubmitted") or {}
    if resub:
        parts.append(f"{len(resub)} job(s) resubmitted")
    lost = data.get("steps_lost")
    if isinstance(lost, int):
        parts.append(f"{lost} steps lost")
    return ", ".join(parts)


def summary_event(incident_id: str, rows: Sequence[Event], at: float | None = None) -> Event:
    """The summary row of an incident; dated when it opened, so it sorts where it began."""
    data = summarize(incident_id, rows)
    opened = data["opened_at"]
    return Event(
        at=float(opened if opened is not None else at or 0.0),
        kind=INCIDENT,
        message=summary_text(data),
        host=str(data["host"]),
        actor="watchdog",
        data=data,
    )


def healed_summary(
    incident_id: str, rows: Sequence[Event], at: float, superseded: bool = False
) -> Event:
    """The summary of an incident that healed itself at ``at`` (no recovery ran): recovered,
    its MTTR from its first row to the workload running again. ``superseded``: a loss of
    the pod's node or slice came first and opened its own incident: it ended there, with no
    recovery of its own (the loss's recovery covers it)."""
    ev = summary_event(incident_id, rows, at=at)
    opened = _num(ev.data.get("opened_at"))
    outcome = IncidentOutcome.NO_RECOVERY if superseded else IncidentOutcome.RECOVERED
    data = {
        **ev.data,
        "outcome": outcome,
        "result": result_text(outcome),
        "ended_at": at,
        "mttr_s": None if superseded or opened is None else round(at - opened, 3),
    }
    return replace(ev, data=data, message=summary_text(data))


def _healed(cur: _Open, event: Event) -> bool:
    """``event`` says the workload a self-healing incident's pod belonged to runs again."""
    if cur.opened_by not in SELF_HEALING or cur.recovering or event.kind != EventKind.JOB_STATE:
        return False
    if event.data.get("new_status") != JobStatus.RUNNING:
        return False
    workloads = {str(e.data.get("workload") or "") for e in cur.rows if e.kind in SELF_HEALING}
    workloads.discard("")
    return not workloads or str(event.data.get("job_id") or "") in workloads


# -- the writer's side -----------------------------------------------------------------------------
@dataclass
class _Open:
    id: str
    last_at: float
    rows: list[Event] = field(default_factory=list)
    recovering: bool = False
    opened_by: str = ""


class IncidentTracker:
    """Stamps rows with the open incident's id and says when to journal its summary.

    Not thread-safe: one writer (the event sink's thread) calls it, in journal order.
    """

    def __init__(self, lapse_s: float = LAPSE_S, cluster: str = "") -> None:
        self.lapse_s = lapse_s
        self.cluster = cluster  # its journal's cluster: named in every id it makes
        self._open: _Open | None = None
        self._closed: collections.deque[str] = collections.deque(maxlen=64)
        self._superseded: list[Event] = []  # summaries to journal with the next stored row

    @property
    def current(self) -> str:
        """The open incident's id, or ""."""
        return self._open.id if self._open is not None else ""

    def stamp(self, event: Event) -> Event:
        """``event`` with its incident id in ``data`` when it belongs to one."""
        if event.kind == INCIDENT or incident_of(event):
            return event
        cur = self._open
        if cur is not None and not cur.recovering and event.at - cur.last_at > self.lapse_s:
            cur = self._open = None  # trouble no recovery followed: it passed
        if (
            cur is not None
            and not cur.recovering
            and cur.opened_by in SELF_HEALING
            and event.kind in LOSS_KINDS
        ):
            # A pod's own failure that no recovery followed (its JobSet restarted by itself)
            # has passed once a loss of the pod's node or slice arrives: that is its own one.
            # It ends here, summarised (no recovery of its own: the loss's covers it); before,
            # it was dropped unsummarised and stayed open to readers for ever.
            self._superseded.append(healed_summary(cur.id, cur.rows, event.at, superseded=True))
            self._closed.append(cur.id)
            cur = self._open = None
        if cur is None:
            if not opens(event.kind, event.data):
                return event
            iid = new_id(event.at, self._closed, self.cluster)
            cur = self._open = _Open(id=iid, last_at=event.at, opened_by=event.kind)
        if not member(event):
            return event
        return replace(event, data={**event.data, KEY: cur.id})

    def stored(self, event: Event) -> Event | None:
        """Note a stored row; returns the summary to journal when it closed its incident (or
        when an earlier one was superseded)."""
        out = self._stored(event)
        if out is None and self._superseded:
            return self._superseded.pop(0)
        return out

    def _stored(self, event: Event) -> Event | None:
        cur = self._open
        if cur is None or incident_of(event) != cur.id or event.kind == INCIDENT:
            return None
        cur.rows.append(event)
        cur.last_at = max(cur.last_at, event.at)
        if event.kind == RECOVERY_STARTED:
            cur.recovering = True
        if _healed(cur, event):
            # A pod's own failure its JobSet restarted by itself: over once the workload
            # runs again. Before, no summary was ever written (the incident "passed" only
            # when the next loss came or LAPSE_S later): every crash, OOM kill or eviction
            # stayed an open incident to readers, without an MTTR.
            self._close(cur.id)
            return healed_summary(cur.id, cur.rows, event.at)
        if event.kind not in _ENDS:
            return None
        self._close(cur.id)
        return summary_event(cur.id, cur.rows, at=event.at)

    def _close(self, iid: str) -> None:
        if self._open is not None and self._open.id == iid:
            self._open = None
        self._closed.append(iid)

    def foreign(self, event: Event) -> None:
        """Note a row another process journaled (read back from the journal): the owner's
        incident opens or ends here too, so this process's own rows meanwhile (its tunnel,
        its job watcher) carry the right id, and one it takes over ends summarised whole."""
        iid = incident_of(event)
        if not iid or iid in self._closed:
            return  # a row of an incident that ended here already: it opens nothing
        cur = self._open
        if event.kind == INCIDENT or event.kind in _ENDS:
            self._close(iid)
            return
        if cur is None or cur.id != iid:
            if cur is not None and not opens(event.kind, event.data):
                return
            cur = self._open = _Open(id=iid, last_at=event.at)
        cur.rows.append(event)
        cur.last_at = max(cur.last_at, event.at)
        cur.recovering = cur.recovering or event.kind == RECOVERY_STARTED

    def resume(self, journal: Journal, window: int = 2000) -> None:
        """Pick up an incident a previous process left open (it died mid-recovery)."""
        rows = journal.query(limit=window)
        last = next((incident_of(e) for e in reversed(rows) if incident_of(e)), "")
        if not last or any(e.kind == INCIDENT and incident_of(e) == last for e in rows):
            return
        mine = [e for e in rows if incident_of(e) == last]
        if mine[-1].kind in _ENDS:
            return
        self._open = _Open(
            id=last,
            last_at=max(e.at for e in mine),
            rows=mine,
            recovering=any(e.kind == RECOVERY_STARTED for e in mine),
        )


# -- the readers' side -----------------------------------------------------------------------------
@dataclass(frozen=True)
class Incident:
    """An incident as a reader sees it: its rows (time order) and its summary row (its own,
    once journaled; derived from the rows while it is open)."""

    id: str
    rows: tuple[Event, ...]
    summary: Event

    @property
    def at(self) -> float:
        return self.summary.at

    @property
    def cluster(self) -> str:
        """The cluster it happened on (its rows' journal's; '' in rows from before)."""
        return self.summary.cluster or next((r.cluster for r in self.rows if r.cluster), "")

    @property
    def open(self) -> bool:
        return self.summary.id is None and self.summary.data.get("ended_at") is None

    def to_json(self) -> dict[str, Any]:
        return {"at": self.at, "message": self.summary.message, **self.summary.data}


def group(events: Iterable[Event]) -> list[Incident | Event]:
    """Rows to incidents plus the rows of no incident, in time order (ties by id)."""
    loose: list[Event] = []
    members: dict[str, list[Event]] = {}
    summaries: dict[str, Event] = {}
    for e in events:
        iid = incident_of(e)
        if not iid:
            loose.append(e)
        elif e.kind == INCIDENT:
            summaries[iid] = e
        else:
            members.setdefault(iid, []).append(e)
    out: list[Incident | Event] = list(loose)
    for iid in {*members, *summaries}:
        rows = tuple(sorted(members.get(iid, ()), key=_order))
        summary = summaries.get(iid) or summary_event(iid, rows)
        out.append(Incident(iid, rows, summary))
    out.sort(key=lambda x: _order(x.summary if isinstance(x, Incident) else x))
    return out


def incidents(journal: Journal, limit: int = 5, window: int = 5000) -> list[Incident]:
    """The newest ``limit`` incidents in the journal's last ``window`` rows, oldest first."""
    found = [x for x in group(journal.query(limit=window)) if isinstance(x, Incident)]
    return found[-limit:] if limit else found


def in_time_order(events: Iterable[Event]) -> list[Event]:
    """Rows by when they happened (an action is dated at its start, journaled at its end)."""
    return sorted(events, key=_order)


def _order(e: Event) -> tuple[float, int]:
    return (e.at, e.id if e.id is not None else 1 << 62)


def _num(value: Any) -> float | None:
    return float(value) if isinstance(value, int | float) and not isinstance(value, bool) else None
