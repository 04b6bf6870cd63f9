"""One `phantom watch` over a fleet of two pod emulators (real processes, real SSH, loopback).

Without Ray (fast): a worker preempted in each pod, each printed and journaled on its own
cluster (its line, its incident, its journal), counted on the one /metrics under its
``cluster`` label; a second watcher on one of the clusters is refused naming it; `status
--json` gives one object per cluster, then the fleet's ledger. Slow, issue 47's fleet (the
two pods with Ray, and a GKE emulator as a third cluster): a worker lost in pod-a, the head
in pod-b and the GKE slice at once, each recovered by the one watcher and closed as its own incident on its own
cluster's journal, and Debian's Prometheus summing the preemptions by cluster.
"""

from __future__ import annotations

import asyncio
import json
import subprocess
import urllib.parse
from collections.abc import Iterator
from dataclasses import dataclass, replace
from pathlib import Path

import pytest

from console.config import Config, load_fleet
from console.services.record.journal import Journal
from console.wiring import make_services
from emulators.gke import client as gke_client
from emulators.gke.client import GkeInfo
from emulators.tpu_pod import client as pod_client
from emulators.tpu_pod.client import PodInfo
from tests.support.fixtures_gke import start_cluster, stop_cluster
from tests.support.fixtures_pod import stop_ray
from tests.support.fleet_pods import GKE, NAMES, fleet_toml, two_pods
from tests.support.prometheus import NO_PROMETHEUS, PROMETHEUS, prometheus
from tests.support.waiting import wait_until
from tests.support.watcher import Watcher, phantom_argv, state_dir, watch_env
from tests.watch.test_watch_pod import scrape


@dataclass
class Fleet:
    config: Path
    pods: dict[str, PodInfo]
    tmp: Path
    gke: GkeInfo | None = None

    def journal(self, name: str) -> Journal:
        return Journal(state_dir(self.tmp) / "fleet" / name / "journal.sqlite")

    def members(self) -> tuple[Config, ...]:
        return load_fleet(self.config, discover=False).members


@pytest.fixture
def fleet(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Fleet]:
    """The two pods of ``tests.support.fleet_pods`` and the fleet config naming them, every
    state dir under this test's (the children's too)."""
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "state"))
    with two_pods(tmp_path) as made:
        yield Fleet(made.config, made.pods, tmp_path)


@pytest.fixture
def watchers() -> Iterator[list[Watcher]]:
    made: list[Watcher] = []
    yield made
    for w in made:
        w.kill()


def preemptions(url: str) -> dict[str, float]:
    counted: dict[str, float] = {}
    for (name, labels), value in scrape(url).items():
        if name == "phantom_preemptions_total":
            cluster = dict(labels)["cluster"]
            counted[cluster] = counted.get(cluster, 0.0) + value
    return counted


