"""`phantom report`: the ledger from the journal file alone, as md, json or html; bad flags
exit 2 naming the fix, and the numbers are the ones `status --json` gives."""

from __future__ import annotations

import asyncio
import io
import json
import os
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import pytest

from console import exit_codes
from console.cli import main
from console.config import Config
from console.report import report_main
from console.services.ledger.book import book
from console.services.model import JobInfo, JobStatus
from console.services.record.journal import Journal
from console.services.record.outcomes import JobOutcomes
from console.wiring.settings import ledger_settings
from tests.support.incident_rows import replay
from tests.support.ledger_rows import drill

START = 1_760_000_000.0
NOW = START + 9000.0


def journal_file(tmp_path: Path) -> tuple[Path, list]:
    path = tmp_path / "journal.sqlite"
    journal = Journal(path)
    asyncio.run(replay(journal, drill(start=START, scale=20, earlier_job=True)))
    rows = journal.query(limit=100_000)
    journal.close()
    return path, rows


def run(path: Path, fmt: str, **kw: object) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    code = report_main(
        Config(), fmt=fmt, journal_path=str(path), out=out, err=err, clock=lambda: NOW, **kw
    )
    return code, out.getvalue(), err.getvalue()


def test_json_is_the_ledger_status_shows(tmp_path: Path) -> None:
    path, rows = journal_file(tmp_path)
    code, out, _ = run(path, "json")
    assert code == exit_codes.OK
    report = json.loads(out)
    assert report == json.loads(
        json.dumps(book(rows, ledger_settings(Config()), now=NOW).to_json())
    )
    assert report["productive_s"] + sum(report["badput_s"].values()) == pytest.approx(
        report["wall_s"], abs=0.01
    )


def test_the_report_ends_a_job_when_the_cluster_said_it_ended(tmp_path: Path) -> None:
    """B's end as ``record.outcomes`` wrote it (the cluster's end time, 100 s before the
    row the console journaled) is where the report ends it."""
    path, _ = journal_file(tmp_path)
    journal = Journal(path)
    ended = START + 20 * 400 - 100
    JobOutcomes(journal).note([JobInfo("B", JobStatus.SUCCEEDED, end_time=ended)])
    journal.close()
    code, out, _ = run(path, "json")
    assert code == exit_codes.OK
    (chain,) = [j for j in json.loads(out)["jobs"] if j["name"] == "A"]
    assert chain["end"] == ended


def test_markdown_and_since(tmp_path: Path) -> None:
    path, _ = journal_file(tmp_path)
    code, out, _ = run(path, "md")
    assert code == exit_codes.OK
    assert out.startswith("# Phantom preemption ledger\n")
    assert "| capacity | 10m00s |" in out and "| A → B | job |" in out
    assert "spot saved $" in out
    code, out, _ = run(path, "json", since=START + 4000)
    assert code == exit_codes.OK
    assert json.loads(out)["start"] == START + 4000
    code, out, _ = run(path, "json", since=START - 10**8)  # before the journal: from its start
    assert json.loads(out)["start"] == START - 1200


