"""Several front ends on one pod: the journal is how they hear each other.

Every process follows the journal (rows written after the last one it saw) and publishes
what *other* processes wrote on its own bus, so a console in tmux shows a cron script's
submit, and a script's ``wait-event`` sees the TUI's recovery. The process holding the pod's
``watch`` lease also takes instructions from the rows: a ``recovery_requested`` starts the
recovery, another front end's teardown disarms the watchdog and its bring-up arms it, an
``auto recovery on|off`` switches it. A follower builds the recovery's progress from the
owner's rows (``RecoveryView``), so both front ends show the same steps.
"""

from __future__ import annotations

import asyncio
import os
import socket
from collections.abc import Callable, Sequence
from dataclasses import replace
from typing import Protocol

from console.services.model import (
    Event,
    EventKind,
    RecoveryOutcome,
    RecoveryStatus,
    RecoveryStep,
    StepState,
    Update,
)
from console.services.record.journal import (
    ACTION,
    RECOVERED,
    RECOVERY_FAILED,
    RECOVERY_STARTED,
    Journal,
    Recovery,
    trigger_of,
)
from console.services.record.lease import PodLeases
from console.services.record.sink import EventSink

RECOVERY_REQUESTED = EventKind.RECOVERY_REQUESTED
_ENDS = (RECOVERED, RECOVERY_FAILED)


class Recoverer(Protocol):
    """What sharing drives in this process's watchdog (``recovery.watchdog.Watchdog``).

    Declared here, below the recovery room, so the journal's room never imports it: the
    facade hands its watchdog in."""

    @property
    def sink(self) -> EventSink: ...

    @property
    def status(self) -> RecoveryStatus: ...

    @property
    def auto(self) -> bool: ...

    @property
    def step_names(self) -> Sequence[str]:
        """The recovery plan's steps, in order."""

    def start_recovery(self, actor: str = "user", trigger: str = "") -> object: ...

    def arm(self) -> None: ...

    def disarm(self) -> None: ...

    def set_auto(self, enabled: bool, actor: str = "user", *, journal: bool = True) -> None: ...


class RecoveryView:
    """A recovery's progress rebuilt from its journal rows (for front ends that follow)."""

    def __init__(self, step_names: Sequence[str], auto: bool) -> None:
        self.step_names = tuple(step_names)
        self.status = RecoveryStatus(active=False, auto=auto)

    def fold(self, ev: Event) -> bool:
        """Apply one row; True when the status changed."""
        st = self.status
        if ev.kind == RECOVERY_STARTED:
            self.status = RecoveryStatus(
                active=True,
                auto=st.auto,
                steps=tuple(RecoveryStep(name=n) for n in self.step_names),
                trigger=trigger_of(ev),
                started_at=ev.at,
                detect_s=_num(ev.data.get("detect_s")),
                owner=st.owner,
            )
            return True
        if ev.kind == ACTION and str(ev.data.get("action", "")).startswith("recovery."):
            # A step is journaled once, when it ends (dated at its start): the next step
            # still pending is the one running now.
            name = str(ev.data["action"]).removeprefix("recovery.")
            ok = StepState.OK if ev.data.get("ok") else StepState.FAILED
            state = str(ev.data.get("state") or ok)
            elapsed = _num(ev.data.get("duration_s"))
            changed = self._step(
                name, state, started_at=ev.at, message=ev.message, elapsed_s=elapsed
            )
            if changed and state != StepState.FAILED:
                self._next_running(name, (ev.at + (elapsed or 0.0)))
            return changed
        if ev.kind in _ENDS:
            recovered = ev.kind == RECOVERED
            self.status = replace(
                st,
                active=False,
                outcome=RecoveryOutcome.OK if recovered else RecoveryOutcome.FAILED,
                failed_step="" if recovered else str(ev.data.get("step", "")),
                mttr_s=_num(ev.data.get("mttr_s")),
            )
            return True
        return False

    def _next_running(self, after: str, at: float) -> None:
        names = [s.name for s in self.status.steps]
        if after not in names:
            return
        for step in self.status.steps[names.index(after) + 1 :]:
            if step.state == StepState.PENDING:
                self._step(step.name, StepState.RUNNING, started_at=at)
                return

    def _step(
        self,
        name: str,
        state: str,
        *,
        started_at: float | None = None,
        message: str = "",
        elapsed_s: float | None = None,
    ) -> bool:
        steps = list(self.status.steps)
        for i, step in enumerate(steps):
            if step.name != name:
                continue
            steps[i] = replace(
                step,
                state=state,
                started_at=step.started_at if started_at is None else started_at,
                message=message or step.message,
                elapsed_s=step.elapsed_s if elapsed_s is None else elapsed_s,
            )
            self.status = replace(self.status, steps=tuple(steps))
            return True
        return False


