"""Alerts against a real HTTP receiver on loopback: the bodies as sent, dedup, the rate limit,
retries with backoff, a receiver that hangs, and the URL's token never in the journal.

The events go through the real event sink and journal (a file), as the services emit them;
the alerter hears them on the bus, as the composition root wires it."""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from aiohttp import web

from console.config.alerts import AlertsConfig, WebhookConfig
from console.secrets import Scrubber
from console.services.alerts.sender import Alerter
from console.services.model import Event, UpdateBus
from console.services.record.journal import RECOVERED, RECOVERY_STARTED, Journal
from console.services.record.sink import EventSink
from tests.support.waiting import until

TOKEN = "T0KEN-9f8e7d6c5b4a-secret"
URL_ENV = "PHANTOM_TEST_WEBHOOK"


@dataclass
class Receiver:
    """One webhook endpoint: records each body; answers with ``statuses`` in turn (then 200);
    with ``hang`` set, holds every request until it is released."""

    statuses: list[int] = field(default_factory=list)
    hang: bool = False
    bodies: list[dict[str, Any]] = field(default_factory=list)
    release: asyncio.Event = field(default_factory=asyncio.Event)
    entered: int = 0

    async def handle(self, request: web.Request) -> web.Response:
        assert request.match_info["token"] == TOKEN
        self.entered += 1
        if self.hang:
            await self.release.wait()
        self.bodies.append(await request.json())
        status = self.statuses.pop(0) if self.statuses else 200
        return web.Response(status=status, text="ok")


@dataclass
class Rig:
    journal: Journal
    sink: EventSink
    bus: UpdateBus
    url: Callable[[str], str]
    receivers: dict[str, Receiver]
    alerters: list[Alerter] = field(default_factory=list)

    async def alerter(self, **settings: Any) -> Alerter:
        hooks = settings.pop("hooks", {"ops": "json"})
        cfg = AlertsConfig(
            webhooks=tuple(
                WebhookConfig(n, URL_ENV + "_" + n.upper(), f) for n, f in hooks.items()
            ),
            **{"backoff_s": 0.01, "timeout_s": 30.0, **settings},
        )
        alerter = Alerter(cfg, {n: self.url(n) for n in hooks}, self.sink, source="phantom-pod")
        self.bus.subscribe(alerter.offer)
        await alerter.start()
        self.alerters.append(alerter)
        return alerter

    async def emit(self, kind: str, message: str = "", **data: Any) -> Event:
        return await self.sink.emit(
            Event(at=time.time(), kind=kind, message=message or kind, host="w-0", data=data)
        )

    def alert_rows(self) -> list[Event]:
        return self.journal.query(kinds=["alert"], limit=1000)


@pytest.fixture
async def rig(tmp_path: Path) -> AsyncIterator[Rig]:
    receivers = {name: Receiver() for name in ("ops", "slack", "dead", "slow")}
    app = web.Application()
    for name, r in receivers.items():
        app.router.add_post(f"/{name}/hooks/{{token}}", r.handle)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
    journal = Journal(tmp_path / "journal.sqlite", scrubber=Scrubber(environ={}))
    bus = UpdateBus()
    sink = EventSink(journal, bus.publish)
    made = Rig(
        journal, sink, bus, lambda name: f"http://127.0.0.1:{port}/{name}/hooks/{TOKEN}", receivers
    )
    try:
        yield made
    finally:
        for r in receivers.values():
            r.release.set()
        for a in made.alerters:
            await a.stop(drain_s=0.0)
        await sink.flush()
        await runner.cleanup()
        sink.close()
        journal.close()


async def test_bodies_as_sent_json_and_slack(rig: Rig) -> None:
    """A whole preemption incident: one preemption alert, then one recovery alert with its
    MTTR (and an empty cost), in the generic body and in Slack's."""
    alerter = await rig.alerter(hooks={"ops": "json", "slack": "slack"})
    await rig.emit("preempted", "w-1: preempted", tpu_state="PREEMPTED")
    await rig.emit(RECOVERY_STARTED, "recovery started", detect_s=0.4)
    await rig.emit(RECOVERED, "cluster recovered in 42.0s", mttr_s=42.0)
    await rig.sink.flush()
    await until(lambda: len(rig.receivers["slack"].bodies) == 2, 10, "two Slack alerts")
    await alerter.idle()
    ops = rig.receivers["ops"].bodies
    assert [b["kind"] for b in ops] == ["preemption", "recovered"]
    pre, rec = ops
    assert pre["message"] == "w-1: preempted"
    assert pre["incident"] and pre["incident"] == rec["incident"]
    assert pre["source"] == "phantom" and pre["cluster"] == "phantom-pod"
    assert rec["mttr_s"] == 42.0 and rec["result"] == "recovered"
    assert "cost" in rec and rec["cost"] is None
    slack = rig.receivers["slack"].bodies
    assert all(set(b) == {"text"} for b in slack)
    assert "preemption" in slack[0]["text"]
    assert "MTTR 42.0s" in slack[1]["text"] and rec["incident"] in slack[1]["text"]
    rows = rig.alert_rows()
    assert {
        (r.data["receiver"], r.data["alert"], r.data["status"], r.data["attempt"]) for r in rows
    } == {
        ("ops", "preemption", 200, 1),
        ("ops", "recovered", 200, 1),
        ("slack", "preemption", 200, 1),
        ("slack", "recovered", 200, 1),
    }


