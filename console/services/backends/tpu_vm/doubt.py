"""Hosts in doubt: SSH gone while the TPU API still calls the VM READY.

A VM being reclaimed drops its SSH connections a moment before the API calls it lost (on a
loaded machine the reclaim's kill can take longer than a poll). Until the API speaks, such
a host is in doubt: the backend watches the API for it and tells the detector to wait
(``Observation.settling``) before it confirms a soft loss, so a recovery never recreates a
VM the API was about to call PREEMPTED (the journal would then hold no preemption for it).
The doubt lasts ``window_s`` at most: a wedged sshd on a live VM is the poll's to see.

A drop is heard three ways: an open connection closing from the other end, the tunnel to
the head closing, and, where no connection was open to hear it, a poll that finds a READY
host refusing SSH that answered the poll before.
"""

from __future__ import annotations

import time
from collections.abc import Callable

from console.services.model import HostState
from console.services.observation import Observation

DOUBT_S = 5.0


class Doubt:
    """When each host in doubt dropped its connection (``clock`` seconds)."""

    def __init__(self, window_s: float = DOUBT_S, clock: Callable[[], float] = time.monotonic):
        self.window_s = window_s
        self._clock = clock
        self._since: dict[str, float] = {}

    def __bool__(self) -> bool:
        return bool(self._since)

    def dropped(self, host: str) -> None:
        """``host``'s connection dropped now (the first drop of a doubt counts)."""
        self._since.setdefault(host, self._clock())

    def open(self) -> dict[str, float]:
        """Hosts still in their window -> when they dropped."""
        now = self._clock()
        return {h: since for h, since in self._since.items() if now - since <= self.window_s}

    def review(self, obs: Observation, before: Observation | None) -> tuple[str, ...]:
        """The hosts of ``obs`` still in doubt, after what ``obs`` says: a READY host that
        answered SSH in ``before`` and refuses it now enters; a host the API calls anything
        but READY, a host answering SSH again, or a doubt older than the window leaves."""
        now = self._clock()
        answered = {h.name for h in before.hosts if h.ssh_ok} if before is not None else set()
        for h in obs.hosts:
            if h.name in answered and not h.ssh_ok and h.tpu_state == HostState.READY:
                self._since.setdefault(h.name, now)
        doubtful = []
        for h in obs.hosts:
            since = self._since.get(h.name)
            if since is None:
                continue
            if now - since > self.window_s or h.tpu_state != HostState.READY or h.ssh_ok:
                del self._since[h.name]
            else:
                doubtful.append(h.name)
        return tuple(doubtful)
