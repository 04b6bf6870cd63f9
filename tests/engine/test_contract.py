"""The engine's contract with its launchers and the console: one definition of each word.

The console, the benchmarks and the engine's own launchers read exit 75 and the lines the
engine prints through ``engine.contract``; a second definition would drift silently.
"""

from __future__ import annotations

import re
import subprocess
import sys

from engine import contract
from engine.notice import notice_line
from tests.support import REPO

# A literal exit code 75 compared or assigned: `== 75`, `!= 75`, `NAME = 75`.
_LITERAL_75 = re.compile(
    r"(?:[=!]=[ \t]*75\b)|(?:^[ \t]*[A-Za-z_]\w*[ \t]*=[ \t]*75\b)", re.MULTILINE
)


def test_exit_75_is_defined_once() -> None:
    found = []
    for package in ("console", "engine", "emulators", "benchmarks", "scripts"):
        for path in (REPO / package).rglob("*.py"):
            for m in _LITERAL_75.finditer(path.read_text()):
                found.append(f"{path.relative_to(REPO)}: {m.group(0).strip()}")
    assert found == ["engine/exit_codes.py: EX_PREEMPTED = 75"], found


def test_the_sweep_id_lines_the_engine_prints_are_the_ones_the_console_reads() -> None:
    for line in (contract.SWEEP_STARTING, contract.SWEEP_RESUMING, contract.SWEEP_WANDB):
        printed = "[sweep] " + line.format(sweep_id="s-1a2b.c_3") + ": random, 4 sample(s)"
        m = contract.SWEEP_ID_RE.search(printed)
        assert m is not None and m.group(1) == "s-1a2b.c_3", printed


def test_the_notice_line_round_trips() -> None:
    line = "[engine] " + notice_line(4096, "file:///b/run/ckpt-4096", 1.25, "SIGTERM")
    m = contract.NOTICE_LINE_RE.search(line)
    assert m is not None
    assert (m["step"], m["code"]) == ("4096", str(contract.EX_PREEMPTED))


def test_reading_the_contract_costs_the_standard_library_only() -> None:
    code = "import sys, engine.contract; print(sorted({'torch','ray','wandb','jax'} & set(sys.modules)))"
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, cwd=REPO, check=True
    ).stdout
    assert out.strip() == "[]"
