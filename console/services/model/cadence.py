"""Metric cadence per run: the verdict (steady, stalled, stale) and the run's latest metrics."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from enum import StrEnum


class CadenceVerdict(StrEnum):
    """What a run's cadence says: ``ok`` (logging at its usual pace, or not running),
    ``stalled`` (running and silent past the rule in ``cadence.rules``), ``stale`` (its
    source did not answer in time or could not be read: the numbers are not current)."""

    OK = "ok"
    STALLED = "stalled"
    STALE = "stale"


@dataclass(frozen=True)
class RunCadence:
    run_id: str
    name: str
    source: str  # "offline", "online" or "tensorboard"
    last_step: int | None
    last_at: float | None
    seconds_since: float | None
    median_interval_s: float | None
    steps_per_min: float | None
    recent_intervals: tuple[float, ...] = ()
    stalled: bool = False
    state: str = ""  # running / finished / crashed when known
    job: str = ""  # the console's job or workload the run belongs to, when known
    stale: str = ""  # why these numbers are not current (empty: they are)
    # Derived from ``stale`` and ``stalled`` (so ``replace`` cannot leave it behind).
    verdict: CadenceVerdict = field(init=False, default=CadenceVerdict.OK)

    def __post_init__(self) -> None:
        verdict = (
            CadenceVerdict.STALE
            if self.stale
            else CadenceVerdict.STALLED
            if self.stalled
            else CadenceVerdict.OK
        )
        object.__setattr__(self, "verdict", verdict)


@dataclass(frozen=True)
class RunMetrics:
    """A run's metric values for sparklines (GKE: the six Tunix metrics by their doc names,
    rewards/mean, score/mean, rollout_time, completions/mean_length, actor_dequeue_time,
    step_time_sec). ``series`` holds the newest (step, value) pairs per metric, one value per
    step (a step logged again after a restart keeps its newest value)."""

    run_id: str
    name: str
    series: Mapping[str, tuple[tuple[int, float], ...]] = field(default_factory=dict)
    last_step: int | None = None
    at: float | None = None  # the writer's time of the newest value
