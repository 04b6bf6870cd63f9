"""Chaos: the seeded schedule of reclaims, and faults seen in the field.

Faults (``phantom pod fault HOST KIND``), each reproducing a report of spot-VM users:

- ``hang``: SSH accepts the TCP connection and never answers (open sessions stall
  too) until cleared or ``--seconds`` pass;
- ``silent-death``: every process of the host dies; SSH and the API still say it is
  up (READY);
- ``stale-api``: the API keeps reporting the node as it was for ``--seconds``;
- ``slow-api``: every API call (gRPC and REST) takes ``--seconds`` longer, until
  cleared or ``--duration`` passes;
- ``drop-forwards``: every forwarded TCP connection (``ssh -L``) of the host is closed at
  once, its SSH connections staying up, as a NAT or proxy that times out a long-lived
  connection does: a ``ray job logs -f`` through the tunnel ends, new ones open.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import math
import random
import time
from collections.abc import Awaitable, Callable, Iterator
from typing import TYPE_CHECKING, Any

import grpc
from google.cloud.tpu_v2.types import cloud_tpu

from emulators.tpu_pod.operations import ApiError
from emulators.tpu_pod.procs import allow_forks
from emulators.tpu_pod.startargs import FAULT_KINDS

if TYPE_CHECKING:
    from emulators.tpu_pod.api_state import PodState
    from emulators.tpu_pod.hosts import Host
    from emulators.tpu_pod.nodes import Node

log = logging.getLogger("phantom.pod.chaos")

DEFAULT_FAULT_SECONDS = {
    "hang": math.inf,
    "silent-death": 0.0,
    "stale-api": 30.0,
    "slow-api": 5.0,
    "drop-forwards": 0.0,
}


def chaos_schedule(seed: int | None, interval: float, n_hosts: int) -> Iterator[tuple[float, str]]:
    """Endless seeded (delay seconds, target) pairs; target is a host index or "all".

    Delays are uniform in [0.5, 1.5] x interval; one reclaim in ten takes the
    whole node, as a zone-wide spot reclaim would.
    """
    rng = random.Random(seed)
    while True:
        delay = interval * rng.uniform(0.5, 1.5)
        target = "all" if rng.random() < 0.1 else str(rng.randrange(n_hosts))
        yield delay, target


def chaos_events(
    seed: int | None, interval: float, n_hosts: int, faults: tuple[str, ...] = ()
) -> Iterator[tuple[float, str, str, float]]:
    """(delay, action, target, seconds): ``chaos_schedule`` with, when ``faults`` are
    given, half of its events turned into one of those faults lasting ``seconds``.

    Without faults it is exactly ``chaos_schedule`` (action "preempt"), so existing
    seeds replay the same reclaims.
    """
    pick = random.Random(f"{seed}/faults") if seed is not None else random.Random()
    for delay, target in chaos_schedule(seed, interval, n_hosts):
        if faults and pick.random() < 0.5:
            kind = faults[pick.randrange(len(faults))]
            yield delay, kind, target, round(interval * pick.uniform(0.25, 0.75), 3)
        else:
            yield delay, "preempt", target, 0.0


def check_fault(kind: str, seconds: float | None, duration: float | None) -> None:
    """ValueError naming the field and the fix."""
    if kind not in FAULT_KINDS:
        raise ValueError(f"unknown fault {kind!r}: use one of {', '.join(FAULT_KINDS)} or clear")
    for name, value in (("--seconds", seconds), ("--duration", duration)):
        if value is not None and value < 0:
            raise ValueError(f"{name} must be >= 0, got {value}")
    if kind == "stale-api" and seconds == 0:
        raise ValueError("stale-api needs --seconds > 0 (how long the API stays stale)")


class Faults:
    """API-wide faults (slow, stale views); host faults live on the hosts themselves."""

    def __init__(self) -> None:
        self.slow: tuple[float, float] | None = None  # (delay s, expiry monotonic)
        self.stale: dict[str, tuple[cloud_tpu.Node, float]] = {}
        self._released = asyncio.Event()  # set when the slow API is cleared

    async def hold(self, delay: float) -> None:
        """Hold a call of the slow API for ``delay`` s, or until the fault is cleared: a
        call in flight ends with its fault (tests await that instead of the whole delay)."""
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self._released.wait(), delay)

    def api_delay(self) -> float:
        if self.slow is None:
            return 0.0
        delay, until = self.slow
        if time.monotonic() >= until:
            self.slow = None
            return 0.0
        return delay

    def stale_view(self, path: str) -> cloud_tpu.Node | None:
        entry = self.stale.get(path)
        if entry is None:
            return None
        if time.monotonic() >= entry[1]:
            del self.stale[path]
            return None
        return entry[0]

    def stale_views(self) -> dict[str, cloud_tpu.Node]:
        for path in list(self.stale):
            self.stale_view(path)
        return {p: pb for p, (pb, _) in self.stale.items()}

    def set_slow(self, delay: float, duration: float | None) -> None:
        self.slow = (delay, _until(duration))
        if self._released.is_set():
            self._released = asyncio.Event()

    def set_stale(self, path: str, snapshot: cloud_tpu.Node, seconds: float) -> None:
        self.stale[path] = (snapshot, _until(seconds))

    def clear(self, paths: list[str] | None = None) -> None:
        """Clear the slow API and the stale views of ``paths`` (None: all of them)."""
        self.slow = None
        self._released.set()
        for path in list(self.stale) if paths is None else paths:
            self.stale.pop(path, None)

    def status(self) -> list[dict[str, Any]]:
        now = time.monotonic()
        out: list[dict[str, Any]] = []
        if self.api_delay():
            assert self.slow is not None
            out.append({"kind": "slow-api", "seconds": self.slow[0], **_left(self.slow[1], now)})
        for path, (_, until) in self.stale.items():
            if until > now:
                out.append({"kind": "stale-api", "node": path, **_left(until, now)})
        return out


def host_fault_status(faults: dict[str, float]) -> list[dict[str, Any]]:
    now = time.monotonic()
    return [{"kind": k, **_left(until, now)} for k, until in faults.items() if until > now]


def _until(seconds: float | None) -> float:
    if seconds is None or math.isinf(seconds) or seconds <= 0:
        return math.inf
    return time.monotonic() + seconds


def _left(until: float, now: float) -> dict[str, float | None]:
    return {"left_s": None if math.isinf(until) else round(until - now, 3)}


async def run_chaos(
    seed: int | None,
    interval: float,
    n_hosts: int,
    faults: tuple[str, ...],
    preempt: Callable[[str], Awaitable[Any]],
    fault: Callable[[str, str, float], Awaitable[Any]],
) -> None:
    """Play ``chaos_events`` forever. A reclaim of a host that is not up is a no-op,
    so the sequence of events depends on the seed alone."""
    for delay, action, target, seconds in chaos_events(seed, interval, n_hosts, faults):
        await asyncio.sleep(delay)
        try:
            if action == "preempt":
                await preempt(target)
            else:
                await fault(target, action, seconds)
        except Exception as exc:  # one failed chaos event must not stop the schedule
            log.warning("chaos %s %s: %s", action, target, exc)


# --- injecting and clearing faults -------------------------------------------------------


async def inject(
    pod: PodState,
    node: Node,
    hosts: list[Host],
    kind: str,
    seconds: float | None,
    duration: float | None,
    source: str = "command",
) -> dict[str, Any]:
    """Apply fault ``kind`` to ``hosts`` of ``node`` (API faults: to the API of ``node``)."""
    secs = DEFAULT_FAULT_SECONDS[kind] if seconds is None else seconds
    rt = pod.rt
    detail: dict[str, Any] = {}
    if kind == "hang":
        up = [h for h in hosts if h.ssh is not None]
        if not up:
            raise ApiError(
                grpc.StatusCode.FAILED_PRECONDITION,
                f"hang: no host of {[h.name for h in hosts]} is up (READY)",
            )
        for host in up:
            assert host.ssh is not None
            await host.ssh.hang()
            host.faults["hang"] = _until(secs)
            if not math.isinf(secs) and secs > 0:
                rt.spawn(_unhang_later(host, host.generation, secs))
        hosts = up
    elif kind == "silent-death":
        async with rt.lock:
            detail["killed"] = await pod.life.kill_processes(hosts)
            await asyncio.to_thread(allow_forks, [h.cgroup for h in hosts])
    elif kind == "drop-forwards":
        detail["dropped"] = sum(h.ssh.drop_forwards() for h in hosts if h.ssh is not None)
    elif kind == "stale-api":
        pod.faults.set_stale(node.path, pod.node_pb(node), secs)
    elif kind == "slow-api":
        pod.faults.set_slow(secs, duration)
    rt.event(
        "fault",
        fault=kind,
        node=node.path,
        hosts=[h.name for h in hosts],
        seconds=None if math.isinf(secs) else secs,
        source=source,
        **detail,
    )
    await rt.notify()
    return detail


async def _unhang_later(host: Host, generation: int, seconds: float) -> None:
    await asyncio.sleep(seconds)
    if host.generation == generation and "hang" in host.faults and host.ssh is not None:
        await host.ssh.unhang()
        host.faults.pop("hang", None)


async def clear(pod: PodState, node: Node | None, hosts: list[Host]) -> None:
    """Clear the hang of ``hosts`` and the API faults (of ``node``; None: of every node)."""
    for host in hosts:
        if host.faults.pop("hang", None) is not None and host.ssh is not None:
            await host.ssh.unhang()
        host.faults.clear()
    pod.faults.clear(None if node is None else [node.path])
    pod.rt.event("fault_clear", hosts=[h.name for h in hosts])
    await pod.rt.notify()
