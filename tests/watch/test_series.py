"""The exporter's series from the rows and snapshots the services publish, scraped over HTTP
with the names the issue lists; /healthz follows the poll loop."""

from __future__ import annotations

import asyncio
import urllib.error
import urllib.request
from pathlib import Path

from prometheus_client.parser import text_string_to_metric_families

from console.config.listen import Listen
from console.services.exporter.series import FleetSeries, WatchSeries, incident_kind
from console.services.exporter.server import Exporter, MetricsServer
from console.services.model import (
    Event,
    EventKind,
    HostState,
    HostStatus,
    JobInfo,
    JobStatus,
    PodSnapshot,
    RunCadence,
)
from console.services.record.journal import Journal
from tests.support.clock import Clock

NAMES = {
    "phantom_preemptions",
    "phantom_recovery_seconds",
    "phantom_detect_seconds",
    "phantom_hosts",
    "phantom_jobs",
    "phantom_cadence_age_seconds",
    "phantom_goodput_ratio",
    "phantom_cost_dollars",
    "phantom_up",
}


def _snapshot(at: float, states: list[HostState]) -> PodSnapshot:
    hosts = tuple(
        HostStatus(index=i, name=f"phantom-pod-w{i}", ip=f"127.0.0.{10 + i}", tpu_state=s)
        for i, s in enumerate(states)
    )
    return PodSnapshot(at=at, provider="local", node_name="phantom-pod", hosts=hosts)


def _samples(
    series: WatchSeries | FleetSeries,
) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    out = {}
    for family in text_string_to_metric_families(series.render().decode()):
        for s in family.samples:
            out[(s.name, tuple(sorted(s.labels.items())))] = s.value
    return out


def test_every_series_from_what_the_services_publish() -> None:
    clock = Clock(1000.0)
    series = WatchSeries(
        zone="local-a", hosts_total=4, alive_within_s=30.0, monotonic=clock, clock=clock
    )
    up = [HostState.READY] * 4
    series.offer(_snapshot(1000.0, up))
    # One incident: a worker preempted (two rows about it), then its summary row.
    for kind in (EventKind.PREEMPTED, EventKind.HOST_LOST):
        series.offer(
            Event(
                at=1001.0,
                kind=kind,
                message="lost",
                host="phantom-pod-w2",
                data={"incident": "inc-1"},
            )
        )
    series.offer(
        Event(at=1002.0, kind=EventKind.PREEMPTED, message="lost", host="phantom-pod-w0", data={})
    )
    summary = {
        "incident": "inc-1",
        "result": "recovered",
        "outcome": "recovered",
        "mttr_s": 42.0,
        "detect_s": 1.5,
    }
    series.offer(
        Event(at=1050.0, kind=EventKind.INCIDENT, message="done", data={**summary, "hosts": ["w2"]})
    )
    series.offer(JobInfo(job_id="j1", status=JobStatus.RUNNING))
    series.offer(JobInfo(job_id="j2", status=JobStatus.FAILED))
    series.offer(
        RunCadence(
            run_id="r1", name="ppo", source="offline", last_step=10, last_at=990.0,
            seconds_since=None, median_interval_s=None, steps_per_min=None,
        )
    )  # fmt: skip
    series.set_ledger({"goodput": 0.9, "money": {"spot_usd": 1.5, "on_demand_same_work_usd": 4.0}})
    got = _samples(series)
    assert {name for name, _ in got} >= {
        "phantom_preemptions_total",
        "phantom_recovery_seconds_count",
        "phantom_detect_seconds_count",
        "phantom_hosts",
        "phantom_jobs",
        "phantom_cadence_age_seconds",
        "phantom_goodput_ratio",
        "phantom_cost_dollars_total",
        "phantom_up",
    }
    assert got[("phantom_preemptions_total", (("kind", "worker"), ("zone", "local-a")))] == 1.0
    assert got[("phantom_preemptions_total", (("kind", "head"), ("zone", "local-a")))] == 1.0
    assert got[("phantom_recovery_seconds_count", (("kind", "worker"),))] == 1.0
    assert got[("phantom_recovery_seconds_sum", (("kind", "worker"),))] == 42.0
    assert got[("phantom_detect_seconds_sum", ())] == 1.5
    assert got[("phantom_hosts", (("state", "READY"),))] == 4.0
    assert got[("phantom_hosts", (("state", "PREEMPTED"),))] == 0.0
    assert got[("phantom_jobs", (("state", "RUNNING"),))] == 1.0
    assert got[("phantom_jobs", (("state", "FAILED"),))] == 1.0
    assert got[("phantom_cadence_age_seconds", (("run", "ppo"),))] == 10.0
    assert got[("phantom_goodput_ratio", ())] == 0.9
    assert got[("phantom_cost_dollars_total", (("kind", "on_demand"),))] == 4.0
    assert got[("phantom_up", ())] == 1.0
    clock.t += 31.0  # no snapshot for longer than alive_within_s: the loop is not alive
    assert _samples(series)[("phantom_up", ())] == 0.0


