"""The object store: resourceVersions, watch history, selectors — the etcd + watch cache part.

Objects are plain JSON dicts as the API serves them. One global resourceVersion counter
orders every change; a bounded history of change events lets a watch resume from an
older resourceVersion, and answers 410 Gone once that version has been compacted away.
"""

from __future__ import annotations

import asyncio
import copy
import re
import secrets
import uuid
from collections import deque
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

Obj = dict[str, Any]
Key = tuple[str, str]  # (namespace or "", name)

CLUSTER_SCOPED = frozenset({"nodes", "namespaces", "clusterqueues", "resourceflavors"})


def now_iso() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def now_micro() -> str:
    """RFC 3339 with microseconds, as MicroTime fields (Event.eventTime) carry."""
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def parse_time(text: str) -> datetime:
    return datetime.fromisoformat(text.replace("Z", "+00:00"))


def rand_suffix(n: int = 5) -> str:
    """Lowercase consonant-digit suffix like the apiserver's generateName."""
    alphabet = "bcdfghjklmnpqrstvwxz2456789"
    return "".join(secrets.choice(alphabet) for _ in range(n))


class Gone(Exception):
    """The requested resourceVersion is older than the retained history."""


class SelectorError(ValueError):
    pass


# --- selectors ------------------------------------------------------------------------

_SET_RE = re.compile(r"^\s*([\w./-]+)\s+(in|notin)\s+\(([^)]*)\)\s*$")


def _split_selector(text: str) -> list[str]:
    """Split on commas outside parentheses."""
    parts, depth, cur = [], 0, ""
    for ch in text:
        if ch == "(":
            depth += 1
        elif ch == ")":
            depth -= 1
        if ch == "," and depth == 0:
            parts.append(cur)
            cur = ""
        else:
            cur += ch
    if cur.strip():
        parts.append(cur)
    return [p.strip() for p in parts if p.strip()]


Predicate = Callable[[dict[str, str]], bool]


def _label_req(key: str, op: str, values: frozenset[str]) -> Predicate:
    def check(labels: dict[str, str]) -> bool:
        if op == "in":
            return labels.get(key) in values
        if op == "notin":
            return labels.get(key) not in values
        if op == "=":
            return labels.get(key) in values
        if op == "!=":
            return labels.get(key) not in values
        if op == "exists":
            return key in labels
        return key not in labels  # "!"

    return check


def parse_label_selector(text: str) -> Predicate:
    """A predicate over a labels dict for `key=v`, `key!=v`, `key in (a,b)`, `key`, `!key`."""
    checks: list[Predicate] = []
    for part in _split_selector(text or ""):
        m = _SET_RE.match(part)
        if m:
            vals = frozenset(v.strip() for v in m.group(3).split(","))
            checks.append(_label_req(m.group(1), m.group(2), vals))
            continue
        for op in ("!=", "==", "="):
            if op in part:
                key, val = (s.strip() for s in part.split(op, 1))
                _check_key(key, text)
                checks.append(_label_req(key, "!=" if op == "!=" else "=", frozenset({val})))
                break
        else:
            key = part[1:].strip() if part.startswith("!") else part
            _check_key(key, text)
            checks.append(_label_req(key, "!" if part.startswith("!") else "exists", frozenset()))

    def all_match(labels: dict[str, str]) -> bool:
        return all(c(labels) for c in checks)

    return all_match


def _check_key(key: str, text: str) -> None:
    if not key or not re.fullmatch(r"([a-z0-9.-]+/)?[A-Za-z0-9]([\w.-]*[A-Za-z0-9])?", key):
        raise SelectorError(f'unable to parse requirement: invalid label key "{key}" in "{text}"')


def field_value(obj: Obj, path: str) -> str:
    cur: Any = obj
    for part in path.split("."):
        cur = cur.get(part) if isinstance(cur, dict) else None
    if cur is None:
        return ""
    if isinstance(cur, bool):
        return "true" if cur else "false"
    return str(cur)


def _field_req(key: str, negate: bool, value: str) -> Callable[[Obj], bool]:
    def check(obj: Obj) -> bool:
        return (field_value(obj, key) == value) != negate

    return check


