"""The journal: SQLite (WAL), versioned, thread-safe, crash-proof, and never a secret on disk."""

from __future__ import annotations

import os
import signal
import sqlite3
import subprocess
import sys
import textwrap
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from console.secrets import MASK
from console.services.model import (
    ActionResult,
    Event,
    HostResult,
    IncidentCause,
    IncidentOutcome,
)
from console.services.record.journal import (
    _MIGRATIONS,
    SCHEMA_VERSION,
    AsyncJournal,
    Journal,
    JournalError,
    default_journal_path,
)
from console.services.record.sink import EventSink
from tests.support import REPO
from tests.support.waiting import wait_until

ROOT = REPO


@pytest.fixture
def journal(tmp_path: Path) -> Iterator[Journal]:
    j = Journal(tmp_path / "journal.sqlite")
    yield j
    j.close()


def ev(at: float, kind: str = "state_change", message: str = "m", **kw: object) -> Event:
    return Event(at=at, kind=kind, message=message, **kw)  # type: ignore[arg-type]


def test_record_and_query_newest_last(journal: Journal) -> None:
    stored = [journal.record_event(ev(100.0 + i, message=f"event {i}")) for i in range(5)]
    assert [e.id for e in stored] == [1, 2, 3, 4, 5]
    assert [e.message for e in journal.query()] == [f"event {i}" for i in range(5)]
    assert [e.message for e in journal.query(limit=2)] == ["event 3", "event 4"]
    assert journal.query(limit=0) == []
    assert journal.query()[0] == stored[0]


def test_query_filters(journal: Journal) -> None:
    journal.record_event(ev(1.0, "preempted", "host-1 preempted", host="host-1"))
    journal.record_event(ev(2.0, "job_state", "job raysubmit_1 RUNNING -> FAILED"))
    journal.record_event(ev(3.0, "stalled", "run ppo stalled", data={"run_id": "abc_1"}))
    journal.record_event(ev(4.0, "preempted", "host-2 preempted 100%", host="host-2"))
    assert [e.at for e in journal.query(kinds=["preempted"])] == [1.0, 4.0]
    assert [e.at for e in journal.query(kinds=["preempted", "stalled"])] == [1.0, 3.0, 4.0]
    assert journal.query(kinds=[]) == []
    assert [e.at for e in journal.query(since=3.0)] == [3.0, 4.0]
    assert [e.at for e in journal.query(host="host-2")] == [4.0]
    assert [e.at for e in journal.query(text="FAILED")] == [2.0]
    assert [e.at for e in journal.query(text="failed")] == [2.0]  # case-insensitive
    assert [e.at for e in journal.query(text="abc_1")] == [3.0]  # data is searched too
    assert [e.at for e in journal.query(text="100%")] == [4.0]  # LIKE wildcards are literal
    assert journal.query(text="abc%1") == []
    assert [e.at for e in journal.query(kinds=["preempted"], since=2.0, host="host-2")] == [4.0]


def test_record_action_with_per_host_results(journal: Journal) -> None:
    per_host = {
        "host-0": HostResult("host-0", ok=True, exit_status=0, elapsed_s=1.5, stdout_tail="ok"),
        "host-1": HostResult("host-1", ok=False, error="timeout after 10s"),
    }
    e = journal.record_action("watchdog", "bootstrap", per_host, 2.25, False, at=50.0)
    assert e.kind == "action" and e.actor == "watchdog" and e.host == "host-1"
    assert e.message == "bootstrap failed in 2.2s (1/2 hosts ok)"
    (row,) = journal.query(kinds=["action"])
    assert row.data["action"] == "bootstrap" and row.data["ok"] is False
    assert row.data["duration_s"] == 2.25
    assert row.data["per_host"]["host-1"]["error"] == "timeout after 10s"
    assert row.data["per_host"]["host-0"]["exit_status"] == 0
    result = ActionResult("ray_up", ok=True, elapsed_s=3.0, message="head + 3 workers")
    r = journal.record_result(result, "user", at=60.0)
    assert (r.message, r.data["action"], r.actor) == ("head + 3 workers", "ray_up", "user")
    assert [e.data["action"] for e in journal.query(actions=["ray_up"])] == ["ray_up"]


