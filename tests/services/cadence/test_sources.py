"""Cadence sources: a live offline run followed to its stall, and the W&B public API against
a small GraphQL server on loopback replaying recorded responses (WANDB_BASE_URL)."""

from __future__ import annotations

import json
import re
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

from console.services.cadence.sources import CadenceSourceError, OfflineRunSource, OnlineRunSource
from console.services.cadence.tracker import CadenceTracker
from tests.services.cadence.conftest import WRITER, writer_env
from tests.support import DATA as SUPPORT_DATA
from tests.support.clock import Clock
from tests.support.waiting import wait_until

DATA = SUPPORT_DATA / "wandb_graphql"


def test_offline_source_follows_a_live_run_and_flags_it_stalled_when_it_hangs(
    tmp_path: Path,
) -> None:
    """A writer logs every 50 ms (flushing every 0.2 s), then hangs without finishing."""
    env = writer_env(tmp_path, 0.2)
    env["HANG"] = "1"
    proc = subprocess.Popen(
        [sys.executable, "-c", WRITER, "40", "0.05", "small"],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
    )
    try:
        source = OfflineRunSource(tmp_path, flush_interval_s=0.2)
        tracker = CadenceTracker([source], stall_factor=4)
        deadline = time.monotonic() + 120
        growth: list[int] = []
        while time.monotonic() < deadline:
            cads = tracker.poll()
            if cads and cads[0].last_step is not None:
                if not growth or cads[0].last_step != growth[-1]:
                    growth.append(cads[0].last_step)
                if cads[0].last_step == 39:
                    break
            time.sleep(0.05)  # sleep-noqa: sampling is the subject (growth seen step by step)
        assert growth and growth[-1] == 39
        assert len(growth) >= 3, f"saw the run only at steps {growth}: not incremental"
        (cad,) = tracker.poll()
        assert cad.state == "running" and cad.name == "tiny-ppo"
        assert cad.median_interval_s == pytest.approx(0.05, abs=0.04)
        assert cad.steps_per_min and cad.steps_per_min > 100
        assert len(cad.recent_intervals) == 30
        # The writer now hangs: the run must be flagged within k x median + lag.
        wait_until(
            lambda: tracker.poll()[0].stalled,
            max(1.0, deadline - time.monotonic()),
            "the hung run to be flagged stalled",
            step=0.05,
        )
        (cad,) = tracker.latest()
        assert cad.stalled
        (tr,) = tracker.take_transitions()
        assert tr.stalled and tr.run_id == cad.run_id
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=30)


class GraphQLReplay(BaseHTTPRequestHandler):
    """Answers wandb's GraphQL POSTs from tests/data/wandb_graphql/<Operation>[.<run>].json."""

    server: Any

    def do_POST(self) -> None:
        body = self.rfile.read(int(self.headers.get("Content-Length", "0")))
        if not self.path.startswith("/graphql"):
            self._send(200, b"{}")  # wandb-core's telemetry endpoints
            return
        req = json.loads(body)
        match = re.search(r"\b(?:query|mutation)\s+(\w+)", req.get("query", ""))
        op = match.group(1) if match else ""
        variables = req.get("variables") or {}
        self.server.requests.append((op, variables))
        if self.server.fail:
            self._send(500, b'{"errors": [{"message": "internal error"}]}')
            return
        candidates = [DATA / f"{op}.{variables.get('name', '')}.json", DATA / f"{op}.json"]
        for path in candidates:
            if path.exists():
                self._send(200, path.read_bytes())
                return
        self._send(200, json.dumps({"errors": [{"message": f"no recording for {op}"}]}).encode())

    def _send(self, code: int, payload: bytes) -> None:
        self.send_response(code)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(payload)))
        self.end_headers()
        self.wfile.write(payload)

    def log_message(self, *args: Any) -> None:
        pass


@pytest.fixture
def wandb_server() -> Iterator[Any]:
    server = ThreadingHTTPServer(("127.0.0.1", 0), GraphQLReplay)
    server.requests = []
    server.fail = False
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield server
    finally:
        server.shutdown()
        server.server_close()


FAKE_KEY = "local" + "0" * 35  # 40 chars, like a W&B key; never a real one


def test_online_source_reads_runs_and_history_from_the_api(wandb_server: Any) -> None:
    url = f"http://127.0.0.1:{wandb_server.server_address[1]}"
    source = OnlineRunSource(
        "proj", "ent", base_url=url, environ={"WANDB_API_KEY": FAKE_KEY}, samples=200, timeout_s=10
    )
    observations = {o.run_id: o for o in source.poll()}
    assert set(observations) == {"live01", "done01"}
    live = observations["live01"]
    assert (live.name, live.state, live.replace) == ("ppo-alpha-0.3", "running", True)
    assert [p.step for p in live.points] == [0, 1, 2, 3, 4, 5]
    assert live.stride == 1.0
    done = observations["done01"]
    assert done.state == "finished" and done.points == ()  # finished: no history fetched
    ops = [op for op, _ in wandb_server.requests]
    assert "Runs" in ops and ops.count("RunSampledHistory") == 1
    (hist_vars,) = [v for op, v in wandb_server.requests if op == "RunSampledHistory"]
    spec = json.loads(hist_vars["specs"][0])
    assert spec == {"keys": ["_step", "_timestamp"], "samples": 200}
    runs_vars = next(v for op, v in wandb_server.requests if op == "Runs")
    assert (runs_vars["entity"], runs_vars["project"], runs_vars["order"]) == (
        "ent",
        "proj",
        "-created_at",
    )

    clock = Clock(1795971410.0 + 5.0)
    tracker = CadenceTracker([source], stall_factor=3, clock=clock)
    cads = {c.run_id: c for c in tracker.poll()}
    live_cad = cads["live01"]
    assert live_cad.source == "online" and live_cad.last_step == 5
    assert live_cad.median_interval_s == pytest.approx(2.0)
    assert live_cad.steps_per_min == pytest.approx(30.0)
    assert not live_cad.stalled and not cads["done01"].stalled
    clock.t += 30.0  # 35 s > 3 x 2 s + 15 s lag
    assert {c.run_id: c for c in tracker.poll()}["live01"].stalled


def test_online_source_reports_server_errors_and_missing_key(wandb_server: Any) -> None:
    with pytest.raises(CadenceSourceError, match=r"\$WANDB_API_KEY is not set"):
        OnlineRunSource("proj", "ent", environ={}).poll()
    url = f"http://127.0.0.1:{wandb_server.server_address[1]}"
    source = OnlineRunSource(
        "proj", "ent", base_url=url, environ={"WANDB_API_KEY": FAKE_KEY}, timeout_s=5
    )
    source.poll()
    wandb_server.fail = True
    tracker = CadenceTracker([source], stall_factor=3)
    tracker.poll()
    assert "listing runs of 'ent/proj' failed" in tracker.errors["online"]
    assert FAKE_KEY not in tracker.errors["online"]
