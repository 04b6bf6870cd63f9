"""Hosts in doubt (SSH gone, the API still READY) and the detector that waits on them.

The last CI run failed on a head preemption journaled with no ``preempted`` row: the
reclaim's kill outlasted two polls on a loaded machine, no open connection had heard the
drop, so nothing kept the soft head loss from being confirmed; the recovery recreated the
VM in the instant the API called it PREEMPTED. A poll that finds a host refusing SSH that
answered before is a drop too: the detector waits for the API's word (or the window).
"""

from __future__ import annotations

from dataclasses import replace

from console.services.backends.tpu_vm.doubt import Doubt
from console.services.model import HostState
from tests.services.backends.tpu_vm.test_heard import UP, Feed, poll

T = 1_760_000_000.0


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def test_a_host_refusing_ssh_after_answering_is_in_doubt_until_the_api_speaks() -> None:
    clock = Clock()
    doubt = Doubt(window_s=5.0, clock=clock)
    before = poll(T, *UP)
    refused = poll(T + 0.5, replace(UP[0], ssh_ok=False, ray_alive=0), UP[1])
    assert doubt.review(refused, before) == ("w0",)
    clock.now += 1.0
    assert doubt.review(refused, refused) == ("w0",)  # still READY, still refusing
    gone = poll(T + 1.5, replace(UP[0], ssh_ok=False, tpu_state=HostState.PREEMPTED), UP[1])
    assert doubt.review(gone, refused) == ()  # the API's word ends the doubt
    assert not doubt


def test_a_doubt_ends_when_ssh_answers_or_the_window_passes() -> None:
    clock = Clock()
    doubt = Doubt(window_s=5.0, clock=clock)
    refused = poll(T, replace(UP[0], ssh_ok=False, ray_alive=0), UP[1])
    assert doubt.review(refused, poll(T, *UP)) == ("w0",)
    assert doubt.review(poll(T, *UP), refused) == ()  # answering again
    doubt.dropped("w0")  # an open connection closed from the other end
    assert doubt.open() == {"w0": clock.now}
    clock.now += 5.1
    assert doubt.open() == {}
    assert doubt.review(refused, refused) == ()  # a wedged sshd is the poll's to see
    assert not doubt


def test_a_host_that_never_answered_is_not_in_doubt() -> None:
    """A VM being created refuses SSH until its sshd is up: no drop, nothing to wait for."""
    doubt = Doubt(window_s=5.0, clock=Clock())
    booting = poll(T, replace(UP[0], ssh_ok=False, ray_alive=0), UP[1])
    assert doubt.review(booting, booting) == ()
    assert doubt.review(booting, None) == ()


async def test_the_detector_waits_for_the_api_when_only_a_poll_saw_the_drop() -> None:
    """Polls on, the head refusing SSH for longer than the detector's two confirming polls:
    no recovery is confirmed before the API calls the VM PREEMPTED, and the journal has its
    preemption row."""
    clock = Clock()
    doubt = Doubt(window_s=5.0, clock=clock)
    feed = Feed()
    last = poll(T, *UP)
    await feed(last)
    head_down = replace(UP[0], ssh_ok=False, ray_alive=0)
    for i in range(4):
        clock.now += 0.5
        obs = poll(T + 0.5 * (i + 1), head_down, UP[1])
        obs = replace(obs, ray_reachable=False, tunnel_up=False)
        obs = replace(obs, settling=doubt.review(obs, last))
        last = obs
        verdict = await feed(obs)
        assert verdict.trouble and not verdict.confirmed, (i, verdict)
    gone = replace(head_down, tpu_state=HostState.PREEMPTED, preempted_at=T + 2.1)
    obs = replace(poll(T + 2.5, gone, UP[1]), ray_reachable=False, tunnel_up=False)
    obs = replace(obs, settling=doubt.review(obs, last))
    assert obs.settling == ()
    assert (await feed(obs)).confirmed
    assert ("preempted", "w0") in await feed.rows()
