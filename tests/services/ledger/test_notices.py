"""Notice verification against a real journal and real checkpoint files.

The checkpoints are written by the engine's own store (``engine.storage``: manifest last,
validity checked on read), the notices and job states are journal rows as the detector and
the job watcher write them.
"""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest

from console.services.ledger.notices import (
    SLACK_S,
    NoticeVerifier,
    Saved,
    active_at,
    judge,
    saved_checkpoints,
)
from console.services.model import Event, EventKind, Update
from console.services.record.journal import Journal
from console.services.record.sink import EventSink
from engine.exit_codes import EX_PREEMPTED
from engine.storage import MANIFEST, FsspecCheckpointStore, build_manifest
from tests.support.noticed_runs import NOTICED_RUN, NoticedRuns
from tests.support.waiting import until

GRACE = 30.0


def save(storage: Path, run: str, step: int, created: float, trigger: str = "interval") -> None:
    """One complete checkpoint of ``run`` at ``step``, as the trainer writes it."""
    work = storage.parent / f"work-{run}-{step}"
    work.mkdir(parents=True)
    (work / "model.zip").write_bytes(b"weights" * step)
    manifest = build_manifest(work, step, {"trigger": trigger, "run_name": run})
    manifest["created_unix"] = created
    FsspecCheckpointStore(str(storage), run, keep=10).save(work, step, manifest, {})


def notice(journal: Journal, at: float, host: str = "w-1") -> Event:
    return journal.record_event(
        Event(at, EventKind.PREEMPTION_NOTICE, f"{host}: notice", host=host, data={"notice_at": at})
    )


def job_state(journal: Journal, at: float, job: str, status: str) -> None:
    journal.record_event(
        Event(at, EventKind.JOB_STATE, f"job {job}", data={"job_id": job, "new_status": status})
    )


def verifier(journal: Journal, storage: Path, now: float, rows: list[Update]) -> NoticeVerifier:
    sink = EventSink(journal, rows.append)
    return NoticeVerifier(journal, sink, str(storage), grace_s=GRACE, clock=lambda: now)


def test_saved_checkpoints_skip_an_incomplete_one(tmp_path: Path) -> None:
    storage = tmp_path / "bucket"
    save(storage, "run-a", 256, 100.0)
    save(storage, "run-a", 512, 200.0, trigger="notice")
    # a save killed before its manifest was written: not a checkpoint
    broken = storage / "run-a" / "checkpoints" / "step-000000000768"
    broken.mkdir()
    (broken / "model.zip").write_bytes(b"half")
    # a manifest over a file of the wrong size: not a checkpoint either
    save(storage, "run-b", 128, 150.0)
    (storage / "run-b" / "checkpoints" / "step-000000000128" / "model.zip").write_bytes(b"x")
    got = sorted((s.run, s.step, s.created_at, s.trigger) for s in saved_checkpoints(str(storage)))
    assert got == [("run-a", 256, 100.0, "interval"), ("run-a", 512, 200.0, "notice")]
    assert saved_checkpoints(str(tmp_path / "nowhere")) == []
    assert json.loads((storage / "run-a/checkpoints/step-000000000512" / MANIFEST).read_text())


def test_judge_takes_checkpoints_in_the_window_only() -> None:
    n = Event(1000.0, EventKind.PREEMPTION_NOTICE, "n", host="w-0", data={"notice_at": 990.0}, id=7)
    before, inside, late = Saved("r", 1, 900.0), Saved("r", 2, 1005.0), Saved("r", 3, 1030.0)
    v = judge(n, [before, inside, late], grace_s=GRACE)
    assert (v.notice_at, v.deadline, v.matched) == (990.0, 1020.0, (inside,))
    assert v.honoured
    assert not judge(n, [before, late], grace_s=GRACE).honoured
    assert judge(n, [], grace_s=GRACE, expected=False).honoured  # no job: nothing owed
    with pytest.raises(ValueError, match="id"):
        judge(Event(1.0, EventKind.PREEMPTION_NOTICE, "n"), [], grace_s=GRACE)


def test_active_at_follows_the_job_state_rows() -> None:
    rows = [
        Event(10, EventKind.JOB_STATE, "", data={"job_id": "a", "new_status": "RUNNING"}),
        Event(20, EventKind.JOB_STATE, "", data={"job_id": "b", "new_status": "PENDING"}),
        Event(30, EventKind.JOB_STATE, "", data={"job_id": "a", "new_status": "SUCCEEDED"}),
    ]
    assert active_at(rows, 5) == []
    assert active_at(rows, 25) == ["a", "b"]
    assert active_at(rows, 35) == ["b"]


