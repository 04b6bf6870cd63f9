"""Which runs a ``runs(filters:, order:)`` query selects, and in what order.

The public API sends W&B's MongoDB-style filters as a JSONString (``Api.runs(path,
filters={...})``, ``{"$and": [{"sweep": id}]}`` from ``Sweep.best_run``) and an order key
as ``QueryGenerator.format_order_key`` writes it: ``+``/``-`` then ``created_at``,
``createdAt``, ``name``, ``sweep``, ``config.<name>(.value)``, ``summary_metrics.<key>``
or ``tags``. A filter or order the server cannot read is refused with a message that
names it (W&B answers such queries with an error, never with every run).
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from typing import Any

from emulators.wandb.state import Record, iso

OPERATORS = (
    "$and",
    "$or",
    "$eq",
    "$ne",
    "$in",
    "$nin",
    "$gt",
    "$gte",
    "$lt",
    "$lte",
    "$regex",
    "$exists",
)
# Run columns a filter or an order may name, beside config.* and summary_metrics.*
_COLUMNS = {
    "name": "name",
    "id": "name",
    "display_name": "display_name",
    "displayName": "display_name",
    "state": "state",
    "sweep": "sweep",
    "sweepName": "sweep",
    "tags": "tags",
    "group": "group",
    "jobType": "job_type",
    "job_type": "job_type",
    "notes": "notes",
    "createdAt": "created_at",
    "created_at": "created_at",
    "heartbeatAt": "heartbeat_at",
    "heartbeat_at": "heartbeat_at",
    "updatedAt": "heartbeat_at",
    "updated_at": "heartbeat_at",
}
_TIMES = ("created_at", "heartbeat_at")
_MISSING = object()


class RunQueryError(ValueError):
    """A filter or order the server cannot read; the message names it."""


def parse_filters(text: str | None) -> dict[str, Any]:
    if not text:
        return {}
    try:
        flt = json.loads(text) if isinstance(text, str) else text
    except ValueError:
        raise RunQueryError(f"invalid filters: not JSON: {text!r}") from None
    if not isinstance(flt, dict):
        raise RunQueryError(f"invalid filters: expected an object, got {flt!r}")
    _check(flt)
    return flt


def _check(flt: Any) -> None:
    if not isinstance(flt, dict):
        raise RunQueryError(f"invalid filters: expected an object, got {flt!r}")
    for key, want in flt.items():
        if key in ("$and", "$or"):
            if not isinstance(want, list):
                raise RunQueryError(f"invalid filters: {key} takes a list of filters")
            for sub in want:
                _check(sub)
            continue
        if key.startswith("$"):
            raise RunQueryError(_unknown_op(key))
        _column(key)
        if isinstance(want, dict) and any(k.startswith("$") for k in want):
            for op, val in want.items():
                if op not in OPERATORS or op in ("$and", "$or"):
                    raise RunQueryError(_unknown_op(op))
                if op in ("$in", "$nin") and not isinstance(val, list):
                    raise RunQueryError(f"invalid filters: {op} on {key} takes a list")
                if op == "$regex":
                    try:
                        re.compile(str(val))
                    except re.error as exc:
                        raise RunQueryError(
                            f"invalid filters: bad $regex on {key}: {exc}"
                        ) from None


def _unknown_op(op: str) -> str:
    return f"invalid filters: unknown operator {op!r}; known: {', '.join(OPERATORS)}"


def _column(key: str) -> tuple[str, str]:
    """(kind, name): kind is ``column``, ``config`` or ``summary``."""
    if key in _COLUMNS:
        return "column", _COLUMNS[key]
    head, _, rest = key.partition(".")
    if head == "config" and rest:
        return "config", rest.removesuffix(".value")
    if head in ("summary_metrics", "summaryMetrics", "summary") and rest:
        return "summary", rest
    raise RunQueryError(
        f"invalid key {key!r}: use a run column ({', '.join(sorted(set(_COLUMNS)))}), "
        "config.<name> or summary_metrics.<key>"
    )


def value(run: Record, key: str, state: Callable[[Record], str]) -> Any:
    """The run's value for a filter/order key; ``_MISSING`` when it has none."""
    kind, name = _column(key)
    if kind == "column":
        if name == "state":
            return state(run)
        got = run.get(name)
        if name in _TIMES and got is not None:
            return iso(float(got))
        return _MISSING if got is None else got
    if kind == "config":
        cfg = json.loads(run.get("config") or "{}")
        entry = cfg.get(name, _MISSING)
        if isinstance(entry, dict) and "value" in entry:
            return entry["value"]
        return _dig(cfg, name) if entry is _MISSING else entry
    return _dig(run.get("summary") or {}, name)


