"""Exit codes are an API: cron, CI and agents branch on them. One home for all of them.

Every ``phantom`` command (the TUI, ``--script``, ``status``, ``init``, ``trust``, ``pod``)
returns one of these.
"""

from __future__ import annotations

OK = 0
FAILED = 1  # an action or a script step failed, or the cluster could not be reached
USAGE = 2  # bad usage, config, script or input: nothing was run
INTERRUPTED = 130  # SIGINT / SIGTERM (after stopping what the command itself started)
