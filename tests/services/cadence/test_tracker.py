"""The tracker over its sources: stalls whatever the writer's clock, failing sources, and
which sources a config asks for."""

from __future__ import annotations

import threading
from pathlib import Path

import pytest

from console.config import WandbConfig
from console.services.cadence.sources import (
    CadenceSourceError,
    RunObservation,
)
from console.services.cadence.tracker import CadenceTracker, sources_from_config
from console.services.cadence.wandb_files import HistoryPoint
from tests.services.cadence.conftest import pts
from tests.support.clock import Clock


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
    clock = Clock(1000.0)
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


def test_a_stall_that_ends_with_the_run_says_it_finished_not_logging_again() -> None:
    """A run called stalled that then ends (no row came: its workload finished) is no longer
    a stall; the row that says so names the end, it does not say the run logs again."""
    clock = Clock(100.0)
    src = ScriptedSource()
    src.next = [RunObservation("r", "grpo", "offline", "running", tuple(pts((0, 98.0), (1, 99.0))))]
    tracker = CadenceTracker([src], stall_factor=2, clock=clock)
    assert not tracker.poll()[0].stalled
    src.next = [RunObservation("r", "grpo", "offline", "running", ())]
    clock.t += 10
    assert tracker.poll()[0].stalled
    assert [t.stalled for t in tracker.take_transitions()] == [True]
    src.next = [RunObservation("r", "grpo", "offline", "finished", ())]
    assert not tracker.poll()[0].stalled
    (tr,) = tracker.take_transitions()
    ev = tr.to_event()
    assert ev.kind == "cadence_resumed" and ev.message == "run grpo (r) finished: no longer a stall"


def test_tracker_backfill_of_a_dead_run_is_stalled_at_once() -> None:
    clock = Clock(10_000.0)
    src = ScriptedSource()
    src.next = [
        RunObservation("old", "old", "offline", "running", tuple(pts((0, 10.0), (1, 20.0))))
    ]
    tracker = CadenceTracker([src], stall_factor=5, clock=clock)
    (cad,) = tracker.poll()
    assert cad.stalled and cad.seconds_since == pytest.approx(9980.0)


def test_failing_source_is_reported_and_cannot_flip_a_run_to_stalled() -> None:
    clock = Clock(100.0)
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
    tracker = CadenceTracker([src], stall_factor=2, clock=Clock(0.0))
    assert [c.run_id for c in tracker.poll()] == ["a", "b"]
    src.next = [RunObservation("b", "b", "offline")]
    assert [c.run_id for c in tracker.poll()] == ["b"]
    assert [c.run_id for c in tracker.latest()] == ["b"]


def test_stall_factor_must_exceed_one() -> None:
    with pytest.raises(ValueError, match="stall_factor"):
        CadenceTracker([], stall_factor=1.0)


def test_sources_from_config(tmp_path: Path) -> None:
    offline = sources_from_config(WandbConfig(dir=str(tmp_path)))
    assert [s.kind for s in offline] == ["offline"]
    online = sources_from_config(
        WandbConfig(mode="online", project="p", dir=str(tmp_path)), environ={}
    )
    assert [s.kind for s in online] == ["offline", "online"]
    assert sources_from_config(WandbConfig(mode="disabled")) == []


class HangingSource:
    """A source whose read blocks until released (a W&B server that does not answer)."""

    kind = "online"

    def __init__(self) -> None:
        self.release = threading.Event()
        self.reads = 0
        self.next: list[RunObservation] = []

    def poll(self) -> list[RunObservation]:
        self.reads += 1
        self.release.wait(60)
        return self.next


def test_a_source_that_hangs_is_stale_by_the_deadline_and_blinds_no_other() -> None:
    clock = Clock(100.0)
    files, api = ScriptedSource(), HangingSource()
    files.next = [RunObservation("f", "f", "offline", "running", tuple(pts((0, 98.0), (1, 99.0))))]
    api.next = [RunObservation("a", "a", "online", "running", tuple(pts((0, 98.0), (1, 99.0))))]
    tracker = CadenceTracker([files, api], stall_factor=2, clock=clock, source_deadline_s=0.2)
    cads = {c.source: c for c in tracker.poll()}  # returns although the API never answered
    assert cads["offline"].verdict == "ok"
    assert cads["online"].verdict == "stale" and cads["online"].name == "every online run"
    assert "online cadence: no answer" in tracker.errors["online"]
    tracker.poll()
    assert api.reads == 1  # not read again while its previous read hangs
    api.release.set()  # the server answers: the next read counts
    for _ in range(50):
        cads = {c.source: c for c in tracker.poll()}
        if "online" not in tracker.errors:
            break
    assert cads["online"].run_id == "a" and cads["online"].verdict == "ok"
    # a run it knew keeps its numbers, marked stale, while its source hangs again
    api.release.clear()
    (online,) = [c for c in tracker.poll() if c.source == "online"]
    assert online.run_id == "a" and online.verdict == "stale" and online.last_step == 1
    api.release.set()
