"""News heard between polls (a notice, the API calling a VM lost), laid over observations.

The facade journals the news from the last observation the moment it is heard; the poll in
flight then ends with an observation whose TPU API read may predate the news. These feed
the real detector (journal in memory) in that order: the news is one row, at once, and the
poll that ends after it takes nothing back (no second row, no "preempted after its notice",
no state change back to READY). Soft signals are never news: a dropped connection alone
waits for the poll and its settling, as before.
"""

from __future__ import annotations

from dataclasses import replace

from console.services.backends.tpu_vm.heard import Heard
from console.services.model import Event, HostState, Update
from console.services.observation import HostObservation, Observation
from console.services.record.journal import Journal
from console.services.record.sink import EventSink
from console.services.recovery.detector import Detector, Verdict

T = 1_760_000_000.0
UP = (
    HostObservation(
        name="w0", ip="127.0.0.10", tpu_state=HostState.READY, ssh_ok=True, ray_alive=1
    ),
    HostObservation(
        name="w1", ip="127.0.0.11", tpu_state=HostState.READY, ssh_ok=True, ray_alive=1
    ),
)


def poll(at: float, *hosts: HostObservation, settling: tuple[str, ...] = ()) -> Observation:
    return Observation(
        at=at,
        hosts=hosts or UP,
        head="w0",
        ray_reachable=True,
        tunnel_up=True,
        settling=settling,
    )


class Feed:
    """The real detector over an in-memory journal, armed (Ray was formed)."""

    def __init__(self) -> None:
        self.seen: list[Update] = []
        self.journal = Journal(":memory:")
        self.sink = EventSink(self.journal, self.seen.append)
        self.det = Detector(self.sink, clock=lambda: T, confirm_polls=2)
        self.det.arm()

    async def __call__(self, obs: Observation) -> Verdict:
        return await self.det.update(obs)

    async def rows(self) -> list[tuple[str, str]]:
        await self.sink.flush()
        self.sink.close()
        self.journal.close()
        return [(u.kind, u.host) for u in self.seen if isinstance(u, Event)]


def test_nothing_heard_leaves_the_observation_as_it_is() -> None:
    heard = Heard({})
    last = poll(T)
    assert heard.over(last, at=T + 1) is last
    heard.api_lost("w1", HostState.READY, None, T + 1)  # not a loss: no news
    assert heard.count == 0 and heard.over(last) is last


def test_a_notice_is_laid_over_a_host_that_shows_none() -> None:
    notices: dict[str, float] = {}
    heard = Heard(notices)
    last = poll(T)
    notices["w1"] = T + 2
    heard.noticed()
    now = heard.over(last, at=T + 2.01)
    assert heard.count == 1
    assert now.at == T + 2.01 and now.host("w1").notice_at == T + 2  # type: ignore[union-attr]
    assert now.hosts[0] is last.hosts[0]  # the rest as the last poll saw it
    assert heard.over(now) is now  # already there: nothing to lay


def test_an_api_loss_stands_until_a_poll_begun_after_it_reads_the_api() -> None:
    heard = Heard({})
    heard.api_lost("w1", HostState.PREEMPTED, T + 1.5, T + 1.6)
    heard.api_lost("w1", HostState.PREEMPTED, T + 1.5, T + 1.7)  # the same word again
    assert heard.count == 1
    before = heard.over(poll(T + 1))  # the poll in flight read the API before the news
    gone = before.host("w1")
    assert gone is not None and gone.tpu_state == HostState.PREEMPTED
    assert gone.preempted_at == T + 1.5 and gone.ssh_ok is False
    assert before.at == T + 1  # laid over a poll, it keeps the poll's time
    later = poll(T + 2)
    assert heard.over(later) is later  # a poll begun after the news read the API itself
    heard.polled(T + 2)
    assert heard.lost == {}
    heard.api_lost("w1", HostState.PREEMPTED, T + 3, T + 3.1)
    heard.forget("w1")  # recreated: the old VM's loss no longer holds
    assert heard.over(poll(T + 3)).host("w1") == UP[1]


async def test_a_notice_heard_mid_poll_is_one_row_and_the_poll_takes_nothing_back() -> None:
    notices: dict[str, float] = {}
    heard = Heard(notices)
    feed = Feed()
    last = poll(T)
    assert not (await feed(last)).trouble
    # The notice comes while the next poll (begun at T + 5) is in flight; its host loop ran
    # before the notice, so it shows none.
    notices["w1"] = T + 6
    heard.noticed()
    verdict = await feed(heard.over(last, at=T + 6.01))  # journaled now, from the last poll
    assert verdict.confirmed  # the provider's word: no confirming poll
    assert await feed.rows() == [("preemption_notice", "w1")]
    feed = Feed()
    await feed(last)
    await feed(heard.over(last, at=T + 6.01))
    await feed(heard.over(poll(T + 5)))  # the poll in flight ends
    await feed(heard.over(poll(T + 10)))  # and the next one
    assert await feed.rows() == [("preemption_notice", "w1")]


async def test_an_api_loss_heard_mid_poll_is_one_row_and_no_state_goes_back() -> None:
    heard = Heard({})
    feed = Feed()
    last = poll(T)
    await feed(last)
    dropped = replace(UP[1], ssh_ok=False, ray_alive=0)
    # The connection dropped: the poll sees a soft loss and the backend's doubt.
    settling = poll(T + 5, UP[0], dropped, settling=("w1",))
    assert not (await feed(settling)).confirmed
    # The API watch hears PREEMPTED while the next poll (begun at T + 6, its read before
    # the news) is in flight.
    heard.api_lost("w1", HostState.PREEMPTED, T + 6.2, T + 6.3)
    assert (await feed(heard.over(settling, at=T + 6.31))).confirmed
    await feed(heard.over(poll(T + 6, UP[0], dropped)))  # the poll in flight ends
    heard.polled(T + 7)
    gone = replace(dropped, tpu_state=HostState.PREEMPTED, preempted_at=T + 6.2)
    await feed(heard.over(poll(T + 7, UP[0], gone)))  # the next one reads it itself
    rows = await feed.rows()
    assert rows.count(("preempted", "w1")) == 1, rows
    changes = [r for r in rows if r[0] == "state_change"]
    assert changes == [("state_change", "w1")], rows  # READY -> PREEMPTED, once


async def test_soft_losses_still_settle_the_news_path_adds_none() -> None:
    """A dropped connection is no news: nothing is laid over, so the quick path feeds
    nothing, and the settling poll does not confirm the soft loss (e241859's rule)."""
    heard = Heard({})
    feed = Feed()
    await feed(poll(T))
    dropped = replace(UP[0], ssh_ok=False, ray_alive=0)
    settling = poll(T + 5, dropped, UP[1], settling=("w0",))
    assert heard.over(settling, at=T + 5.1) is settling
    verdicts = [await feed(settling) for _ in range(3)]
    assert all(v.trouble and not v.confirmed for v in verdicts)
    await feed.rows()
