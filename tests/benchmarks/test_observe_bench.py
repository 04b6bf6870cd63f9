"""The observe benchmark runs through its own entry point on small pods (it is how the
1,024-host figures are measured): both modes, and a worker preempted, detected and recovered
at every size. No timing is asserted."""

from __future__ import annotations

import json
import os
import subprocess
import sys


def test_observe_bench_measures_polls_and_recovers_a_preempted_worker() -> None:
    env = {**os.environ, "NO_GCE_CHECK": "True"}
    proc = subprocess.run(
        [sys.executable, "-m", "benchmarks.observe", "--hosts", "2,3", "--polls", "2",
         "--baseline-max", "2"],
        capture_output=True,
        text=True,
        timeout=300,
        env=env,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-3000:]
    report = json.loads(proc.stdout.strip().splitlines()[-1])
    assert set(report["planned"]) == {"2", "3"} and set(report["every_host"]) == {"2"}
    assert report["worker_recovered_at_every_size"] is True
    three = report["planned"]["3"]
    assert three["detect_polls"] >= 1 and three["sessions"] > 0
    assert "planned sessions 3 over 2:" in proc.stdout
