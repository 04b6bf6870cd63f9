"""Metric cadence: the pure stall rule, W&B's offline run files, and the online public API.

Offline runs are real: a tiny ``wandb.init(mode="offline")`` + ``wandb.log`` loop runs in a
subprocess with WANDB_DIR under tmp_path. The online path talks to a small GraphQL server on
loopback that replays recorded responses from tests/data/wandb_graphql (WANDB_BASE_URL).
"""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import subprocess
import sys
import textwrap
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest
from waiting import wait_until

from console.config import WandbConfig
from console.services.cadence import (
    CadenceSourceError,
    CadenceTracker,
    OfflineRunSource,
    OnlineRunSource,
    RunObservation,
    compute_cadence,
    intervals,
    is_stalled,
    median,
    merge_windows,
    skew_estimate,
    skew_window,
    sources_from_config,
    steps_per_minute,
)
from console.services.wandb_files import (
    BLOCK_LEN,
    HistoryPoint,
    OfflineRun,
    RecordLogReader,
    WandbFileError,
    iter_records,
    read_history,
    run_files,
)

DATA = Path(__file__).parent / "data" / "wandb_graphql"


def pts(*pairs: tuple[int, float]) -> list[HistoryPoint]:
    return [HistoryPoint(step=s, timestamp=t) for s, t in pairs]


# -- pure logic ------------------------------------------------------------------------------------
def test_intervals_drop_duplicates_and_clock_steps_back() -> None:
    p = pts((0, 100.0), (1, 102.0), (2, 102.0), (3, 101.0), (4, 104.0))
    assert intervals(p) == [2.0, 3.0]
    assert intervals(pts((0, 0.0), (10, 40.0)), stride=4.0) == [10.0]


def test_median_and_rate() -> None:
    assert median([]) is None
    assert median([3.0, 1.0, 2.0]) == 2.0
    assert steps_per_minute(pts((0, 0.0), (30, 60.0))) == 30.0
    assert steps_per_minute(pts((5, 10.0))) is None
    assert steps_per_minute(pts((5, 10.0), (6, 10.0))) is None


def test_one_step_only_has_no_median_and_never_stalls() -> None:
    cad = compute_cadence("r", "n", "offline", pts((7, 1000.0)), now=5000.0, stall_factor=5)
    assert cad.last_step == 7
    assert cad.seconds_since == 4000.0
    assert cad.median_interval_s is None and cad.steps_per_min is None
    assert not cad.stalled


def test_no_rows_yet() -> None:
    cad = compute_cadence("r", "n", "offline", [], now=10.0, stall_factor=5)
    assert cad.last_step is None and cad.seconds_since is None and not cad.stalled


def test_stall_rule_is_k_times_median_plus_lag() -> None:
    rows = pts(*[(i, 1000.0 + 2.0 * i) for i in range(10)])  # every 2 s, last at 1018
    ok = compute_cadence("r", "n", "offline", rows, now=1018 + 10.0, stall_factor=5)
    assert ok.median_interval_s == 2.0 and not ok.stalled
    late = compute_cadence("r", "n", "offline", rows, now=1018 + 10.5, stall_factor=5)
    assert late.stalled
    lagged = compute_cadence("r", "n", "offline", rows, now=1018 + 20.0, stall_factor=5, lag_s=15)
    assert not lagged.stalled
    assert is_stalled(26.0, 2.0, 5, lag_s=15)
    assert late.steps_per_min == pytest.approx(30.0)
    assert late.recent_intervals == (2.0,) * 9


def test_finished_or_failed_runs_never_stall() -> None:
    rows = pts((0, 0.0), (1, 1.0), (2, 2.0))
    for state in ("finished", "failed", "crashed"):
        assert not compute_cadence(
            "r", "n", "o", rows, now=1e6, stall_factor=2, state=state
        ).stalled
    assert compute_cadence("r", "n", "o", rows, now=1e6, stall_factor=2, state="running").stalled


