"""The fan-out benchmark runs through its own entry point on a small pod and accounts the CPU
of both sides (how the 256-host figure is split between the console and the emulator). No
timing is asserted."""

from __future__ import annotations

import json
import os
import subprocess
import sys


def test_fanout_bench_runs_and_splits_cpu_between_console_and_emulator() -> None:
    env = {**os.environ, "NO_GCE_CHECK": "True"}
    proc = subprocess.run(
        [sys.executable, "-m", "benchmarks.fanout", "--hosts", "1,32", "--repeat", "1",
         "--command", "true"],
        capture_output=True,
        text=True,
        timeout=300,
        env=env,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-3000:]
    report = json.loads(proc.stdout.strip().splitlines()[-1])
    assert set(report["cold_s"]) == {"1", "32"} and report["fanout_32_over_1"] > 0
    cpu = report["cpu_per_host_at_32"]
    # a cold fan-out to 32 hosts is 32 SSH handshakes: both ends spend CPU on them (tens of
    # ms each side, several clock ticks)
    assert cpu["cold"]["console_ms_per_host"] > 0 and cpu["cold"]["emulator_ms_per_host"] > 0
    assert "CPU per host: console" in proc.stderr
