"""Classification apart from wording: ``classify`` returns what is wrong as typed values and
no words; ``diagnosis`` words exactly that result, and the warnings are chosen by what a line
is about, not by reading its text."""

from __future__ import annotations

from dataclasses import replace

from console.services.model import HostState
from console.services.observation import HostObservation, Observation
from console.services.recovery import classify as cx
from console.services.recovery import diagnosis as dx

T = 1_760_000_000.0


def pod(head_state: HostState, *, gcs: bool = True, tunnel: bool | None = True) -> Observation:
    hosts = tuple(
        HostObservation(
            name=f"w{i}",
            ip=f"127.0.0.{10 + i}",
            tpu_state=head_state if i == 0 else HostState.READY,
            ssh_ok=True,
            ray_alive=1,
            index=i,
        )
        for i in range(2)
    )
    return Observation(at=T, hosts=hosts, head="w0", ray_reachable=gcs, tunnel_up=tunnel)


def test_the_head_lost_with_its_host_is_a_typed_result_worded_once() -> None:
    o = pod(HostState.PREEMPTED)
    typed = cx.classify(o)
    assert typed.head_loss is cx.HeadLoss.HOST and typed.head_condition is cx.HostCondition.LOST
    assert typed.symptoms == () and not typed.tunnel_down  # the head's loss explains it
    worded = dx.diagnose(o)
    assert replace(worded, symptoms=()) == typed
    assert "head lost: head host w0 is lost" in worded.symptoms


def test_a_silent_gcs_before_ray_is_expected_is_no_warning_but_a_symptom() -> None:
    o = pod(HostState.READY, gcs=False, tunnel=False)
    d = dx.diagnose(o)
    assert d.head_loss is cx.HeadLoss.GCS_SILENT
    assert "head lost: Ray GCS on the head does not answer" in d.symptoms
    assert not any(w.startswith("head lost") for w in dx.warnings(o, d, ray_expected=False))
    assert "head lost: Ray GCS on the head does not answer" in dx.warnings(o, d, ray_expected=True)


def test_a_tunnel_down_warning_says_why() -> None:
    o = replace(pod(HostState.READY), tunnel_up=False, tunnel_error="connection refused")
    d = dx.diagnose(o)
    assert d.tunnel_down and "dashboard tunnel down" in d.symptoms
    assert dx.warnings(o, d, ray_expected=True) == ("dashboard tunnel down (connection refused)",)
