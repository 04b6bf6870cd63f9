"""Hard news heard between polls, laid over an observation without a round trip.

Two signals reach the backend between polls: a host's preemption notice (its metadata
watcher, ``notice``) and the TPU API calling a VM lost (the backend's API watch, which reads
GetNode alone every few tens of milliseconds once a host dropped its connection). Both are
the provider's word, so the detector trusts them at once (hard conditions). A poll of a
thousand hosts takes seconds; waiting for the one in flight, and then for the next, would
put those seconds between the signal and the journal. ``Heard`` keeps the news and
``over`` lays it on the last observation, so the facade can journal it now; the poll in
flight gets it laid over as well when it ends (its TPU API read may predate the news), so
no later observation takes back what an earlier one said.

Soft signals (a dropped connection alone) are never news here: they wait for the poll and
its confirmation (``Observation.settling``).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, replace

from console.services.model import LOST_STATES, HostState
from console.services.observation import HostObservation, Observation


@dataclass(frozen=True)
class Lost:
    """The TPU API called a host lost: in ``state`` since ``preempted_at``, read at ``at``."""

    at: float
    state: HostState
    preempted_at: float | None


class Heard:
    """The news heard since the last poll. ``notices`` is the notice watcher's own record
    (host -> when heard; cleared when the host is recreated); API reads are kept here until
    a poll that began after them has its own read."""

    def __init__(
        self, notices: Mapping[str, float], reasons: Mapping[str, str] | None = None
    ) -> None:
        self.notices = notices
        self.reasons = reasons if reasons is not None else {}  # a notice's, when not `preempted`
        self.lost: dict[str, Lost] = {}
        self.count = 0  # grows with every piece of news: the facade feeds each once

    def noticed(self) -> None:
        """A notice was heard (the watcher recorded it in ``notices``)."""
        self.count += 1

    def api_lost(self, host: str, state: HostState, preempted_at: float | None, at: float) -> None:
        """The API's read at ``at`` says ``host`` is in ``state`` (one of ``LOST_STATES``)."""
        if state not in LOST_STATES:
            return
        known = self.lost.get(host)
        if known is not None and known.state == state:
            return
        self.lost[host] = Lost(at=at, state=state, preempted_at=preempted_at)
        self.count += 1

    def forget(self, host: str) -> None:
        """The host was recreated: what was heard of its old VM no longer holds."""
        self.lost.pop(host, None)

    def polled(self, began_at: float) -> None:
        """A poll that began at ``began_at`` read the API after the news heard before then:
        its own word stands from now on."""
        self.lost = {h: f for h, f in self.lost.items() if f.at >= began_at}

    def over(self, obs: Observation, at: float | None = None) -> Observation:
        """``obs`` with the news it does not hold yet: a notice on a host that shows none,
        and a host the API called lost after ``obs`` began. ``obs`` itself when there is
        none; otherwise a copy, taken at ``at`` when given (a copy made now, not a poll)."""
        notices, lost = self.notices, self.lost
        if not notices and not lost:
            return obs
        hosts: list[HostObservation] | None = None
        for i, h in enumerate(obs.hosts):
            new = h
            notice_at = notices.get(h.name)
            if notice_at is not None and h.notice_at is None:
                new = replace(new, notice_at=notice_at, notice_reason=self.reasons.get(h.name, ""))
            fact = lost.get(h.name)
            if fact is not None and fact.at >= obs.at and h.tpu_state not in LOST_STATES:
                new = replace(
                    new, tpu_state=fact.state, preempted_at=fact.preempted_at, ssh_ok=False
                )
            if new is not h:
                if hosts is None:
                    hosts = list(obs.hosts)
                hosts[i] = new
        if hosts is None:
            return obs
        return replace(obs, hosts=tuple(hosts), at=obs.at if at is None else at)
