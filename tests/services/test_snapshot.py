"""The snapshot both front ends show, from one observation and its diagnosis."""

from __future__ import annotations

from console.services.observation import HostObservation, Observation
from console.services.recovery.diagnosis import diagnose
from console.services.snapshot import pod_snapshot


def test_snapshot_warns_about_preemption_duplicates_and_tunnel() -> None:
    obs = Observation(
        at=100.0,
        hosts=(
            HostObservation("pod-w0", "10.0.0.2", "READY", ssh_ok=True, ray_alive=1),
            HostObservation("pod-w1", "10.0.0.3", "READY", ssh_ok=True, ray_alive=2),
            HostObservation("pod-w2", "10.0.0.4", "PREEMPTED", ssh_ok=False, preempted_at=90.0),
        ),
        head="pod-w0",
        ray_reachable=True,
        tunnel_up=False,
        tunnel_error="connection lost",
    )
    snap = pod_snapshot(obs, diagnose(obs), provider="gcp", node_name="pod", ray_expected=True)
    text = " | ".join(snap.warnings)
    assert "pod-w2: VM lost (10.0.0.4, TPU state PREEMPTED at " in text
    assert "pod-w1: 2 live Ray nodes on 10.0.0.3: duplicate" in text
    by_name = {h.name: h for h in snap.hosts}
    assert by_name["pod-w2"].ssh == "down" and by_name["pod-w2"].ray_state == "-"
    assert by_name["pod-w1"].ray_nodes == 2 and by_name["pod-w0"].ray_state == "ALIVE"
    assert snap.ray_alive == 2 and not snap.tunnel_up


def test_tunnel_warning_says_why_and_a_fresh_pod_without_ray_is_no_warning() -> None:
    hosts = tuple(
        HostObservation(f"pod-w{i}", f"10.0.0.{i}", "READY", ssh_ok=True) for i in range(2)
    )
    down = Observation(at=1.0, hosts=hosts, head="pod-w0", tunnel_up=False, tunnel_error="refused")
    fresh = Observation(at=1.0, hosts=hosts, head="pod-w0")
    # Ray was formed and its GCS is silent now: a warning; never formed: the expected state.
    assert any("head lost" in w for w in _warnings(fresh, ray_expected=True))
    assert _warnings(fresh, ray_expected=False) == ()
    assert "dashboard tunnel down (refused)" not in _warnings(down, ray_expected=False)


def _warnings(obs: Observation, *, ray_expected: bool) -> tuple[str, ...]:
    return pod_snapshot(
        obs, diagnose(obs), provider="gcp", node_name="pod", ray_expected=ray_expected
    ).warnings