class Sharing:
    """This process's place among the front ends of one pod."""

    def __init__(
        self,
        journal: Journal,
        leases: PodLeases,
        watchdog: Recoverer,
        publish: Callable[[Update], None],
        own_ids: Callable[[int], bool],
    ) -> None:
        self.journal = journal
        self.leases = leases
        self.watchdog = watchdog
        self._publish = publish
        self._own = own_ids
        self._last_id = journal.last_id()
        self.view = RecoveryView(watchdog.step_names, watchdog.auto)
        self._ends: list[Event] = []

    @property
    def owner(self) -> bool:
        """This process watches and recovers the pod (it takes the lease if it is free)."""
        return self.leases.watch.try_acquire()

    def owner_name(self) -> str:
        holder = self.leases.watch.holder()
        return holder.describe() if holder is not None else ""

    async def follow_journal(self) -> None:
        """What the other front ends wrote since the last look: shown, and obeyed by the
        owner. Call before acting on a new observation (a teardown the owner must not undo
        is in the journal before its action lease is released)."""
        rows = await asyncio.to_thread(self.journal.after, self._last_id)
        owner = self.owner
        changed = False
        self.watchdog.sink.note_foreign(
            [e for e in rows if e.id is not None and not self._own(e.id)]
        )
        for ev in rows:
            assert ev.id is not None
            self._last_id = ev.id
            if ev.kind in _ENDS:
                self._ends.append(ev)
            changed |= self.view.fold(ev)
            if self._own(ev.id):
                continue
            self._publish(ev)
            if owner:
                self._obey(ev)
        if changed and not owner:
            self._publish(replace(self.view.status, owner=self.owner_name()))

    def _obey(self, ev: Event) -> None:
        wd = self.watchdog
        if ev.kind == RECOVERY_REQUESTED:
            wd.start_recovery(actor=ev.actor or "user", trigger=ev.message)
        elif ev.kind == EventKind.ACTION and ev.data.get("ok"):
            action = ev.data.get("action")
            if action == "teardown":
                wd.disarm()
            elif action == "ray_up":
                wd.arm()
        elif ev.kind == EventKind.WATCHDOG and isinstance(ev.data.get("auto"), bool):
            wd.set_auto(bool(ev.data["auto"]), actor=ev.actor, journal=False)

    def status(self) -> RecoveryStatus:
        """What the front ends show: this process's own recovery when it is the owner,
        else the owner's, from the journal."""
        if self.owner:
            return self.watchdog.status
        return replace(self.view.status, auto=self.watchdog.auto, owner=self.owner_name())

    def interrupted(self) -> Recovery | None:
        """A recovery the journal shows started and never ended (its process died mid-way),
        or None."""
        last = self.journal.recoveries(limit=1)
        if last and last[-1].ok is None:
            return last[-1]
        return None

    def owed(self, recovery: Recovery) -> dict[str, str]:
        """What ``recovery`` (the ``interrupted()`` one) owed (job id -> sweep id;
        ``Journal.owed``)."""
        return self.journal.owed(recovery)

    def request(self, actor: str, at: float) -> Event:
        return Event(
            at=at,
            kind=RECOVERY_REQUESTED,
            message=f"recovery requested by {actor} (pid {os.getpid()} on {socket.gethostname()})",
            actor=actor,
            data={"pid": os.getpid()},
        )

    def ended_after(self, request_id: int) -> Event | None:
        return next((e for e in self._ends if e.id is not None and e.id > request_id), None)


def _num(value: object) -> float | None:
    return float(value) if isinstance(value, int | float) and not isinstance(value, bool) else None