async def test_every_alert_kind_and_nothing_else(rig: Rig) -> None:
    """Stall, no capacity (once per wait however many tries), a notice not honoured (by
    its name only), a job failed or finished; a running job or a resumed run is no alert."""
    await rig.alerter()
    await rig.emit("stalled", "run r1 stalled", run_id="r1")
    await rig.emit("cadence_resumed", "run r1 logging again", run_id="r1")
    await rig.emit("capacity", "no capacity in a", ok=False, zone="a")
    await rig.emit("notice_not_honoured", "w-2: notice, no checkpoint")
    await rig.emit("job_state", "j1 RUNNING", job_id="j1", new_status="RUNNING")
    await rig.emit("job_state", "j1 FAILED", job_id="j1", new_status="FAILED")
    await rig.emit("job_state", "j2 SUCCEEDED", job_id="j2", new_status="SUCCEEDED")
    await rig.sink.flush()
    kinds = ["stall", "no_capacity", "notice_not_honoured", "job_failed", "job_finished"]
    await until(lambda: len(rig.receivers["ops"].bodies) == len(kinds), 10, "five alerts")
    assert [b["kind"] for b in rig.receivers["ops"].bodies] == kinds
    assert rig.receivers["ops"].bodies[3]["job_id"] == "j1"


async def test_the_same_incident_or_event_is_not_sent_twice(rig: Rig) -> None:
    """Four hosts preempted in one incident, a stockout retried three times, the same job
    end seen twice: one alert each."""
    alerter = await rig.alerter()
    for i in range(4):
        await rig.emit("preempted", f"w-{i}: preempted")
    for _ in range(3):
        await rig.emit("capacity", "stockout", ok=False, zone="a")
    stored = await rig.emit("job_state", "j1 FAILED", job_id="j1", new_status="FAILED")
    rig.bus.publish(stored)  # the same row published again
    await rig.sink.flush()
    await until(lambda: len(rig.receivers["ops"].bodies) >= 3, 10, "three alerts")
    await alerter.idle()
    assert [b["kind"] for b in rig.receivers["ops"].bodies] == [
        "preemption",
        "no_capacity",
        "job_failed",
    ]


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
    await until(lambda: len(rig.receivers["ops"].bodies) == 1, 10, "our alert")
    await alerter.idle()
    assert [b["message"] for b in rig.receivers["ops"].bodies] == ["ours"]


async def test_rate_limited_per_receiver(rig: Rig) -> None:
    """Two a minute: the third is not sent and says so in the journal."""
    alerter = await rig.alerter(per_minute=2)
    for run in ("r1", "r2", "r3"):
        await rig.emit("stalled", f"run {run} stalled", run_id=run)
    await rig.sink.flush()
    await until(lambda: len(rig.alert_rows()) == 3, 10, "three alert rows")
    await alerter.idle()
    assert [b["run_id"] for b in rig.receivers["ops"].bodies] == ["r1", "r2"]
    limited = [r for r in rig.alert_rows() if r.data.get("status") == "rate_limited"]
    assert len(limited) == 1 and "alerts.per_minute" in limited[0].message


async def test_retried_with_backoff_after_a_500_then_delivered(rig: Rig) -> None:
    rig.receivers["ops"].statuses = [500, 503]
    alerter = await rig.alerter(retries=3)
    await rig.emit("stalled", "run r1 stalled", run_id="r1")
    await rig.sink.flush()
    await until(lambda: len(rig.alert_rows()) == 3, 10, "three attempts journaled")
    await alerter.idle()
    rows = rig.alert_rows()
    assert [(r.data["attempt"], r.data["status"], r.data["ok"]) for r in rows] == [
        (1, 500, False),
        (2, 503, False),
        (3, 200, True),
    ]
    assert "retrying" in rows[0].message
    assert len(rig.receivers["ops"].bodies) == 3  # the same alert each time


