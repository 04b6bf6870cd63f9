"""Tunix metrics from TensorBoard event files: the doc's names map to the tags Tunix writes,
reading is incremental (a poll reads what was appended), a restart's repeated steps keep
their newest value, and the cadence rule calls a running workload that stops writing
stalled."""

from __future__ import annotations

import contextlib
import os
import time
from pathlib import Path

from tensorboard.compat.proto import event_pb2, summary_pb2
from tensorboard.summary.writer.event_file_writer import EventFileWriter
from tensorboard.util import tensor_util

from console.services.backends.gke.metrics import DOC_TAGS, RunReader, TbRun, TensorBoardSource
from console.services.cadence.snapshot import read_cadence, with_jobs
from console.services.cadence.tracker import CadenceTracker
from console.services.model import CadenceVerdict, JobInfo
from emulators.gke.workload.grpo import TUNIX_TAGS


class Writer:
    """tensorboard's own writer, one file per 'process start' (as Tunix writes them)."""

    def __init__(self, logdir: Path, tensors: bool = False) -> None:
        self._w = EventFileWriter(str(logdir), flush_secs=60)
        self.tensors = tensors

    def step(self, step: int, wall: float, value: float) -> None:
        values = []
        for tag in DOC_TAGS.values():
            if self.tensors:  # TF2-style summaries carry a scalar tensor
                proto = tensor_util.make_tensor_proto(value)
                values.append(summary_pb2.Summary.Value(tag=tag, tensor=proto))
            else:
                values.append(summary_pb2.Summary.Value(tag=tag, simple_value=value))
        self._w.add_event(
            event_pb2.Event(wall_time=wall, step=step, summary=summary_pb2.Summary(value=values))
        )
        self._w.flush()

    def close(self) -> None:
        self._w.close()


def test_doc_names_map_to_the_tags_tunix_writes() -> None:
    assert set(DOC_TAGS) == {
        "rewards/mean",
        "score/mean",
        "rollout_time",
        "completions/mean_length",
        "actor_dequeue_time",
        "step_time_sec",
    }
    assert set(DOC_TAGS.values()) <= set(TUNIX_TAGS)
    assert DOC_TAGS["step_time_sec"] == "perf/train/global_step_time"


def test_reading_is_incremental(tmp_path: Path) -> None:
    w = Writer(tmp_path)
    reader = RunReader(str(tmp_path))
    for s in range(1, 11):
        w.step(s, 1000.0 + s, s / 10)
    first = reader.poll()
    assert [p.step for p in first] == list(range(1, 11))
    read_after_first = reader.events_read
    assert reader.poll() == []  # nothing new: nothing read again
    assert reader.events_read == read_after_first
    for s in range(11, 14):
        w.step(s, 1000.0 + s, s / 10)
    assert [p.step for p in reader.poll()] == [11, 12, 13]
    assert reader.events_read == read_after_first + 3  # only the appended events
    w.close()


def test_a_restart_repeats_steps_and_keeps_the_newest_value(tmp_path: Path) -> None:
    old = Writer(tmp_path)
    for s in range(1, 8):
        old.step(s, 1000.0 + s, 1.0)
    old.close()
    reader = RunReader(str(tmp_path))
    reader.poll()
    time.sleep(1.1)  # sleep-noqa: a new file name (its second) for the resumed process
    new = Writer(tmp_path, tensors=True)
    for s in range(5, 10):  # resumed from the checkpoint at step 4: 5..7 again
        new.step(s, 2000.0 + s, 2.0)
    again = reader.poll()
    assert [p.step for p in again] == [5, 6, 7, 8, 9]  # a repeated step is an arrival too
    series = reader.series()["rewards/mean"]
    assert [s for s, _ in series] == list(range(1, 10)), "one value per step"
    assert dict(series)[4] == 1.0 and dict(series)[5] == 2.0 and dict(series)[7] == 2.0
    assert len(reader.files()) == 2
    new.close()


def test_a_running_workload_that_stops_writing_is_stalled(tmp_path: Path) -> None:
    now = [3000.0]
    state = ["RUNNING"]
    logdir = tmp_path / "run" / "tensorboard"
    w = Writer(logdir)
    source = TensorBoardSource(
        lambda: (TbRun("grpo", "grpo-run", str(logdir), state[0]),), lag_s=0.5
    )
    tracker = CadenceTracker([source], stall_factor=5.0, clock=lambda: now[0])
    for s in range(1, 11):  # one step a second, seen as it is written
        w.step(s, now[0], 0.5)
        (cad,) = tracker.poll()
        now[0] += 1.0
    assert not cad.stalled and cad.median_interval_s == 1.0 and cad.state == "running"
    (metrics,) = tracker.metrics()
    assert metrics.last_step == 10 and len(metrics.series["step_time_sec"]) == 10
    now[0] += 6.0  # silence beyond 5 x 1 s + 0.5 s lag, pods still Running
    (cad,) = tracker.poll()
    assert cad.stalled
    transitions = tracker.take_transitions()
    assert [t.stalled for t in transitions] == [True]
    state[0] = "PENDING"  # restarting: a silence is expected, not a stall
    (cad,) = tracker.poll()
    assert not cad.stalled and cad.state == "restarting"
    state[0] = "RUNNING"  # running again: the silence counts from now
    (cad,) = tracker.poll()
    assert not cad.stalled
    w.close()


