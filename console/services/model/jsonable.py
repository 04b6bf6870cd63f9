"""Published values as plain JSON (for --script, MCP and ``status --json``)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import asdict
from enum import StrEnum
from typing import Any


def to_jsonable(value: Any) -> Any:
    """Dataclass/tuple/mapping tree -> plain JSON-able values (for --script and status)."""
    if hasattr(value, "__dataclass_fields__"):
        return to_jsonable(asdict(value))
    if isinstance(value, Mapping):
        return {str(k): to_jsonable(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [to_jsonable(v) for v in value]
    if isinstance(value, StrEnum):
        return str(value)
    return value
