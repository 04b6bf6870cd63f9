"""What an action returns: its result, per host, with the typed reason a refusal or
failure carries."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any


@dataclass(frozen=True)
class HostResult:
    """One host's share of a fan-out action."""

    host: str
    ok: bool
    exit_status: int | None = None
    elapsed_s: float = 0.0
    stdout_tail: str = ""
    stderr_tail: str = ""
    error: str = ""  # a one-line reason when not ok (timeout, refused, host key mismatch...)


class Verdict(StrEnum):
    OK = "ok"
    REFUSED = "refused"  # nothing was run
    FAILED = "failed"  # it ran and did not reach its goal


class Reason(StrEnum):
    """Why a call ended as it did: a front end acts on this, never on the message's words."""

    DONE = "done"
    UNKNOWN_ACTION = "unknown_action"
    BAD_INPUT = "bad_input"  # an argument missing, of the wrong type or out of range
    BAD_CONFIG = "bad_config"  # the config, found wrong only when the services were built
    UNSUPPORTED = "unsupported"  # this cluster's backend cannot (its capabilities)
    NOT_ALLOWED = "not_allowed"  # this front end was not allowed to act (MCP's --allow)
    STEP_FAILED = "step_failed"  # the action ran and failed (the service said why)
    ERROR = "error"  # an unexpected error


# Reasons for which nothing was run: the call was refused, not failed.
REFUSALS = frozenset(
    {
        Reason.UNKNOWN_ACTION,
        Reason.BAD_INPUT,
        Reason.BAD_CONFIG,
        Reason.UNSUPPORTED,
        Reason.NOT_ALLOWED,
    }
)


@dataclass(frozen=True)
class ActionResult:
    """What became of one action, the same for every front end (TUI, script, watch, MCP):
    ``verdict`` ok, refused or failed, ``reason`` why (what a front end acts on), ``message``
    the sentence for people; a fan-out's ``per_host`` results and ``data`` (JSON-able; also a
    failed one's partial result)."""

    action: str
    ok: bool
    elapsed_s: float = 0.0
    per_host: Mapping[str, HostResult] = field(default_factory=dict)
    message: str = ""
    data: Mapping[str, Any] = field(default_factory=dict)
    reason: Reason = Reason.DONE
    """DONE when ok; a failure given no reason is STEP_FAILED (the service said why)."""

    def __post_init__(self) -> None:
        reason = Reason(self.reason)
        if not self.ok and reason is Reason.DONE:
            reason = Reason.STEP_FAILED
        elif self.ok and reason is not Reason.DONE:
            raise ValueError(f"{self.action}: an ok result has reason done, not {reason}")
        object.__setattr__(self, "reason", reason)

    @property
    def verdict(self) -> Verdict:
        if self.ok:
            return Verdict.OK
        return Verdict.REFUSED if self.reason in REFUSALS else Verdict.FAILED

    @classmethod
    def done(cls, action: str, message: str, data: Mapping[str, Any]) -> ActionResult:
        return cls(action, True, message=message, data=data)

    @classmethod
    def refused(
        cls, action: str, reason: Reason, message: str, data: Mapping[str, Any] | None = None
    ) -> ActionResult:
        if reason not in REFUSALS:
            raise ValueError(f"{action}: {reason} is not a refusal")
        return cls(action, False, message=message, data=data or {}, reason=reason)

    @classmethod
    def failed(
        cls, action: str, reason: Reason, message: str, data: Mapping[str, Any] | None = None
    ) -> ActionResult:
        if reason in REFUSALS or reason is Reason.DONE:
            raise ValueError(f"{action}: {reason} is not a failure")
        return cls(action, False, message=message, data=data or {}, reason=reason)
