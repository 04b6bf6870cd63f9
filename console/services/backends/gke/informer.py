"""List + watch one resource into a cache (what client-go calls a reflector/informer).

    list -> cache, version V -> watch from V -> ADDED/MODIFIED/DELETED update the cache,
    BOOKMARKs move V -> the server ends the watch -> watch again from V
    -> 410 Expired (V compacted away) -> relist, and the diff against the cache is replayed
    as events, so a listener misses nothing that happened while the watch was down

Reading the cache costs nothing on the network: the backend's poll only reads caches, so a
console refreshing every second does not send a request a second per resource (no polling
storm). A failed list or watch is retried with backoff; ``error`` says why meanwhile, and
``synced`` tells whether the cache reflects the server at all.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Callable
from typing import Any

from console.services.backends.gke.kube import Expired, KubeApi, KubeError, Obj, Resource, WatchType

log = logging.getLogger(__name__)

Listener = Callable[[str, Obj], None]  # (ADDED | MODIFIED | DELETED, object)


def key_of(obj: Obj) -> str:
    meta = obj.get("metadata") or {}
    return str(meta.get("name") or "")


def _rv(obj: Obj) -> str:
    return str((obj.get("metadata") or {}).get("resourceVersion") or "")


class Informer:
    def __init__(
        self,
        api: KubeApi,
        resource: Resource,
        *,
        label_selector: str = "",
        watch_timeout_s: float | None = 300.0,
        backoff_s: float = 0.5,
        max_backoff_s: float = 10.0,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.api = api
        self.resource = resource
        self.label_selector = label_selector
        # Ask the server to end each watch after this long (as client-go does, 5-10 min):
        # a half-open connection is noticed within it.
        self.watch_timeout_s = watch_timeout_s
        self.backoff_s = backoff_s
        self.max_backoff_s = max_backoff_s
        self._clock = clock
        self.items: dict[str, Obj] = {}
        self.resource_version = ""
        self.synced = asyncio.Event()
        self.error = ""
        self.lists = 0  # how many times it listed (1 + relists after 410 or errors)
        self.expired = 0  # 410s seen
        self.bookmarks = 0
        self.events = 0
        self.updated_at: float | None = None  # our clock, last change applied
        self._listeners: list[Listener] = []
        self._task: asyncio.Task[None] | None = None
        self._changed = asyncio.Event()

    def add_listener(self, listener: Listener) -> None:
        self._listeners.append(listener)

    def start(self) -> None:
        if self._task is None or self._task.done():
            self._task = asyncio.create_task(self._run(), name=f"informer-{self.resource}")

    async def stop(self) -> None:
        task, self._task = self._task, None
        if task is not None:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task

    def values(self) -> list[Obj]:
        return list(self.items.values())

    def get(self, name: str) -> Obj | None:
        return self.items.get(name)

    async def wait_synced(self, timeout_s: float) -> bool:
        try:
            async with asyncio.timeout(timeout_s):
                await self.synced.wait()
        except TimeoutError:
            return False
        return True

    async def changed(self, timeout_s: float) -> bool:
        """Wait for the next change applied to the cache (or ``timeout_s``)."""
        event = self._changed
        try:
            async with asyncio.timeout(timeout_s):
                await event.wait()
        except TimeoutError:
            return False
        return True

    # -- the loop ----------------------------------------------------------------------------
    async def _run(self) -> None:
        delay = self.backoff_s
        need_list = not self.resource_version  # restarted with a cache: resume its watch
        while True:
            try:
                if need_list:
                    await self._relist()
                    need_list = False
                await self._watch()
                delay = self.backoff_s  # a clean end of the watch: go again at once
                continue
            except asyncio.CancelledError:
                raise
            except Expired:
                self.expired += 1
                need_list = True  # our version was compacted away: start from a new list
                continue
            except KubeError as exc:
                self.error = f"{self.resource}: {exc}"
                need_list = need_list or exc.status in (400, 404)
            except Exception as exc:  # connection refused, reset, timeouts: retry
                self.error = f"{self.resource}: {type(exc).__name__}: {exc}"
            log.debug("informer %s: %s; retrying in %.1fs", self.resource, self.error, delay)
            await asyncio.sleep(delay)
            delay = min(self.max_backoff_s, delay * 2)

    async def _relist(self) -> None:
        listed = await self.api.list(self.resource, label_selector=self.label_selector)
        self.lists += 1
        fresh = {key_of(o): o for o in listed.items}
        old = self.items
        self.items = fresh
        self.resource_version = listed.resource_version
        self.error = ""
        # Replay the difference so listeners see what happened while we were not watching.
        for name, obj in fresh.items():
            before = old.get(name)
            if before is None:
                self._notify(WatchType.ADDED, obj)
            elif _rv(before) != _rv(obj):
                self._notify(WatchType.MODIFIED, obj)
        for name, obj in old.items():
            if name not in fresh:
                self._notify(WatchType.DELETED, obj)
        self.synced.set()
        self._touch()

    async def _watch(self) -> None:
        async for ev in self.api.watch(
            self.resource,
            self.resource_version,
            label_selector=self.label_selector,
            timeout_s=self.watch_timeout_s,
        ):
            self.error = ""
            rv = ev.resource_version
            if ev.type == WatchType.BOOKMARK:
                self.bookmarks += 1
                if rv:
                    self.resource_version = rv
                continue
            name = key_of(ev.obj)
            if ev.type == WatchType.DELETED:
                self.items.pop(name, None)
            elif ev.type in (WatchType.ADDED, WatchType.MODIFIED):
                self.items[name] = ev.obj
            else:
                continue
            if rv:
                self.resource_version = rv
            self.events += 1
            self._notify(ev.type, ev.obj)
            self._touch()

    def _notify(self, kind: str, obj: Obj) -> None:
        for listener in self._listeners:
            try:
                listener(kind, obj)
            except Exception:  # a listener's bug must not stop the cache
                log.exception("informer %s listener failed", self.resource)

    def _touch(self) -> None:
        self.updated_at = self._clock()
        event, self._changed = self._changed, asyncio.Event()
        event.set()

    def stats(self) -> dict[str, Any]:
        return {
            "resource": str(self.resource),
            "items": len(self.items),
            "resource_version": self.resource_version,
            "lists": self.lists,
            "expired": self.expired,
            "bookmarks": self.bookmarks,
            "events": self.events,
            "error": self.error,
        }