async def test_an_unhonoured_notice_is_said_once_also_across_restarts(tmp_path: Path) -> None:
    storage = tmp_path / "bucket"
    path = tmp_path / "journal.sqlite"
    now = time.time()
    journal = Journal(path)
    job_state(journal, now - 600, "job-1", "RUNNING")
    save(storage, "run-1", 1024, now - 300)  # a periodic save well before the notices
    honoured = notice(journal, now - 200, "w-0")
    save(storage, "run-1", 2048, now - 195, trigger="notice")  # 5 s after it
    missed = notice(journal, now - 100, "w-1")  # the run died without a save
    pending = notice(journal, now - 10, "w-2")  # its grace runs until now + 20
    rows: list[Update] = []
    v = verifier(journal, storage, now, rows)
    verdicts = await v.check()
    assert {x.notice_id: x.honoured for x in verdicts} == {honoured.id: True, missed.id: False}
    assert pending.id not in {x.notice_id for x in verdicts}
    (said,) = [r for r in rows if isinstance(r, Event)]
    assert said.kind == EventKind.NOTICE_NOT_HONOURED and said.id is not None
    assert said.data["notice_id"] == missed.id and said.host == "w-1"
    assert "no complete checkpoint within its 30s grace" in said.message
    assert await v.check() == []  # judged: never again in this process
    journal.close()

    # a restarted console on the same journal: the pending notice's grace has ended since,
    # with no checkpoint; the one already said is not said again
    journal = Journal(path)
    rows = []
    later = verifier(journal, storage, now + 60, rows)
    verdicts = await later.check()
    # the honoured one is judged again (kept in memory only) and found honoured again
    assert [(x.notice_id, x.honoured) for x in verdicts] == [
        (honoured.id, True),
        (pending.id, False),
    ]
    assert [r.data["notice_id"] for r in rows if isinstance(r, Event)] == [pending.id]
    assert await later.check() == []
    said_rows = journal.query(kinds=[EventKind.NOTICE_NOT_HONOURED])
    assert sorted(r.data["notice_id"] for r in said_rows) == [missed.id, pending.id]
    journal.close()


# The chaos drill's sweep head notice (journal row 116 of its run, the sweep's job_state rows
# 110/111) and the notice lines its four trials logged: run, step, seconds after SIGTERM.
SWEEP = "phantom-sweep-20261201-230856-3303e4"
SWEEP_NOTICE_AT = 1796166562.1674407
SWEEP_TRIALS = [
    ("chaos-sweep-s1-06b23_00000", 24064, 0.749),
    ("chaos-sweep-s1-06b23_00001", 12294, 0.083),
    ("chaos-sweep-s1-06b23_00002", 17593, 0.110),
    ("chaos-sweep-s1-06b23_00003", 16421, 0.096),
]


@pytest.mark.parametrize("checkpointed", [True, False])
async def test_a_sweeps_trials_notice_checkpoints_honour_its_notice(
    tmp_path: Path, checkpointed: bool
) -> None:
    """A sweep's trials save under ``<sweep storage>/<sweep id>/_runs/<run>``, not at the top
    of the storage: their notice checkpoints honour the head's notice; trials that saved
    nothing in its grace leave it not honoured, as a job would."""
    storage = tmp_path / "bucket"
    runs = storage / "sweeps" / "chaos-sweep-s1" / "_runs"
    journal = Journal(tmp_path / "journal.sqlite")
    journal.record_event(
        Event(
            1796166537.87984,
            EventKind.JOB_STATE,
            "sweep",
            data={"job_id": SWEEP, "new_status": "PENDING"},
        )
    )
    journal.record_event(
        Event(
            1796166541.8837,
            EventKind.JOB_STATE,
            "sweep",
            data={"job_id": SWEEP, "new_status": "RUNNING"},
        )
    )
    row = journal.record_event(
        Event(
            1796166562.70479,
            EventKind.PREEMPTION_NOTICE,
            "phantom-pod-w0: preemption notice at 23:09:22 (127.0.0.10)",
            host="phantom-pod-w0",
            data={"tpu_state": "READY", "ip": "127.0.0.10", "notice_at": SWEEP_NOTICE_AT},
        )
    )
    for run, step, seconds in SWEEP_TRIALS:
        save(runs, run, step - 2048, SWEEP_NOTICE_AT - 20)  # their periodic saves, before it
        if checkpointed:
            save(runs, run, step, SWEEP_NOTICE_AT + seconds, trigger="notice")
    rows: list[Update] = []
    (verdict,) = await verifier(journal, storage, SWEEP_NOTICE_AT + 60, rows).check()
    assert verdict.notice_id == row.id and verdict.expected
    assert verdict.honoured == checkpointed
    if checkpointed:
        assert sorted((s.run, s.step) for s in verdict.matched) == [
            (run, step) for run, step, _ in SWEEP_TRIALS
        ]
        assert rows == []
    else:
        (said,) = rows
        assert isinstance(said, Event) and said.kind == EventKind.NOTICE_NOT_HONOURED
        assert said.data["notice_id"] == row.id
    journal.close()


