"""`phantom watch` on the pod emulator: real processes, real SSH, the real journal.

Without Ray (fast): a preemption is journaled and printed with its incident id, counted on
/metrics, and Debian's real Prometheus scrapes it and answers a PromQL query with the
count; a second watcher on the same pod is refused (exit 2); SIGTERM stops it (exit 0);
--once makes one pass. With Ray (slow): a preempted worker recovered with no TUI, then the
head preempted, the watcher stopped by SIGTERM in the middle of that recovery, and a new
watcher finishing the same incident (one incident, not two).
"""

from __future__ import annotations

import asyncio
import json
import subprocess
import urllib.parse
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest
from prometheus_client.parser import text_string_to_metric_families

from console.services.record.journal import Journal
from console.wiring import make_services
from emulators.tpu_pod import client as pod_client
from emulators.tpu_pod.client import PodInfo
from tests.support.fixtures_pod import start_test_pod, stop_ray, stop_test_pod
from tests.support.prometheus import NO_PROMETHEUS, PROMETHEUS, prometheus
from tests.support.waiting import wait_until
from tests.support.watcher import Watcher, phantom_argv, state_dir, watch_env, write_config


def scrape(url: str) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    with urllib.request.urlopen(url, timeout=10) as resp:
        text = resp.read().decode()
    return {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for f in text_string_to_metric_families(text)
        for s in f.samples
    }


def preemptions(url: str) -> float:
    return sum(v for (name, _), v in scrape(url).items() if name == "phantom_preemptions_total")


def healthz(base: str) -> int:
    with urllib.request.urlopen(base + "/healthz", timeout=10) as resp:
        return int(resp.status)


@pytest.fixture
def watcher_of(tmp_path: Path) -> Iterator[list[Watcher]]:
    """Every watcher a test starts, killed at the end if the test left it running."""
    made: list[Watcher] = []
    yield made
    for w in made:
        w.kill()


