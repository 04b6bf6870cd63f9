"""Shared test helpers: fakes of the services boundary, pod fixtures, waiting helpers."""

from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
TESTS = REPO / "tests"
DATA = TESTS / "data"