def test_action_time_defaults_to_when_it_started(tmp_path: Path) -> None:
    j = Journal(tmp_path / "j.sqlite", clock=lambda: 1000.0)
    assert j.record_action("user", "teardown", {}, 4.0, True).at == 996.0
    j.close()


def test_schema_is_versioned_and_wal(journal: Journal, tmp_path: Path) -> None:
    assert journal.schema_version == SCHEMA_VERSION == 7
    db = sqlite3.connect(journal.path)
    assert db.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
    assert db.execute("PRAGMA user_version").fetchone()[0] == SCHEMA_VERSION
    db.close()
    newer = tmp_path / "newer.sqlite"
    db = sqlite3.connect(newer)
    db.execute("PRAGMA user_version = 99")
    db.close()
    with pytest.raises(JournalError, match=r"schema version 99 was written by a newer phantom"):
        Journal(newer)


def test_reopen_keeps_rows_and_garbage_file_is_a_clear_error(tmp_path: Path) -> None:
    path = tmp_path / "j.sqlite"
    with Journal(path) as j:
        j.record_event(ev(1.0, message="before restart"))
    with Journal(path) as j:
        assert [e.message for e in j.query()] == ["before restart"]
        assert j.record_event(ev(2.0)).id == 2
    bad = tmp_path / "bad.sqlite"
    bad.write_bytes(b"this is not a database, it is a text file" * 100)
    with pytest.raises(JournalError, match=r"bad\.sqlite: not a usable SQLite database.*mv "):
        Journal(bad)


def test_default_path_is_in_the_state_dir() -> None:
    assert (
        default_journal_path() == Path(os.environ["XDG_STATE_HOME"]) / "phantom" / "journal.sqlite"
    )


def test_secrets_never_reach_the_file(journal: Journal, monkeypatch: pytest.MonkeyPatch) -> None:
    key = "wandb-v1-" + "k3y" * 12
    monkeypatch.setenv("WANDB_API_KEY", key)
    stored = journal.record_event(
        ev(
            1.0,
            "action",
            f"submitted with WANDB_API_KEY={key} and token: abc123 (Bearer eyJhbGciOiJIUzI1NiJ9)",
            data={
                "runtime_env": {"env_vars": {"WANDB_API_KEY": key, "WANDB_PROJECT": "phantom"}},
                "stderr": f"curl -H 'Authorization: {key}' failed",
                "list": [key, {"password": "hunter22"}],
                "host_key": "SHA256:abcdefghijklmnop",
                "empty_token": "",
            },
        )
    )
    raw = journal.path.read_bytes() + Path(str(journal.path) + "-wal").read_bytes()
    assert key.encode() not in raw and b"hunter22" not in raw and b"abc123" not in raw
    assert b"eyJhbGciOiJIUzI1NiJ9" not in raw
    (row,) = journal.query()
    assert row == stored
    assert key not in row.message and "abc123" not in row.message
    assert row.data["runtime_env"]["env_vars"] == {
        "WANDB_API_KEY": MASK,
        "WANDB_PROJECT": "phantom",
    }
    assert row.data["stderr"] == f"curl -H 'Authorization: {MASK}' failed"
    assert row.data["list"] == [MASK, {"password": MASK}]
    assert row.data["host_key"] == "SHA256:abcdefghijklmnop"  # fingerprints are not secrets
    assert row.data["empty_token"] == ""