def parse_field_selector(text: str, allowed: frozenset[str]) -> Callable[[Obj], bool]:
    checks: list[Callable[[Obj], bool]] = []
    for part in _split_selector(text or ""):
        for op in ("!=", "==", "="):
            if op in part:
                key, val = (s.strip() for s in part.split(op, 1))
                break
        else:
            raise SelectorError(f"invalid selector: '{part}'; can't understand '{part}'")
        if key not in allowed:
            raise SelectorError(f"field label not supported: {key}")
        checks.append(_field_req(key, op == "!=", val))

    def all_match(obj: Obj) -> bool:
        return all(c(obj) for c in checks)

    return all_match


FIELD_SELECTABLE: dict[str, frozenset[str]] = {
    "pods": frozenset(
        {
            "metadata.name",
            "metadata.namespace",
            "spec.nodeName",
            "spec.restartPolicy",
            "spec.schedulerName",
            "spec.serviceAccountName",
            "status.phase",
            "status.podIP",
            "status.nominatedNodeName",
            "spec.hostNetwork",
        }
    ),
    "events": frozenset(
        {
            "metadata.name",
            "metadata.namespace",
            "involvedObject.kind",
            "involvedObject.namespace",
            "involvedObject.name",
            "involvedObject.uid",
            "involvedObject.apiVersion",
            "involvedObject.resourceVersion",
            "involvedObject.fieldPath",
            "reason",
            "reportingComponent",
            "source",
            "type",
        }
    ),
    "nodes": frozenset({"metadata.name", "spec.unschedulable"}),
    "jobs": frozenset({"metadata.name", "metadata.namespace", "status.successful"}),
}
DEFAULT_FIELDS = frozenset({"metadata.name", "metadata.namespace"})


@dataclass(frozen=True)
class Selector:
    namespace: str = ""  # "" = all namespaces
    labels: Predicate = field(default=parse_label_selector(""))
    fields: Callable[[Obj], bool] = field(default=parse_field_selector("", frozenset()))

    def matches(self, obj: Obj) -> bool:
        meta = obj.get("metadata", {})
        if self.namespace and meta.get("namespace", "") != self.namespace:
            return False
        return self.labels(meta.get("labels") or {}) and self.fields(obj)

    @classmethod
    def parse(cls, resource: str, namespace: str, label: str, fields: str) -> Selector:
        allowed = FIELD_SELECTABLE.get(resource, DEFAULT_FIELDS)
        return cls(namespace, parse_label_selector(label), parse_field_selector(fields, allowed))


# --- watch ----------------------------------------------------------------------------


@dataclass
class WatchEvent:
    rv: int
    type: str  # ADDED | MODIFIED | DELETED
    resource: str
    obj: Obj
    old: Obj | None = None  # the previous version, for selector transitions


class Watcher:
    """One open watch: a queue of events already filtered for its selector."""

    def __init__(self, resource: str, selector: Selector) -> None:
        self.resource = resource
        self.selector = selector
        self.queue: asyncio.Queue[tuple[str, Obj] | None] = asyncio.Queue()

    def offer(self, ev: WatchEvent) -> None:
        for item in self.translate(ev):
            self.queue.put_nowait(item)

    def translate(self, ev: WatchEvent) -> Iterator[tuple[str, Obj]]:
        """An object leaving the selection is DELETED for this watch, entering it ADDED."""
        if ev.resource != self.resource:
            return
        now = self.selector.matches(ev.obj)
        before = ev.old is not None and self.selector.matches(ev.old)
        if ev.type == "MODIFIED":
            if now and before:
                yield "MODIFIED", ev.obj
            elif now:
                yield "ADDED", ev.obj
            elif before:
                yield "DELETED", ev.obj
        elif now:
            yield ev.type, ev.obj


