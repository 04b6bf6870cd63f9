"""The console's metrics reader on event files Tunix's own logger wrote (google-tunix 0.1.7:
MetricsLogger -> metrax TensorboardBackend -> tensorboardX; made by
tests/fixtures/tunix/make_fixtures.py): the tags are the ones the reader maps and the
emulated trainer writes, every step is read with its value, and the resumed process's
repeated steps keep its newer value. tensorboardX writes one value per event, where
tensorboard's writer (the emulated trainer's) groups a step's values in one event."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
from tensorboard.backend.event_processing.event_file_loader import LegacyEventFileLoader

from console.services.backends.gke.metrics import DOC_TAGS, RunReader, TbRun, TensorBoardSource
from console.services.cadence.tracker import CadenceTracker
from emulators.gke.workload.grpo import TUNIX_TAGS

FIXTURE = Path(__file__).resolve().parents[3] / "fixtures" / "tunix" / "grpo" / "tensorboard"
FIRST, SECOND = range(1, 7), range(5, 11)  # the two process starts make_fixtures.py ran


def expected(name: str, step: int, start: int) -> object:
    """make_fixtures.value: what Tunix logged for (buffered metric name, step, process
    start), as the float32 tensorboardX stores."""
    return pytest.approx(0.1 * step + 0.01 * (len(name) % 7) + (0.5 if start else 0.0), 1e-6)


def tags_written() -> set[str]:
    tags = set()
    for f in FIXTURE.iterdir():
        for event in LegacyEventFileLoader(str(f)).Load():
            tags |= {v.tag for v in event.summary.value}
    return tags


def test_tunix_writes_the_tags_the_console_reads_and_the_emulator_imitates() -> None:
    written = tags_written()
    assert set(DOC_TAGS.values()) <= written, set(DOC_TAGS.values()) - written
    assert written <= set(TUNIX_TAGS), written - set(TUNIX_TAGS)


def test_every_step_is_read_and_a_resumed_process_wins_its_repeated_steps() -> None:
    reader = RunReader(str(FIXTURE))
    assert len(reader.files()) == 2
    assert sorted(p.step for p in reader.poll()) == list(range(1, 11))
    assert reader.poll() == []
    series = reader.series()
    # rewards/mean is the buffered "rewards/mean": Tunix logs prefix "rewards", name "mean"
    rewards = dict(series["rewards/mean"])
    assert sorted(rewards) == list(range(1, 11))
    for step in FIRST:
        start = 1 if step in SECOND else 0
        assert rewards[step] == expected("rewards/mean", step, start), step
    dequeue = dict(series["actor_dequeue_time"])  # no "/": Tunix's prefix "global"
    assert dequeue[3] == expected("actor_dequeue_time", 3, 0)
    assert dequeue[10] == expected("actor_dequeue_time", 10, 1)


def test_the_cadence_tracker_reads_tunix_files_as_a_run(tmp_path: Path) -> None:
    logdir = tmp_path / "grpo-run" / "tensorboard"
    shutil.copytree(FIXTURE, logdir)
    source = TensorBoardSource(lambda: (TbRun("grpo", "grpo-run", str(logdir), "SUCCEEDED"),))
    tracker = CadenceTracker([source], stall_factor=5.0, clock=lambda: 5e9)
    (cad,) = tracker.poll()
    assert cad.state == "finished" and not cad.stalled
    (metrics,) = tracker.metrics()
    assert metrics.last_step == 10
    assert len(metrics.series["step_time_sec"]) == 10
    assert dict(metrics.series["score/mean"])[10] == expected("rewards/score/mean", 10, 1)
