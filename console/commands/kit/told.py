"""How a command's outcome is told: errors as sentences, job logs as plain text, durations.

A script's stdout and an agent's tool results are read by programs and people: an error is
the sentence the service wrote ("no pod emulator is running for ..."), not a Python class name before it, and
a job's log lines are the text the job printed, without the terminal's colour codes, each
as often as it was printed. Checked on real Ray jobs (tests/services/backends/tpu_vm/
test_jobs.py, and the driver logs of distributed and Tune jobs on the pod emulator): a
worker's line reaches the driver's log once (the engine's drivers turn Ray's log dedup off),
so nothing is dropped here; lines that repeat are the job's own (a Tune status table's
borders, a reused trial actor's W&B banner for each trial, a loop's "tick").
"""

from __future__ import annotations

import re
from collections.abc import Iterable

from console.services.model import ActionResult

# CSI sequences (colours, cursor moves), OSC sequences (titles, links) and lone ESC codes.
_ANSI = re.compile(r"\x1b\[[0-?]*[ -/]*[@-~]|\x1b\][^\x07\x1b]*(?:\x07|\x1b\\)|\x1b[@-Z\\-_]")
# Errors whose message is written for the user; any other type is a bug, named as such.
_TOLD = (ValueError, LookupError, OSError, RuntimeError, TimeoutError, ConnectionError)


def error_sentence(exc: BaseException) -> str:
    """What went wrong, as a sentence: the message of an error the services raise for
    users; an unexpected error names its type so a bug report can find it."""
    text = str(exc).strip()
    if isinstance(exc, KeyError | IndexError) or not isinstance(exc, _TOLD) or not text:
        return f"unexpected {type(exc).__name__}" + (f": {text}" if text else "")
    return text


def plain(line: str) -> str:
    """``line`` without ANSI escape sequences (and without a trailing carriage return)."""
    return _ANSI.sub("", line).rstrip("\r")


def plain_lines(lines: Iterable[str]) -> list[str]:
    """Log lines as plain text (``plain``), every one kept."""
    return [plain(line) for line in lines]


def failure_sentence(result: ActionResult) -> str:
    """Why a result failed, as one sentence: its message, else the hosts that failed and
    why, else that it failed."""
    reasons = [f"{h}: {r.error}" for h, r in result.per_host.items() if not r.ok and r.error]
    return result.message or "; ".join(reasons) or f"{result.action} failed"


def duration(seconds: float | None, *, compact: bool = False) -> str:
    """Seconds for people: 4.2s, 2m14s, 3h05m, 2d4h (``compact``: 4s, 2m)."""
    if seconds is None:
        return "-"
    s = max(0.0, seconds)
    if s < 60:
        return f"{int(s)}s" if compact else f"{s:.1f}s"
    m, sec = divmod(int(s), 60)
    if m < 60:
        return f"{m}m" if compact else f"{m}m{sec:02d}s"
    h, m = divmod(m, 60)
    if h < 24:
        return f"{h}h{m:02d}m"
    d, h = divmod(h, 24)
    return f"{d}d{h}h"


def result_text(result: ActionResult) -> str:
    """One line for a finished action: what, ok or FAILED, how long, why, which hosts failed."""
    failed = [name for name, r in result.per_host.items() if not r.ok]
    text = f"{result.action}: {'ok' if result.ok else 'FAILED'} in {duration(result.elapsed_s)}"
    if result.message:
        text += f" — {result.message}"
    if failed:
        text += f" (failed on {', '.join(failed[:6])}{'…' if len(failed) > 6 else ''})"
    return text
