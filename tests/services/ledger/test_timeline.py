"""Painting a span: the highest priority wins where intervals overlap, and the segments
always tile the span exactly (so badput + productive = wall time for any rows)."""

from __future__ import annotations

import itertools
import math
import random

import pytest

from console.services.ledger.timeline import PRIORITY, Cause, Paint, Segment, paint, totals


def reference(start: float, end: float, base: Cause, paints: list[Paint]) -> list[Segment]:
    """The definition, cell by cell: at each elementary interval the highest (priority,
    rank) covering it, the first given among equals."""
    items = [p for p in paints if p.end > start and p.start < end and p.end > p.start]
    cuts = sorted(
        {start, end, *(max(start, p.start) for p in items), *(min(end, p.end) for p in items)}
    )
    out: list[Segment] = []
    for a, b in itertools.pairwise(cuts):
        over = [p for p in items if p.start <= a and p.end >= b]
        top = max(over, key=lambda p: (PRIORITY[p.cause], p.rank), default=None)
        cause, detail = (top.cause, top.detail) if top else (base, "")
        if out and (out[-1].cause, out[-1].detail) == (cause, detail):
            out[-1] = Segment(out[-1].start, b, cause, detail)
        else:
            out.append(Segment(a, b, cause, detail))
    return out


def test_priority_and_rank_decide_overlaps() -> None:
    segs = paint(
        0.0,
        10.0,
        Cause.QUEUED,
        [
            Paint(1.0, 9.0, Cause.PRODUCTIVE),
            Paint(2.0, 4.0, Cause.RECOVER, "head", rank=2.0),
            Paint(3.0, 5.0, Cause.RECOVER, "workers", rank=3.0),
            Paint(8.0, 12.0, Cause.DETECT),
        ],
    )
    assert segs == [
        Segment(0.0, 1.0, Cause.QUEUED),
        Segment(1.0, 2.0, Cause.PRODUCTIVE),
        Segment(2.0, 3.0, Cause.RECOVER, "head"),
        Segment(3.0, 5.0, Cause.RECOVER, "workers"),
        Segment(5.0, 8.0, Cause.PRODUCTIVE),
        Segment(8.0, 10.0, Cause.DETECT),
    ]


@pytest.mark.parametrize("seed", range(20))
def test_segments_tile_the_span_for_any_paints(seed: int) -> None:
    rng = random.Random(seed)
    start, end = rng.uniform(-50, 50), rng.uniform(60, 500)
    paints = []
    for _ in range(rng.randint(0, 40)):
        a = rng.uniform(-100, 600)
        paints.append(
            Paint(a, a + rng.expovariate(0.05), rng.choice(list(Cause)), str(rng.randint(0, 3)))
        )
    segs = paint(start, end, Cause.IDLE, paints)
    assert segs == reference(start, end, Cause.IDLE, paints)
    assert segs[0].start == start and segs[-1].end == end
    assert all(a.end == b.start for a, b in itertools.pairwise(segs))
    assert math.fsum(totals(segs).values()) == pytest.approx(end - start, abs=1e-9)


def test_an_empty_span_has_no_segments() -> None:
    assert paint(5.0, 5.0, Cause.IDLE, [Paint(0, 10, Cause.PRODUCTIVE)]) == []