def test_skew_estimate_from_what_we_observed() -> None:
    # Rows written between polls at 104 and 110 (lag 2): synchronized clocks fit -> no skew.
    w = skew_window(109.0, 105.0, seen_at=110.0, prev_poll_at=104.0, lag_s=2.0)
    assert w == (-1.0, 3.0) and skew_estimate(w) == 0.0
    # Writer an hour ahead: skew is at least 3600 - 1.
    ahead = skew_window(3709.0, 3705.0, seen_at=110.0, prev_poll_at=104.0, lag_s=2.0)
    assert skew_estimate(ahead) == 3599.0
    # Writer an hour behind: the smallest skew the observations allow.
    behind = skew_window(-3491.0, -3495.0, seen_at=110.0, prev_poll_at=104.0, lag_s=2.0)
    assert skew_estimate(behind) == -3601.0
    # Successive polls narrow the window; a contradiction (clock jump) restarts it.
    assert merge_windows((-5.0, 5.0), (-1.0, 9.0)) == (-1.0, 5.0)
    assert merge_windows((-5.0, 5.0), (100.0, 110.0)) == (100.0, 110.0)
    # Backfill: no previous poll, no upper bound; an old row is trusted as is.
    old = skew_window(10.0, 0.0, seen_at=10_000.0, prev_poll_at=None, lag_s=2.0)
    assert old[1] == float("inf") and skew_estimate(old) == 0.0
    assert skew_estimate(None) == 0.0


class FakeClock:
    def __init__(self, t: float) -> None:
        self.t = t

    def __call__(self) -> float:
        return self.t


class ScriptedSource:
    """A source whose polls are given by the test (the tracker's input, not our code)."""

    kind = "offline"

    def __init__(self) -> None:
        self.next: list[RunObservation] = []
        self.fail: Exception | None = None

    def poll(self) -> list[RunObservation]:
        if self.fail is not None:
            raise self.fail
        return self.next


@pytest.mark.parametrize("skew", [0.0, 3600.0, -3600.0])
def test_tracker_detects_stall_whatever_the_writer_clock(skew: float) -> None:
    clock = FakeClock(1000.0)
    src = ScriptedSource()
    tracker = CadenceTracker([src], stall_factor=3, clock=clock)
    step = 0

    def log_rows(n: int) -> None:
        nonlocal step
        rows = []
        for _ in range(n):
            clock.t += 1.0
            rows.append(HistoryPoint(step, clock.t + skew))
            step += 1
        src.next = [RunObservation("r1", "ppo", "offline", "running", tuple(rows), lag_s=0.5)]

    src.next = []
    tracker.poll()  # first poll: nothing yet
    for _ in range(5):
        log_rows(3)
        (cad,) = tracker.poll()
        assert not cad.stalled, cad
        assert cad.median_interval_s == pytest.approx(1.0)
    src.next = [RunObservation("r1", "ppo", "offline", "running", (), lag_s=0.5)]
    clock.t += 3.0  # silence 3 s <= 3 x 1 s + 0.5 s
    assert not tracker.poll()[0].stalled
    assert tracker.take_transitions() == []
    clock.t += 1.0  # 4 s > 3.5 s
    (cad,) = tracker.poll()
    assert cad.stalled and cad.seconds_since == pytest.approx(4.0)
    (tr,) = tracker.take_transitions()
    assert tr.stalled and tr.run_id == "r1" and tr.threshold_s == pytest.approx(3.5)
    ev = tr.to_event()
    assert ev.kind == "stalled" and "ppo" in ev.message and ev.data["run_id"] == "r1"
    log_rows(1)
    assert not tracker.poll()[0].stalled
    (tr,) = tracker.take_transitions()
    assert not tr.stalled and tr.to_event().kind == "cadence_resumed"


def test_tracker_backfill_of_a_dead_run_is_stalled_at_once() -> None:
    clock = FakeClock(10_000.0)
    src = ScriptedSource()
    src.next = [
        RunObservation("old", "old", "offline", "running", tuple(pts((0, 10.0), (1, 20.0))))
    ]
    tracker = CadenceTracker([src], stall_factor=5, clock=clock)
    (cad,) = tracker.poll()
    assert cad.stalled and cad.seconds_since == pytest.approx(9980.0)


