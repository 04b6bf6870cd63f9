"""How the script tells what happened: errors as sentences, job logs as plain text.

A script's stdout is JSON lines read by programs and people: an error is the sentence the
service wrote ("no pod emulator is running for ..."), not a Python class name before it, and
a job's log lines are the text the job printed, without the terminal's colour codes and
without the copies Ray's driver adds (a worker's line reaches the driver's log once per
subscriber, so the same line arrived three times).
"""

from __future__ import annotations

import re
from collections import deque
from collections.abc import Iterable

# CSI sequences (colours, cursor moves), OSC sequences (titles, links) and lone ESC codes.
_ANSI = re.compile(r"\x1b\[[0-?]*[ -/]*[@-~]|\x1b\][^\x07\x1b]*(?:\x07|\x1b\\)|\x1b[@-Z\\-_]")
# Errors whose message is written for the user; any other type is a bug, named as such.
_TOLD = (ValueError, LookupError, OSError, RuntimeError, TimeoutError, ConnectionError)
DUPLICATE_WINDOW = 64  # how far back a repeated line counts as a copy


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
    """Log lines as plain text, each once: a line identical to one of the last
    ``DUPLICATE_WINDOW`` lines is a copy and is dropped (blank lines are kept)."""
    out: list[str] = []
    recent: deque[str] = deque(maxlen=DUPLICATE_WINDOW)
    seen: dict[str, int] = {}
    for raw in lines:
        line = plain(raw)
        if line.strip() and seen.get(line):
            continue
        out.append(line)
        if line.strip():
            if len(recent) == recent.maxlen:
                old = recent[0]
                seen[old] -= 1
            recent.append(line)
            seen[line] = seen.get(line, 0) + 1
    return out
