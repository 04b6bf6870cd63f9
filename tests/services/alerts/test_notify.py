"""Alerts through apprise against a real HTTP receiver on loopback (apprise's ``json://``):
one message per incident and one when its recovery closes it, nothing more under a burst of
20 preemptions, the rate limit, retries, and the secret in the environment, never in a body
or the journal.

The events go through the real event sink and journal (a file), as the services emit them;
the alerter hears them on the bus, as the composition root wires it."""

from __future__ import annotations

import base64
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from aiohttp import web

from console.config import parse_config
from console.config.alerts import notify_urls
from console.secrets import Scrubber
from console.services.alerts.notify import Alerter
from console.services.model import Event
from console.services.model.bus import UpdateBus
from console.services.record.journal import RECOVERED, RECOVERY_STARTED, Journal
from console.services.record.sink import EventSink
from tests.support.waiting import until

SECRET = "S3CRET-alerts-9f8e7d6c5b4a"
SECRET_ENV = "PHANTOM_TEST_ALERT_SECRET"


@dataclass
class Receiver:
    """What apprise's json:// posts: records each body and its basic-auth password; answers
    with ``statuses`` in turn (then 200)."""

    statuses: list[int] = field(default_factory=list)
    bodies: list[dict[str, Any]] = field(default_factory=list)
    raw: list[bytes] = field(default_factory=list)
    passwords: list[str] = field(default_factory=list)

    async def handle(self, request: web.Request) -> web.Response:
        auth = request.headers.get("Authorization", "")
        if auth.startswith("Basic "):
            self.passwords.append(base64.b64decode(auth[6:]).decode().partition(":")[2])
        raw = await request.read()
        self.raw.append(raw)
        self.bodies.append(await request.json())
        status = self.statuses.pop(0) if self.statuses else 200
        return web.Response(status=status, text="ok")


@dataclass
class Rig:
    journal: Journal
    sink: EventSink
    bus: UpdateBus
    port: int
    receiver: Receiver
    alerters: list[Alerter] = field(default_factory=list)

    async def alerter(self, **settings: Any) -> Alerter:
        url = f"json://phantom:${{{SECRET_ENV}}}@127.0.0.1:{self.port}/hook"
        config = parse_config(
            {"alerts": {"notify": [{"name": "ops", "url": url}], "backoff_s": 0.01, **settings}}
        )
        alerter = Alerter(
            config.alerts, notify_urls(config.alerts), self.sink, source="phantom-pod"
        )
        self.bus.subscribe(alerter.offer)
        await alerter.start()
        self.alerters.append(alerter)
        return alerter

    async def emit(self, kind: str, message: str = "", host: str = "w-0", **data: Any) -> Event:
        return await self.sink.emit(
            Event(at=time.time(), kind=kind, message=message or kind, host=host, data=data)
        )

    def alert_rows(self) -> list[Event]:
        return self.journal.query(kinds=["alert"], limit=1000)


