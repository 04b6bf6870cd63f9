"""States are enums in the model, and code compares with the enum, never a string literal.

An AST walk over the console and the benchmarks finds every string constant equal to a state
name (``HostState``, ``JobStatus``, ``RayState``) where code *uses* it: a
comparison operand (also inside ``x in ("A", "B")``), a dict key, a ``case`` pattern, or the
value of a state field (``status=``, ``tpu_state=``, ...). Words in messages, headers and
help text are not uses. A protocol's own vocabulary (a Kubernetes watch type, a queued
resource state) is an enum of its own beside the client that speaks it.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from console.services.model import EventKind, HostState, JobStatus, RayState
from tests.support import REPO

# The upper-case state names (Reachability's ok/down/unknown and RayState's "-" are everyday
# words: their fields are typed, which mypy checks).
WORDS = {str(m) for enum in (HostState, JobStatus, RayState) for m in enum} - {RayState.NONE}
FIELDS = {"status", "tpu_state", "ray_state", "ssh", "job_status", "node_state", "state"}
MODEL = REPO / "console" / "services" / "model"  # the package defines the words


def _is_word(node: ast.AST) -> bool:
    return isinstance(node, ast.Constant) and isinstance(node.value, str) and node.value in WORDS


def _uses(tree: ast.AST) -> list[tuple[int, str]]:
    found: list[tuple[int, str]] = []

    def note(node: ast.AST) -> None:
        for sub in ast.walk(node) if isinstance(node, ast.Tuple | ast.List | ast.Set) else [node]:
            if _is_word(sub):
                found.append((sub.lineno, sub.value))  # type: ignore[attr-defined]

    for node in ast.walk(tree):
        if isinstance(node, ast.Compare):
            for operand in (node.left, *node.comparators):
                note(operand)
        elif isinstance(node, ast.Dict):
            for key in node.keys:
                if key is not None:
                    note(key)
        elif isinstance(node, ast.MatchValue) or (
            isinstance(node, ast.keyword) and node.arg in FIELDS
        ):
            note(node.value)
    return found


def _sources() -> list[Path]:
    return sorted(
        p
        for package in ("console", "benchmarks")
        for p in (REPO / package).rglob("*.py")
        if MODEL not in p.parents
    )


KINDS = {str(k) for k in EventKind}
_MAKERS = {"emit", "_event", "workload_event", "emit_soon"}  # (kind, message, ...) calls


def _is_kind_ref(node: ast.AST) -> bool:
    return (isinstance(node, ast.Attribute) and node.attr == "kind") or (
        isinstance(node, ast.Name) and "kind" in node.id.lower()
    )


def _kind_uses(tree: ast.AST) -> list[tuple[int, str]]:
    """Event-kind words where code makes or matches a row: compared with a ``kind``, passed
    as ``kind=`` or as the kind of ``Event``/``emit``, keyed or listed in a ``*KIND*`` table."""
    found: list[tuple[int, str]] = []

    def note(node: ast.AST | None) -> None:
        if node is None:
            return
        subs = ast.walk(node) if isinstance(node, ast.Tuple | ast.List | ast.Set) else [node]
        for sub in subs:
            if isinstance(sub, ast.Constant) and sub.value in KINDS:
                found.append((sub.lineno, str(sub.value)))

    for node in ast.walk(tree):
        if isinstance(node, ast.Compare):
            operands = (node.left, *node.comparators)
            if any(_is_kind_ref(o) for o in operands):
                for o in operands:
                    note(o)
        elif isinstance(node, ast.keyword) and node.arg == "kind":
            note(node.value)
        elif isinstance(node, ast.Call):
            name = getattr(node.func, "id", None) or getattr(node.func, "attr", "")
            if name == "Event" and len(node.args) > 1:
                note(node.args[1])
            elif name in _MAKERS and node.args:
                note(node.args[0])
        elif isinstance(node, ast.Assign | ast.AnnAssign):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            if any(isinstance(t, ast.Name) and "KIND" in t.id for t in targets):
                value = node.value
                if isinstance(value, ast.Dict):
                    for key in value.keys:
                        note(key)
                elif value is not None:
                    for sub in ast.walk(value):
                        if isinstance(sub, ast.Tuple | ast.List | ast.Set):
                            note(sub)
    return found


def test_no_event_kind_literal_is_used_outside_its_enum() -> None:
    used = [
        f"{path.relative_to(REPO)}:{line}: {word!r}"
        for path in _sources()
        for line, word in _kind_uses(ast.parse(path.read_text(), str(path)))
    ]
    assert used == [], "use EventKind:\n" + "\n".join(used)


@pytest.mark.parametrize(
    "code",
    [
        'if event.kind == "preempted": pass',
        'Event(at=1.0, kind="stalled", message="")',
        'await self._event("recovered", "done")',
        'LOSS_KINDS = ("preempted", "host_lost")',
        'KIND_STYLE = {"action": "cyan"}',
    ],
)
def test_the_kind_walk_sees_each_kind_of_use(code: str) -> None:
    assert _kind_uses(ast.parse(code)), code


def test_no_state_literal_is_used_outside_its_enum() -> None:
    used = [
        f"{path.relative_to(REPO)}:{line}: {word!r}"
        for path in _sources()
        for line, word in _uses(ast.parse(path.read_text(), str(path)))
    ]
    assert used == [], "use the enum:\n" + "\n".join(used)


@pytest.mark.parametrize(
    "code",
    [
        'x = h.tpu_state == "READY"',
        'ok = status in ("RUNNING", "PENDING")',
        'STYLE = {"FAILED": "red"}',
        'JobInfo("j", status="PENDING")',
    ],
)
def test_the_walk_sees_each_kind_of_use(code: str) -> None:
    assert _uses(ast.parse(code)), code