async def test_a_hanging_receiver_never_holds_up_the_event_path(rig: Rig) -> None:
    """The slow receiver holds its first request; meanwhile every event is journaled and
    published and the other receiver gets every alert."""
    rig.receivers["slow"].hang = True
    alerter = await rig.alerter(hooks={"slow": "json", "ops": "json"})
    await rig.emit("stalled", "run r0 stalled", run_id="r0")
    await until(lambda: rig.receivers["slow"].entered == 1, 10, "the slow receiver holding")
    published: list[Event] = []
    rig.bus.subscribe(lambda u: published.append(u) if isinstance(u, Event) else None)
    for i in range(1, 6):
        await rig.emit("stalled", f"run r{i} stalled", run_id=f"r{i}")
    # Every emit returned (journaled, published) while the receiver still holds request 1.
    assert not rig.receivers["slow"].release.is_set()
    assert rig.receivers["slow"].entered == 1
    assert [e.data["run_id"] for e in published if e.kind == "stalled"] == [
        f"r{i}" for i in range(1, 6)
    ]
    await until(lambda: len(rig.receivers["ops"].bodies) == 6, 10, "the other receiver's six")
    assert rig.receivers["slow"].entered == 1 and not rig.receivers["slow"].bodies
    rig.receivers["slow"].release.set()
    await until(lambda: len(rig.receivers["slow"].bodies) == 6, 10, "the slow one's six")
    await alerter.idle()
    assert [b["run_id"] for b in rig.receivers["slow"].bodies] == [f"r{i}" for i in range(6)]


async def test_a_full_queue_drops_its_oldest_and_journals_how_many(rig: Rig) -> None:
    rig.receivers["slow"].hang = True
    alerter = await rig.alerter(hooks={"slow": "json"}, queue=2)
    await rig.emit("stalled", "run r0 stalled", run_id="r0")
    await until(lambda: rig.receivers["slow"].entered == 1, 10, "the slow receiver holding")
    for i in range(1, 6):
        await rig.emit("stalled", f"run r{i} stalled", run_id=f"r{i}")
    rig.receivers["slow"].release.set()
    await until(lambda: len(rig.receivers["slow"].bodies) == 3, 10, "r0 and the newest two")
    await alerter.idle()
    assert [b["run_id"] for b in rig.receivers["slow"].bodies] == ["r0", "r4", "r5"]
    dropped = [r for r in rig.alert_rows() if r.data.get("dropped")]
    assert [(r.data["receiver"], r.data["dropped"]) for r in dropped] == [("slow", 3)]


async def test_the_secret_url_never_reaches_the_journal(rig: Rig, tmp_path: Path) -> None:
    """Deliveries that succeed, fail with an error naming the URL (nothing listens on the
    dead receiver's port) and time out: the journal file never holds the URL or its token."""
    rig.receivers["slow"].hang = True
    await rig.alerter(hooks={"ops": "slack"})
    dead_cfg = AlertsConfig(
        webhooks=(WebhookConfig("dead", URL_ENV, "json"),), retries=1, backoff_s=0.01
    )
    dead_url = f"http://127.0.0.1:9/dead/hooks/{TOKEN}"  # port 9 (discard): refused
    dead = Alerter(dead_cfg, {"dead": dead_url}, rig.sink)
    slow_cfg = AlertsConfig(
        webhooks=(WebhookConfig("slow", URL_ENV, "json"),), retries=0, timeout_s=0.2
    )
    slow = Alerter(slow_cfg, {"slow": rig.url("slow")}, rig.sink)
    for a in (dead, slow):
        rig.bus.subscribe(a.offer)
        await a.start()
        rig.alerters.append(a)
    await rig.emit("stalled", "run r1 stalled", run_id="r1")
    await rig.sink.flush()
    await until(lambda: len(rig.alert_rows()) == 4, 10, "ok, two refused, one timed out")
    rows = {(r.data["receiver"], r.data["attempt"]): r for r in rig.alert_rows()}
    assert rows["ops", 1].data["status"] == 200
    assert rows["dead", 2].data["status"] is None and rows["dead", 2].data["error"]
    assert "no answer within" in rows["slow", 1].data["error"]
    await rig.sink.flush()
    raw = _journal_bytes(tmp_path)
    assert TOKEN.encode() not in raw
    assert b"/hooks/" not in raw
    assert json.dumps(rows["dead", 2].data).find("hooks") == -1


def _journal_bytes(where: Path) -> bytes:
    """The journal's database and its write-ahead log, as they are on disk."""
    return b"".join(p.read_bytes() for p in sorted(where.glob("journal.sqlite*")))
