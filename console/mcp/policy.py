"""Who may act through MCP: reads always; an acting tool only when the operator allowed it by
name (``--allow preempt,recover``) or all of them (``--allow-all``); a destroying one (it
stops or deletes what runs: teardown, stop_job, workload_delete) only with
``--allow-destructive`` besides."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from console.commands import Command, Effect, Front, by_name, by_words, offered


class PolicyError(ValueError):
    """An --allow the server cannot honour (the message names it and the fix)."""


@dataclass(frozen=True)
class Policy:
    allowed: frozenset[str] = frozenset()  # command names
    allow_all: bool = False
    allow_destructive: bool = False

    @classmethod
    def parse(cls, names: Iterable[str], allow_all: bool, allow_destructive: bool) -> Policy:
        """``names``: tool names or script verbs (``ray-up`` is ``ray_up``), commas allowed."""
        allowed: set[str] = set()
        tools = sorted(c.name for c in offered(Front.MCP) if c.acts)
        for raw in names:
            for word in filter(None, (w.strip() for w in raw.split(","))):
                row = by_name(word.replace("-", "_")) or by_words(word)
                if row is None or Front.MCP not in row.fronts:
                    raise PolicyError(
                        f"--allow {word}: no such tool; the acting tools are {', '.join(tools)}"
                    )
                if not row.acts:
                    continue  # a read needs no allow
                if row.effect is Effect.DESTROYS and not allow_destructive:
                    raise PolicyError(
                        f"--allow {word}: {row.name} stops or deletes what runs; add "
                        "--allow-destructive to allow it"
                    )
                allowed.add(row.name)
        return cls(frozenset(allowed), allow_all, allow_destructive)

    def refusal(self, action: Command[Any]) -> str | None:
        """Why this server may not run ``action`` (None: it may)."""
        if not action.acts:
            return None
        if action.effect is Effect.DESTROYS and not self.allow_destructive:
            return (
                f"{action.name} stops or deletes what runs; this server is read-only for it "
                "(the operator starts `phantom mcp --allow-destructive --allow "
                f"{action.name}` to allow it)"
            )
        if self.allow_all or action.name in self.allowed:
            return None
        return (
            f"{action.name} changes the cluster and this server is read-only for it (the "
            f"operator starts `phantom mcp --allow {action.name}` or `--allow-all` to allow it)"
        )

    def describe(self) -> str:
        if self.allow_all:
            acts = "every acting tool"
        elif self.allowed:
            acts = ", ".join(sorted(self.allowed))
        else:
            acts = "nothing (read-only)"
        extra = "; destructive tools allowed" if self.allow_destructive else ""
        return f"may act: {acts}{extra}"