def test_a_one_shot_read_judges_each_run_and_marks_a_hung_one_stale(tmp_path: Path) -> None:
    """`phantom status` on GKE: each workload's dir is read under the deadline; one whose
    event file never answers (a FIFO: its open blocks, as on a hung mount) is stale, the
    others are judged by the same rule, and each names its workload as its job."""
    good = tmp_path / "grpo" / "tensorboard"
    w = Writer(good)
    for s in range(1, 6):
        w.step(s, 1000.0 + 2 * s, 0.5)
    w.close()
    hung = tmp_path / "hung" / "tensorboard"
    hung.mkdir(parents=True)
    fifo = hung / "events.out.tfevents.1.host"
    os.mkfifo(fifo)
    runs = (
        TbRun("grpo", "grpo-run", str(good), "RUNNING"),
        TbRun("hung", "hung-run", str(hung), "RUNNING"),
    )
    try:
        got = read_cadence(
            [TensorBoardSource(lambda: runs, lag_s=0.5)],
            stall_factor=5.0,
            deadline_s=2.0,
            clock=lambda: 1011.0,
        )
    finally:
        with contextlib.suppress(OSError):  # release the reader still waiting on the FIFO
            os.close(os.open(fifo, os.O_WRONLY | os.O_NONBLOCK))
    jobs = [JobInfo("grpo", "RUNNING"), JobInfo("hung", "RUNNING")]
    by_id = {c.run_id: c for c in with_jobs(got, jobs)}
    grpo = by_id["grpo"]
    assert (grpo.last_step, grpo.median_interval_s, grpo.seconds_since) == (5, 2.0, 1.0)
    assert grpo.verdict == CadenceVerdict.OK and grpo.job == "grpo"
    assert by_id["hung"].verdict == CadenceVerdict.STALE and by_id["hung"].job == "hung"
    assert "no answer within 2s" in by_id["hung"].stale


def test_a_writer_that_flushes_in_batches_is_no_stall_and_a_real_stall_still_is(
    tmp_path: Path,
) -> None:
    """Tunix's metrics logger buffers (tensorboard's writer flushes every ``flush_secs``):
    the newest steps are on no disk for up to that long, so a healthy run looks silent.
    Before, the stall rule allowed only the configured lag (the emulator's 1 s): a run whose
    writer flushed every 10 steps was called stalled between flushes. Now the reader learns
    the flush lag from what it sees (the age of the oldest step each poll finds new), and a
    silence longer than that is still a stall."""
    now = [5000.0]
    logdir = tmp_path / "run" / "tensorboard"
    writer = EventFileWriter(str(logdir), flush_secs=3600)
    held: list[event_pb2.Event] = []  # the logger's buffer: on no disk until flushed

    def log(step: int) -> None:
        value = [summary_pb2.Summary.Value(tag=t, simple_value=0.5) for t in DOC_TAGS.values()]
        summary = summary_pb2.Summary(value=value)
        held.append(event_pb2.Event(wall_time=now[0], step=step, summary=summary))

    def flush() -> None:
        for event in held:
            writer.add_event(event)
        held.clear()
        writer.flush()

    source = TensorBoardSource(
        lambda: (TbRun("grpo", "grpo-run", str(logdir), "RUNNING"),),
        lag_s=0.5,
    )
    tracker = CadenceTracker([source], stall_factor=5.0, clock=lambda: now[0])
    step = 0
    for _batch in range(4):  # 10 steps of 1 s each, then one flush; polled every second
        for _ in range(10):
            step += 1
            log(step)
            now[0] += 1.0
            (cad,) = tracker.poll()
            assert not cad.stalled, f"a false stall at step {step} (silence {cad.seconds_since})"
        flush()
    (cad,) = tracker.poll()
    assert cad.median_interval_s == 1.0 and not cad.stalled
    assert (cad.seconds_since or 0.0) <= 1.0  # the flush brought the run up to date
    # the run stops: beyond 5 x 1 s + the 9 s a flush's batch spans, it is stalled
    now[0] += 12.0
    (cad,) = tracker.poll()
    assert not cad.stalled  # within one flush period of the last flush: may be healthy
    now[0] += 3.0
    (cad,) = tracker.poll()
    assert cad.stalled
    (metrics,) = tracker.metrics()
    assert metrics.last_step == 40  # every step counted, none lost to the lag
    writer.close()
