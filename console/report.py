"""`phantom report [--since DATE] --format md|html|json`: the ledger as a document.

Read from the journal file alone (no cluster needed: a post-mortem is often written after
the pod is gone), over ``--since`` to now, and printed to stdout or written to ``--output``;
with ``--logs PATH`` the trainers' own step lines (their job logs saved to files, or Ray's log
directory) add the engine's steps (restart warm-up, redone work), as do a GKE run's TensorBoard
event files found there (Tunix's, under its output directory), and with ``--runs DIR`` the
jobs' W&B run files do, for runs the lines do not cover (a SIGKILL leaves a run file short,
so redone work read from it alone comes out low).
The HTML is one self-contained page (inline SVG, no network). Exit 0 with a report; 2 for
bad input (a date, a format, a journal that is not there), named with its fix.
"""

from __future__ import annotations

import argparse
import datetime as dt
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import TextIO

from console import exit_codes
from console.config import Config
from console.config.validate import write_atomic

FORMATS = ("md", "html", "json")


def parse_since(text: str) -> float:
    """``2026-12-01``, ``2026-12-01T08:30`` or with an offset (``...+02:00``, ``...Z``) ->
    epoch seconds; a date or time without an offset is UTC."""
    try:
        when = dt.datetime.fromisoformat(text.strip().replace("Z", "+00:00"))
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"{text!r}: a date such as 2026-12-01 or 2026-12-01T08:30 (UTC unless it carries "
            "an offset such as +02:00)"
        ) from None
    if when.tzinfo is None:
        when = when.replace(tzinfo=dt.UTC)
    return when.timestamp()


def report_main(
    config: Config,
    *,
    fmt: str,
    since: float | None = None,
    journal_path: str | None = None,
    output: str | None = None,
    runs_dir: str | None = None,
    logs_path: str | None = None,
    out: TextIO | None = None,
    err: TextIO | None = None,
    clock: Callable[[], float] = time.time,
) -> int:
    from console.config import cluster_state_dir
    from console.services.ledger.book import ROWS, book
    from console.services.ledger.render import render
    from console.services.record.journal import Journal, JournalError
    from console.wiring.settings import ledger_settings

    out = out or sys.stdout
    err = err or sys.stderr
    # A fleet's cluster keeps its own journal (a [cluster] config: the state dir's, as always).
    path = Path(journal_path) if journal_path else cluster_state_dir(config) / "journal.sqlite"
    named = f"--journal {path}" if journal_path else f"no journal at {path}"
    if runs_dir is not None and not Path(runs_dir).expanduser().is_dir():
        err.write(
            f"phantom report: --runs {runs_dir}: not a directory; give the WANDB_DIR the jobs "
            "logged to (their offline run files), or leave --runs out\n"
        )
        return exit_codes.USAGE
    if logs_path is not None and not Path(logs_path).expanduser().exists():
        err.write(
            f"phantom report: --logs {logs_path}: no such file or directory; give the trainers' "
            "log files (a file, or a directory read whole), or leave --logs out\n"
        )
        return exit_codes.USAGE
    if not path.is_file():
        what = "is a directory" if path.is_dir() else "nothing recorded there yet"
        err.write(
            f"phantom report: {named}: {what}; run phantom on the cluster first, or pass "
            "--journal PATH (a copied journal.sqlite)\n"
        )
        return exit_codes.USAGE
    target: Path | None = None
    if output:
        from console.config.validate import Invalid, check_output, kept_paths

        try:
            target = check_output(
                "phantom report: --output",
                output,
                keep=kept_paths(config, journal=path),
                may_replace=is_report,
                replaced_what="a report (phantom report writes only over its own reports)",
            )
        except Invalid as exc:
            err.write(f"{exc}\n")
            return exit_codes.USAGE
    now = clock()
    if since is not None and since >= now:
        err.write(
            f"phantom report: --since is in the future ({_utc(since)}); give an earlier date\n"
        )
        return exit_codes.USAGE
    try:
        journal = Journal(path)
    except JournalError as exc:
        err.write(f"phantom report: {'--journal: ' if journal_path else ''}{exc}\n")
        return exit_codes.USAGE
    try:
        rows = journal.query(limit=ROWS)
        # when each job really ended (record.outcomes), also one no console watched end
        ended = journal.read("SELECT job_id, COALESCE(ended_at, recorded_at) FROM job_outcomes")
    finally:
        journal.close()
    outcomes = {str(job): float(at) for job, at in ended if at is not None}
    progress = None
    if runs_dir is not None or logs_path is not None:
        from console.services.ledger.goodput import attempts
        from console.services.ledger.steps import attribute, prefer_lines, read_logs, read_runs

        found = prefer_lines(
            read_logs(logs_path) if logs_path is not None else [],
            read_runs(runs_dir) if runs_dir is not None else [],
        )
        progress = attribute(found, attempts(rows))
    text = render(
        book(
            rows,
            ledger_settings(config),
            now=now,
            since=since,
            outcomes=outcomes,
            progress=progress,
        ),
        fmt,
    )
    if target is not None:
        try:
            write_atomic(target, text)
        except OSError as exc:
            err.write(
                f"phantom report: cannot write {output}: {exc.strerror or exc}; pick a "
                "writable path for --output\n"
            )
            return exit_codes.USAGE
        out.write(f"{output}\n")
    else:
        out.write(text)
    return exit_codes.OK


def is_report(path: Path) -> bool:
    """Whether ``path`` holds a report this command wrote (md, html or json), so that
    writing a fresh one over it loses nothing."""
    from console.config.validate import head

    text = head(path, 1 << 16)
    first = text.lstrip()[:200]
    if first.startswith("# ") or first.lower().startswith("<!doctype html>"):
        return "preemption ledger" in text
    return first.startswith("{") and '"headline"' in text and '"advice"' in text


def _utc(at: float) -> str:
    return time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime(at))
