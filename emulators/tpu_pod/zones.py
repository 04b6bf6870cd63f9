"""Zones, their capacity in slices and their stockout windows.

Stdlib only: the CLI parses and checks the flags with it before a daemon is
spawned (bad input exits 2 with nothing started); the daemon asks it whether a
zone can take one more slice now.

A zone's free capacity is ``capacity - used`` outside its stockout windows and 0
inside them; ``used`` counts every node that exists in the zone whatever its
state (a PREEMPTED node holds its slice until it is deleted, as on GCP).
Windows are seconds after the daemon started: ``local-a:0-180`` is a stockout
for the first three minutes; ``local-a:60-`` never ends.
"""

from __future__ import annotations

import math
import random
import re
import secrets
import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from emulators.tpu_pod.layout import DEFAULT_CAPACITY, MAX_SLOTS, MAX_ZONES

_ZONE_NAME = re.compile(r"^[a-z][a-z0-9-]{0,62}$")


def stockout_message(zone: str) -> str:
    """The Cloud TPU API's wording of a stockout (operation error code 8, RESOURCE_EXHAUSTED)."""
    eid = secrets.token_hex(8)
    return (
        f'There is no more capacity in the zone "{zone}"; you can try in another zone where '
        f"Cloud TPU Nodes are offered (see https://cloud.google.com/tpu/docs/regions) "
        f"[EID: 0x{eid}]"
    )


@dataclass(frozen=True)
class Window:
    """A stockout from ``start`` to ``end`` seconds after the daemon started."""

    start: float
    end: float = math.inf

    def covers(self, t: float) -> bool:
        return self.start <= t < self.end

    def to_json(self) -> dict[str, float | None]:
        return {"start": self.start, "end": None if math.isinf(self.end) else self.end}


@dataclass
class Zone:
    name: str
    index: int  # position in the zone list: the second octet of its addresses
    capacity: int = DEFAULT_CAPACITY
    windows: list[Window] = field(default_factory=list)


def parse_zones(text: str) -> tuple[str, ...]:
    """``"local-a,local-b"`` -> names; ValueError naming the flag and the fix."""
    names = tuple(n.strip() for n in text.split(",") if n.strip())
    if not names:
        raise ValueError("--zones: give at least one zone, e.g. local-a,local-b,local-c")
    for n in names:
        if not _ZONE_NAME.match(n):
            raise ValueError(
                f"--zones: {n!r} is not a zone name (lowercase letters, digits and '-')"
            )
    if len(set(names)) != len(names):
        raise ValueError(f"--zones: {text!r} names a zone twice")
    if len(names) > MAX_ZONES:
        raise ValueError(f"--zones: at most {MAX_ZONES} zones, got {len(names)}")
    return names