def test_an_incident_is_named_by_what_it_lost() -> None:
    assert incident_kind({"hosts": ["a", "b", "c", "d"], "head": True}, 4) == "slice"
    assert incident_kind({"hosts": ["a"], "head": True}, 4) == "head"
    assert incident_kind({"hosts": ["b"], "head": False}, 4) == "worker"
    # a GKE slice: one "host" (the slice) of a cluster whose config says 4 hosts
    assert incident_kind({"hosts": ["np-0"], "slices": ["np-0"], "head": False}, 4) == "slice"


def test_a_gke_slice_lost_is_counted_and_timed_as_a_slice() -> None:
    """GKE's rows name the slice they lost; it was counted and timed as a worker (issue 47's
    fleet drill: sum by (cluster, kind) of the recoveries said worker for the GKE cluster)."""
    series = WatchSeries(zone="us-east5", hosts_total=4, alive_within_s=30.0)
    data = {"nodes": ["n-a", "n-b"], "slice": "np-0", "pods": [], "incident": "inc-1"}
    series.offer(Event(at=1.0, kind=EventKind.PREEMPTED, message="lost", host="np-0", data=data))
    summary = {"incident": "inc-1", "outcome": "recovered", "mttr_s": 3.0, "detect_s": 0.5}
    series.offer(
        Event(
            at=4.0,
            kind=EventKind.INCIDENT,
            message="done",
            host="np-0",
            data={**summary, "hosts": ["np-0"], "slices": ["np-0"], "head": False},
        )
    )
    got = _samples(series)
    lost = {k: v for k, v in got.items() if k[0] == "phantom_preemptions_total"}
    assert lost == {("phantom_preemptions_total", (("kind", "slice"), ("zone", "us-east5"))): 1.0}
    assert got[("phantom_recovery_seconds_count", (("kind", "slice"),))] == 1.0


async def test_metrics_and_healthz_over_http() -> None:
    clock = Clock(1000.0)
    series = WatchSeries(zone="z", hosts_total=4, alive_within_s=30.0, monotonic=clock, clock=clock)
    exporter = Exporter(series, MetricsServer(series, Listen("127.0.0.1", 0)))
    await exporter.start()
    base = f"http://127.0.0.1:{exporter.server.port}"
    try:

        def get(path: str) -> tuple[int, str]:
            try:
                with urllib.request.urlopen(base + path, timeout=10) as r:
                    return r.status, r.read().decode()
            except urllib.error.HTTPError as exc:
                return exc.code, exc.read().decode()

        status, _ = await asyncio.to_thread(get, "/healthz")
        assert status == 503  # no poll yet
        exporter.offer(_snapshot(1000.0, [HostState.READY]))
        status, text = await asyncio.to_thread(get, "/healthz")
        assert (status, text) == (200, "ok\n")
        status, text = await asyncio.to_thread(get, "/metrics")
        families = {f.name for f in text_string_to_metric_families(text)}
        assert status == 200 and families == NAMES
    finally:
        await exporter.stop()


