"""Which journaled events are alerts, what identifies each one, and the bodies sent.

An alert is derived from one stored row (what the event sink published), so it says what the
journal says. Its ``key`` is what "the same alert" means: a preemption is one alert per
incident however many hosts' rows it has, a recovery one per incident (from the incident's
summary row: trigger, MTTR, result), a capacity wait one per incident (its retries are many
rows), a job's end one per job and status, anything else one per row.
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from console.config.alerts import AlertKind
from console.services.model import Event, EventKind, HostState, IncidentOutcome, JobStatus
from console.services.record.incidents import INCIDENT, LOSS_KINDS, incident_of

ALERT = EventKind.ALERT  # the journal's kind for a delivery attempt
# The event of a notice no checkpoint followed (its verifying service is still to come).
NOT_HONOURED = frozenset({EventKind.NOTICE_NOT_HONOURED})
# A GKE pod's failure by its cause, its own alert kind: one alert per incident and cause (its
# pods' rows are many); a failure the workload does not retry is its job failing.
POD_FAILURES: Mapping[str, AlertKind] = {
    EventKind.POD_CRASHED: AlertKind.POD_CRASHED,
    EventKind.POD_OOM_KILLED: AlertKind.POD_OOM_KILLED,
    EventKind.POD_EVICTED: AlertKind.POD_EVICTED,
}


@dataclass(frozen=True)
class Alert:
    kind: AlertKind
    key: str  # the same key is never sent twice
    message: str
    at: float
    host: str = ""
    incident: str = ""
    details: Mapping[str, Any] = field(default_factory=dict)


def alert_for(event: Event) -> Alert | None:
    """The alert ``event`` raises, or None."""
    kind, key = _classify(event)
    if kind is None:
        return None
    iid = incident_of(event)
    details: dict[str, Any] = {"event": event.kind}
    if event.id is not None:
        details["event_id"] = event.id
    d = event.data
    if event.kind == INCIDENT:
        details.update(
            trigger=d.get("trigger", ""),
            result=d.get("result", ""),
            mttr_s=d.get("mttr_s"),
            detect_s=d.get("detect_s"),
            resubmitted=dict(d.get("resubmitted") or {}),
            steps_lost=d.get("steps_lost"),
            # The ledger prices incidents later; until then an incident has no cost.
            cost=d.get("cost"),
        )
    for name in (
        "job_id",
        "new_status",
        "run_id",
        "zone",
        "reason",
        "workload",
        "pod",
        "cause",
        "exit_code",
        "restartable",
    ):
        if name in d:
            details[name] = d[name]
    return Alert(
        kind=kind,
        key=key,
        message=event.message,
        at=event.at,
        host=event.host,
        incident=iid,
        details=details,
    )


def _classify(e: Event) -> tuple[AlertKind | None, str]:
    iid = incident_of(e)
    row = f"row:{e.id}" if e.id is not None else f"at:{e.kind}:{e.at}:{e.message}"
    if e.kind in LOSS_KINDS or (
        e.kind == EventKind.STATE_CHANGE and str(e.data.get("to", "")) == HostState.PREEMPTED
    ):
        return AlertKind.PREEMPTION, f"preemption:{iid or row}"
    if e.kind == INCIDENT:
        outcome = e.data.get("outcome")
        if outcome == IncidentOutcome.RECOVERED:
            return AlertKind.RECOVERED, f"recovered:{iid}"
        if outcome == IncidentOutcome.FAILED:
            return AlertKind.RECOVERY_FAILED, f"recovery_failed:{iid}"
        return None, ""
    if e.kind == EventKind.STALLED:
        return AlertKind.STALL, f"stall:{row}"
    if (e.kind == EventKind.CAPACITY and e.data.get("ok") is False) or (
        e.kind == EventKind.QUOTA_PENDING
    ):
        return AlertKind.NO_CAPACITY, f"no_capacity:{iid or row}"
    if e.kind in POD_FAILURES:
        if e.data.get("restartable") is False:
            return AlertKind.JOB_FAILED, f"job_failed:{e.data.get('workload') or iid or row}"
        kind = POD_FAILURES[e.kind]
        return kind, f"{kind}:{iid or row}"
    if e.kind in NOT_HONOURED:
        return AlertKind.NOTICE_NOT_HONOURED, f"notice_not_honoured:{row}"
    if e.kind == EventKind.JOB_STATE:
        job, status = str(e.data.get("job_id", "")), str(e.data.get("new_status", ""))
        if status == JobStatus.FAILED:
            return AlertKind.JOB_FAILED, f"job_failed:{job}"
        if status == JobStatus.SUCCEEDED:
            return AlertKind.JOB_FINISHED, f"job_finished:{job}"
    return None, ""


_TITLES = {
    AlertKind.PREEMPTION: "preemption",
    AlertKind.RECOVERED: "recovered",
    AlertKind.RECOVERY_FAILED: "recovery FAILED",
    AlertKind.STALL: "metrics stalled",
    AlertKind.NO_CAPACITY: "no capacity",
    AlertKind.NOTICE_NOT_HONOURED: "preemption notice not honoured",
    AlertKind.JOB_FAILED: "job failed",
    AlertKind.JOB_FINISHED: "job finished",
    AlertKind.POD_CRASHED: "pod crashed",
    AlertKind.POD_OOM_KILLED: "pod OOMKilled",
    AlertKind.POD_EVICTED: "pod evicted",
}


_TYPES = {
    AlertKind.PREEMPTION: "warning",
    AlertKind.RECOVERED: "success",  # the incident's alert is closed
    AlertKind.RECOVERY_FAILED: "failure",
    AlertKind.STALL: "warning",
    AlertKind.NO_CAPACITY: "warning",
    AlertKind.NOTICE_NOT_HONOURED: "warning",
    AlertKind.JOB_FAILED: "failure",
    AlertKind.JOB_FINISHED: "info",
    AlertKind.POD_CRASHED: "warning",
    AlertKind.POD_OOM_KILLED: "warning",
    AlertKind.POD_EVICTED: "warning",
}


def notify_type(alert: Alert) -> str:
    """apprise's notify type (its receivers colour and icon by it): a recovery is a success
    that closes its incident's warning."""
    return _TYPES.get(alert.kind, "info")


def text_of(alert: Alert, source: str) -> tuple[str, str]:
    """(title, body) as every apprise receiver shows them: what happened, its incident, the
    MTTR of a recovery, when (UTC). Only what the journal row says (already scrubbed)."""
    title = f"phantom {source}: {_TITLES.get(alert.kind, alert.kind)}".strip()
    parts = [alert.message]
    if alert.host:
        parts.append(f"host {alert.host}")
    mttr = alert.details.get("mttr_s")
    if isinstance(mttr, int | float) and alert.kind == AlertKind.RECOVERED:
        parts.append(f"MTTR {mttr:.1f}s")
    if alert.incident:
        parts.append(f"incident {alert.incident}")
    stamp = time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime(alert.at))
    return title, " | ".join(parts) + f" ({stamp})"
