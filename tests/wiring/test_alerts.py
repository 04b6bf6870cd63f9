"""The composition root wires [alerts] into the services both front ends drive."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import pytest
from aiohttp import web

from console.services.alerts.notify import Alerter
from console.services.model import Event
from console.wiring import make_services
from tests.support.waiting import until
from tests.wiring.test_wiring import gcp_config


async def test_the_services_send_alerts_and_mask_the_url(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    got: list[dict[str, Any]] = []

    async def hook(request: web.Request) -> web.Response:
        got.append(await request.json())
        return web.Response(text="ok")

    app = web.Application()
    app.router.add_post("/hooks/T0KEN-wiring-0123456789", hook)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
    url = f"json://127.0.0.1:{port}/hooks/T0KEN-wiring-0123456789"
    # The whole URL may be the secret part: the variable holds it, the file names it.
    monkeypatch.setenv("PHANTOM_TEST_WIRED_WEBHOOK", url)
    hooks = [{"name": "ops", "url": "${PHANTOM_TEST_WIRED_WEBHOOK}"}]
    svc = make_services(gcp_config(tmp_path, alerts={"notify": hooks}), state_dir=tmp_path / "s")
    try:
        (alerter,) = svc.consumers
        assert isinstance(alerter, Alerter)
        await alerter.start()  # what the facade's start does (no cluster to poll here)
        await svc.sink.emit(Event(at=time.time(), kind="stalled", message=f"run r1 at {url}"))
        await until(lambda: len(got) == 1, 10, "the alert")
        await alerter.stop()
        assert "T0KEN" not in got[0]["message"]  # the journal masked it before the bus had it
        rows = svc.journal.query(limit=50)
        assert [r.kind for r in rows] == ["stalled", "alert"]
        assert all("T0KEN" not in repr(r) for r in rows)
    finally:
        svc.close_journal()
        await runner.cleanup()
