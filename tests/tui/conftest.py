"""Every test here runs an app: the young generation as the console itself sets it."""

from collections.abc import Iterator

import pytest

from tests.support.tui import young_gc_threshold


@pytest.fixture(autouse=True)
def young_gc() -> Iterator[None]:
    with young_gc_threshold():
        yield