class Store:
    """All objects of the cluster, one resourceVersion sequence, watchers, change signal."""

    def __init__(self, history: int) -> None:
        self.rv = 1
        self.objects: dict[str, dict[Key, Obj]] = {}
        self.history: deque[WatchEvent] = deque(maxlen=max(history, 1))
        self.compacted = 1  # events at or below this rv are gone
        self.watchers: set[Watcher] = set()
        self.changed = asyncio.Event()

    # --- reads ------------------------------------------------------------------------

    def get(self, resource: str, namespace: str, name: str) -> Obj | None:
        ns = "" if resource in CLUSTER_SCOPED else namespace
        return self.objects.get(resource, {}).get((ns, name))

    def list(self, resource: str, selector: Selector | None = None) -> list[Obj]:
        items = self.objects.get(resource, {}).values()
        sel = selector or Selector()
        out = [o for o in items if sel.matches(o)]
        return sorted(
            out, key=lambda o: (o["metadata"].get("namespace", ""), o["metadata"]["name"])
        )

    def oldest_resumable(self) -> int:
        return self.history[0].rv - 1 if self.history else self.rv

    # --- writes -----------------------------------------------------------------------

    def _bump(self) -> int:
        self.rv += 1
        return self.rv

    def _publish(self, ev: WatchEvent) -> None:
        if len(self.history) == self.history.maxlen:
            self.compacted = self.history[0].rv
        self.history.append(ev)
        for w in list(self.watchers):
            w.offer(ev)
        self.changed.set()

    def create(self, resource: str, obj: Obj) -> Obj:
        meta = obj.setdefault("metadata", {})
        if resource in CLUSTER_SCOPED:
            meta.pop("namespace", None)
        if not meta.get("name") and meta.get("generateName"):
            meta["name"] = meta["generateName"] + rand_suffix()
        key = (meta.get("namespace", ""), meta["name"])
        bucket = self.objects.setdefault(resource, {})
        if key in bucket:
            raise KeyError(key)
        meta["uid"] = str(uuid.uuid4())
        meta["creationTimestamp"] = now_iso()
        meta.setdefault("generation", 1)
        meta["resourceVersion"] = str(self._bump())
        bucket[key] = obj
        self._publish(WatchEvent(self.rv, "ADDED", resource, copy.deepcopy(obj)))
        return obj

    def update(self, resource: str, obj: Obj) -> bool:
        """Store ``obj`` (same key) if it differs from the stored one; True if it changed."""
        meta = obj["metadata"]
        key = (meta.get("namespace", ""), meta["name"])
        bucket = self.objects.setdefault(resource, {})
        old = bucket.get(key)
        if old is None:
            raise KeyError(key)
        if old is not obj and _same(old, obj):
            return False
        if old is obj:
            raise AssertionError("update() needs a modified copy, not the stored object")
        meta["resourceVersion"] = str(self._bump())
        bucket[key] = obj
        self._publish(WatchEvent(self.rv, "MODIFIED", resource, copy.deepcopy(obj), old))
        return True

    def mutate(self, resource: str, obj: Obj, fn: Callable[[Obj], None]) -> Obj:
        """Apply ``fn`` to a copy of ``obj`` and store it if anything changed."""
        new = copy.deepcopy(obj)
        fn(new)
        self.update(resource, new)
        return (
            self.get(resource, new["metadata"].get("namespace", ""), new["metadata"]["name"]) or new
        )

    def delete(self, resource: str, namespace: str, name: str) -> Obj | None:
        ns = "" if resource in CLUSTER_SCOPED else namespace
        obj = self.objects.get(resource, {}).pop((ns, name), None)
        if obj is None:
            return None
        obj = copy.deepcopy(obj)
        obj["metadata"]["resourceVersion"] = str(self._bump())
        self._publish(WatchEvent(self.rv, "DELETED", resource, obj, obj))
        return obj

    def compact(self) -> int:
        """Forget the history up to now, as etcd compaction does; returns the compacted rv."""
        self.history.clear()
        self.compacted = self.rv
        return self.rv

    # --- watch ------------------------------------------------------------------------

    def watch(self, resource: str, selector: Selector, since: int | None) -> Watcher:
        """A watcher primed with the events after ``since`` (None = from now on).

        Raises Gone when ``since`` is older than the retained history.
        """
        w = Watcher(resource, selector)
        if since is not None and since < self.rv:
            if since < self.compacted:
                raise Gone(f"too old resource version: {since} ({self.compacted})")
            for ev in self.history:
                if ev.rv > since:
                    w.offer(ev)
        self.watchers.add(w)
        return w

    def unwatch(self, w: Watcher) -> None:
        self.watchers.discard(w)


def _same(a: Obj, b: Obj) -> bool:
    a2 = dict(a, metadata={k: v for k, v in a["metadata"].items() if k != "resourceVersion"})
    b2 = dict(b, metadata={k: v for k, v in b["metadata"].items() if k != "resourceVersion"})
    return a2 == b2
