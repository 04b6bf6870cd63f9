"""Diagnostics on stderr: one ``[<source>] message`` line each (stdout is reserved for results).

Sources in use: ``engine`` (a trainer), ``sweep`` (the sweep driver), ``distributed`` (the
launcher), ``bench``. The console matches some of these lines (``starting sweep <id>``,
``resuming sweep <id>``, ``W&B sweep <id>``, the preemption line of ``engine.notice``), so
their wording is part of the interface.
"""

from __future__ import annotations

import sys


def log(msg: str, source: str = "engine") -> None:
    """Write one diagnostic line to stderr and flush it (job logs are read while running)."""
    print(f"[{source}] {msg}", file=sys.stderr, flush=True)