def test_thread_safe_writes_and_reads(journal: Journal) -> None:
    errors: list[BaseException] = []

    def writer(n: int) -> None:
        try:
            for i in range(150):
                journal.record_event(ev(float(i), "t", f"w{n}-{i}", host=f"host-{n}"))
                if i % 50 == 0:
                    journal.query(limit=20, host=f"host-{n}")
        except BaseException as exc:  # surfaced below
            errors.append(exc)

    threads = [threading.Thread(target=writer, args=(n,)) for n in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []
    rows = journal.query(limit=10_000)
    assert len(rows) == journal.count() == 1200
    assert len({r.id for r in rows}) == 1200
    assert [r.message for r in rows if r.host == "host-3"] == [f"w3-{i}" for i in range(150)]


WRITER = textwrap.dedent(
    """
    import sys
    from console.services.record.journal import Journal
    from console.services.model import Event, HostResult
    j = Journal(sys.argv[1])
    i = 0
    while True:
        if i % 3 == 0:
            j.record_action("watchdog", "bootstrap", {"h": HostResult("h", ok=True)}, 0.1, True,
                            data={"seq": i})
        else:
            j.record_event(Event(at=float(i), kind="tick", message=f"tick {i}", data={"seq": i}))
        i += 1
        if i == 200:
            print("200", flush=True)
    """
)


@pytest.mark.timeout(120)
def test_survives_kill_9_mid_write(tmp_path: Path) -> None:
    path = tmp_path / "crash.sqlite"
    proc = subprocess.Popen(
        [sys.executable, "-c", WRITER, str(path)],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert proc.stdout is not None
        assert proc.stdout.readline().strip() == "200"  # the loop is writing
        reader = Journal(path)
        # poll the live writer (WAL lets readers in)
        wait_until(lambda: reader.count() >= 1000, 60, "1000 rows read beside the writer", 0.01)
        reader.close()
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=30)
    assert proc.returncode == -signal.SIGKILL
    db = sqlite3.connect(path)
    assert db.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
    db.close()
    with Journal(path) as j:
        rows = j.query(limit=1_000_000)
        assert len(rows) >= 1000
        assert [r.id for r in rows] == list(range(1, len(rows) + 1))
        assert [r.data["seq"] for r in rows] == list(range(len(rows)))  # no torn or lost row
        assert all(r.kind == ("action" if r.data["seq"] % 3 == 0 else "tick") for r in rows)
        assert j.record_event(ev(1.0, message="after the crash")).id == len(rows) + 1


def _watchdog_rows(j: Journal) -> None:
    """What the watchdog writes around recoveries (kinds and data as in watchdog.py)."""
    j.record_event(ev(100.0, "preempted", "host-2 preempted", host="host-2"))
    j.record_event(
        ev(
            101.0,
            "recovery_started",
            "recovery started: host-2 lost",
            actor="watchdog",
            data={"trigger": "host-2 lost", "detect_s": 1.5},
        )
    )
    j.record_action("watchdog", "recovery.recreate", {}, 10.0, True, at=101.0)
    j.record_event(
        ev(
            160.0,
            "recovered",
            "cluster recovered in 59.5s",
            actor="watchdog",
            data={"mttr_s": 59.5, "detect_s": 1.5},
        )
    )
    j.record_event(
        ev(
            200.0,
            "recovery_started",
            "recovery started: requested by user",
            actor="user",
            data={"trigger": "requested by user"},
        )
    )
    j.record_event(
        ev(
            201.0,
            "recovered",
            "cluster healthy: nothing to recover",
            actor="user",
            data={"mttr_s": None, "detect_s": None, "outcome": "nothing to recover"},
        )
    )
    j.record_event(
        ev(
            300.0,
            "recovery_started",
            "recovery started: head lost",
            actor="watchdog",
            data={"trigger": "head lost", "detect_s": 4.0},
        )
    )
    j.record_event(
        ev(
            420.0,
            "recovery_failed",
            "recovery failed at bootstrap: ...",
            actor="watchdog",
            data={"step": "bootstrap"},
        )
    )
    j.record_event(
        ev(
            500.0,
            "recovery_started",
            "recovery started: head lost",
            actor="watchdog",
            data={"trigger": "head lost", "detect_s": 2.0},
        )
    )
    j.record_event(
        ev(
            620.0,
            "recovered",
            "cluster recovered in 121.0s",
            actor="watchdog",
            data={"mttr_s": 121.0, "detect_s": 2.0},
        )
    )
    j.record_event(
        ev(
            700.0,
            "recovery_started",
            "recovery started: host-1 lost",
            actor="watchdog",
            data={"trigger": "host-1 lost", "detect_s": 3.0},
        )
    )


def test_recoveries_and_mttr(journal: Journal) -> None:
    _watchdog_rows(journal)
    recs = journal.recoveries()
    assert [(r.trigger, r.ok, r.mttr_s) for r in recs] == [
        ("host-2 lost", True, 59.5),
        ("head lost", False, None),
        ("head lost", True, 121.0),
        ("host-1 lost", None, None),  # still running (or the console died during it)
    ]
    assert recs[0].detect_s == 1.5 and recs[0].duration_s == 59.0
    assert recs[1].failed_step == "bootstrap" and recs[3].ended_at is None
    assert journal.recoveries(limit=1) == recs[-1:]
    s = journal.mttr_summary()
    assert (s.recoveries, s.succeeded, s.failed) == (4, 2, 1)
    assert s.mean_mttr_s == pytest.approx(90.25) and s.max_mttr_s == 121.0
    assert s.mean_detect_s == pytest.approx((1.5 + 4.0 + 2.0 + 3.0) / 4)


async def test_reads_for_the_event_loop(journal: Journal) -> None:
    sink = EventSink(journal, lambda u: None)
    await sink.emit(ev(1.0, "preempted", "host-0 preempted", host="host-0"))
    await sink.record(ActionResult("recovery.bootstrap", ok=True, elapsed_s=2.0), "watchdog")
    stored = await sink.emit(ev(3.0, "recovered", "cluster recovered in 2.0s"))
    assert stored.id == 3
    reads = AsyncJournal(journal)
    rows = await reads.query(kinds=["action", "preempted"])
    assert [r.kind for r in rows] == ["preempted", "action"]
    assert rows[1].actor == "watchdog" and rows[1].data["action"] == "recovery.bootstrap"
    assert await reads.recoveries() == []
    sink.close()


def _journal_of_version(path: Path, version: int, rows: list[tuple[object, ...]]) -> None:
    """A journal as a phantom of schema ``version`` left it, holding ``rows``."""
    db = sqlite3.connect(path)
    for v in range(1, version + 1):
        for statement in _MIGRATIONS[v].split(";"):
            if statement.strip():
                db.execute(statement)
    db.execute(f"PRAGMA user_version = {version}")
    db.executemany(
        "INSERT INTO events (at, kind, actor, message, data) VALUES (?, ?, ?, ?, ?)", rows
    )
    db.commit()
    db.close()


def test_a_journal_written_before_triggers_were_fields_still_reads(tmp_path: Path) -> None:
    """A version-4 journal (an older phantom's): its recovery rows said their trigger only in
    the message, its incident summaries their end only in words. Opened now, it is migrated
    once: the trigger, the outcome, the failed step and the cause are fields, and nothing
    reads the words again."""
    path = tmp_path / "old.sqlite"
    rows = [
        (100.0, "preempted", "watchdog", "host-2 preempted", "{}"),
        (101.0, "recovery_started", "watchdog", "recovery started: host-2 lost", '{"detect_s": 1.5}'),
        (160.0, "recovered", "watchdog", "cluster recovered in 59.5s", '{"mttr_s": 59.5}'),
        (300.0, "recovery_started", "user", "recovery started: requested by user", "{}"),
        (420.0, "recovery_failed", "user", "recovery failed at bootstrap: ...", '{"step": "bootstrap"}'),
        (100.0, "incident", "watchdog", "preempted (host-2): recovered in 59.5s",
         '{"incident": "inc-1", "trigger_kind": "preempted", "result": "recovered", "mttr_s": 59.5}'),
        (300.0, "incident", "watchdog", "recovery started: failed at bootstrap",
         '{"incident": "inc-2", "trigger_kind": "recovery_started", "result": "failed at bootstrap"}'),
    ]  # fmt: skip
    _journal_of_version(path, 4, rows)

    with Journal(path) as j:
        assert j.schema_version == SCHEMA_VERSION
        assert [(r.trigger, r.ok, r.failed_step) for r in j.recoveries()] == [
            ("host-2 lost", True, ""),
            ("requested by user", False, "bootstrap"),
        ]
        summaries = [e.data for e in j.query(kinds=["incident"])]
        assert [(d["outcome"], d["failed_step"], d["cause"]) for d in summaries] == [
            (IncidentOutcome.RECOVERED, "", IncidentCause.PREEMPTION),
            (IncidentOutcome.FAILED, "bootstrap", IncidentCause.REQUESTED),
        ]
        assert summaries[0]["result"] == "recovered"  # the words stay, for people
        assert [e.message for e in j.query(kinds=["recovery_started"])] == [
            "recovery started: host-2 lost",
            "recovery started: requested by user",
        ]


def test_a_journal_written_before_outcomes_were_fields_still_reads(tmp_path: Path) -> None:
    """A version-5 journal: its recovery end rows said how the recovery ended only by an MTTR
    or its absence. Opened now, each gets its ``outcome`` once, as the runner now writes it,
    and the recoveries and incidents read that field."""
    path = tmp_path / "v5.sqlite"
    rows = [
        (101.0, "recovery_started", "watchdog", "recovery started: host-2 lost", '{"trigger": "host-2 lost"}'),
        (160.0, "recovered", "watchdog", "cluster recovered in 59.5s", '{"mttr_s": 59.5}'),
        (200.0, "recovery_started", "user", "recovery started: requested by user", '{"trigger": "requested by user"}'),
        (201.0, "recovered", "user", "cluster healthy: nothing to recover", '{"mttr_s": null}'),
        (300.0, "recovery_started", "user", "recovery started: head lost", '{"trigger": "head lost"}'),
        (420.0, "recovery_failed", "user", "recovery failed at bootstrap: ...", '{"step": "bootstrap"}'),
    ]  # fmt: skip
    _journal_of_version(path, 5, rows)

    with Journal(path) as j:
        assert j.schema_version == SCHEMA_VERSION
        ends = [e.data["outcome"] for e in j.query(kinds=["recovered", "recovery_failed"])]
        assert ends == [
            IncidentOutcome.RECOVERED,
            IncidentOutcome.NOTHING_TO_RECOVER,
            IncidentOutcome.FAILED,
        ]
        assert [(r.trigger, r.ok) for r in j.recoveries()] == [
            ("host-2 lost", True),
            ("head lost", False),
        ]


# -- rows stay bounded (issue 45) -----------------------------------------------------------------


def _ray_stop_output(size: int) -> str:
    """What `ray stop` prints on a host with many workers, coloured, about ``size`` chars."""
    lines, n = [], 0
    while sum(map(len, lines)) < size:
        n += 1
        lines.append(f"\x1b[32mStopped\x1b[0m raylet worker pid=\x1b[1m{100000 + n}\x1b[22m\n")
    lines.append("\x1b[1m\x1b[32mStopped all 4096 Ray processes.\x1b[39m\x1b[22m\n")
    return "".join(lines)


def test_a_megabyte_of_ray_stop_output_keeps_the_row_small_and_the_text_aside(
    tmp_path: Path,
) -> None:
    """`recovery.orphans` kept each host's whole `ray stop` stdout, ANSI escapes and all: a
    90 KB row. Now each host keeps a short plain tail; the full text is in a side file the
    row names; the row stays well under 16 KB."""
    journal = Journal(tmp_path / "journal.sqlite")
    out = _ray_stop_output(1_000_000)
    hosts = [f"pod-w{i}" for i in range(1, 4)]
    ev = journal.record_result(
        ActionResult(
            action="recovery.orphans",
            ok=True,
            elapsed_s=3.0,
            per_host={
                h: HostResult(host=h, ok=True, exit_status=0, stdout_tail=out) for h in hosts
            },
            data={"state": "ok"},
        ),
        "watchdog",
    )
    (raw,) = journal.read("SELECT data FROM events WHERE id = ?", (ev.id,))
    assert len(raw[0]) < 16_000, len(raw[0])
    assert "\x1b" not in raw[0] and "\\u001b" not in raw[0]
    (stored,) = journal.query(limit=1)
    for h in hosts:
        one = stored.data["per_host"][h]
        assert one["stdout_tail"].endswith("Stopped all 4096 Ray processes.\n")
        assert len(one["stdout_tail"]) < 2_200
        side = Path(one["stdout_file"])
        assert side.parent == tmp_path / "journal.sqlite.output"
        text = side.read_text(encoding="utf-8")
        assert "\x1b" not in text and text.count("Stopped raylet worker") == out.count("raylet")
    assert ev.data["per_host"] == stored.data["per_host"]  # what is published is the row


def test_no_string_in_a_row_grows_without_bound() -> None:
    journal = Journal(":memory:")
    ev = journal.record_event(
        Event(at=1.0, kind="watchdog", message="m" * 100_000, data={"why": ["x" * 50_000]})
    )
    (raw,) = journal.read("SELECT message, data FROM events WHERE id = ?", (ev.id,))
    assert len(raw[0]) < 5_000 and len(raw[1]) < 5_000
    assert raw[0].endswith("m" * 100) and "characters cut" in raw[0]


def test_what_an_unfinished_recovery_owes_is_its_newest_row_s() -> None:
    """The start says what it owed then; a later DETECT (a round later, after a resubmission)
    says what it owes now: the process that resumes it reads the newest."""
    journal = Journal(":memory:")
    journal.record_event(
        Event(at=1.0, kind="recovery_started", message="recovery started: x", data={"owed": {}})
    )
    journal.record_event(
        Event(
            at=1.5, kind="recovery_started", message="recovery started: y", data={"owed": {"a": ""}}
        )
    )
    journal.record_result(
        ActionResult("recovery.detect", True, 0.1, data={"owed": {"b": "sweep-1"}}), "watchdog"
    )
    journal.record_event(Event(at=3.0, kind="watchdog", message="auto recovery on", data={}))
    (last,) = journal.recoveries(limit=1)
    assert last.ok is None and journal.owed(last) == {"b": "sweep-1"}
    first = journal.recoveries()[0]
    assert first.ended_at is None


def test_each_row_names_its_cluster_and_older_rows_read_as_none(tmp_path: Path) -> None:
    """A fleet's journal stamps its cluster's name on every row it writes (a row that names
    one keeps it); a version-6 journal's rows read back naming none."""
    path = tmp_path / "v6.sqlite"
    _journal_of_version(path, 6, [(100.0, "preempted", "watchdog", "host-2 preempted", "{}")])
    with Journal(path, cluster="pod-a") as j:
        assert j.schema_version == SCHEMA_VERSION
        mine = j.record_event(Event(at=101.0, kind="preempted", message="host-1 preempted"))
        other = j.record_event(Event(at=102.0, kind="note", message="x", cluster="pod-b"))
        assert (mine.cluster, other.cluster) == ("pod-a", "pod-b")
        assert [e.cluster for e in j.query()] == ["", "pod-a", "pod-b"]
        assert [e.cluster for e in j.after(1)] == ["pod-a", "pod-b"]


def test_what_an_ended_recovery_owed_is_its_own_rows_not_a_later_recoverys() -> None:
    """The watch drill reads what each recovery owed after the fact: an ended recovery's rows
    stop at its end (it read the next recovery's DETECT before)."""
    journal = Journal(":memory:")
    journal.record_event(
        Event(at=1.0, kind="recovery_started", message="recovery started: x", data={"owed": {}})
    )
    journal.record_result(
        ActionResult("recovery.detect", True, 0.1, data={"owed": {"a": "sweep-1"}}), "watchdog"
    )
    journal.record_event(Event(at=2.0, kind="recovered", message="cluster recovered", data={}))
    journal.record_event(
        Event(
            at=3.0, kind="recovery_started", message="recovery started: y", data={"owed": {"b": ""}}
        )
    )
    first, second = journal.recoveries()
    assert first.ok and journal.owed(first) == {"a": "sweep-1"}
    assert second.ok is None and journal.owed(second) == {"b": ""}