def test_one_watch_guards_both_pods_each_on_its_own_cluster(
    fleet: Fleet, watchers: list[Watcher]
) -> None:
    a, b = fleet.pods["pod-a"], fleet.pods["pod-b"]
    assert a.hosts[0].ip.startswith("127.0.") and b.hosts[0].ip.startswith("127.1.")
    env = watch_env(fleet.tmp)
    w = Watcher(fleet.config, env, ["--metrics", "127.0.0.1:0"])
    watchers.append(w)
    started = {
        name: w.wait_for(
            lambda x, n=name: x.get("state") == "started" and x.get("cluster") == n,
            120,
            f"{name} started",
        )
        for name in NAMES
    }
    metrics = started["pod-a"]["metrics"]
    assert started["pod-b"]["metrics"] == metrics  # one /metrics for the fleet

    # A second watcher on one cluster of the fleet is refused, naming it.
    second = subprocess.run(
        phantom_argv("--config", str(fleet.config), "--cluster", "pod-b", "watch"),
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert second.returncode == 2, second.stderr
    assert "another watcher already runs for cluster 'pod-b'" in second.stderr
    assert "Traceback" not in second.stderr and second.stdout == ""

    pod_client.preempt(a.run_dir, 1)
    pod_client.preempt(b.run_dir, 1)
    lost_a = w.event("preempted", 60, cluster="pod-a", host=a.hosts[1].name)
    lost_b = w.event("preempted", 60, cluster="pod-b", host=b.hosts[1].name)
    assert lost_a["incident"].startswith("inc-") and lost_b["incident"].startswith("inc-")
    wait_until(
        lambda: preemptions(metrics) == {"pod-a": 1.0, "pod-b": 1.0},
        30,
        "each cluster's preemption on /metrics under its label",
    )

    assert w.terminate() == 0, w.stderr
    for name, lost in (("pod-a", lost_a), ("pod-b", lost_b)):
        with fleet.journal(name) as journal:
            rows = journal.query(limit=5000)
        assert {r.cluster for r in rows} == {name}  # every row names its cluster
        mine = [r for r in rows if r.kind == "preempted"]
        assert [(r.host, r.data.get("incident")) for r in mine] == [
            (fleet.pods[name].hosts[1].name, lost["incident"])
        ]
    assert not (state_dir(fleet.tmp) / "journal.sqlite").exists()  # nothing shared


def test_status_json_gives_one_object_per_cluster(fleet: Fleet) -> None:
    env = watch_env(fleet.tmp)

    def status(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            phantom_argv("--config", str(fleet.config), *args, "status", "--json"),
            env=env,
            capture_output=True,
            text=True,
            timeout=180,
        )

    every = status()
    assert every.returncode == 0, every.stderr
    *objects, fleet_ledger = [json.loads(line) for line in every.stdout.splitlines()]
    assert fleet_ledger["type"] == "fleet"  # then the fleet's ledger: each one's and the total
    assert fleet_ledger["ledger"]["total"]["clusters"] == list(NAMES)
    assert [(o["cluster"], o["ok"], o["pod"]["node_name"]) for o in objects] == [
        ("pod-a", True, "pod-a"),
        ("pod-b", True, "pod-b"),
    ]
    assert [h["ip"] for h in objects[1]["pod"]["hosts"]] == [
        h.ip for h in fleet.pods["pod-b"].hosts
    ]
    one = status("--cluster", "pod-b")
    assert one.returncode == 0, one.stderr
    (only,) = [json.loads(line) for line in one.stdout.splitlines()]
    assert only["cluster"] == "pod-b" and only["pod"]["node_name"] == "pod-b"


@pytest.fixture
def fleet_gke(fleet: Fleet) -> Iterator[Fleet]:
    """``fleet`` plus a GKE emulator (one 2-node v5p-16 spot slice) as its third cluster,
    ``GKE``; the emulator stopped afterwards, its containers checked gone."""
    run_dir = fleet.tmp / GKE
    info = start_cluster(run_dir, recreate_delay=1.0, tpu_type="v5p-16")
    try:
        fleet.config.write_text(fleet_toml(fleet.pods, fleet.tmp, info))
        yield replace(fleet, gke=info)
    finally:
        stop_cluster(run_dir)


@pytest.mark.slow
@pytest.mark.timeout(1500)
@pytest.mark.skipif(PROMETHEUS is None, reason=NO_PROMETHEUS)
def test_one_watch_recovers_a_worker_a_head_and_a_slice_each_on_its_cluster(
    fleet_gke: Fleet, watchers: list[Watcher]
) -> None:
    """Issue 47's fleet: two pods and a GKE cluster under one `phantom watch`; a worker lost
    in pod-a, the head in pod-b and the slice in GKE at once. Each is recovered and closed
    as its own incident in its own cluster's journal, Prometheus sums the preemptions by
    cluster, and `phantom report` has a row per cluster and the fleet's total."""
    fleet = fleet_gke
    assert fleet.gke is not None
    a, b = fleet.pods["pod-a"], fleet.pods["pod-b"]
    everyone = (*NAMES, GKE)
    try:
        asyncio.run(_form_clusters(tuple(m for m in fleet.members() if m.name in NAMES)))
        w = Watcher(fleet.config, watch_env(fleet.tmp), ["--metrics", "127.0.0.1:0"])
        watchers.append(w)
        metrics = {
            name: w.wait_for(
                lambda x, n=name: x.get("state") == "started" and x.get("cluster") == n,
                120,
                f"{name} started",
            )["metrics"]
            for name in everyone
        }
        assert len(set(metrics.values())) == 1  # one /metrics for the fleet
        with prometheus(fleet.tmp, urllib.parse.urlsplit(metrics[GKE]).netloc) as prom:
            # All three within a second or two: a worker, a head, a whole slice.
            pod_client.preempt(a.run_dir, 1)
            pod_client.preempt(b.run_dir, 0)
            gke_client.preempt_slice(fleet.gke.run_dir, 0, 0.0)
            victims = {
                "pod-a": a.hosts[1].name,
                "pod-b": b.hosts[0].name,
                GKE: fleet.gke.slices[0].name,
            }
            lost = {n: w.event("preempted", 60, cluster=n, host=h) for n, h in victims.items()}
            # three incidents, one per cluster (each journal numbers its own: opened in
            # the same second, two clusters' ids may read alike; the cluster tells them apart)
            assert all(x["incident"].startswith("inc-") for x in lost.values())
            for name in everyone:
                done = w.event("recovered", 600, cluster=name)
                assert done["incident"] == lost[name]["incident"]
                summary = w.event("incident", 60, cluster=name, incident=lost[name]["incident"])
                assert summary["data"]["outcome"] == "recovered"
            lost_by = "sum by (cluster) (phantom_preemptions_total)"
            wait_until(
                lambda: prom.by(lost_by, "cluster") == {(n,): 1.0 for n in everyone},
                60,
                f"PromQL {lost_by}: 1 for each cluster",
            )
            # each cluster's recovery timed, as what it was: a worker's, a head's, a slice's
            mttr_by = "sum by (cluster, kind) (phantom_recovery_seconds_count)"
            kinds = {("pod-a", "worker"): 1.0, ("pod-b", "head"): 1.0, (GKE, "slice"): 1.0}
            wait_until(
                lambda: prom.by(mttr_by, "cluster", "kind") == kinds,
                60,
                f"PromQL {mttr_by}: {kinds}",
            )
        assert w.terminate() == 0, w.stderr
        for name in everyone:
            with fleet.journal(name) as journal:
                rows = journal.query(limit=5000)
            assert {r.cluster for r in rows} == {name}
            summaries = [r for r in rows if r.kind == "incident"]
            assert [(s.data["incident"], s.data["outcome"]) for s in summaries] == [
                (lost[name]["incident"], "recovered")
            ]
        report_has_each_cluster_and_the_total(fleet, {n: x["incident"] for n, x in lost.items()})
    finally:
        for pod in fleet.pods.values():
            stop_ray(pod)


def report_has_each_cluster_and_the_total(fleet: Fleet, incidents: dict[str, str]) -> None:
    """`phantom report --format json` over the fleet: a row per cluster (each with its one
    incident, and its detection and recovery as badput) and the total, the sum of those
    rows."""
    proc = subprocess.run(
        phantom_argv("--config", str(fleet.config), "report", "--format", "json"),
        env=watch_env(fleet.tmp),
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stderr
    report = json.loads(proc.stdout)
    rows, total = report["clusters"], report["total"]
    assert list(rows) == total["clusters"] == list(incidents)
    for name, incident in incidents.items():
        assert [i["incident"] for i in rows[name]["incidents"]] == [incident], name
        lost = rows[name]["badput_s"]  # the incident's time, not idle time alone
        assert lost.get("detect", 0.0) + lost.get("recover", 0.0) > 0, (name, lost)
    assert total["incidents"] == len(incidents)
    assert total["wall_s"] == pytest.approx(sum(r["wall_s"] for r in rows.values()), abs=0.01)
    for cause, seconds in total["badput_s"].items():
        rowed = sum(r["badput_s"].get(cause, 0.0) for r in rows.values())
        assert seconds == pytest.approx(rowed, abs=0.01), cause


async def _form_clusters(members: tuple[Config, ...]) -> None:
    """Bootstrap and Ray up on every pod as a user would, then leave: the watcher takes over
    formed clusters."""

    async def form(config: Config) -> None:
        svc = make_services(config, autostart_pod=False)
        try:
            await svc.start()
            boot = await svc.bootstrap()
            assert boot.ok, boot.message
            up = await svc.ray_up()
            assert up.ok, up.message
        finally:
            await svc.stop()
            svc.close_journal()

    await asyncio.gather(*(form(c) for c in members))


def test_once_makes_one_pass_over_every_cluster_in_text(fleet: Fleet) -> None:
    proc = subprocess.run(
        phantom_argv("--config", str(fleet.config), "watch", "--once", "--format", "text"),
        env=watch_env(fleet.tmp),
        capture_output=True,
        text=True,
        timeout=180,
    )
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.splitlines()
    assert {"phantom watch: watching pod-a", "phantom watch: watching pod-b"} <= set(lines)
    assert lines[-1] == "phantom watch: stopped"
    # each row names its cluster after the time: the first poll's host keys of both pods
    for name in NAMES:
        assert any(f"  {name}  host_key  {name}-w0  " in line for line in lines), lines
