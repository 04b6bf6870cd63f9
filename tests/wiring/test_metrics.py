"""The composition root serves the Prometheus series for any front end that asks (the TUI's
`phantom --metrics`): the exporter is a consumer of the facade's bus, like the alerts; a
port in use stops `phantom --metrics` before the TUI starts (exit 2)."""

from __future__ import annotations

import asyncio
import socket
import subprocess
import urllib.request
from pathlib import Path

from prometheus_client.parser import text_string_to_metric_families

from console.config.listen import Listen
from console.services.exporter.server import Exporter
from console.services.model import Event, EventKind
from console.wiring import make_services
from tests.support.watcher import phantom_argv, watch_env
from tests.wiring.test_wiring import gcp_config


async def test_the_services_serve_the_series_they_publish(tmp_path: Path) -> None:
    svc = make_services(
        gcp_config(tmp_path), state_dir=tmp_path / "s", metrics=Listen("127.0.0.1", 0)
    )
    try:
        (exporter,) = [c for c in svc.consumers if isinstance(c, Exporter)]
        await exporter.start()  # what the facade's start does (no cluster to poll here)
        await svc.sink.emit(
            Event(at=1.0, kind=EventKind.PREEMPTED, message="w1 preempted", host="t-w1")
        )
        url = f"http://127.0.0.1:{exporter.server.port}/metrics"

        def scrape() -> str:
            with urllib.request.urlopen(url, timeout=10) as resp:
                return resp.read().decode()

        text = await asyncio.to_thread(scrape)
        (counted,) = [
            sample
            for family in text_string_to_metric_families(text)
            for sample in family.samples
            if sample.name == "phantom_preemptions_total"
        ]
        # every series names its cluster, a [cluster] config's too (its node's name)
        assert (
            counted.labels["kind"] == "worker"
            and counted.labels["cluster"] == svc.settings.cluster.name != ""
        )
        assert counted.value == 1.0
        await exporter.stop()
    finally:
        svc.close_journal()


def test_a_port_in_use_stops_the_tui_before_it_starts(tmp_path: Path) -> None:
    with socket.socket() as held:
        held.bind(("127.0.0.1", 0))
        held.listen()
        port = held.getsockname()[1]
        proc = subprocess.run(
            phantom_argv("--metrics", f"127.0.0.1:{port}"),
            env=watch_env(tmp_path),
            capture_output=True,
            text=True,
            timeout=60,
        )
    assert proc.returncode == 2, proc.stderr
    assert "--metrics 127.0.0.1:" in proc.stderr and "cannot listen there" in proc.stderr
