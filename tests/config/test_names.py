"""Each name pattern has one home (console.config.names); every surface checks against it."""

from __future__ import annotations

import pytest

from console.config.names import ENV_NAME_RE, NAME_RE
from tests.support import REPO


@pytest.mark.parametrize("pattern", [NAME_RE.pattern, ENV_NAME_RE.pattern])
def test_each_pattern_is_written_once(pattern: str) -> None:
    homes = [
        str(path.relative_to(REPO))
        for package in ("console", "engine")
        for path in (REPO / package).rglob("*.py")
        if pattern in path.read_text()
    ]
    assert homes == ["console/config/names.py"]


@pytest.mark.parametrize(
    ("name", "ok"),
    [("phantom-pod", True), ("a", True), ("pod-", False), ("9pod", False), ("Pod", False)],
)
def test_resource_names(name: str, ok: bool) -> None:
    assert bool(NAME_RE.match(name)) is ok


@pytest.mark.parametrize(
    ("name", "ok"), [("HF_TOKEN", True), ("_x1", True), ("1X", False), ("A-B", False)]
)
def test_env_names(name: str, ok: bool) -> None:
    assert bool(ENV_NAME_RE.match(name)) is ok