def test_html_is_self_contained(tmp_path: Path) -> None:
    path, _ = journal_file(tmp_path)
    target = tmp_path / "r.html"
    code, out, _ = run(path, "html", output=str(target))
    assert (code, out) == (exit_codes.OK, f"{target}\n")
    page = target.read_text()
    assert '<svg id="timeline"' in page and '<svg id="badput"' in page
    assert "<script" not in page and "src=" not in page and "@import" not in page
    assert "default-src 'none'" in page


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["report"], "the following arguments are required: --format"),
        (["report", "--format", "pdf"], "invalid choice: 'pdf' (choose from 'md', 'html', 'json')"),
        (["report", "--format", "md", "--since", "last week"], "'last week': a date such as"),
    ],
)
def test_bad_flags_exit_2_with_the_fix(
    argv: list[str], message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as done:
        main(argv)
    assert done.value.code == exit_codes.USAGE
    err = capsys.readouterr().err
    assert message in err and "Traceback" not in err


def test_missing_journal_and_future_since_exit_2(tmp_path: Path) -> None:
    code, out, err = run(tmp_path / "none.sqlite", "md")
    assert (code, out) == (exit_codes.USAGE, "")
    assert "--journal" in err and "nothing recorded there yet" in err
    path, _ = journal_file(tmp_path)
    code, _, err = run(path, "md", since=NOW + 60)
    assert code == exit_codes.USAGE and "in the future" in err
    code, _, err = run(path, "md", output=str(tmp_path / "no" / "such" / "dir.html"))
    assert code == exit_codes.USAGE and "pick a writable path for --output" in err


# -- nothing saved is overwritten (issue 36, item 1) -------------------------------------------


def _phantom_report(tmp_path: Path, *args: str) -> subprocess.CompletedProcess[str]:
    """`phantom report ...` as a user runs it, with its state dir in ``tmp_path``."""
    env = {
        **os.environ,
        "XDG_STATE_HOME": str(tmp_path / "state"),
        "XDG_CONFIG_HOME": str(tmp_path / "config"),
        "PHANTOM_NO_CONFIG_DISCOVERY": "1",
    }
    return subprocess.run(
        [sys.executable, "-m", "console", "report", "--format", "md", *args],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )


def _rows(path: Path) -> int:
    journal = Journal(path)
    try:
        return len(journal.query(limit=100_000))
    finally:
        journal.close()


def test_report_output_onto_the_journal_is_refused_and_the_journal_kept(tmp_path: Path) -> None:
    """The field's data loss: `report -o <the journal>` wrote the report over the SQLite
    journal (300 rows gone). Now exit 2, the journal named, every row still there: given as
    --journal, as the default journal, and through a symlink."""
    state = tmp_path / "state" / "phantom"
    state.mkdir(parents=True)
    path, rows = journal_file(state)
    assert len(rows) > 20
    before = path.read_bytes()
    (tmp_path / "link.md").symlink_to(path)
    for args in (
        ("--journal", str(path), "-o", str(path)),
        ("-o", str(path)),  # the default journal, in the state dir
        ("-o", str(tmp_path / "link.md")),
    ):
        proc = _phantom_report(tmp_path, *args)
        assert proc.returncode == exit_codes.USAGE, proc.stdout + proc.stderr
        assert "journal" in proc.stderr and "Traceback" not in proc.stderr
        assert path.read_bytes() == before
        assert _rows(path) == len(rows)


def test_report_output_never_replaces_a_file_that_is_not_a_report(tmp_path: Path) -> None:
    path, _ = journal_file(tmp_path)
    notes = tmp_path / "notes.md"
    notes.write_text("my notes\n")
    code, _, err = run(path, "md", output=str(notes))
    assert code == exit_codes.USAGE and "is not a report" in err
    assert notes.read_text() == "my notes\n"
    inside = tmp_path / "state" / "phantom" / "pod"
    inside.mkdir(parents=True)
    cfg = Config(cluster=replace(Config().cluster, run_dir=str(inside)))
    err_io = io.StringIO()
    code = report_main(
        cfg, fmt="md", journal_path=str(path), output=str(inside / "r.md"), err=err_io,
        out=io.StringIO(), clock=lambda: NOW,
    )  # fmt: skip
    assert code == exit_codes.USAGE and "pod emulator's run dir" in err_io.getvalue()
    assert not (inside / "r.md").exists()


def test_report_output_replaces_its_own_report_whole(tmp_path: Path) -> None:
    """A report may be written again over an earlier one (md, html, json), through a temp
    file renamed into place: no temp file is left beside it."""
    path, _ = journal_file(tmp_path)
    for fmt in ("md", "html", "json"):
        target = tmp_path / f"r.{fmt}"
        for _ in range(2):
            code, out, err = run(path, fmt, output=str(target))
            assert (code, out) == (exit_codes.OK, f"{target}\n"), err
    assert sorted(p.name for p in tmp_path.iterdir()) == [
        "journal.sqlite", "r.html", "r.json", "r.md",
    ]  # fmt: skip


def test_a_fleets_cluster_reports_from_its_own_journal(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`phantom --cluster NAME report` reads that cluster's journal (its state dir's), not
    another cluster's nor the state dir's own."""
    from console.config.fleet import parse_fleet

    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "xdg"))
    _, pod_b = parse_fleet({"clusters": [{"name": "pod-a"}, {"name": "pod-b"}]}).members
    home = Path(pod_b.state_dir)
    home.mkdir(parents=True)
    path, rows = journal_file(home)
    out, err = io.StringIO(), io.StringIO()
    code = report_main(pod_b, fmt="json", out=out, err=err, clock=lambda: NOW)
    assert code == exit_codes.OK, err.getvalue()
    assert path == tmp_path / "xdg" / "phantom" / "fleet" / "pod-b" / "journal.sqlite"
    assert json.loads(out.getvalue()) == json.loads(
        json.dumps(book(rows, ledger_settings(pod_b), now=NOW).to_json())
    )
