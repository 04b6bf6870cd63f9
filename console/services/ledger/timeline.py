"""A span of wall time painted with causes: every second gets exactly one.

Intervals carry a cause and a priority; where they overlap the highest priority wins, and the
span's own base cause fills what nothing covers. So the segments of a painted span always
sum to its length (badput plus productive time is wall time, by construction, not by hope).
"""

from __future__ import annotations

import heapq
import itertools
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from enum import StrEnum


class Cause(StrEnum):
    """Where a second of wall time went (the ledger's words; badput is all but productive)."""

    PRODUCTIVE = "productive"  # training that was kept
    DETECT = "detect"  # the loss happened, nobody knew yet
    RECOVER = "recover"  # a recovery step ran (``Segment.detail``: which)
    CAPACITY = "capacity"  # waiting for TPU capacity (stockouts, quota)
    WARMUP = "warmup"  # process started, first training step not yet
    REDONE = "redone"  # steps computed again after resuming from an older checkpoint
    QUEUED = "queued"  # submitted, not running, no incident to blame
    IDLE = "idle"  # (cluster) the pod was up and no job ran


BADPUT = tuple(c for c in Cause if c is not Cause.PRODUCTIVE)
# Higher wins: an incident hides whatever the job was said to do meanwhile.
PRIORITY = {
    Cause.DETECT: 70,
    Cause.CAPACITY: 60,
    Cause.RECOVER: 50,
    Cause.WARMUP: 40,
    Cause.REDONE: 30,
    Cause.PRODUCTIVE: 20,
    Cause.QUEUED: 10,
    Cause.IDLE: 0,
}
# The pod's bar: it trained while any job did, so one job's training hides another's
# warm-up, redone work or wait (an incident still hides everything).
POD_PRIORITY = {**PRIORITY, Cause.PRODUCTIVE: 45}


@dataclass(frozen=True)
class Segment:
    start: float
    end: float
    cause: Cause
    detail: str = ""  # the recovery step, the incident id, ...

    @property
    def seconds(self) -> float:
        return self.end - self.start


@dataclass(frozen=True)
class Paint:
    """One interval to paint; ``rank`` orders equals (later recovery steps over earlier)."""

    start: float
    end: float
    cause: Cause
    detail: str = ""
    rank: float = 0.0


def paint(
    start: float,
    end: float,
    base: Cause,
    paints: Iterable[Paint],
    priority: Mapping[Cause, int] = PRIORITY,
) -> list[Segment]:
    """``[start, end]`` as adjacent segments (merged where cause and detail repeat).

    A sweep over the cut points with a heap of the paints begun so far (the ones that have
    ended are dropped when they reach the top): O(n log n) in the number of paints, so a
    journal of thousands of incidents paints in milliseconds.
    """
    if end <= start:
        return []
    items = [p for p in paints if p.end > start and p.start < end and p.end > p.start]
    cuts = sorted(
        {start, end, *(max(start, p.start) for p in items), *(min(end, p.end) for p in items)}
    )
    order = sorted(range(len(items)), key=lambda k: items[k].start)
    heap: list[tuple[int, float, int]] = []  # (-priority, -rank, index): ties go to the first given
    nxt = 0
    out: list[Segment] = []
    for a, b in itertools.pairwise(cuts):
        while nxt < len(order) and max(start, items[order[nxt]].start) <= a:
            k = order[nxt]
            heapq.heappush(heap, (-priority[items[k].cause], -items[k].rank, k))
            nxt += 1
        while heap and items[heap[0][2]].end <= a:
            heapq.heappop(heap)
        top = items[heap[0][2]] if heap else None
        cause, detail = (top.cause, top.detail) if top is not None else (base, "")
        if out and out[-1].cause == cause and out[-1].detail == detail and out[-1].end == a:
            out[-1] = Segment(out[-1].start, b, cause, detail)
        else:
            out.append(Segment(a, b, cause, detail))
    return out


def totals(segments: Sequence[Segment]) -> dict[Cause, float]:
    """Seconds per cause (every cause present, 0 where none)."""
    out = dict.fromkeys(Cause, 0.0)
    for s in segments:
        out[s.cause] += s.seconds
    return out


def by_detail(segments: Sequence[Segment], cause: Cause) -> dict[str, float]:
    """Seconds per detail of one cause (recovery seconds per step)."""
    out: dict[str, float] = {}
    for s in segments:
        if s.cause is cause:
            out[s.detail] = out.get(s.detail, 0.0) + s.seconds
    return out
