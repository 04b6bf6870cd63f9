"""Which hosts a poll probes over SSH: the cost grows with trouble, not with the pod.

The TPU API answers for every host in one call and the Ray GCS for every node in another; an
SSH probe of every host in every poll would cost a 256-host pod 256 sessions an interval.
A poll probes:

* every host whose reachability is unknown, or was bad at its last probe, or whose TPU state
  changed since the last poll (a VM just READY again);
* every host where the API and Ray disagreed at the last poll (READY, but no live Ray node,
  or more than one);
* every host whose SSH connection dropped since the last poll (``suspect``, from the
  connection's ``connection_lost``; the same event wakes the poller);
* and ``batch`` more, round-robin, so a wedged host that still holds its connection open is
  found within ``ceil(hosts / batch)`` polls.

A host not probed keeps the result of its last probe.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from console.services.model import HostResult

DEFAULT_BATCH = 8


@dataclass
class _Seen:
    state: str = ""
    ssh_ok: bool | None = None
    error: str = ""  # the last failed probe's error ("" after a success)


class ProbePlanner:
    def __init__(self, batch: int = DEFAULT_BATCH) -> None:
        if batch < 0:
            raise ValueError(f"probe batch {batch!r}: must be 0 or more")
        self.batch = batch
        self._seen: dict[str, _Seen] = {}
        self._suspect: set[str] = set()
        self._cursor = 0

    def suspect(self, name: str) -> None:
        """``name``'s connection dropped: probe it at the next poll."""
        self._suspect.add(name)

    def choose(
        self,
        usable: Sequence[str],
        states: Mapping[str, str],
        ray_alive: Mapping[str, int] | None,
    ) -> list[str]:
        """The hosts to probe this poll, of ``usable`` (READY or unknown to the API).

        ``ray_alive``: live Ray nodes per host at the last poll, None when the GCS did not
        answer (then Ray cannot disagree with anything)."""
        must: list[str] = []
        for name in usable:
            seen = self._seen.get(name)
            if (
                seen is None
                or seen.ssh_ok is not True
                or seen.state != states.get(name)
                or name in self._suspect
                or (ray_alive is not None and ray_alive.get(name, 0) != 1)
            ):
                must.append(name)
        chosen = set(must)
        rest = [name for name in usable if name not in chosen]
        if not rest or self.batch == 0:
            return must
        k = min(self.batch, len(rest))
        start = self._cursor % len(rest)
        self._cursor = start + k
        return must + [rest[(start + i) % len(rest)] for i in range(k)]

    def record(self, states: Mapping[str, str], probes: Mapping[str, HostResult]) -> None:
        """After a poll: every host's state, and the results of the hosts probed."""
        for name, state in states.items():
            seen = self._seen.setdefault(name, _Seen())
            if name in probes:
                seen.ssh_ok = probes[name].ok
                seen.error = "" if probes[name].ok else probes[name].error
                self._suspect.discard(name)
            elif seen.state != state:
                seen.ssh_ok, seen.error = None, ""
            seen.state = state
        for gone in set(self._seen) - set(states):
            del self._seen[gone]

    def last(self, name: str) -> bool | None:
        """The result of ``name``'s last probe (None: never probed since its state changed)."""
        seen = self._seen.get(name)
        return seen.ssh_ok if seen is not None else None

    def last_error(self, name: str) -> str:
        """The error of ``name``'s last probe when it failed, else ""."""
        seen = self._seen.get(name)
        return seen.error if seen is not None else ""