@pytest.fixture
async def rig(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> AsyncIterator[Rig]:
    monkeypatch.setenv(SECRET_ENV, SECRET)
    receiver = Receiver()
    app = web.Application()
    app.router.add_post("/hook", receiver.handle)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
    journal = Journal(tmp_path / "journal.sqlite", scrubber=Scrubber([SECRET_ENV]))
    bus = UpdateBus()
    sink = EventSink(journal, bus.publish)
    made = Rig(journal, sink, bus, port, receiver)
    try:
        yield made
    finally:
        for a in made.alerters:
            await a.stop(drain_s=0.0)
        await sink.flush()
        await runner.cleanup()
        sink.close()
        journal.close()


async def test_one_message_per_incident_and_one_on_recovery_under_a_burst(rig: Rig) -> None:
    """20 hosts preempted in one incident, then its recovery: the receiver gets the
    preemption once and the recovery once (a success closing it), both naming the incident;
    the secret reaches the receiver as the URL's password, never in a body or a row."""
    alerter = await rig.alerter()
    for i in range(20):
        await rig.emit("preempted", f"w-{i}: preempted", host=f"w-{i}", tpu_state="PREEMPTED")
    await rig.emit(RECOVERY_STARTED, "recovery started", detect_s=0.4)
    await rig.emit(RECOVERED, "cluster recovered in 42.0s", mttr_s=42.0)
    await rig.sink.flush()
    await until(lambda: len(rig.receiver.bodies) >= 2, 20, "two messages")
    await alerter.idle()
    bodies = rig.receiver.bodies
    assert len(bodies) == 2, bodies
    pre, rec = bodies
    assert pre["type"] == "warning" and pre["title"] == "phantom phantom-pod: preemption"
    assert rec["type"] == "success" and rec["title"] == "phantom phantom-pod: recovered"
    assert "w-0: preempted" in pre["message"]
    assert "MTTR 42.0s" in rec["message"]
    incident = next(r.data["for_incident"] for r in rig.alert_rows())
    assert incident.startswith("inc-")
    assert f"incident {incident}" in pre["message"] and f"incident {incident}" in rec["message"]
    assert rig.receiver.passwords == [SECRET, SECRET]
    assert all(SECRET.encode() not in raw for raw in rig.receiver.raw)
    rows = rig.journal.query(limit=1000)
    assert all(SECRET not in repr(r) for r in rows)
    assert sorted((r.data["alert"], r.data["ok"]) for r in rig.alert_rows()) == [
        ("preemption", True),
        ("recovered", True),
    ]


async def test_the_rate_limit_drops_and_journals_the_rest(rig: Rig) -> None:
    alerter = await rig.alerter(per_minute=3)
    for i in range(5):
        await rig.emit("stalled", f"run r{i} stalled", run_id=f"r{i}")
    await rig.sink.flush()
    await until(lambda: len(rig.alert_rows()) == 5, 20, "five alert rows")
    await alerter.idle()
    assert len(rig.receiver.bodies) == 3
    limited = [r for r in rig.alert_rows() if r.data.get("status") == "rate_limited"]
    assert len(limited) == 2 and "alerts.per_minute" in limited[0].message


async def test_a_failed_delivery_is_retried_and_journaled_without_the_secret(rig: Rig) -> None:
    rig.receiver.statuses = [500, 503]
    alerter = await rig.alerter(retries=2)
    await rig.emit("job_state", "j1 FAILED", job_id="j1", new_status="FAILED")
    await rig.sink.flush()
    await until(lambda: any(r.data.get("ok") for r in rig.alert_rows()), 20, "a delivery")
    await alerter.idle()
    attempts = [(r.data["attempt"], r.data["ok"]) for r in rig.alert_rows()]
    assert attempts == [(1, False), (2, False), (3, True)]
    assert all(SECRET not in repr(r) and "127.0.0.1" not in r.message for r in rig.alert_rows())


async def test_rows_another_front_end_wrote_are_its_own_to_send(rig: Rig, tmp_path: Path) -> None:
    alerter = await rig.alerter()
    other = Journal(tmp_path / "journal.sqlite")
    try:
        row = other.record_event(Event(at=1.0, kind="stalled", message="theirs", data={}))
    finally:
        other.close()
    rig.bus.publish(row)  # what following the journal publishes
    await rig.emit("stalled", "ours")
    await rig.sink.flush()
    await until(lambda: len(rig.receiver.bodies) == 1, 10, "our alert")
    await alerter.idle()
    assert ["ours" in b["message"] for b in rig.receiver.bodies] == [True]


async def test_gke_pod_failures_alert_by_their_cause_once_per_incident(rig: Rig) -> None:
    """A JobSet's 8 pods crash (retried): one `pod crashed` alert for the incident, not
    eight; an OOMKilled pod and an evicted one are their own kinds; a failure the workload
    does not retry is its job failing. Before, a crash or an OOMKilled pod alerted nothing
    and an eviction was sent as a preemption."""
    alerter = await rig.alerter()
    for i in range(8):
        await rig.emit(
            "pod_crashed",
            f"pod w-{i}: crashed (exit 137); it is retried",
            host=f"node-{i}",
            pod=f"w-{i}",
            workload="w",
            cause="crash",
            exit_code=137,
            restartable=True,
        )
    await rig.emit(
        "pod_oom_killed", "pod w-0: OOMKilled (exit 137)", pod="w-0", workload="w",
        cause="oom_killed", exit_code=137, restartable=True,
    )  # fmt: skip
    await rig.emit(
        "pod_evicted",
        "pod w-1: evicted: PreemptionByScheduler: default-scheduler: preempting to "
        "accommodate a higher priority pod",
        pod="w-1", workload="w", cause="evicted", exit_code=143, restartable=True,
    )  # fmt: skip
    await rig.emit(
        "pod_crashed", "pod v-0: crashed (exit 3); not restartable: its workload fails",
        pod="v-0", workload="v", cause="crash", exit_code=3, restartable=False,
    )  # fmt: skip
    await rig.sink.flush()
    await until(lambda: len(rig.receiver.bodies) >= 4, 20, "four messages")
    await alerter.idle()
    titles = sorted(b["title"] for b in rig.receiver.bodies)
    assert titles == [
        "phantom phantom-pod: job failed",
        "phantom phantom-pod: pod OOMKilled",
        "phantom phantom-pod: pod crashed",
        "phantom phantom-pod: pod evicted",
    ], titles
    evicted = next(b for b in rig.receiver.bodies if b["title"].endswith("pod evicted"))
    assert "PreemptionByScheduler" in evicted["message"] and evicted["type"] == "warning"
    assert sorted(r.data["alert"] for r in rig.alert_rows()) == [
        "job_failed",
        "pod_crashed",
        "pod_evicted",
        "pod_oom_killed",
    ]
