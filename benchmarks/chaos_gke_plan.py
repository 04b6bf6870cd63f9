"""The GKE chaos drill's plan (seeded events: which kind, which target, where in the
checkpoint period, which overlap a second disruption, which kill the watcher mid-recovery)
and the workload's own record of its steps (the coordinator's attempts read from the
kubelet's CRI logs, stitched into the final record)."""

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
OOM = "oom"  # the OOM killer: exit 137, reason OOMKilled
EVICT = "evict"  # the pod's node cordoned and drained (the Eviction API)
KINDS = (PREEMPT_GRACE, PREEMPT_ABRUPT, NODE_FAILURE, CRASH, OOM, EVICT)
# The five kinds of disruption, each drill kind in one of them.
FAMILY = {
    PREEMPT_GRACE: "slice-preemption",
    PREEMPT_ABRUPT: "slice-preemption",
    NODE_FAILURE: "node-failure",
    CRASH: "pod-crash",
    OOM: "oom-kill",
    EVICT: "eviction",
}
FAMILIES = ("slice-preemption", "pod-crash", "oom-kill", "node-failure", "eviction")
POD_LEVEL = (CRASH, OOM, EVICT)  # the slice's nodes stay Ready: a second may follow at once
NODE_LEVEL = (PREEMPT_GRACE, PREEMPT_ABRUPT, NODE_FAILURE)  # these open a watchdog recovery
COORDINATOR, WORKER, SLICE = "coordinator", "worker", "slice"
_STEP = re.compile(r"completed step: (\d+),")
_RESTORED = re.compile(r"Restoring checkpoint from .* \(step (\d+)\)")
_SAVED = re.compile(r"[Ss]aved a checkpoint at step (\d+)")


# -- the plan --------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Shot:
    index: int
    kind: str
    target: str  # SLICE for a preemption, else COORDINATOR or WORKER
    cycle: float  # where in the checkpoint period it lands, 0..1
    # A second disruption fired ``overlap_after`` seconds after this one, before training
    # resumed (its index, kind and target; its cycle unused).
    overlap: Shot | None = None
    overlap_after: float = 0.0
    # SIGKILL the watcher ``kill_after`` seconds into the recovery this shot opens, and
    # start it again ``restart_after`` seconds later (as systemd would).
    kill_after: float | None = None
    restart_after: float = 0.0

    @property
    def graceful(self) -> bool:
        """Whether the coordinator (the checkpoint writer) gets its SIGTERM and grace."""
        if self.kind in (PREEMPT_GRACE, EVICT):
            return True
        if self.kind == PREEMPT_ABRUPT:
            return False
        return self.target == WORKER

    @property
    def family(self) -> str:
        return FAMILY[self.kind]

    def disruptions(self) -> list[Shot]:
        """This shot and the one overlapping it."""
        return [self] if self.overlap is None else [self, self.overlap]

    def describe(self) -> str:
        target = "" if self.target == SLICE else f" {self.target}"
        text = f"#{self.index} {self.kind}{target} @{self.cycle:.2f}"
        if self.overlap is not None:
            o = self.overlap
            otarget = "" if o.target == SLICE else f" {o.target}"
            text += f" +{self.overlap_after:.1f}s #{o.index} {o.kind}{otarget}"
        if self.kill_after is not None:
            text += f" (watcher SIGKILL +{self.kill_after:.1f}s, up +{self.restart_after:.1f}s)"
        return text


def _target(rng: random.Random, kind: str) -> str:
    return SLICE if kind.startswith("preempt") else rng.choice((COORDINATOR, WORKER))


def plan(seed: int, count: int, overlaps: int = 0, kills: int = 0) -> list[Shot]:
    """``count`` disruptions: every kind once in each run of six (shuffled), targets and
    cycle points drawn from ``seed``; ``overlaps`` of them follow a pod-level one (a crash,
    an OOM kill, an eviction) 2-8 s later, a slice preemption or a node failure, while the
    JobSet restarts; ``kills`` shots that open a watchdog recovery (a preemption or a node
    failure, first or second of a pair) SIGKILL the watcher 1-6 s into it, up again 0-3 s
    later."""
    if not 0 <= overlaps <= count // 2:
        raise ValueError(f"overlaps must be 0..{count // 2} for {count} disruptions")
    rng = random.Random(seed)
    kinds: list[str] = []
    while len(kinds) < count - overlaps:
        batch = list(KINDS)
        rng.shuffle(batch)
        kinds += batch
    kinds = kinds[: count - overlaps]
    pod_level = [i for i, k in enumerate(kinds) if k in POD_LEVEL]
    if len(pod_level) < overlaps:  # too few to carry them: turn others into pod-level ones
        others = [i for i, k in enumerate(kinds) if k not in POD_LEVEL]
        for i in others[: overlaps - len(pod_level)]:
            kinds[i] = rng.choice(POD_LEVEL)
        pod_level = [i for i, k in enumerate(kinds) if k in POD_LEVEL]
    carriers = set(rng.sample(pod_level, overlaps))
    shots: list[Shot] = []
    n = 0
    for i, kind in enumerate(kinds):
        n += 1
        index, target, cycle = n, _target(rng, kind), round(rng.uniform(0.1, 0.9), 2)
        overlap, after = None, 0.0
        if i in carriers:
            n += 1
            second = rng.choice(NODE_LEVEL)
            overlap = Shot(n, second, _target(rng, second), 0.0)
            after = round(rng.uniform(2.0, 8.0), 1)
        shots.append(Shot(index, kind, target, cycle, overlap, after))
    recovering = [
        i
        for i, s in enumerate(shots)
        if s.kind in NODE_LEVEL or (s.overlap is not None and s.overlap.kind in NODE_LEVEL)
    ]
    if len(recovering) < kills:
        raise ValueError(f"{kills} watcher kills need as many preemptions or node failures")
    for i in sorted(rng.sample(recovering, kills)):
        s = shots[i]
        shots[i] = Shot(
            s.index,
            s.kind,
            s.target,
            s.cycle,
            s.overlap,
            s.overlap_after,
            round(rng.uniform(1.0, 6.0), 1),
            round(rng.uniform(0.0, 3.0), 1),
        )
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
    saved: int = 0  # the newest checkpoint it wrote (0: none)


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
            elif m := _SAVED.search(text):
                a.saved = max(a.saved, int(m.group(1)))
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
    "EVICT",
    "FAMILIES",
    "FAMILY",
    "KINDS",
    "NODE_FAILURE",
    "NODE_LEVEL",
    "OOM",
    "POD_LEVEL",
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
