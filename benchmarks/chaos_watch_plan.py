"""The watch drill's plan and its figures (no I/O here).

``draw`` is the seeded schedule of one phase: for each first kill, its kind (a worker's VM,
the head's, the whole slice), whether a second kill overlaps it and whether the watcher is
SIGKILLed in its recovery. The Tune phase draws its own (``chaos_watch.schedule``), the W&B
phase its own (``wandb_plan``: a head and a worker at least, the watcher killed in a head's
recovery first: the one that relaunches the agents). ``kill_counts``, ``mttr_by_kind`` and
``lost_past_checkpoint`` make the figures, of the whole drill or of one phase
(``phase_figures``: the same keys with the phase's prefix).
"""

from __future__ import annotations

import random
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

WORKER, HEAD, SLICE = "worker", "head", "slice"
KINDS = (WORKER, HEAD, SLICE)
TUNE, WANDB = "tune", "wandb"  # the drill's phases: a Ray Tune sweep, then one on W&B


@dataclass
class Kill:
    index: int
    kind: str
    hosts: list[str]
    at: float
    overlap_of: int | None = None  # the kill this one overlaps
    watcher_killed: bool = False
    phase: str = TUNE


def draw(
    rng: random.Random,
    kills: int,
    overlaps: int,
    watcher_kills: int,
    fixed: Sequence[str] = (),
    watcher_first: str | None = None,
) -> list[tuple[str, bool, bool]]:
    """``kills`` first kills: the ``fixed`` kinds, the rest a worker or (3 in 10) the head,
    shuffled; ``overlaps`` of them followed by a second kill, ``watcher_kills`` with the
    watcher SIGKILLed in their recovery (kills of kind ``watcher_first`` chosen first)."""
    kinds = list(fixed)[:kills]
    kinds += [HEAD if rng.random() < 0.3 else WORKER for _ in range(kills - len(kinds))]
    rng.shuffle(kinds)
    overlapped = set(rng.sample(range(kills), min(overlaps, kills)))
    n = min(watcher_kills, kills)
    if watcher_first is None:
        watcher = set(rng.sample(range(kills), n))
    else:
        first = [i for i, k in enumerate(kinds) if k == watcher_first]
        others = [i for i, k in enumerate(kinds) if k != watcher_first]
        picked = rng.sample(first, min(n, len(first)))
        watcher = set(picked + rng.sample(others, n - len(picked)))
    return [(kinds[i], i in overlapped, i in watcher) for i in range(kills)]


def wandb_plan(
    seed: int, kills: int, overlaps: int, watcher_kills: int
) -> list[tuple[str, bool, bool]]:
    """The W&B phase's kills: the head at least once (its job's driver goes with it: the
    watcher relaunches the agents with the sweep id) and a worker (agents retried by Ray);
    the watcher killed in a head's recovery first. No whole slice: a head and its workers
    are already both covered, and the phase stays short."""
    rng = random.Random(seed * 7919 + 2)
    return draw(rng, kills, overlaps, watcher_kills, fixed=(HEAD, WORKER), watcher_first=HEAD)


def kill_counts(kills: Sequence[Kill]) -> dict[str, Any]:
    return {
        "kills": len(kills),
        "kills_by_kind": {k: sum(1 for x in kills if x.kind == k) for k in KINDS},
        "overlaps": sum(1 for x in kills if x.overlap_of is not None),
        "watcher_kills": sum(1 for x in kills if x.watcher_killed),
        "hosts_killed": sum(len(x.hosts) for x in kills),
    }


def mttr_by_kind(
    recoveries: Sequence[tuple[float, float | None, float | None]],
    kills: Sequence[Kill],
    phase: str | None = None,
) -> dict[str, dict[str, Any]]:
    """MTTR (median, max) by the kind of the kill each recovery was for; with ``phase``, only
    the recoveries of that phase's kills. ``recoveries``: (started_at, ended_at, mttr_s), in
    order; mttr_s None for one that did not end recovered. A recovery is for the first kill
    since the previous one ended recovered (not an overlapping one, when there is such a
    kill): an overlapping loss joins the recovery under way, and a watcher restarted
    mid-recovery starts it again, after the overlap perhaps, owing it to the kill that opened
    it; a recovery that failed leaves its kill to the next."""
    mttr: dict[str, list[float]] = {}
    prev_end = float("-inf")
    for started_at, ended_at, mttr_s in recoveries:
        if mttr_s is None:
            continue
        window = [k for k in kills if prev_end < k.at <= started_at]
        firsts = [k for k in window if k.overlap_of is None] or window
        if ended_at is not None:
            prev_end = ended_at
        if firsts and (phase is None or firsts[0].phase == phase):
            mttr.setdefault(firsts[0].kind, []).append(mttr_s)
    return {
        k: {"n": len(v), "median": round(sorted(v)[len(v) // 2], 1), "max": round(max(v), 1)}
        for k, v in mttr.items()
    }


def lost_past_checkpoint(runs: Iterable[Sequence[tuple[int, int]]]) -> int:
    """Steps redone before a checkpoint: each run's attempts in order, as (the step it
    resumed from, its last checkpoint); an attempt that resumes before the newest checkpoint
    of those before it lost the difference (0 when each resumes at the last checkpoint)."""
    lost = 0
    for attempts in runs:
        best = 0
        for resumed, saved in attempts:
            lost += max(0, best - resumed)
            best = max(best, saved)
    return lost


def phase_figures(
    prefix: str,
    kills: Sequence[Kill],
    recoveries: Sequence[tuple[float, float | None, float | None]],
    phase: str,
) -> dict[str, Any]:
    """One phase's kill counts and MTTR by kind, under the phase's prefix."""
    mine = [k for k in kills if k.phase == phase]
    figs = {**kill_counts(mine), "mttr_s_by_kind": mttr_by_kind(recoveries, kills, phase)}
    return {f"{prefix}{k}": v for k, v in figs.items()}