async def test_a_notice_with_no_job_running_expects_nothing(tmp_path: Path) -> None:
    now = time.time()
    journal = Journal(tmp_path / "journal.sqlite")
    job_state(journal, now - 600, "job-1", "RUNNING")
    job_state(journal, now - 500, "job-1", "SUCCEEDED")
    notice(journal, now - 100)
    rows: list[Update] = []
    (verdict,) = await verifier(journal, tmp_path / "bucket", now, rows).check()
    assert verdict.honoured and not verdict.expected and rows == []
    journal.close()


async def test_a_notice_heard_live_is_judged_when_its_grace_ends(tmp_path: Path) -> None:
    """The bus path: a notice offered as it is journaled is judged once its grace (and the
    margin) has passed; here it passed already, so at once."""
    now = time.time()
    journal = Journal(tmp_path / "journal.sqlite")
    job_state(journal, now - 600, "job-1", "RUNNING")
    heard = notice(journal, now - GRACE - 10)
    rows: list[Update] = []
    v = verifier(journal, tmp_path / "bucket", now, rows)
    v.offer(heard)
    await until(lambda: bool(rows), 10, "the notice judged")
    await v.stop()
    (said,) = rows
    assert isinstance(said, Event) and said.data["notice_id"] == heard.id
    journal.close()


@pytest.mark.parametrize("algo", ["ppo", "dqn"])
async def test_the_real_engines_notice_checkpoint_honours_its_notice(
    noticed_runs: NoticedRuns, algo: str, tmp_path: Path
) -> None:
    """A real trainer: a notice it never got (the watcher heard it, the SIGTERM was lost) is
    not honoured; the next notice, delivered as SIGTERM, is: the engine's notice checkpoint
    lands in the storage within the grace.

    The trainer (PPO, DQN) is tests/support/noticed_runs.py's, SIGTERM at its first
    progress line (tests/engine/test_notice.py resumes it). The journal holds what the
    watcher wrote meanwhile: the job running, the lost notice, heard with its grace over
    before the next came (dated back by that much: the trainer would train all the while
    it was waited for), and the delivered one at the SIGTERM."""
    grace = 1.5
    noticed_run = noticed_runs[algo]
    assert noticed_run.returncode == EX_PREEMPTED, noticed_run.log[-3000:]
    journal = Journal(tmp_path / "journal.sqlite")
    lost_at = noticed_run.signalled_at - grace - SLACK_S - 0.1
    job_state(journal, lost_at - 1, "job-1", "RUNNING")
    lost = notice(journal, lost_at, "w-0")  # never reached the trainer
    delivered = notice(journal, noticed_run.signalled_at, "w-1")
    rows: list[Update] = []
    sink = EventSink(journal, rows.append)
    v = NoticeVerifier(
        journal, sink, str(noticed_run.storage), grace_s=grace, clock=lambda: time.time() + 60
    )
    verdicts = {x.notice_id: x for x in await v.check()}
    assert not verdicts[lost.id].honoured
    assert verdicts[delivered.id].honoured
    (ckpt,) = verdicts[delivered.id].matched
    assert (ckpt.run, ckpt.trigger) == (NOTICED_RUN, "notice")
    assert [r.data["notice_id"] for r in rows if isinstance(r, Event)] == [lost.id]
    journal.close()