def _dig(data: Any, dotted: str) -> Any:
    if isinstance(data, dict) and dotted in data:
        return data[dotted]
    cur = data
    for part in dotted.split("."):
        if not isinstance(cur, dict) or part not in cur:
            return _MISSING
        cur = cur[part]
        if isinstance(cur, dict) and set(cur) == {"value"}:
            cur = cur["value"]
    return cur


def match(run: Record, flt: dict[str, Any], state: Callable[[Record], str]) -> bool:
    for key, want in flt.items():
        if key == "$and":
            if not all(match(run, f, state) for f in want):
                return False
        elif key == "$or":
            if not any(match(run, f, state) for f in want):
                return False
        else:
            have = value(run, key, state)
            if isinstance(want, dict) and any(k.startswith("$") for k in want):
                if not all(_compare(op, have, val) for op, val in want.items()):
                    return False
            elif not _compare("$eq", have, want):
                return False
    return True


def _compare(op: str, have: Any, val: Any) -> bool:
    """Mongo's rules: a list field (tags) matches when any element does."""
    if op == "$exists":
        return (have is not _MISSING and have is not None) == bool(val)
    if op == "$ne":
        return not _compare("$eq", have, val)
    if op == "$nin":
        return not _compare("$in", have, val)
    if have is _MISSING:
        return False
    if isinstance(have, list) and not isinstance(val, list):
        return any(_compare(op, h, val) for h in have)
    if op == "$eq":
        return bool(have == val)
    if op == "$in":
        return any(_compare("$eq", have, v) for v in val)
    if op == "$regex":
        return isinstance(have, str) and re.search(str(val), have) is not None
    try:
        if op == "$gt":
            return bool(have > val)
        if op == "$gte":
            return bool(have >= val)
        if op == "$lt":
            return bool(have < val)
        if op == "$lte":
            return bool(have <= val)
    except TypeError:
        return False  # a string against a number: not comparable, not matched
    raise RunQueryError(_unknown_op(op))


def parse_order(order: str | None) -> tuple[str, bool]:
    """(key, descending). Absent: oldest first, as the SDK's default ``+created_at``."""
    text = (order or "+created_at").strip()
    descending = text.startswith("-")
    key = text[1:] if text[:1] in "+-" else text
    if not key or key.endswith(".") or ".." in key or key.startswith("."):
        raise RunQueryError(
            f"invalid order {order!r}: write [+|-]KEY, e.g. -summary_metrics.reward or "
            "+config.lr or -created_at"
        )
    try:
        _column(key)
    except RunQueryError as exc:
        raise RunQueryError(f"invalid order {order!r}: {exc}") from None
    return key, descending


def ordered(runs: list[Record], order: str | None, state: Callable[[Record], str]) -> list[Record]:
    """Sorted by the key; runs without a value come last either way (a best_run must be
    a run that has the metric), ties by creation time."""
    key, descending = parse_order(order)
    kind, name = _column(key)
    raw_time = kind == "column" and name in _TIMES

    def sort_key(run: Record) -> Any:
        got = run.get(name) if raw_time else value(run, key, state)
        if got is _MISSING or got is None:
            return None
        if isinstance(got, bool):
            return (0, float(got))
        if isinstance(got, (int, float)):
            return (0, float(got))
        return (1, json.dumps(got) if not isinstance(got, str) else got)

    have = [(sort_key(r), r) for r in runs]
    present = [(k, r) for k, r in have if k is not None]
    absent = [r for k, r in have if k is None]
    present.sort(key=lambda kr: kr[1]["created_at"])
    present.sort(key=lambda kr: kr[0], reverse=descending)
    absent.sort(key=lambda r: r["created_at"])
    return [r for _, r in present] + absent