async def test_a_restarted_watcher_binds_the_port_its_killed_one_was_scraped_on() -> None:
    """Issue 45: `phantom watch` SIGKILLed just after a Prometheus scrape, started again by
    systemd on the same --metrics port, exited with `address already in use`: the scrape's
    connection, closed by the server, sat in TIME_WAIT on that port. A port a live process
    listens on is still refused."""
    series = WatchSeries(zone="z", hosts_total=4, alive_within_s=30.0)
    first = MetricsServer(series, Listen("127.0.0.1", 0))
    await first.bind()
    port = first.port

    def scrape() -> int:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as r:
            r.read()
            return int(r.status)

    assert await asyncio.to_thread(scrape) == 200
    second = MetricsServer(series, Listen("127.0.0.1", port))
    try:
        await second.bind()
    except OSError:
        pass
    else:
        raise AssertionError("two live watchers listen on one port")
    await first.close()
    again = MetricsServer(series, Listen("127.0.0.1", port))
    await again.bind()  # was: OSError address already in use
    try:
        assert again.port == port and await asyncio.to_thread(scrape) == 200
    finally:
        await again.close()


async def test_a_restarted_watcher_does_not_count_again_what_its_predecessor_counted(
    tmp_path: Path,
) -> None:
    """Issue 45's GKE drill (50 disruptions, 6 watcher SIGKILLs): the watchers' counters
    summed over their lives said 33 preemptions where the journal had 31. A watcher started
    mid-recovery writes rows about the hosts its predecessor had already counted (the same
    incident); it starts knowing the journal's losses."""
    with Journal(tmp_path / "journal.sqlite") as journal:
        journal.record_event(
            Event(at=1.0, kind=EventKind.PREEMPTED, message="lost", host="phantom-pod-w2",
                  data={"incident": "inc-1"})
        )  # fmt: skip

        async def rows(n: int) -> list[Event]:
            return journal.query(limit=n)

        series = WatchSeries(zone="z", hosts_total=4, alive_within_s=30.0)
        exporter = Exporter(series, MetricsServer(series, Listen("127.0.0.1", 0)), history=rows)
        await exporter.start()
        try:
            for host, incident in (("phantom-pod-w2", "inc-1"), ("phantom-pod-w3", "inc-1")):
                exporter.offer(
                    Event(at=2.0, kind=EventKind.HOST_LOST, message="lost", host=host,
                          data={"incident": incident})
                )  # fmt: skip
        finally:
            await exporter.stop()
    counted = [
        v for (name, _), v in _samples(series).items() if name == "phantom_preemptions_total"
    ]
    assert counted == [1.0]


def test_a_fleets_series_share_one_page_each_sample_naming_its_cluster() -> None:
    clock = Clock(1000.0)

    def member(name: str) -> WatchSeries:
        return WatchSeries(
            zone="z", hosts_total=4, alive_within_s=30.0, monotonic=clock, clock=clock, cluster=name
        )

    a, b = member("pod-a"), member("pod-b")
    fleet = FleetSeries([a, b])
    for series, host in ((a, "phantom-pod-w1"), (b, "phantom-pod-w2"), (b, "phantom-pod-w3")):
        series.offer(Event(at=1001.0, kind=EventKind.PREEMPTED, message="lost", host=host, data={}))
    a.offer(_snapshot(1000.0, [HostState.READY] * 4))
    got = _samples(fleet)
    worker = (("kind", "worker"), ("zone", "z"))
    assert got[("phantom_preemptions_total", (("cluster", "pod-a"), *worker))] == 1.0
    assert got[("phantom_preemptions_total", (("cluster", "pod-b"), *worker))] == 2.0
    assert got[("phantom_up", (("cluster", "pod-a"),))] == 1.0
    assert got[("phantom_up", (("cluster", "pod-b"),))] == 0.0
    # one family per name on the page, as Prometheus' parser requires
    text = fleet.render().decode()
    assert text.count("# TYPE phantom_preemptions_total counter") == 1
    # /healthz names the cluster whose poll loop is not alive
    assert not fleet.alive() and fleet.health() == "pod-b: no poll finished within 30s"
    b.offer(_snapshot(1000.0, [HostState.READY] * 4))
    assert fleet.alive() and fleet.health() == ""
