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

The same watcher long-polls ``instance/maintenance-event`` beside it, as GCE documents: the
value is ``NONE`` until about 60 s before a host maintenance, then
``TERMINATE_ON_HOST_MAINTENANCE`` (the VM is stopped: a TPU VM cannot be live-migrated; for
the console that is a notice like ``preempted``, with its reason) or
``MIGRATE_ON_HOST_MAINTENANCE`` (the VM is live-migrated, a pause it survives: told through
``on_maintenance``, as is the return to ``NONE``).

A watcher outlives everything short of its host's notice or its host leaving the pod: a
session that fails (a connect or probe that timed out on a loaded pod of a thousand hosts, a
dropped connection, an exception) is started again after a backoff (``FIRST_RETRY_S``,
doubling to ``MAX_RETRY_S``, back to the first after a session that listened). The backend
starts watchers on hosts that answered and stops one only when its host's VM is gone: a
probe that timed out says nothing about the watcher's own session.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Callable, Iterable

from console.services.backends.tpu_vm.ssh import SshFanout

log = logging.getLogger(__name__)

# curl rather than python: one watcher per host, and a pod may have a thousand hosts. The
# long-poll's answer is the new value: it is printed the moment curl returns, before the
# next ETag is parsed (a sed and a curl more on the notice's path cost a loaded host ~0.1 s).
# One function long-polls a key; the maintenance-event's loop runs in the background (it
# ends with the session's shell: it checks that its parent lives before each poll).
WATCH_COMMAND = r"""trap 'kill "$mpid" $cpid 2>/dev/null; rm -f "$hdr" "$hdr.body"; echo TERM; exit 0' TERM
base="http://${GCE_METADATA_HOST:-metadata.google.internal}/computeMetadata/v1/instance"
hdr=$(mktemp)
cpid=
fetch() {  # $1: the URL, $2: seconds at most, $3: the header file (the body: "$3.body")
  curl -sf -m "$2" -D "$3" -o "$3.body" -H 'Metadata-Flavor: Google' "$1" &
  cpid=$!
  wait "$cpid"  # a trapped signal ends this wait at once (it would wait out a foreground curl)
}
poll() {  # $1: the key, $2: the line's name, $3: the header file
  while kill -0 "$parent" 2>/dev/null; do
    fetch "$base/$1" 10 "$3" || { sleep 2; continue; }
    while echo "$2=$(<"$3.body")"; do
      tag=$(sed -n 's/^[Ee][Tt][Aa][Gg]: *\([^[:space:]]*\).*/\1/p' "$3")
      fetch "$base/$1?wait_for_change=true&timeout_sec=60&last_etag=$tag" 70 "$3" \
        || { sleep 1; break; }
    done
  done
}
parent=$$
(trap 'kill $cpid 2>/dev/null; rm -f "$mhdr" "$mhdr.body"; exit 0' TERM
 mhdr=$(mktemp); poll maintenance-event MAINTENANCE "$mhdr"; rm -f "$mhdr" "$mhdr.body") &
mpid=$!
poll preempted PREEMPTED "$hdr"
"""
FIRST_RETRY_S = 1.0  # after a session that listened (a metadata server restarting)
MAX_RETRY_S = 30.0  # a host that keeps failing is tried this often, never given up
# instance/maintenance-event's values (GCE): nothing coming, a live migration, a termination
NO_MAINTENANCE = "NONE"
MIGRATE = "MIGRATE_ON_HOST_MAINTENANCE"
TERMINATE = "TERMINATE_ON_HOST_MAINTENANCE"


class NoticeWatcher:
    """One watcher per host; ``on_notice(host, at)`` once per notice (until ``clear``);
    ``on_maintenance(host, value, at)`` when a host's maintenance-event changes to a live
    migration or back to ``NONE`` (a terminating maintenance is a notice)."""

    def __init__(
        self,
        ssh: SshFanout,
        on_notice: Callable[[str, float], None],
        *,
        on_maintenance: Callable[[str, str, float], None] | None = None,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self._ssh = ssh
        self._on_notice = on_notice
        self._on_maintenance = on_maintenance
        self._clock = clock
        self._tasks: dict[str, asyncio.Task[None]] = {}
        self.notices: dict[str, float] = {}
        # why, when not metadata `preempted`: "maintenance-event TERMINATE_ON_HOST_MAINTENANCE"
        self.reasons: dict[str, str] = {}
        self.maintenance: dict[str, str] = {}  # host -> its maintenance-event, when not NONE
        self.listening: set[str] = set()  # hosts whose watcher has read the metadata

    def watch(self, hosts: Iterable[str], keep: Iterable[str] = ()) -> None:
        """Start a watcher on each of ``hosts`` where none runs; keep the ones on ``keep``
        (hosts whose VM is still there, answering or not) and stop the rest."""
        wanted = set(hosts)
        kept = wanted | set(keep)
        for name in list(self._tasks):
            if name not in kept:
                self._tasks.pop(name).cancel()
                self.listening.discard(name)
        for name in wanted:
            task = self._tasks.get(name)
            if task is None or task.done():
                self._tasks[name] = asyncio.create_task(
                    self._keep(name), name=f"phantom-notice-{name}"
                )

    def clear(self, host: str) -> None:
        """The host was recreated: a new VM, no notice (yet)."""
        self.notices.pop(host, None)
        self.reasons.pop(host, None)
        self.maintenance.pop(host, None)
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
        listened = False

        def on_output(_host: str, stream: str, line: str) -> None:
            nonlocal listened
            text = line.strip()
            if stream != "stdout":
                return
            if text.startswith("PREEMPTED="):
                listened = True
                self.listening.add(host)
            if text in ("PREEMPTED=TRUE", "TERM"):
                self._noticed(host)
            elif text.startswith("MAINTENANCE="):
                self._maintenance(host, text.removeprefix("MAINTENANCE="))

        retry = FIRST_RETRY_S
        while True:
            listened = False
            try:
                res = await self._ssh.run_one(
                    host, WATCH_COMMAND, on_output, timeout_s=3600.0, watch=True
                )
                error = "" if res.ok else res.error
            except asyncio.CancelledError:
                raise
            except Exception as exc:  # whatever a session dies of, the watcher goes on
                error = f"{type(exc).__name__}: {exc}"
            if host in self.notices:
                return  # the VM is going away: its replacement gets a new watcher
            self.listening.discard(host)
            retry = FIRST_RETRY_S if listened else min(MAX_RETRY_S, retry * 2)
            log.debug("notice watcher on %s ended (%s); again in %.0fs", host, error, retry)
            await asyncio.sleep(retry)

    def _maintenance(self, host: str, value: str) -> None:
        before = self.maintenance.get(host, NO_MAINTENANCE)
        if value == before or not value:
            return
        if value == NO_MAINTENANCE:
            self.maintenance.pop(host, None)
        else:
            self.maintenance[host] = value
        if value == TERMINATE:  # the VM is stopped at the maintenance: a notice
            self._noticed(host, f"maintenance-event {TERMINATE}")
            return
        if self._on_maintenance is not None:
            try:
                self._on_maintenance(host, value, self._clock())
            except Exception:  # a broken callback must not kill the watcher
                log.exception("maintenance callback failed for %s", host)

    def _noticed(self, host: str, reason: str = "") -> None:
        if host in self.notices:
            return
        at = self._clock()
        if reason:
            self.reasons[host] = reason
        self.notices[host] = at
        try:
            self._on_notice(host, at)
        except Exception:  # a broken callback must not kill the watcher
            log.exception("notice callback failed for %s", host)
