"""Incidents: a preemption and its recovery as one record, on a real journal file.

Fed with what the console journaled during a real worker-then-head preemption against the
pod emulator (``tests/support/incident_rows.py``), replayed through the real event sink.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path

import pytest

from console.services.model import Event, IncidentCause
from console.services.record.incidents import (
    INCIDENT,
    LAPSE_S,
    Incident,
    group,
    incident_of,
    incidents,
)
from console.services.record.journal import Journal
from console.services.record.sink import EventSink
from tests.support.incident_rows import recorded, replay

W0, W1 = "phantom-pod-w0", "phantom-pod-w1"
START = 1_800_000_000.0


@pytest.fixture
def journal(tmp_path: Path) -> Iterator[Journal]:
    j = Journal(tmp_path / "journal.sqlite")
    yield j
    j.close()


def head_step(rows: list[Event]) -> int:
    """Where the head's rebuild ends: the middle of the head's recovery."""
    return next(
        i
        for i, e in enumerate(rows)
        if e.data.get("action") == "recovery.head" and e.data.get("state") == "ok"
    )


def head_incident(found: list[Incident]) -> Incident:
    (head,) = [i for i in found if i.summary.data["head"]]
    return head


async def test_a_head_preemption_is_one_incident_with_its_figures(
    journal: Journal, tmp_path: Path
) -> None:
    await replay(journal, recorded(start=START))
    journal.close()
    again = Journal(tmp_path / "journal.sqlite")  # what a restarted console reads
    try:
        found = incidents(again)
        rows = again.query(limit=10_000)
    finally:
        again.close()

    assert len(found) == 2
    worker, head = found
    assert worker.summary.data["hosts"] == [W1] and not worker.summary.data["head"]
    data = head.summary.data
    assert head.summary.id is not None  # its own journal row, not derived by the reader
    assert (data["trigger_kind"], data["hosts"], data["head"]) == ("preempted", [W0], True)
    assert data["result"] == "recovered"
    assert data["mttr_s"] == pytest.approx(42.05, abs=0.01)
    assert data["detect_s"] == pytest.approx(0.057, abs=0.001)
    assert [s["step"] for s in data["steps"]] == [
        "detect",
        "recreate",
        "orphans",
        "wait_ready",
        "bootstrap",
        "head",
        "tunnel",
        "resubmit",
        "workers",
        "verify",
    ]
    assert all(s["state"] == "ok" for s in data["steps"])
    assert list(data["resubmitted"]) == ["phantom-single-20261201-154436-8c9fe8"]
    assert data["steps_lost"] is None  # no row of this recording reports one
    assert head.summary.message == (
        f"head preempted ({W0}): recovered in 42.0s, 1 job(s) resubmitted"
    )
    # Every worker's "Ray node down (VM fine)" while the head was rebuilt is in the incident.
    down = [e for e in rows if e.kind == "ray_node_down" and e.at > head.at]
    assert len(down) == 4 and {incident_of(e) for e in down} == {head.id}
    assert data["folded"]["ray_node_down"] == 4
    # One summary per incident, journaled right after the row that ended it.
    summaries = [e for e in rows if e.kind == INCIDENT]
    assert [incident_of(e) for e in summaries] == [worker.id, head.id]
    ends = {incident_of(e): e.id for e in rows if e.kind == "recovered"}
    assert all(s.id == ends[incident_of(s)] + 1 for s in summaries if s.id is not None)


async def test_what_a_user_did_stays_outside_and_each_step_is_one_row(journal: Journal) -> None:
    await replay(journal, recorded(start=START))
    rows = journal.query(limit=10_000)
    users = [e for e in rows if e.actor == "user"]
    assert users and not any(incident_of(e) for e in users)  # bootstrap, ray_up, preempt...
    head = head_incident(incidents(journal))
    steps = [
        e
        for e in rows
        if incident_of(e) == head.id and str(e.data.get("action", "")).startswith("recovery.")
    ]
    assert len(steps) == len({e.data["action"] for e in steps}) == 10
    assert "recovery_step" not in {e.kind for e in rows}
    # The watchdog's own submit of the resubmitted job belongs to the incident.
    (submit,) = [e for e in rows if e.data.get("action") == "submit" and e.actor == "watchdog"]
    assert incident_of(submit) == head.id
    # After the recovery ended, rows are no incident's.
    after = [e for e in rows if e.id is not None and e.id > max(x.id or 0 for x in head.rows)]
    loose = [e for e in after if e.kind != INCIDENT]
    assert [e.kind for e in loose][:2] == ["job_state", "tunnel_down"]  # then the teardown
    assert not any(incident_of(e) for e in loose)


async def test_readers_see_incidents_and_loose_rows_in_time_order(journal: Journal) -> None:
    await replay(journal, recorded(start=START))
    rows = journal.query(limit=10_000)
    # An action is dated at its start and journaled at its end: id order is not time order.
    assert [e.at for e in rows] != sorted(e.at for e in rows)
    entries = group(rows)
    times = [x.at for x in entries]
    assert times == sorted(times)
    assert sum(isinstance(x, Incident) for x in entries) == 2
    for inc in (x for x in entries if isinstance(x, Incident)):
        assert [e.at for e in inc.rows] == sorted(e.at for e in inc.rows)
        assert inc.at == inc.rows[0].at  # the summary sorts where the incident began
    loose = [x for x in entries if isinstance(x, Event)]
    assert len(loose) + sum(len(x.rows) + 1 for x in entries if isinstance(x, Incident)) == len(
        rows
    )


async def test_an_incident_a_dead_console_left_open_is_resumed(
    journal: Journal, tmp_path: Path
) -> None:
    rows = recorded(start=START)
    cut = head_step(rows)
    await replay(journal, rows[:cut])  # the console dies mid-recovery of the head...
    journal.close()
    second = Journal(tmp_path / "journal.sqlite")  # ...and the next one finishes it
    try:
        await replay(second, rows[cut:])
        found = incidents(second)
        stored = second.query(limit=10_000)
    finally:
        second.close()
    head = head_incident(found)
    assert head.summary.id is not None and head.summary.data["result"] == "recovered"
    assert len(head.summary.data["steps"]) == 10
    assert len({incident_of(e) for e in stored if incident_of(e)}) == 2


async def test_trouble_no_recovery_follows_lapses_unsummarised(journal: Journal) -> None:
    def down(at: float) -> Event:
        return Event(at, "ray_node_down", f"{W1}: Ray node down (VM fine)", host=W1)

    await replay(journal, [down(START), down(START + LAPSE_S + 1)])
    first, second = journal.query()
    assert incident_of(first) and incident_of(second)
    assert incident_of(first) != incident_of(second)
    assert not journal.query(kinds=[INCIDENT])
    (open_, _) = [x for x in group(journal.query()) if isinstance(x, Incident)]
    assert open_.open and open_.summary.data["result"] == "no recovery"


async def test_the_summary_is_published_after_the_row_that_ended_it(journal: Journal) -> None:
    published = await replay(journal, recorded(start=START))
    kinds = [e.kind for e in published]
    assert kinds.count(INCIDENT) == 2
    assert all(kinds[i - 1] == "recovered" for i, k in enumerate(kinds) if k == INCIDENT)
    assert [e.id for e in published] == [e.id for e in journal.query(limit=10_000)]


async def test_a_second_front_end_follows_the_owners_incident(
    journal: Journal, tmp_path: Path
) -> None:
    rows = recorded(start=START)
    cut = head_step(rows)
    await replay(journal, rows[:cut])  # the owner, mid-recovery of the head
    follower_journal = Journal(tmp_path / "journal.sqlite")
    follower = EventSink(follower_journal, lambda _: None)  # a second console starts here
    try:
        seen = follower_journal.last_id()
        tunnel = await follower.emit(Event(START + 80, "tunnel_up", "tunnel open", actor="tunnel"))
        head = incident_of(next(e for e in journal.query(limit=500) if e.kind == "head_lost"))
        assert incident_of(tunnel) == head  # its own row, during the owner's incident
        await replay(journal, rows[cut:])  # the owner ends it (and summarises it)
        follower.note_foreign([e for e in follower_journal.after(seen) if e.id != tunnel.id])
        later = await follower.emit(Event(START + 200, "tunnel_down", "tunnel closed"))
        assert not incident_of(later)
        # A late row of the ended incident from elsewhere reopens nothing.
        follower.note_foreign([replace(rows[cut], data={"incident": head})])
        assert not incident_of(await follower.emit(Event(START + 201, "tunnel_up", "open")))
    finally:
        follower.close()
        follower_journal.close()
    summaries = journal.query(kinds=[INCIDENT])
    assert [incident_of(e) for e in summaries][-1] == head


def test_a_pod_failure_no_recovery_followed_leaves_a_later_preemption_its_own_incident() -> None:
    """GKE restarts a crashed pod's JobSet by itself; the slice preempted a minute later is a
    loss of its own, not a row of the crash's incident (the GKE chaos drill's shape)."""
    from console.services.record.incidents import IncidentTracker

    tracker = IncidentTracker()
    crash = tracker.stamp(Event(at=100.0, kind="pod_crashed", host="grpo-w-0", message="crash"))
    tracker.stored(crash)
    lost = tracker.stamp(Event(at=160.0, kind="preempted", host="np-0", message="preempted"))
    assert crash.data["incident"] and lost.data["incident"]
    assert lost.data["incident"] != crash.data["incident"]
    # a preemption's own follow-on rows stay in its incident
    notice = tracker.stamp(Event(at=161.0, kind="host_lost", host="np-0", message="lost"))
    assert notice.data["incident"] == lost.data["incident"]


def test_an_incident_opened_in_the_second_the_last_one_ended_gets_an_id_of_its_own() -> None:
    """A slice preempted again 70 ms after it came back (the zone-rates bench at test scale)
    opens its incident in the same second as the one just recovered. Both ids were
    ``inc-YYYYmmdd-HHMMSS``, so the two were counted as one and a zone lost a preemption."""
    from console.services.record.incidents import IncidentTracker

    tracker = IncidentTracker()
    iids = []
    for at in (1000.10, 1000.55, 1000.90):
        lost = tracker.stamp(Event(at=at, kind="preempted", host="pod-w0", message="preempted"))
        tracker.stored(lost)
        end = tracker.stamp(Event(at=at + 0.05, kind="recovered", host="pod-w0", message="ok"))
        assert tracker.stored(end) is not None  # the incident closed with its summary
        iids.append(lost.data["incident"])
    base = iids[0]
    assert iids == [base, f"{base}-2", f"{base}-3"]


def test_a_pod_failure_its_jobset_healed_is_summarised_recovered_when_it_runs_again() -> None:
    """A crash (or OOM kill, or eviction) whose JobSet restarted by itself ends once the
    workload runs again: a summary, recovered, with its MTTR. Before, none was ever written
    (the GKE chaos drill under `phantom watch`: every such incident left open)."""
    from console.services.record.incidents import IncidentTracker

    tracker = IncidentTracker()
    crash = tracker.stamp(
        Event(at=100.0, kind="pod_oom_killed", host="n-1", message="oom", data={"workload": "g"})
    )
    assert tracker.stored(crash) is None
    other = tracker.stamp(
        Event(
            at=101.0, kind="job_state", message="x", data={"job_id": "h", "new_status": "RUNNING"}
        )
    )
    assert tracker.stored(other) is None  # another workload running says nothing of this one
    pending = tracker.stamp(
        Event(
            at=102.0, kind="job_state", message="p", data={"job_id": "g", "new_status": "PENDING"}
        )
    )
    assert tracker.stored(pending) is None
    running = tracker.stamp(
        Event(
            at=108.5, kind="job_state", message="r", data={"job_id": "g", "new_status": "RUNNING"}
        )
    )
    summary = tracker.stored(running)
    assert summary is not None and summary.kind == INCIDENT
    assert incident_of(summary) == incident_of(crash) == incident_of(running)
    assert summary.data["outcome"] == "recovered" and summary.data["mttr_s"] == 8.5
    assert summary.data["cause"] == IncidentCause.OOM_KILLED
    assert tracker.current == ""


def test_a_pod_failure_a_loss_supersedes_is_summarised_not_left_open() -> None:
    """An OOM kill, then the pod's node fails before the JobSet ran again (the GKE chaos
    drill's overlap): the loss opens its own incident, and the OOM kill's ends, summarised
    with no recovery of its own. Before, it was dropped unsummarised: open for ever."""
    from console.services.record.incidents import IncidentTracker

    tracker = IncidentTracker()
    oom = tracker.stamp(
        Event(at=100.0, kind="pod_oom_killed", host="n-1", message="oom", data={"workload": "g"})
    )
    assert tracker.stored(oom) is None
    lost = tracker.stamp(Event(at=105.0, kind="host_lost", host="np-0", message="lost"))
    assert incident_of(lost) and incident_of(lost) != incident_of(oom)
    summary = tracker.stored(lost)
    assert summary is not None and summary.kind == INCIDENT
    assert incident_of(summary) == incident_of(oom)
    assert summary.data["outcome"] == "no recovery" and summary.data["ended_at"] == 105.0
    assert tracker.current == incident_of(lost)


def test_a_gke_slice_lost_is_summarised_as_that_slice() -> None:
    """GKE's loss rows name their slice (its host is the slice, its nodes gone at once): the
    summary names the slices lost, so readers (the exporter's recovery kind) see a slice's
    loss, not one host of four (issue 47's fleet: the GKE recovery was timed as a worker's)."""
    from console.services.record.incidents import IncidentTracker

    tracker = IncidentTracker()
    nodes = {"nodes": ["gke-np-0-a", "gke-np-0-b"], "slice": "np-0", "pods": []}
    lost = tracker.stamp(Event(at=100.0, kind="preempted", host="np-0", message="x", data=nodes))
    assert tracker.stored(lost) is None
    end = tracker.stamp(Event(at=102.0, kind="recovered", message="ok", data={"mttr_s": 2.0}))
    summary = tracker.stored(end)
    assert summary is not None and summary.kind == INCIDENT
    assert (summary.data["hosts"], summary.data["slices"]) == (["np-0"], ["np-0"])
    # a TPU VM host's loss names no slice
    worker = tracker.stamp(Event(at=200.0, kind="preempted", host=W1, message="x"))
    tracker.stored(worker)
    again = tracker.stored(tracker.stamp(Event(at=201.0, kind="recovered", message="ok")))
    assert again is not None and (again.data["hosts"], again.data["slices"]) == ([W1], [])


async def test_two_clusters_opening_an_incident_in_the_same_second_get_ids_of_their_own(
    tmp_path: Path,
) -> None:
    """A fleet's watchdogs each stamp their own cluster's rows: a worker lost in pod-a and the
    head in pod-b in the same second opened ``inc-YYYYmmdd-HHMMSS`` twice, so the fleet's
    surfaces (the Events screens side by side, alerts, `phantom watch`'s lines) could not
    tell the two incidents apart. Each id now names its cluster, a later one in the same
    second is still counted (``-2``), and a journal's ids from before read as they were."""
    journals = {n: Journal(tmp_path / n / "journal.sqlite", cluster=n) for n in ("pod", "pod-2")}
    sinks = {n: EventSink(j, lambda _: None) for n, j in journals.items()}
    try:
        ids = []
        for offset in (0.1, 0.6):  # pod loses a worker twice in the second, pod-2 once
            for name in ("pod", "pod-2") if offset < 0.5 else ("pod",):
                sink = sinks[name]
                lost = await sink.emit(Event(START + offset, "preempted", "lost", host="w1"))
                await sink.emit(Event(START + offset + 0.05, "recovered", "back", host="w1"))
                ids.append(incident_of(lost))
        stamp = time.strftime("%Y%m%d-%H%M%S", time.gmtime(START))
        assert ids == [f"inc-{stamp}-pod", f"inc-{stamp}-pod-2", f"inc-{stamp}-2-pod"]
        for name, journal in journals.items():
            found = incidents(journal)
            assert [i.cluster for i in found] == [name] * len(found)
            assert all(i.id.endswith(f"-{name}") for i in found)
    finally:
        for name in journals:
            sinks[name].close()
            journals[name].close()


async def test_an_incident_left_open_under_an_id_from_before_is_taken_up_and_closed(
    tmp_path: Path,
) -> None:
    """A journal written before ids named their cluster: its open incident is resumed under
    its own id, and the summary closes that one."""
    old = f"inc-{time.strftime('%Y%m%d-%H%M%S', time.gmtime(START))}"
    path = tmp_path / "journal.sqlite"
    before = Journal(path)
    before.record_event(Event(START, "preempted", "lost", host="w1", data={"incident": old}))
    before.close()
    journal = Journal(path, cluster="pod-a")
    sink = EventSink(journal, lambda _: None)
    try:
        step = await sink.emit(Event(START + 1, "recovery_started", "recovering"))
        assert incident_of(step) == old
        await sink.emit(Event(START + 9, "recovered", "back"))
        await sink.flush()
        (found,) = incidents(journal)
        assert found.id == old and not found.open
    finally:
        sink.close()
        journal.close()