def test_failing_source_is_reported_and_cannot_flip_a_run_to_stalled() -> None:
    clock = FakeClock(100.0)
    src = ScriptedSource()
    src.next = [RunObservation("r", "r", "offline", "running", tuple(pts((0, 98.0), (1, 99.0))))]
    tracker = CadenceTracker([src], stall_factor=2, clock=clock)
    assert not tracker.poll()[0].stalled
    src.fail = CadenceSourceError("online cadence: listing runs failed: boom")
    clock.t += 100
    (cad,) = tracker.poll()
    assert not cad.stalled
    assert "boom" in tracker.errors["offline"]
    assert tracker.take_transitions() == []
    src.fail = None
    src.next = [RunObservation("r", "r", "offline", "running", ())]
    assert tracker.poll()[0].stalled
    assert tracker.errors == {}


def test_runs_that_vanish_from_a_source_are_dropped() -> None:
    src = ScriptedSource()
    src.next = [RunObservation("a", "a", "offline"), RunObservation("b", "b", "offline")]
    tracker = CadenceTracker([src], stall_factor=2, clock=FakeClock(0.0))
    assert [c.run_id for c in tracker.poll()] == ["a", "b"]
    src.next = [RunObservation("b", "b", "offline")]
    assert [c.run_id for c in tracker.poll()] == ["b"]
    assert [c.run_id for c in tracker.latest()] == ["b"]


def test_stall_factor_must_exceed_one() -> None:
    with pytest.raises(ValueError, match="stall_factor"):
        CadenceTracker([], stall_factor=1.0)


# -- offline run files -----------------------------------------------------------------------------
WRITER = textwrap.dedent(
    """
    import os, sys, time, wandb
    steps, pause, big = int(sys.argv[1]), float(sys.argv[2]), sys.argv[3] == "big"
    run = wandb.init(mode="offline", project="cadence-test", name="tiny-ppo",
                     dir=os.environ["WANDB_DIR"])
    print("started", run.id, flush=True)
    for i in range(steps):
        row = {"loss": 1.0 / (i + 1)}
        if big and i % 4 == 1:
            row.update({f"k{j}": float(i * j) for j in range(900)})  # > one 32 KiB block
        wandb.log(row)
        time.sleep(pause)
    if os.environ.get("HANG"):
        print("hanging", flush=True)
        time.sleep(600)
    run.finish()
    """
)


def _writer_env(wandb_dir: Path, flush_s: float) -> dict[str, str]:
    env = dict(os.environ)
    env.update(
        WANDB_DIR=str(wandb_dir),
        WANDB_MODE="offline",
        WANDB_SILENT="true",
        WANDB__TRANSACTION_LOG_FLUSH_INTERVAL=str(flush_s),
    )
    env.pop("WANDB_API_KEY", None)
    return env


