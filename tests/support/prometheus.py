"""Debian's real Prometheus, scraping a `phantom watch`'s /metrics, asked in PromQL.

    with prometheus(tmp_path, "127.0.0.1:PORT") as prom:
        wait_until(lambda: bool(prom.query("phantom_up == 1")), 90, "phantom_up scraped")

Every second a scrape, on loopback ports of its own; stopped (by its pid) when the block ends,
also when the test fails. ``PROMETHEUS`` is None where the binary is absent: tests skip with
``NO_PROMETHEUS``.
"""

from __future__ import annotations

import contextlib
import json
import shutil
import subprocess
import urllib.parse
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tests.support.fixtures_pod import free_port

PROMETHEUS = shutil.which("prometheus")
NO_PROMETHEUS = "Debian's prometheus is not installed (apt-get install -y prometheus; .ci/run does)"


@dataclass(frozen=True)
class Prometheus:
    api: str  # http://127.0.0.1:PORT/api/v1

    def query(self, promql: str) -> list[dict[str, Any]]:
        """The instant vector ``promql`` gives now ([] before Prometheus listens)."""
        url = f"{self.api}/query?" + urllib.parse.urlencode({"query": promql})
        try:
            with urllib.request.urlopen(url, timeout=10) as resp:
                body = json.load(resp)
        except OSError:
            return []  # not listening yet
        assert body["status"] == "success", body
        return list(body["data"]["result"])

    def by(self, promql: str, *labels: str) -> dict[tuple[str, ...], float]:
        """``promql``'s samples keyed by the values of ``labels`` (a ``sum by (...)``)."""
        return {
            tuple(r["metric"].get(label, "") for label in labels): float(r["value"][1])
            for r in self.query(promql)
        }


@contextlib.contextmanager
def prometheus(tmp_path: Path, target: str) -> Iterator[Prometheus]:
    """Prometheus scraping ``target`` (host:port) as job ``phantom`` every second."""
    assert PROMETHEUS is not None, NO_PROMETHEUS
    port = free_port()
    (tmp_path / "prometheus.yml").write_text(
        "global:\n  scrape_interval: 1s\n  evaluation_interval: 1s\n"
        "scrape_configs:\n  - job_name: phantom\n"
        f"    static_configs:\n      - targets: ['{target}']\n"
    )
    proc = subprocess.Popen(
        [
            PROMETHEUS,
            f"--config.file={tmp_path / 'prometheus.yml'}",
            f"--storage.tsdb.path={tmp_path / 'tsdb'}",
            f"--web.listen-address=127.0.0.1:{port}",
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        yield Prometheus(f"http://127.0.0.1:{port}/api/v1")
    finally:
        proc.terminate()
        try:
            proc.wait(30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(30)
