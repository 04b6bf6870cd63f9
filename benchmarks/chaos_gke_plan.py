"""The GKE chaos drill's plan (seeded events: which kind, which target, where in the
checkpoint period) and the workload's own record of its steps (the coordinator's attempts
read from the kubelet's CRI logs, stitched into the final record)."""

from __future__ import annotations

import contextlib
import random
import re
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

PREEMPT_GRACE = "preempt-grace"
PREEMPT_ABRUPT = "preempt-abrupt"
NODE_FAILURE = "node-failure"
CRASH = "crash"
KINDS = (PREEMPT_GRACE, PREEMPT_ABRUPT, NODE_FAILURE, CRASH)
COORDINATOR, WORKER, SLICE = "coordinator", "worker", "slice"
_STEP = re.compile(r"completed step: (\d+),")
_RESTORED = re.compile(r"Restoring checkpoint from .* \(step (\d+)\)")


# -- the plan --------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Shot:
    index: int
    kind: str
    target: str  # SLICE for a preemption, else COORDINATOR or WORKER
    cycle: float  # where in the checkpoint period it lands, 0..1

    @property
    def graceful(self) -> bool:
        """Whether the coordinator (the checkpoint writer) gets its SIGTERM and grace."""
        if self.kind == PREEMPT_GRACE:
            return True
        if self.kind == PREEMPT_ABRUPT:
            return False
        return self.target == WORKER

    def describe(self) -> str:
        target = "" if self.target == SLICE else f" {self.target}"
        return f"#{self.index} {self.kind}{target} @{self.cycle:.2f}"


def plan(seed: int, count: int) -> list[Shot]:
    """``count`` events: every kind once in each run of four (shuffled), targets and cycle
    points drawn from ``seed``."""
    rng = random.Random(seed)
    kinds: list[str] = []
    while len(kinds) < count:
        batch = list(KINDS)
        rng.shuffle(batch)
        kinds += batch
    shots = []
    for i, kind in enumerate(kinds[:count], 1):
        target = SLICE if kind.startswith("preempt") else rng.choice((COORDINATOR, WORKER))
        shots.append(Shot(i, kind, target, round(rng.uniform(0.1, 0.9), 2)))
    return shots


# -- the workload's own record ---------------------------------------------------------------------
@dataclass
class Attempt:
    """One coordinator pod's run: where it resumed and the last step it completed."""

    pod: str
    first_at: str  # its log's first CRI timestamp (orders the attempts)
    start: int = 0
    reached: int = 0
    done: bool = False


def read_attempts(run_dir: Path, name: str) -> list[Attempt]:
    """The coordinator's attempts, oldest first, from the kubelet's CRI log files."""
    out = []
    for d in (run_dir / "logs").glob(f"default_{name}-slice-job-0-0-*"):
        lines: list[str] = []
        for f in sorted(d.glob("*/*.log")):
            with contextlib.suppress(OSError):
                lines += f.read_text(errors="replace").splitlines()
        if not lines:
            continue
        a = Attempt(d.name, lines[0].split(" ", 1)[0])
        for ln in lines:
            text = ln.split(" ", 3)[-1]
            if m := _STEP.match(text):
                a.reached = max(a.reached, int(m.group(1)))
            elif m := _RESTORED.search(text):
                a.start = int(m.group(1))
            elif "Training completed" in text:
                a.done = True
        a.reached = max(a.reached, a.start)
        out.append(a)
    return sorted(out, key=lambda a: a.first_at)


def stitch(attempts: Sequence[Attempt]) -> tuple[list[int], list[str]]:
    """The final record (each attempt's steps up to where the next one resumed) and what is
    wrong with it (a gap: an attempt resumed past the step its predecessor reached)."""
    steps: list[int] = []
    problems = []
    for i, a in enumerate(attempts):
        end = attempts[i + 1].start if i + 1 < len(attempts) else a.reached
        if end > a.reached:
            problems.append(
                f"attempt {i + 2} resumed at step {end}, past {a.reached} where attempt "
                f"{i + 1} stopped: steps {a.reached + 1}..{end} never ran"
            )
        steps += range(a.start + 1, min(end, a.reached) + 1)
    return steps, problems


__all__ = [
    "COORDINATOR",
    "CRASH",
    "KINDS",
    "NODE_FAILURE",
    "PREEMPT_ABRUPT",
    "PREEMPT_GRACE",
    "SLICE",
    "WORKER",
    "Attempt",
    "Shot",
    "plan",
    "read_attempts",
    "stitch",
]
