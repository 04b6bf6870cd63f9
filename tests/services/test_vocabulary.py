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

from console.services.model import HostState, JobStatus, RayState
from tests.support import REPO

# The upper-case state names (Reachability's ok/down/unknown and RayState's "-" are everyday
# words: their fields are typed, which mypy checks).
WORDS = {str(m) for enum in (HostState, JobStatus, RayState) for m in enum} - {RayState.NONE}
FIELDS = {"status", "tpu_state", "ray_state", "ssh", "job_status", "node_state", "state"}
MODEL = REPO / "console" / "services" / "model.py"


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
        if p != MODEL
    )


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
