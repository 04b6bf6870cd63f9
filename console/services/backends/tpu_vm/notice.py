"""Hearing a preemption notice the way the VM itself does: from its metadata server.

A spot VM is warned before it is reclaimed: ``instance/preempted`` in its metadata turns
TRUE and the guest shuts down (every process gets SIGTERM) within a grace of about 30 s.
The metadata server is only reachable from inside the VM, so the console keeps one small
watcher on each host, over the SSH connection it already has: a shell loop long-polling
``instance/preempted?wait_for_change=true`` from the ETag of its last read (so a change
between two reads is never missed), printing the value after each change, and ``TERM`` if
the shutdown's SIGTERM reaches it first. Either line is the notice. The watcher
uses ``GCE_METADATA_HOST`` when the host sets it (the emulator does, on loopback), else
``metadata.google.internal``, as Google's own libraries do; the console never talks to a
metadata server itself.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Callable, Iterable

from console.services.backends.tpu_vm.ssh import SshFanout

log = logging.getLogger(__name__)

# curl rather than python: one watcher per host, and a pod may have a thousand hosts.
WATCH_COMMAND = r"""trap 'rm -f "$hdr"; echo TERM; exit 0' TERM
md="http://${GCE_METADATA_HOST:-metadata.google.internal}/computeMetadata/v1/instance/preempted"
hdr=$(mktemp)
while :; do
  v=$(curl -sf -m 10 -D "$hdr" -H 'Metadata-Flavor: Google' "$md") || { sleep 2; continue; }
  echo "PREEMPTED=$v"
  tag=$(sed -n 's/^[Ee][Tt][Aa][Gg]: *\([^[:space:]]*\).*/\1/p' "$hdr")
  curl -sf -m 70 -o /dev/null -H 'Metadata-Flavor: Google' \
    "$md?wait_for_change=true&timeout_sec=60&last_etag=$tag" || sleep 1
done"""
RESTART_S = 5.0


class NoticeWatcher:
    """One watcher per host; ``on_notice(host, at)`` once per notice (until ``clear``)."""

    def __init__(
        self,
        ssh: SshFanout,
        on_notice: Callable[[str, float], None],
        *,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self._ssh = ssh
        self._on_notice = on_notice
        self._clock = clock
        self._tasks: dict[str, asyncio.Task[None]] = {}
        self.notices: dict[str, float] = {}
        self.listening: set[str] = set()  # hosts whose watcher has read the metadata

    def watch(self, hosts: Iterable[str]) -> None:
        """Keep a watcher on each of ``hosts`` (started where none runs); stop the rest."""
        wanted = set(hosts)
        for name in list(self._tasks):
            if name not in wanted:
                self._tasks.pop(name).cancel()
        for name in wanted:
            task = self._tasks.get(name)
            if task is None or task.done():
                self._tasks[name] = asyncio.create_task(
                    self._keep(name), name=f"phantom-notice-{name}"
                )

    def clear(self, host: str) -> None:
        """The host was recreated: a new VM, no notice (yet)."""
        self.notices.pop(host, None)
        self.listening.discard(host)
        task = self._tasks.pop(host, None)
        if task is not None:
            task.cancel()

    async def close(self) -> None:
        tasks, self._tasks = list(self._tasks.values()), {}
        for task in tasks:
            task.cancel()
        for task in tasks:
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task

    async def _keep(self, host: str) -> None:
        def on_output(_host: str, stream: str, line: str) -> None:
            text = line.strip()
            if stream != "stdout":
                return
            if text.startswith("PREEMPTED="):
                self.listening.add(host)
            if text in ("PREEMPTED=TRUE", "TERM"):
                self._noticed(host)

        while True:
            res = await self._ssh.run_one(
                host, WATCH_COMMAND, on_output, timeout_s=3600.0, watch=True
            )
            if host in self.notices:
                return  # the VM is going away: its replacement gets a new watcher
            if not res.ok:
                log.debug("notice watcher on %s ended: %s", host, res.error)
            await asyncio.sleep(RESTART_S)

    def _noticed(self, host: str) -> None:
        if host in self.notices:
            return
        at = self._clock()
        self.notices[host] = at
        try:
            self._on_notice(host, at)
        except Exception:  # a broken callback must not kill the watcher
            log.exception("notice callback failed for %s", host)
