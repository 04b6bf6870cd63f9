"""The TUI benchmark runs (it is how the 10,000-row figure is measured): a short, small run
through its own entry point, nothing dropped. No timing is asserted."""

from __future__ import annotations

import json
import subprocess
import sys


def test_tui_bench_runs_and_drops_nothing() -> None:
    proc = subprocess.run(
        [sys.executable, "-m", "benchmarks.tui", "--seconds", "1", "--baseline-seconds", "1",
         "--hosts", "200", "--lines-per-s", "2000"],
        capture_output=True,
        text=True,
        timeout=180,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-3000:]
    report = json.loads(proc.stdout.strip().splitlines()[-1])
    assert report["hosts"] == 200 and report["log_samples"] > 0
    assert report["no_dropped_state"] and report["log_tail_match"]


def test_fleet_bench_runs_and_drops_nothing() -> None:
    """`--fleet`: the Fleet screen over several polling clusters, every row its cluster's
    final snapshot at the end."""
    proc = subprocess.run(
        [sys.executable, "-m", "benchmarks.tui", "--fleet", "3", "--hosts", "64",
         "--seconds", "1", "--baseline-seconds", "1"],
        capture_output=True,
        text=True,
        timeout=180,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-3000:]
    report = json.loads(proc.stdout.strip().splitlines()[-1])
    assert report["clusters"] == 3 and report["hosts_per_cluster"] == 64
    assert report["samples"] > 0 and report["no_dropped_state"]


def test_each_fleet_cluster_draws_from_its_own_seeded_stream() -> None:
    """The fleet bench's clusters change different hosts (each its own seeded stream; one
    shared seed made every cluster publish the same pods, so their rows changed in step),
    and the same cluster changes the same hosts run after run."""
    from benchmarks.tui_fleet import cluster

    def changes(i: int) -> tuple[tuple[int, str], ...]:
        services = cluster(i, 64)
        return tuple(
            (h.index, str(h.tpu_state))
            for _ in range(5)
            for h in services.next_pod(8).hosts
            if h.tpu_state != "READY"
        )

    assert len({changes(0), changes(1), changes(2)}) == 3
    assert changes(1) == changes(1)
