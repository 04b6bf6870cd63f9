"""``python ARGV`` as a child of a fork server (tests/support/forkrun.py).

The same argv, cwd, environment, stdout, stderr and exit code as
``subprocess.run([sys.executable, *ARGV], capture_output=True, text=True)``, without an
interpreter start-up for each run (about 0.2 s of CPU). For tests that run an engine entry
point many times to see what it makes of flags and environment variables
(``--validate-only``, bad flags), and that never reach torch, SB3, jax, wandb or ray.
"""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path

from tests.support.forkrun import ForkServer

# What the interpreter does with `-m MODULE ARGS` or `PATH ARGS` (run by the server as `-c`)
RUNNER = """
import runpy, sys
if sys.argv[1] == "-m":
    sys.argv = sys.argv[2:]
    runpy.run_module(sys.argv[0], run_name="__main__", alter_sys=True)
else:
    sys.argv = sys.argv[1:]
    runpy.run_path(sys.argv[0], run_name="__main__")
"""


class ForkedPython:
    """Runs ``python ARGV`` (``["-m", module, ...]`` or ``[path, ...]``) under ``server``."""

    def __init__(self, server: ForkServer) -> None:
        self.server = server

    def __call__(
        self,
        argv: Sequence[str],
        *,
        cwd: Path,
        env: Mapping[str, str],
        timeout: float = 60,
    ) -> subprocess.CompletedProcess[str]:
        done = self.server.run(RUNNER, list(argv), cwd=cwd, env=env, timeout=timeout)
        return subprocess.CompletedProcess(
            [sys.executable, *argv], done.returncode, done.stdout, done.stderr
        )
