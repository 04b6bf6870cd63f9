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

Over a fleet of several clusters: each cluster's ledger from its own journal, priced with its
own slice of the config, a row each and the fleet's total (``services.ledger.fleet``; a
cluster never run is a row of zeros); ``--journal``, ``--logs`` and ``--runs`` read one
cluster's files, so over several they ask for ``--cluster NAME``.
"""

from __future__ import annotations

import argparse
import datetime as dt
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, TextIO

from console import exit_codes
from console.config import Config
from console.config.validate import write_atomic

if TYPE_CHECKING:
    from console.services.ledger.book import Book
    from console.services.model import Event

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
    config: Config | Sequence[Config],
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
    """The ledger of ``config``'s cluster, or of several clusters (a fleet's, each read from
    its own journal and priced with its own slice): a row per cluster and their total."""
    configs = [config] if isinstance(config, Config) else list(config)
    out = out or sys.stdout
    err = err or sys.stderr
    problem = _usage_problem(configs, journal_path, runs_dir, logs_path)
    if problem:
        err.write(f"phantom report: {problem}\n")
        return exit_codes.USAGE
    journals = _journals(configs, journal_path)
    missing = {name: why for name, path in journals.items() if (why := _not_a_journal(path))}
    if len(missing) == len(journals):  # nothing to read at all (one cluster: its journal)
        for name, why in missing.items():
            where = (
                f"--journal {journals[name]}" if journal_path else f"no journal at {journals[name]}"
            )
            who = f"cluster {name!r}: " if len(journals) > 1 else ""
            err.write(
                f"phantom report: {who}{where}: {why}; run phantom on the cluster first, or "
                "pass --journal PATH (a copied journal.sqlite)\n"
            )
        return exit_codes.USAGE
    target: Path | None = None
    if output:
        from console.config.validate import Invalid, check_output, kept_paths

        keep = [k for c in configs for k in kept_paths(c, journal=journals[c.name])]
        try:
            target = check_output(
                "phantom report: --output",
                output,
                keep=keep,
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
    books = {}
    for c in configs:
        try:
            books[c.name] = _book(
                c,
                None if c.name in missing else journals[c.name],
                now=now,
                since=since,
                runs_dir=runs_dir,
                logs_path=logs_path,
            )
        except JournalUnusable as exc:
            who = (
                "--journal: "
                if journal_path
                else (f"cluster {c.name!r}: " if len(configs) > 1 else "")
            )
            err.write(f"phantom report: {who}{exc}\n")
            return exit_codes.USAGE
    if len(configs) == 1:
        from console.services.ledger.render import render

        text = render(books[configs[0].name], fmt)
    else:
        from console.services.ledger.fleet import FleetBook
        from console.services.ledger.render import render_fleet

        notes = tuple(
            f"{name}: {why} ({journals[name]}): no time recorded" for name, why in missing.items()
        )
        text = render_fleet(FleetBook(books, notes), fmt)
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


class JournalUnusable(Exception):
    """A journal file that cannot be read (``JournalError``'s words)."""


def _usage_problem(
    configs: Sequence[Config],
    journal_path: str | None,
    runs_dir: str | None,
    logs_path: str | None,
) -> str:
    """What is wrong with the flags before anything is read ("" when nothing is)."""
    if runs_dir is not None and not Path(runs_dir).expanduser().is_dir():
        return (
            f"--runs {runs_dir}: not a directory; give the WANDB_DIR the jobs logged to (their "
            "offline run files), or leave --runs out"
        )
    if logs_path is not None and not Path(logs_path).expanduser().exists():
        return (
            f"--logs {logs_path}: no such file or directory; give the trainers' log files (a "
            "file, or a directory read whole), or leave --logs out"
        )
    if len(configs) > 1:
        # One file, or one cluster's trainers' files: which cluster they belong to is the
        # user's to say (steps are matched to jobs by time, and clusters run at once).
        flags = [f for f, v in (("--journal", journal_path), ("--runs", runs_dir),
                                ("--logs", logs_path)) if v is not None]  # fmt: skip
        if flags:
            names = ", ".join(c.name for c in configs)
            return (
                f"{' and '.join(flags)} read one cluster's files, and the config has "
                f"{len(configs)} clusters ({names}): pass --cluster NAME too (e.g. "
                f"`phantom --cluster {configs[0].name} report ...`)"
            )
    return ""


def _journals(configs: Sequence[Config], journal_path: str | None) -> dict[str, Path]:
    """Each cluster's journal file: ``--journal``, else its state dir's (a fleet's cluster
    keeps its own; a [cluster] config: the state dir's, as always)."""
    from console.config import cluster_state_dir

    if journal_path:
        return {configs[0].name: Path(journal_path)}
    return {c.name: cluster_state_dir(c) / "journal.sqlite" for c in configs}


def _not_a_journal(path: Path) -> str:
    if path.is_file():
        return ""
    return "is a directory" if path.is_dir() else "nothing recorded there yet"


def _book(
    config: Config,
    path: Path | None,
    *,
    now: float,
    since: float | None,
    runs_dir: str | None,
    logs_path: str | None,
) -> Book:
    """One cluster's ledger from its journal file (None: it has none yet, an empty ledger),
    priced with its own slice of the config."""
    from console.services.ledger.book import ROWS, book
    from console.services.record.journal import Journal, JournalError
    from console.services.record.outcomes import JobOutcomes
    from console.wiring.settings import ledger_settings

    rows: list[Event] = []
    outcomes: dict[str, float] = {}
    if path is not None:
        try:
            journal = Journal(path)
        except JournalError as exc:
            raise JournalUnusable(str(exc)) from None
        try:
            rows = journal.query(limit=ROWS)
            # when each job really ended (record.outcomes), also one no console watched end
            outcomes = JobOutcomes(journal).ended()
        finally:
            journal.close()
    progress = None
    if runs_dir is not None or logs_path is not None:
        from console.services.ledger.goodput import attempts
        from console.services.ledger.steps import attribute, prefer_lines, read_logs, read_runs

        found = prefer_lines(
            read_logs(logs_path) if logs_path is not None else [],
            read_runs(runs_dir) if runs_dir is not None else [],
        )
        progress = attribute(found, attempts(rows))
    return book(
        rows, ledger_settings(config), now=now, since=since, outcomes=outcomes, progress=progress
    )


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
