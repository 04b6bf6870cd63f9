"""Two front ends on one pod, through one journal file and the pod's leases: the watcher
journals and recovers, the other follows, asks, and sees the same recovery."""

from __future__ import annotations

from pathlib import Path

import pytest

from console.services.model import ActionResult, RecoveryStatus
from console.services.record.lease import PodLeases
from console.services.record.sharing import Sharing
from tests.support.fake_pod import Clock, FakePod, JournalView, make_watchdog, wait_done


class Frontend:
    """One process's view: its own journal connection, sink, leases and watchdog."""

    def __init__(self, pod: FakePod, clock: Clock, state: Path) -> None:
        self.leases = PodLeases(state, "local|phantom-local|local-a|phantom-pod|")
        self.wd, self.view, self.published = make_watchdog(
            pod, clock, journal_path=state / "journal.sqlite", action_lease=self.leases.actions
        )
        self.sharing = Sharing(
            self.view.journal, self.leases, self.wd, self.published.append, self.view.sink.own
        )

    def kinds(self) -> list[str]:
        return [u.kind for u in self.published if hasattr(u, "kind")]


@pytest.fixture
def pair(tmp_path: Path) -> tuple[FakePod, Clock, Frontend, Frontend]:
    clock = Clock()
    pod = FakePod(clock)
    pod.form()
    tui, script = Frontend(pod, clock, tmp_path), Frontend(pod, clock, tmp_path)
    assert tui.sharing.owner and not script.sharing.owner  # first come, first watches
    return pod, clock, tui, script


async def test_a_followers_recover_is_run_once_by_the_watcher_and_both_see_it(
    pair: tuple[FakePod, Clock, Frontend, Frontend],
) -> None:
    pod, _, tui, script = pair
    await tui.wd.on_observation(await pod.observe())
    await script.wd.follow(await pod.observe())
    pod.preempt("pod-w2")
    request = await script.view.sink.emit(script.sharing.request("script", 1.0))
    await tui.sharing.follow_journal()  # the watcher obeys the request
    status = await wait_done(tui.wd)
    assert status.ok
    await script.sharing.follow_journal()
    assert script.sharing.ended_after(request.id or 0) is not None
    seen = script.sharing.status()
    assert seen.ok and seen.owner.startswith("pid ")
    assert {s.name: s.state for s in seen.steps}["recreate"] == "ok"
    assert "recovered" in script.kinds()  # the follower's front end heard it live
    kinds = [e.kind for e in JournalView(tui.view.journal, tui.view.sink).events]
    assert kinds.count("recovery_started") == 1 and kinds.count("recovered") == 1
    assert kinds.count("preempted") == 1  # journaled by the watcher alone


async def test_the_watcher_obeys_teardown_bringup_and_auto_switches_from_others(
    pair: tuple[FakePod, Clock, Frontend, Frontend],
) -> None:
    pod, _, tui, script = pair
    await tui.wd.on_observation(await pod.observe())
    assert tui.wd.armed
    await script.view.sink.record(ActionResult("teardown", True, 1.0), "script")
    await tui.sharing.follow_journal()
    assert not tui.wd.armed  # a teardown elsewhere is not a failure to undo
    await script.view.sink.record(ActionResult("ray_up", True, 1.0), "script")
    await tui.sharing.follow_journal()
    assert tui.wd.armed
    script.wd.set_auto(False, actor="script")
    await script.view.sink.flush()
    await tui.sharing.follow_journal()
    assert not tui.wd.auto


async def test_taking_over_from_a_dead_watcher_repeats_no_event(
    pair: tuple[FakePod, Clock, Frontend, Frontend],
) -> None:
    pod, _, tui, script = pair
    await tui.wd.on_observation(await pod.observe())
    await script.wd.follow(await pod.observe())
    tui.wd.set_auto(False)
    pod.preempt("pod-w1")
    await tui.wd.on_observation(await pod.observe())  # journals the preemption
    await script.wd.follow(await pod.observe())  # remembers it, journals nothing
    tui.leases.release()  # the TUI's process died
    assert script.sharing.owner
    script.wd.set_auto(False)
    await script.wd.on_observation(await pod.observe())
    kinds = [e.kind for e in JournalView(script.view.journal, script.view.sink).events]
    assert kinds.count("preempted") == 1


def test_recovery_status_of_a_follower_names_the_watcher(
    pair: tuple[FakePod, Clock, Frontend, Frontend],
) -> None:
    _, _, tui, script = pair
    status: RecoveryStatus = script.sharing.status()
    assert status.owner.startswith("pid ") and not status.active
    assert tui.sharing.status() is tui.wd.status
