"""The fleet isolation benchmark runs through its own entry point: one round of each condition,
pod B's preemption detected with pod A's TPU API free and held, and the ratio printed. No
timing is asserted (the figure is the benchmark's, in docs/fleet.md)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path


def test_fleet_isolation_bench_measures_both_conditions(tmp_path: Path) -> None:
    env = {**os.environ, "NO_GCE_CHECK": "True", "TMPDIR": str(tmp_path)}
    proc = subprocess.run(
        [sys.executable, "-m", "benchmarks.fleet_isolation", "--rounds", "1", "--poll", "0.5"],
        capture_output=True,
        text=True,
        timeout=300,
        env=env,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    report = json.loads(proc.stdout.strip().splitlines()[-1])
    assert len(report["free_all"]) == len(report["held_all"]) == 1
    assert report["free_s"] >= 0 and report["held_s"] >= 0
    assert "held / free" in proc.stdout
    assert "round 1 held: pod-b detected in" in proc.stderr
    assert list(tmp_path.iterdir()) == [], "the bench left its pods' dirs behind"