def test_a_preemption_is_printed_counted_and_a_second_watcher_refused(
    pod: PodInfo, tmp_path: Path, watcher_of: list[Watcher]
) -> None:
    config, env = write_config(pod, tmp_path), watch_env(tmp_path)
    w = Watcher(config, env, ["--metrics", "127.0.0.1:0"])
    watcher_of.append(w)
    started = w.wait_for(lambda x: x.get("state") == "started", 120, "started")
    metrics = started["metrics"]
    base = metrics.removesuffix("/metrics")
    assert metrics.startswith("http://127.0.0.1:") and healthz(base) == 200

    second = subprocess.run(
        phantom_argv("--config", str(config), "watch"),
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert second.returncode == 2, second.stderr
    assert "another watcher already runs" in second.stderr and "pid " in second.stderr
    assert "Traceback" not in second.stderr and second.stdout == ""

    pod_client.preempt(pod.run_dir, 2)
    row = w.event("preempted", 60, host=pod.hosts[2].name)
    assert row["incident"].startswith("inc-") and row["id"] > 0
    wait_until(lambda: preemptions(metrics) == 1, 30, "the preemption on /metrics")
    assert (
        scrape(metrics)[("phantom_hosts", (("cluster", "phantom-pod"), ("state", "PREEMPTED")))]
        == 1.0
    )

    assert w.terminate() == 0, w.stderr
    last = w.wait_for(lambda x: x.get("state") == "stopped", 10, "stopped")
    assert last["exit_code"] == 0
    rows = Journal(state_dir(tmp_path) / "journal.sqlite").query(limit=1000)
    assert any(r.kind == "preempted" and r.data.get("incident") == row["incident"] for r in rows)


def test_once_makes_one_pass_in_plain_text(pod: PodInfo, tmp_path: Path) -> None:
    config, env = write_config(pod, tmp_path), watch_env(tmp_path)
    proc = subprocess.run(
        phantom_argv("--config", str(config), "watch", "--once", "--format", "text"),
        env=env,
        capture_output=True,
        text=True,
        timeout=180,
    )
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.splitlines()
    assert "phantom watch: watching phantom-pod" in lines
    assert lines[-1] == "phantom watch: stopped"
    # the rows of that pass, as text: time, kind, host, message
    assert any("  host_key  phantom-pod-w0  " in line for line in lines), lines


@pytest.mark.skipif(PROMETHEUS is None, reason=NO_PROMETHEUS)
def test_prometheus_scrapes_watch_and_promql_returns_the_preemption_count(
    pod: PodInfo, tmp_path: Path, watcher_of: list[Watcher]
) -> None:
    config, env = write_config(pod, tmp_path), watch_env(tmp_path)
    w = Watcher(config, env, ["--metrics", "127.0.0.1:0"])
    watcher_of.append(w)
    metrics = w.wait_for(lambda x: x.get("state") == "started", 120, "started")["metrics"]
    target = urllib.parse.urlsplit(metrics).netloc
    with prometheus(tmp_path, target) as prom:

        def count() -> float | None:
            result = prom.query("sum(phantom_preemptions_total)")
            return float(result[0]["value"][1]) if result else None

        wait_until(
            lambda: bool(prom.query("phantom_up == 1")), 90, "Prometheus scraping phantom_up 1"
        )
        pod_client.preempt(pod.run_dir, 1)
        w.event("preempted", 60, host=pod.hosts[1].name)
        wait_until(lambda: count() == 1.0, 60, "PromQL sum(phantom_preemptions_total) = 1")
        (series,) = prom.query('phantom_preemptions_total{kind="worker"}')
        assert series["metric"]["job"] == "phantom"
    assert w.terminate() == 0, w.stderr


@pytest.mark.slow
@pytest.mark.timeout(1200)
def test_watch_recovers_a_worker_then_finishes_a_head_recovery_after_sigterm(
    tmp_path: Path, watcher_of: list[Watcher]
) -> None:
    run_dir = tmp_path / "pod"
    pod = start_test_pod(run_dir, hosts=2)
    try:
        config = write_config(pod, tmp_path)
        asyncio.run(_form_cluster(tmp_path, config))  # on the Ray ports the config names
        env = watch_env(tmp_path)
        w = Watcher(config, env, ["--metrics", "127.0.0.1:0"])
        watcher_of.append(w)
        metrics = w.wait_for(lambda x: x.get("state") == "started", 120, "started")["metrics"]

        # -- a worker is preempted: recovered with no TUI ---------------------------------
        pod_client.preempt(pod.run_dir, 1)
        lost = w.event("preempted", 60, host=pod.hosts[1].name)
        done = w.event("recovered", 400)
        assert done["incident"] == lost["incident"]
        summary = w.event("incident", 60, incident=lost["incident"])
        assert summary["data"]["outcome"] == "recovered"
        got = scrape(metrics)
        wait_until(lambda: preemptions(metrics) == 1, 30, "the preemption counted")
        assert (
            got[
                ("phantom_recovery_seconds_count", (("cluster", "phantom-pod"), ("kind", "worker")))
            ]
            == 1.0
        )

        # -- a cron monitor beside the watcher sees the jobs (issue 45) --------------------
        beside = subprocess.run(
            phantom_argv("--config", str(config), "status", "--json"),
            env=env,
            capture_output=True,
            text=True,
            timeout=240,
        )
        report = json.loads(beside.stdout)
        assert "jobs_error" not in report, report.get("jobs_error")  # was: no tunnel to the head
        assert report["ray"]["alive_nodes"] == 2 and report["jobs"] == []

        # -- the head is preempted; the watcher is stopped mid-recovery ---------------------
        pod_client.preempt(pod.run_dir, 0)
        head = w.event("preempted", 60, host=pod.hosts[0].name)
        w.event("recovery_started", 120, incident=head["incident"])
        w.wait_for(
            lambda x: (
                x.get("kind") == "action"
                and x.get("incident") == head["incident"]
                and str(x["data"].get("action", "")).startswith("recovery.")
            ),
            300,
            "a first recovery step journaled",
        )
        assert w.terminate() == 0, w.stderr
        journal = state_dir(tmp_path) / "journal.sqlite"
        rows = Journal(journal).query(limit=5000)
        mine = [r for r in rows if r.data.get("incident") == head["incident"]]
        assert any(r.kind == "recovery_started" for r in mine)
        assert not any(r.kind in ("recovered", "recovery_failed", "incident") for r in mine)

        # -- a new watcher finishes that incident, without opening a second -----------------
        again = Watcher(config, env)
        watcher_of.append(again)
        finished = again.event("recovered", 600)
        assert finished["incident"] == head["incident"]
        assert again.terminate() == 0, again.stderr
        rows = Journal(journal).query(limit=5000)
        summaries = [r for r in rows if r.kind == "incident"]
        assert [s.data["incident"] for s in summaries] == [lost["incident"], head["incident"]]
        assert summaries[1].data["outcome"] == "recovered"
        after = [r for r in rows if r.id is not None and r.id >= head["id"]]
        ids = {r.data.get("incident") for r in after if r.data.get("incident")}
        assert ids == {head["incident"]}, ids
    finally:
        stop_ray(pod)
        stop_test_pod(run_dir)


async def _form_cluster(tmp_path: Path, config: Path) -> None:
    """Bootstrap and Ray up as a user would, then leave: the watcher takes over a formed
    cluster."""
    from console.config import load_config

    cfg = load_config(str(config), discover=False)
    svc = make_services(cfg, state_dir=state_dir(tmp_path), autostart_pod=False)
    try:
        await svc.start()
        boot = await svc.bootstrap()
        assert boot.ok, boot.message
        up = await svc.ray_up()
        assert up.ok, up.message
    finally:
        await svc.stop()
        svc.close_journal()
