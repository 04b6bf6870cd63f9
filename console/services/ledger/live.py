"""The checkpoint advice, live: computed when a job is submitted and passed in its environment.

``advice.advise`` needs three measurements; at submit time they come from:

- the cost of a save ``C``: the engine's checkpoint lines (``CHECKPOINT_SAVED``, with each
  save's duration) in the logs of the jobs the cluster still knows (the newest few); the last
  cost measured is kept, so a resubmission after a head loss (the old logs gone with it)
  still has one;
- the mean time between preemptions ``M``: the journal's preemption rows, grouped into
  interruptions, over the journal's whole span less their recoveries
  (``advice.mean_time_between_preemptions``);
- the training rate (steps/s), to turn seconds into steps: the complete checkpoints in the
  storage, consecutive saves of one trainer process (their manifests' step, creation time and
  attempt), median over pairs; a pair across a preemption (a resume) is no rate.

The current interval is the job's own ``--checkpoint-every N`` (the engine's default for
``auto`` or none). The advice goes in the job's ``runtime_env.env_vars`` as
``advice.Advice.env`` says (``engine.contract``: read by ``--checkpoint-every auto``, which
says what it chose); a job whose own env sets the steps without the console's reason keeps
its own. Nothing here may stop a submit: a measurement that fails is "no advice", said why.
"""

from __future__ import annotations

import asyncio
import itertools
import logging
import shlex
import statistics
import time
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import replace
from typing import Any, Protocol, TypeVar

from console.services.ledger.advice import (
    Advice,
    NoAdvice,
    advise,
    checkpoint_cost,
    mean_time_between_preemptions,
)
from console.services.ledger.notices import Saved, saved_checkpoints
from console.services.model import JobInfo
from console.services.record.journal import Journal
from engine.contract import CHECKPOINT_ADVICE_REASON, CHECKPOINT_ADVICE_STEPS
from engine.trainconfig import DEFAULT_CHECKPOINT_EVERY as DEFAULT_EVERY

log = logging.getLogger(__name__)


class Submission(Protocol):
    """What the advice reads of a job about to be submitted (``jobs.spec.SubmitSpec``, a
    frozen dataclass): declared here, below the jobs room, which calls in."""

    @property
    def train_args(self) -> str: ...

    @property
    def runtime_env(self) -> Mapping[str, Any]: ...


S = TypeVar("S", bound=Submission)

LOGS_OF = 3  # newest jobs whose logs are read for the save's cost
READ_TIMEOUT_S = 10.0
CONSOLE_REASON = "Young/Daly"  # how the console's own advice reason begins (Advice.reason)


def steps_per_s(saved: Sequence[Saved]) -> float | None:
    """Median training rate over consecutive saves of one trainer process (None without two).

    Pairs only within one attempt (the manifest's ``attempt``): a pair across a preemption
    spans the recovery and the restart, no training rate at all. Saves without one (older
    manifests) pair within their run, the median outvoting such a pair.
    """
    rates = []
    by_attempt: dict[tuple[str, str], list[Saved]] = {}
    for s in saved:
        by_attempt.setdefault((s.run, s.attempt), []).append(s)
    for run_saves in by_attempt.values():
        run_saves.sort(key=lambda s: s.step)
        for a, b in itertools.pairwise(run_saves):
            dt = b.created_at - a.created_at
            if dt > 0 and b.step > a.step:
                rates.append((b.step - a.step) / dt)
    return statistics.median(rates) if rates else None


def current_every(train_args: str) -> int:
    """The job's ``--checkpoint-every N``, else the engine's default (``auto`` too)."""
    try:
        args = shlex.split(train_args)
    except ValueError:
        return DEFAULT_EVERY
    for i, arg in enumerate(args):
        value = ""
        if arg == "--checkpoint-every" and i + 1 < len(args):
            value = args[i + 1]
        elif arg.startswith("--checkpoint-every="):
            value = arg.split("=", 1)[1]
        if value.isdigit() and int(value) > 0:
            return int(value)
    return DEFAULT_EVERY


def with_advice(spec: S, advice: Advice | NoAdvice) -> S:
    """``spec`` with the advice in its env vars (a resubmission's older advice replaced; a
    user's own steps kept)."""
    if not isinstance(advice, Advice):
        return spec
    env = dict(spec.runtime_env)
    env_vars = dict(env.get("env_vars") or {})
    own = CHECKPOINT_ADVICE_STEPS in env_vars and not str(
        env_vars.get(CHECKPOINT_ADVICE_REASON, "")
    ).startswith(CONSOLE_REASON)
    if own:
        return spec
    env_vars.update(advice.env())
    env["env_vars"] = env_vars
    return replace(spec, runtime_env=env)  # type: ignore[type-var]  # S is a frozen dataclass


class LiveAdvisor:
    """``advise(spec)``: the advice for a job about to be submitted."""

    def __init__(
        self,
        journal: Journal,
        storage: str,
        *,
        hosts: int,
        job_logs: Callable[[], Awaitable[Sequence[str]]],
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.journal = journal
        self.storage = storage
        self.hosts = max(1, hosts)
        self.job_logs = job_logs
        self._clock = clock
        self.cost_s: float | None = None  # the last measured, kept across head losses
        self.last: Advice | NoAdvice | None = None

    async def advise(self, spec: Submission) -> Advice | NoAdvice:
        try:
            lines = await asyncio.wait_for(self.job_logs(), READ_TIMEOUT_S)
        except Exception as exc:  # the head may be gone (a resubmission): keep the last cost
            log.info("checkpoint advice: job logs not read (%s)", exc)
            lines = []
        cost = checkpoint_cost(lines)
        if cost is not None:
            self.cost_s = cost
        try:
            mtbf, rate = await asyncio.to_thread(self._measure)
        except Exception as exc:
            log.warning("checkpoint advice: journal or storage not read: %s", exc)
            mtbf = rate = None
        self.last = advise(self.cost_s, mtbf, rate, current_every(spec.train_args))
        log.info("%s", self.last.render())
        return self.last

    def _measure(self) -> tuple[float | None, float | None]:
        now = self._clock()
        first = self.journal.read("SELECT MIN(at) FROM events")[0][0]
        mtbf = None
        if first is not None and now > float(first):
            rows = self.journal.query(1_000_000)  # the recoveries' rows too (up time)
            mtbf = mean_time_between_preemptions(rows, float(first), now, self.hosts)
        rate = steps_per_s(saved_checkpoints(self.storage)) if self.storage else None
        return mtbf, rate

    async def advised(self, spec: S) -> S:
        """``spec`` with the advice in its environment (unchanged without advice)."""
        return with_advice(spec, await self.advise(spec))


async def newest_job_logs(
    list_jobs: Callable[[], Awaitable[Sequence[JobInfo]]],
    job_logs: Callable[[str], Awaitable[str]],
    n: int = LOGS_OF,
) -> list[str]:
    """The log lines of the ``n`` newest jobs the cluster lists (by their start time)."""
    jobs = sorted(await list_jobs(), key=lambda j: j.start_time or 0.0, reverse=True)
    lines: list[str] = []
    for job in jobs[:n]:
        lines += (await job_logs(job.job_id)).splitlines()
    return lines
