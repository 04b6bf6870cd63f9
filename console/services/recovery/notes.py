"""A running recovery step's message, settable from inside its op: long waits say what they
wait for ("waiting for capacity in ZONE ..."). The runner binds ``STEP_NOTE`` around each op
(same task, so a context variable reaches the op's callees); outside a recovery it is unset."""

from __future__ import annotations

from collections.abc import Callable
from contextvars import ContextVar

# The running step's message, settable from inside its op (same task): see ``step_note``.
STEP_NOTE: ContextVar[Callable[[str], None] | None] = ContextVar("step_note", default=None)


def step_note(text: str) -> None:
    """From inside a recovery step's op: show ``text`` as the running step's message (long
    waits say what they wait for, e.g. capacity). Outside a recovery: nothing."""
    note = STEP_NOTE.get()
    if note is not None:
        note(text)
