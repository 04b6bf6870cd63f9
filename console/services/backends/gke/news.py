"""Which watch events are news for detection: they wake the facade's pod poll soon.

The informers hear every change as it happens; the facade polls on an interval. A change
that detection acts on (a TPU node shutting down, gone or Ready again; a pod told its node
is going away, or failed; a JobSet restarting or ending) asks for a poll now, as the TPU VM
backend does on a preemption notice or a dropped connection, so the preemption is seen in
about the time the watch takes, not up to a whole interval later. Anything else (events,
status churn of running pods) waits for the poll: the signature of each object is compared
with the last one seen, so a flood of updates wakes it only on the transitions.

GKE reclaims a TPU slice as one, but its nodes' changes arrive as a burst of watch events
(one per node). The wake comes once the burst has been quiet for ``SETTLE_S`` (each news
puts it off, to at most ``SETTLE_MAX_S`` after the first), so the poll sees the slice whole
and the journal words it once ("8/8 nodes lost"), not once per node. A fixed delay from the
first news was not enough: on a loaded machine a slice's 8 node events spanned more than
it, the poll saw "1/8 nodes lost" and the next one the rest, two `preempted` rows.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Hashable

from console.services.backends.gke import status as S
from console.services.backends.gke.informer import Informer
from console.services.backends.gke.kube import Obj, WatchType
from console.services.backends.gke.observe import Caches

SETTLE_S = 0.25  # news this close together are one burst (a slice's nodes, its pods)
SETTLE_MAX_S = 2.0  # a burst that goes on longer wakes the poll anyway


def node_signature(node: Obj) -> Hashable:
    """A TPU node's HostState (None: not a TPU node, never news)."""
    return S.node_state(node)[0] if S.is_tpu_node(node) else None


def pod_signature(pod: Obj) -> Hashable:
    """A pod that failed or whose node is being taken away (None: neither, never news)."""
    failed = (pod.get("status") or {}).get("phase") == "Failed"
    disrupted = S.condition_true(pod, "DisruptionTarget")
    return (failed, disrupted) if failed or disrupted else None


def workload_signature(obj: Obj) -> Hashable:
    """A JobSet's restart count and end, or a Job's end (Complete / Failed conditions)."""
    st = obj.get("status") or {}
    ended = tuple(S.condition_true(obj, c) for c in ("Completed", "Failed", "Complete"))
    return (int(st.get("restarts", 0) or 0), st.get("terminalState") or "", ended)


class News:
    """Calls ``wake`` when a watched object's signature changes (a deleted object's is
    None). The first list fills the cache: that is the state, not news."""

    def __init__(
        self,
        wake: Callable[[], None],
        settle_s: float = SETTLE_S,
        settle_max_s: float = SETTLE_MAX_S,
    ) -> None:
        self.wake = wake
        self.settle_s = settle_s
        self.settle_max_s = settle_max_s
        self._first = 0.0  # when the burst's first news came (the loop's clock)
        self.woken = 0  # how many changes were news
        self._pending: asyncio.TimerHandle | None = None

    def watch_caches(self, caches: Caches) -> None:
        self.watch(caches.nodes, node_signature)
        self.watch(caches.pods, pod_signature)
        self.watch(caches.jobsets, workload_signature)
        self.watch(caches.jobs, workload_signature)

    def watch(self, informer: Informer, signature: Callable[[Obj], Hashable]) -> None:
        seen: dict[str, Hashable] = {}

        def listener(kind: str, obj: Obj) -> None:
            name = str(S.meta(obj).get("name") or "")
            before = seen.pop(name, None)
            now = None if kind == WatchType.DELETED else signature(obj)
            if now is not None:
                seen[name] = now
            if before != now and informer.synced.is_set():
                self.woken += 1
                self._soon()

        informer.add_listener(listener)

    def _soon(self) -> None:
        loop = asyncio.get_running_loop()
        now = loop.time()
        if self._pending is None:
            self._first = now
        else:  # a burst's later news put its wake off, to at most settle_max_s
            self._pending.cancel()
        at = min(now + self.settle_s, self._first + self.settle_max_s)
        self._pending = loop.call_at(at, self._fire)

    def cancel(self) -> None:
        if self._pending is not None:
            self._pending.cancel()
            self._pending = None

    def _fire(self) -> None:
        self._pending = None
        self.wake()
