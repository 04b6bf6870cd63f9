"""Follow a pod's log the way ``kubectl logs -f`` would, if it never gave up.

In life a follow ends: the kubelet or a proxy closes an idle stream, a container restarts,
a preemption replaces the pod. ``follow`` keeps going across all of it:

* the server closes the stream -> ask again with ``since_seconds`` reaching back past the
  last line seen (kubernetes-asyncio has no ``sinceTime``) and ``timestamps=True``, and drop
  every line at or before the last one delivered (``LogCursor``): no line twice, none lost;
* the container restarted (restartCount grew) -> first what the old instance wrote after
  the cursor (``previous=True``), then the new instance from its start;
* the pod was replaced (a JobSet restart, a Job's new pod) -> ``resolve`` names the new pod
  and its log is followed from its start.

``resolve`` and ``finished`` read the backend's watch caches: waiting for a pod to start
costs no request.
"""

from __future__ import annotations

import asyncio
import math
import time
from collections.abc import AsyncIterator, Callable, Sequence
from dataclasses import dataclass, field
from datetime import datetime

from console.services.backends.gke.kube import KubeApi, KubeError, LogRequest

# How far further back than the last line a resumed follow asks: covers a clock difference
# between this machine and the node; what it re-reads is dropped by the cursor.
RESUME_MARGIN_S = 10


def parse_ts(ts: str) -> int | None:
    """Nanoseconds since the epoch of an RFC3339(Nano) timestamp, None if it is not one.
    Kubelets trim trailing zeros from the fraction, so strings do not compare as text."""
    if not ts or not ts.endswith("Z") or "T" not in ts:
        return None
    base, _, frac = ts[:-1].partition(".")
    try:
        seconds = datetime.fromisoformat(base + "+00:00").timestamp()
    except ValueError:
        return None
    digits = (frac + "000000000")[:9]
    if not digits.isdigit():
        return None
    return int(seconds) * 1_000_000_000 + int(digits)


@dataclass
class LogCursor:
    """Where a reader of one container instance's log stands: the last line's timestamp and
    how many lines carried exactly that timestamp (a burst can share one)."""

    last: int | None = None
    same: int = 0
    _replay: int = field(default=0, repr=False)  # lines at ``last`` a new request repeats

    def accept(self, ts: int) -> bool:
        """Whether a line stamped ``ts`` is new; advances the cursor when it is. Lines arrive
        in log order, so the first ``same`` lines at ``last`` of a request were seen."""
        if self.last is None or ts > self.last:
            self.last, self.same, self._replay = ts, 1, 0
            return True
        if ts < self.last:
            return False
        if self._replay > 0:
            self._replay -= 1
            return False
        self.same += 1
        return True

    def rewind(self) -> None:
        """A new request starts: the lines at ``last`` will be sent again from the first."""
        self._replay = self.same

    def since_seconds(self, now: float) -> int | None:
        if self.last is None:
            return None
        age = now - self.last / 1e9
        return max(1, math.ceil(age) + RESUME_MARGIN_S)


@dataclass(frozen=True)
class PodTarget:
    """The pod (and container) whose log is the stream's current source."""

    name: str
    uid: str
    container: str
    restarts: int  # the container's restartCount
    started: bool  # the container has run (there is a log to read)
    terminal: bool  # the pod is Succeeded/Failed: no more lines will come


@dataclass(frozen=True)
class LogEntry:
    pod: str
    text: str
    ts: int | None


async def follow(
    api: KubeApi,
    resolve: Callable[[], PodTarget | None],
    finished: Callable[[], bool],
    *,
    wait_change: Callable[[float], object] | None = None,
    idle_s: float = 1.0,
    clock: Callable[[], float] = time.time,
    backlog: Sequence[PodTarget] = (),
) -> AsyncIterator[LogEntry]:
    """Every line of the stream's pods, in order, each once. Ends when ``finished()`` and
    the current pod's log is read to its end.

    ``resolve`` names the pod to read now (None: none yet); ``wait_change`` (the caches'
    change signal) is awaited instead of sleeping while there is nothing to read;
    ``backlog``: ended pods that came before (a Job's failed pods), read first.
    """
    for old in backlog:
        try:
            async for entry in _read(api, old, LogCursor(), previous=False, clock=clock):
                yield entry
        except KubeError as exc:
            if exc.status not in (400, 404):
                raise
    current: PodTarget | None = None
    cursor = LogCursor()
    previous_misses = 0
    settled = False  # the end was seen once: looked again after the caches settled

    async def idle() -> None:
        if wait_change is not None:
            result = wait_change(idle_s)
            if asyncio.iscoroutine(result):
                await result
                return
        await asyncio.sleep(idle_s)

    while True:
        target = resolve()
        if target is None or not target.started:
            if finished() and (target is None or target.terminal):
                return
            await idle()
            continue
        if current is None or target.uid != current.uid:
            cursor = LogCursor()  # a new pod (another node's clock): its log from its start
            previous_misses = 0
        elif target.restarts > current.restarts:
            try:
                async for entry in _read(api, target, cursor, previous=True, clock=clock):
                    yield entry
            except KubeError as exc:
                # The restart is counted before the new instance runs: until it does there
                # is no "previous" yet. Look again (a few times: a kubelet may have lost it).
                if exc.status not in (400, 404):
                    raise
                previous_misses += 1
                if previous_misses < 5:
                    await idle()
                    continue
            previous_misses = 0
            cursor = LogCursor()  # the new instance, from its start
        current = target
        got_any = False
        try:
            async for entry in _read(api, target, cursor, previous=False, clock=clock):
                got_any = True
                yield entry
        except KubeError as exc:
            if exc.status not in (400, 404):
                raise
            # waiting to start, or gone since the cache saw it: look again after a change
        now_target = resolve()
        if finished() and (now_target is None or now_target.terminal):
            # One last read: lines written between the stream's end and the verdict.
            if now_target is not None and now_target.uid == target.uid:
                try:
                    async for entry in _read(api, now_target, cursor, False, clock=clock):
                        yield entry
                except KubeError:
                    pass
            if now_target is None or now_target.uid == target.uid:
                # The workload's cache may be ahead of the pods' (two watches): one more
                # look after the pods settle, in case a replacement pod ran meanwhile.
                if settled:
                    return
                settled = True
                await idle()
                continue
        settled = False
        if not got_any:
            await idle()


async def _read(
    api: KubeApi,
    target: PodTarget,
    cursor: LogCursor,
    previous: bool,
    *,
    clock: Callable[[], float],
) -> AsyncIterator[LogEntry]:
    cursor.rewind()
    request = LogRequest(
        pod=target.name,
        container=target.container,
        follow=not previous and not target.terminal,
        timestamps=True,
        since_seconds=cursor.since_seconds(clock()),
        previous=previous,
    )
    async for raw in api.log(request):
        ts_text, _, text = raw.partition(" ")
        ts = parse_ts(ts_text)
        if ts is None:  # not a timestamped line (should not happen): keep it
            yield LogEntry(target.name, raw, None)
            continue
        if cursor.accept(ts):
            yield LogEntry(target.name, text, ts)


async def read_log(api: KubeApi, pod: str, container: str = "", tail: int | None = None) -> str:
    """A pod's log so far (no follow), as one string."""
    lines = [
        line async for line in api.log(LogRequest(pod=pod, container=container, tail_lines=tail))
    ]
    return "\n".join(lines) + ("\n" if lines else "")