def _count(text: str, what: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise ValueError(f"--capacity: {what} {text!r} is not a whole number") from None
    if not 0 <= value <= MAX_SLOTS:
        raise ValueError(f"--capacity: {what} must be 0..{MAX_SLOTS} slices, got {value}")
    return value


def parse_capacity(items: Iterable[str], zones: tuple[str, ...]) -> dict[str, int]:
    """``["2"]`` (every zone) or ``["local-a:2,local-b:0"]`` -> slices per zone."""
    out = dict.fromkeys(zones, DEFAULT_CAPACITY)
    for item in items:
        for part in (p.strip() for p in item.split(",") if p.strip()):
            if ":" not in part:
                out = dict.fromkeys(zones, _count(part, "the capacity"))
                continue
            zone, _, n = part.partition(":")
            if zone not in out:
                raise ValueError(f"--capacity: unknown zone {zone!r}; zones are {list(zones)}")
            out[zone] = _count(n, f"the capacity of {zone}")
    return out


def parse_stockout(text: str, zones: tuple[str, ...]) -> tuple[str, Window]:
    """``"local-a:0-180"`` -> (zone, window); an empty end (``local-a:60-``) never ends."""
    zone, sep, span = text.partition(":")
    start_s, dash, end_s = span.partition("-")
    hint = "use ZONE:START-END in seconds after start-up, e.g. local-a:0-180"
    if not sep or not dash:
        raise ValueError(f"--stockout {text!r}: {hint}")
    if zone not in zones:
        raise ValueError(f"--stockout {text!r}: unknown zone {zone!r}; zones are {list(zones)}")
    try:
        start = float(start_s)
        end = float(end_s) if end_s.strip() else math.inf
    except ValueError:
        raise ValueError(f"--stockout {text!r}: {hint}") from None
    if start < 0 or end <= start:
        raise ValueError(f"--stockout {text!r}: need 0 <= START < END; {hint}")
    return zone, Window(start, end)


def seeded_windows(
    seed: int, zones: tuple[str, ...], mean: float, horizon: float = 86400.0
) -> dict[str, list[Window]]:
    """A reproducible stockout schedule: per zone, windows of mean length ``mean``
    seconds separated by gaps of mean ``3 * mean`` (both uniform in [0.5, 1.5] x mean),
    the first gap drawn the same way, up to ``horizon`` seconds."""
    rng = random.Random(seed)
    out: dict[str, list[Window]] = {}
    for zone in zones:
        t, windows = 0.0, []
        while True:
            t += 3 * mean * rng.uniform(0.5, 1.5)
            if t >= horizon:
                break
            length = mean * rng.uniform(0.5, 1.5)
            windows.append(Window(round(t, 3), round(t + length, 3)))
            t += length
        out[zone] = windows
    return out


class Capacity:
    """The zones of one daemon; times are seconds after ``t0`` (a monotonic clock)."""

    def __init__(
        self,
        names: tuple[str, ...],
        capacity: Mapping[str, int],
        windows: Mapping[str, list[Window]],
    ) -> None:
        self.t0 = time.monotonic()
        self.t0_epoch = time.time()
        self.zones = {
            n: Zone(n, i, capacity.get(n, DEFAULT_CAPACITY), sorted(windows.get(n, []), key=_start))
            for i, n in enumerate(names)
        }

    def zone(self, name: str) -> Zone:
        return self.zones[name]

    def now(self) -> float:
        return time.monotonic() - self.t0

    def in_stockout(self, name: str, t: float | None = None) -> bool:
        t = self.now() if t is None else t
        return any(w.covers(t) for w in self.zones[name].windows)

    def free(self, name: str, used: int) -> int:
        """Slices a create may take in ``name`` now, given ``used`` held already."""
        if self.in_stockout(name):
            return 0
        return max(0, self.zones[name].capacity - used)

    def set(
        self,
        name: str,
        capacity: int | None = None,
        stockout_s: float | None = None,
        clear: bool = False,
    ) -> None:
        """Runtime control: a new capacity, a stockout of ``stockout_s`` from now, or no
        stockouts at all (``clear``)."""
        zone = self.zones[name]
        if capacity is not None:
            zone.capacity = capacity
        if clear:
            zone.windows = []
        if stockout_s is not None:
            now = self.now()
            end = math.inf if stockout_s <= 0 else now + stockout_s
            # Floor, not round: a start rounded up past now would not cover now yet.
            start = math.floor(now * 1000) / 1000
            zone.windows = sorted([*zone.windows, Window(start, end)], key=_start)

    def status(self, used: Mapping[str, int]) -> list[dict[str, Any]]:
        now = self.now()
        return [
            {
                "name": z.name,
                "index": z.index,
                "capacity": z.capacity,
                "used": used.get(z.name, 0),
                "free": self.free(z.name, used.get(z.name, 0)),
                "stockout": self.in_stockout(z.name, now),
                # Future and current windows, in seconds after start-up and as epoch times.
                "windows": [
                    {
                        **w.to_json(),
                        "start_epoch": round(self.t0_epoch + w.start, 3),
                        "end_epoch": None if math.isinf(w.end) else round(self.t0_epoch + w.end, 3),
                    }
                    for w in z.windows
                    if w.end > now
                ][:20],
            }
            for z in self.zones.values()
        ]


def _start(w: Window) -> float:
    return w.start
