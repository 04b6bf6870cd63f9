"""The loopback Ray cluster's bring-up: a node whose `ray start` gave up waiting for its
raylet to register (Ray allows a fixed 30 s, too little on a loaded 2-core CI machine) is
started again, whole; any other exit is an error at once, with the node's log."""

from __future__ import annotations

import os
import stat
import sys
from pathlib import Path

import pytest

from engine.localray import START_ATTEMPTS, LocalRayCluster, NodeExited

TIMED_OUT = (
    "Exception: The current node timed out during startup. This could happen because some of "
    "the raylet failed to startup or the GCS has become overloaded."
)


def fake_ray(tmp_path: Path, fail_first: int, message: str) -> Path:
    """A `ray` that fails its first ``fail_first`` starts with ``message``, then is Ray."""
    real = Path(sys.executable).with_name("ray")
    count = tmp_path / "starts"
    script = tmp_path / "ray"
    script.write_text(
        "#!/bin/sh\n"
        f'echo x >> "{count}"\n'
        f'if [ "$(wc -l < "{count}")" -le {fail_first} ]; then echo "{message}"; exit 1; fi\n'
        f'exec "{real}" "$@"\n'
    )
    script.chmod(script.stat().st_mode | stat.S_IEXEC)
    return script


def cluster_with(monkeypatch: pytest.MonkeyPatch, ray: Path) -> LocalRayCluster:
    cluster = LocalRayCluster(ip_prefix="127.0.67.")
    monkeypatch.setattr(cluster, "_ray_bin", lambda: str(ray))
    return cluster


def test_a_head_whose_raylet_registration_timed_out_is_started_again(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("RAY_USAGE_STATS_ENABLED", "0")
    cluster = cluster_with(monkeypatch, fake_ray(tmp_path, 1, TIMED_OUT))
    try:
        cluster.start()
        assert len(cluster.alive_nodes()) == 1
        assert [n.ip for n in cluster.nodes] == ["127.0.67.1"]  # the failed try is gone
        log = cluster.nodes[0].log_path.read_text()
        assert TIMED_OUT in log and log.index(TIMED_OUT) < cluster.nodes[0].log_from
    finally:
        cluster.stop()
    assert (tmp_path / "starts").read_text().count("x") == 2


def test_a_node_that_fails_otherwise_is_an_error_at_once_with_its_log(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    cluster = cluster_with(monkeypatch, fake_ray(tmp_path, 99, "ValueError: bad --resources"))
    try:
        with pytest.raises(NodeExited, match="bad --resources"):
            cluster.start()
    finally:
        cluster.stop()
    assert (tmp_path / "starts").read_text().count("x") == 1


def test_it_gives_up_after_its_attempts(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    cluster = cluster_with(monkeypatch, fake_ray(tmp_path, 99, TIMED_OUT))
    try:
        with pytest.raises(NodeExited, match="timed out during startup"):
            cluster.start()
    finally:
        cluster.stop()
    assert (tmp_path / "starts").read_text().count("x") == START_ATTEMPTS
    assert not os.path.exists(cluster.temp_dir or "/nonexistent")