@pytest.fixture(scope="module")
def finished_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A real finished offline run: 24 steps, some rows bigger than a block."""
    wandb_dir = tmp_path_factory.mktemp("wandb_finished")
    subprocess.run(
        [sys.executable, "-c", WRITER, "24", "0.01", "big"],
        env=_writer_env(wandb_dir, 15.0),
        check=True,
        timeout=120,
        capture_output=True,
    )
    (path,) = run_files(wandb_dir)
    return path


def test_run_files_finds_offline_runs(finished_run: Path) -> None:
    wandb_dir = finished_run.parents[2]
    assert run_files(wandb_dir) == [finished_run]
    assert run_files(wandb_dir / "wandb") == [finished_run]
    assert run_files(wandb_dir / "nowhere") == []
    assert finished_run.parent.name.startswith("offline-run-")


def test_reads_every_step_of_a_real_offline_run(finished_run: Path) -> None:
    assert finished_run.stat().st_size > 3 * BLOCK_LEN  # records span blocks
    kinds = [r.WhichOneof("record_type") for r in iter_records(finished_run)]
    assert kinds[0] == "header" and "run" in kinds and kinds[-1] in ("exit", "footer", "final")
    history = read_history(finished_run)
    assert [p.step for p in history] == list(range(24))
    assert all(b.timestamp > a.timestamp for a, b in zip(history, history[1:], strict=False))
    run = OfflineRun(finished_run)
    run.poll()
    assert (run.name, run.project, run.state, run.exit_code) == (
        "tiny-ppo",
        "cadence-test",
        "finished",
        0,
    )
    assert finished_run.name == f"run-{run.run_id}.wandb"


def test_incremental_reads_of_a_file_being_appended(finished_run: Path, tmp_path: Path) -> None:
    data = finished_run.read_bytes()
    all_records = list(RecordLogReader(finished_run).read_new())
    growing = tmp_path / "run-grow.wandb"
    growing.write_bytes(b"")
    reader = RecordLogReader(growing)
    seen: list[bytes] = []
    # Cut points: inside the file header, inside record headers, mid-record, at and around
    # block boundaries, then odd-sized chunks to the end.
    cuts = sorted({3, 7, 9, 50, 500, BLOCK_LEN - 3, BLOCK_LEN, BLOCK_LEN + 5, 2 * BLOCK_LEN + 1})
    cuts += list(range(cuts[-1] + 997, len(data), 997)) + [len(data)]
    written = 0
    for cut in cuts:
        with open(growing, "ab") as f:
            f.write(data[written:cut])
        written = cut
        new = reader.read_new()
        seen.extend(new)
        assert reader.offset <= written
    assert seen == all_records
    assert reader.read_new() == []
    assert reader.corrupt_skips == 0
    # Small read chunks (rows here are bigger than 1000 bytes) give the same records.
    assert RecordLogReader(finished_run).read_new(chunk_bytes=1000) == all_records


def test_corrupt_block_is_skipped_and_reading_goes_on(finished_run: Path, tmp_path: Path) -> None:
    data = bytearray(finished_run.read_bytes())
    data[200] ^= 0xFF  # inside the first block's early records
    bad = tmp_path / "run-bad.wandb"
    bad.write_bytes(bytes(data))
    reader = RecordLogReader(bad)
    records = reader.read_new()
    assert reader.corrupt_skips == 1
    assert 0 < len(records) < len(list(RecordLogReader(finished_run).read_new()))
    steps = [p.step for p in read_history(bad)]
    assert steps and steps[-1] == 23  # later blocks still read


def test_not_a_wandb_file_names_the_path(tmp_path: Path) -> None:
    p = tmp_path / "run-x.wandb"
    p.write_bytes(b"PK\x03\x04 this is a zip file")
    with pytest.raises(WandbFileError, match=r"run-x\.wandb: not a W&B run file"):
        RecordLogReader(p).read_new()
    assert RecordLogReader(tmp_path / "missing.wandb").read_new() == []


def test_offline_source_follows_a_live_run_and_flags_it_stalled_when_it_hangs(
    tmp_path: Path,
) -> None:
    """A writer logs every 50 ms (flushing every 0.2 s), then hangs without finishing."""
    env = _writer_env(tmp_path, 0.2)
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
            time.sleep(0.05)
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


def test_sources_from_config(tmp_path: Path) -> None:
    offline = sources_from_config(WandbConfig(dir=str(tmp_path)))
    assert [s.kind for s in offline] == ["offline"]
    online = sources_from_config(
        WandbConfig(mode="online", project="p", dir=str(tmp_path)), environ={}
    )
    assert [s.kind for s in online] == ["offline", "online"]
    assert sources_from_config(WandbConfig(mode="disabled")) == []


# -- online (W&B public API against recorded responses) --------------------------------------------
class GraphQLReplay(BaseHTTPRequestHandler):
    """Answers wandb's GraphQL POSTs from tests/data/wandb_graphql/<Operation>[.<run>].json."""

    server: Any

    def do_POST(self) -> None:  # noqa: N802 (http.server's naming)
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

    clock = FakeClock(1795971410.0 + 5.0)
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


def test_copy_of_a_finished_run_dir_is_found_again(finished_run: Path, tmp_path: Path) -> None:
    """A second run directory (as after a resume) shows up as another file, oldest first."""
    wandb_dir = tmp_path / "w"
    shutil.copytree(finished_run.parent, wandb_dir / "wandb" / finished_run.parent.name)
    later = "offline-run-29991231_235959-" + finished_run.parent.name.rsplit("-", 1)[-1]
    shutil.copytree(finished_run.parent, wandb_dir / "wandb" / later)
    files = run_files(wandb_dir)
    assert [f.parent.name for f in files] == [finished_run.parent.name, later]
    (cad,) = CadenceTracker([OfflineRunSource(wandb_dir)], stall_factor=3).poll()
    assert cad.state == "finished" and cad.last_step == 23
