"""Host (VM) lifecycle: boot, SSH up, preemption notice, kill, wipe.

One ``Runtime`` holds what every host shares (run dir, run id, ports, the
metadata server, the event log); ``HostLifecycle`` does the per-VM work. A host
is identified by ``key`` (its sandbox directory and process marker): the host
name for the first zone's first slice, so every path and marker there is what it
always was, and ``<name>.<zone>.<slot>`` elsewhere, so a node of the same name in
another zone never shares a sandbox or a marker with it.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import os
import shutil
import signal
import socket
import sys
import time
from collections import deque
from collections.abc import Coroutine, Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import asyncssh

from emulators.tpu_pod.layout import MARKER_ENV, RunLayout
from emulators.tpu_pod.metadata import MetadataServer
from emulators.tpu_pod.procs import (
    CGROUP_ENV,
    Target,
    kill_targets,
    make_host_cgroup,
    marker_value,
    pids_by_target,
    remove_cgroup,
    signal_targets,
)
from emulators.tpu_pod.settings import DaemonConfig
from emulators.tpu_pod.sshd import HostContext, HostSSH, known_hosts_line

log = logging.getLogger("phantom.pod")

SYSTEM_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"

# Host (VM) states shown by `pod status`; node states use the real API names.
CREATING, READY, PREEMPTING, PREEMPTED, DELETING, DELETED, STOPPED = (
    "CREATING",
    "READY",
    "PREEMPTING",  # notice given: metadata says TRUE, processes have SIGTERM
    "PREEMPTED",
    "DELETING",
    "DELETED",
    "STOPPED",  # StopNode: processes gone, disk and host key kept
)
LIVE = (CREATING, READY, PREEMPTING)


@dataclass
class Host:
    index: int
    name: str
    ips: tuple[str, ...]  # internal IP, then the external one in GCP-faithful mode
    key: str  # sandbox directory and process marker (see the module docstring)
    tmp_name: str  # its short TMPDIR link under Runtime.short_tmp_root
    state: str = DELETED
    generation: int = 0
    host_key: asyncssh.SSHKey | None = None
    ssh: HostSSH | None = None
    ready_task: asyncio.Task[None] | None = None
    preempted_at: float | None = None
    notice_at: float | None = None  # when instance/preempted turned TRUE
    # instance/maintenance-event: NONE, or (about 60 s before a host maintenance)
    # MIGRATE_ON_HOST_MAINTENANCE / TERMINATE_ON_HOST_MAINTENANCE, as on GCE
    maintenance_event: str = "NONE"
    cgroup: Path | None = None
    authorized: Mapping[str, frozenset[bytes]] = field(default_factory=dict)
    faults: dict[str, float] = field(default_factory=dict)  # kind -> expiry (monotonic)

    @property
    def ip(self) -> str:
        return self.ips[0]

    @property
    def external_ip(self) -> str:
        return self.ips[1] if len(self.ips) > 1 else ""


class Runtime:
    """What every host of the daemon shares; also the event log and change signal."""

    def __init__(self, cfg: DaemonConfig, run_id: str, short_tmp_root: Path) -> None:
        self.cfg = cfg
        self.layout = RunLayout(cfg.run_dir)
        self.run_id = run_id
        self.short_tmp_root = short_tmp_root
        self.ssh_port = cfg.ssh_port
        self.metadata_port = cfg.metadata_port
        self.run_cgroup: Path | None = None
        self.client_key: asyncssh.SSHKey | None = None
        self.base_authorized: dict[str, frozenset[bytes]] = {}
        self.metadata: MetadataServer | None = None
        # Sockets bound at start-up for the first node's addresses, handed over on boot.
        self.reserved_ssh: dict[str, socket.socket] = {}
        self.reserved_meta: dict[str, socket.socket] = {}
        self.events: deque[dict[str, Any]] = deque(maxlen=100)
        self.lock = asyncio.Lock()  # host kills and node deletes, one at a time
        self.changed = asyncio.Condition()
        self.tasks: set[asyncio.Task[Any]] = set()

    def event(self, kind: str, **fields: Any) -> None:
        event = {"t": round(time.time(), 3), "kind": kind, **fields}
        self.events.append(event)
        log.info("event %s", json.dumps(event))

    async def notify(self, hosts: Iterable[Host] | None = None) -> None:
        """Something changed; ``hosts``: only these hosts' metadata can have (None: any)."""
        async with self.changed:
            self.changed.notify_all()
        if self.metadata is not None:
            ips = None if hosts is None else [ip for h in hosts for ip in h.ips]
            await self.metadata.changed(ips)

    def spawn(self, coro: Coroutine[Any, Any, Any]) -> asyncio.Task[Any]:
        task = asyncio.ensure_future(coro)
        self.tasks.add(task)
        task.add_done_callback(self.tasks.discard)
        return task

    def close_reserved(self) -> None:
        for sock in [*self.reserved_ssh.values(), *self.reserved_meta.values()]:
            sock.close()
        self.reserved_ssh.clear()
        self.reserved_meta.clear()


class HostLifecycle:
    def __init__(self, rt: Runtime) -> None:
        self.rt = rt

    # --- sandbox and environment ------------------------------------------------

    def marker(self, host: Host) -> str:
        return marker_value(self.rt.run_id, host.key, host.generation)

    def target(self, host: Host) -> Target:
        return marker_value(self.rt.run_id, host.key), host.cgroup

    def sandbox(self, host: Host) -> Path:
        return self.rt.layout.sandbox(host.key)

    def _short_tmp(self, host: Host) -> Path:
        return self.rt.short_tmp_root / host.tmp_name

    def env(self, host: Host) -> dict[str, str]:
        sandbox = self.sandbox(host)
        venv_bin = os.path.dirname(sys.executable)
        user = self.rt.cfg.ssh_user
        metadata = f"{host.ip}:{self.rt.metadata_port}"
        return {
            "HOME": str(sandbox),
            "USER": user,
            "LOGNAME": user,
            "SHELL": "/bin/bash",
            "LANG": "C.UTF-8",
            # The shim dir comes first so `ray stop` only stops this host's Ray.
            "PATH": f"{self.rt.layout.shim_bin}:{venv_bin}:{sandbox}/.local/bin:{SYSTEM_PATH}",
            "TMPDIR": str(self._short_tmp(host)),
            "PHANTOM_HOST": host.name,
            "PHANTOM_HOST_IP": host.ip,
            # The host's own metadata server, under every name Google's tools read,
            # so none of them ever tries the link-local default address.
            "GCE_METADATA_HOST": metadata,
            "GCE_METADATA_IP": metadata,
            "GCE_METADATA_ROOT": metadata,
            MARKER_ENV: self.marker(host),
            **({CGROUP_ENV: str(host.cgroup)} if host.cgroup else {}),
        }

    def wipe(self, host: Host) -> None:
        shutil.rmtree(self.rt.layout.hosts_dir / host.key, ignore_errors=True)
        with contextlib.suppress(FileNotFoundError):
            self._short_tmp(host).unlink()

    def _make_sandbox(self, host: Host) -> None:
        sandbox = self.sandbox(host)
        (sandbox / "tmp").mkdir(parents=True, exist_ok=True)
        (sandbox / ".local" / "bin").mkdir(parents=True, exist_ok=True)
        self.rt.short_tmp_root.mkdir(mode=0o700, exist_ok=True)
        link = self._short_tmp(host)
        with contextlib.suppress(FileNotFoundError):
            link.unlink()
        # Short per-host TMPDIRs: Ray puts unix sockets under $TMPDIR/ray/session_*/
        # and AF_UNIX paths are capped at 107 bytes, too short for sandbox paths.
        link.symlink_to(sandbox / "tmp")

    # --- boot ---------------------------------------------------------------------

    def boot(
        self, host: Host, authorized: Mapping[str, frozenset[bytes]], fresh: bool = True
    ) -> None:
        """A fresh VM for ``host``: new sandbox and host key, CREATING, READY later.
        ``fresh=False``: a stopped VM started again keeps its disk and host key."""
        host.generation += 1
        if fresh or host.host_key is None:
            host.host_key = asyncssh.generate_private_key("ssh-ed25519")
            self.wipe(host)
        host.preempted_at = None
        host.notice_at = None
        host.maintenance_event = "NONE"
        host.faults.clear()
        host.authorized = authorized
        remove_cgroup(host.cgroup)
        host.cgroup = make_host_cgroup(self.rt.run_cgroup, f"{host.key}-g{host.generation}")
        host.state = CREATING
        host.ready_task = self.rt.spawn(self._become_ready(host, host.generation))

    async def _become_ready(self, host: Host, generation: int) -> None:
        await asyncio.sleep(self.rt.cfg.ready_delay)
        assert host.host_key is not None
        self._make_sandbox(host)
        await self._serve_metadata(host)
        ctx = HostContext(
            name=host.name,
            ips=host.ips,
            port=self.rt.ssh_port,
            sandbox=self.sandbox(host),
            env=self.env(host),
            authorized=host.authorized,
            host_key=host.host_key,
            cgroup=host.cgroup,
        )
        ssh = HostSSH(ctx)
        while True:
            socks = [self.rt.reserved_ssh.pop(ip, None) for ip in host.ips]
            try:
                await ssh.start(socks)
                break
            except OSError as exc:
                log.warning(
                    "%s: cannot listen on %s port %s (%s); retrying",
                    host.name,
                    "/".join(host.ips),
                    self.rt.ssh_port,
                    exc,
                )
                await asyncio.sleep(0.5)
        if host.generation != generation or host.state != CREATING:
            ssh.stop()  # preempted/deleted while booting
            return
        host.ssh = ssh
        host.state = READY
        self.rt.event("ready", hosts=[host.name], generation=generation)
        await self.rt.notify()

    async def _serve_metadata(self, host: Host) -> None:
        metadata = self.rt.metadata
        if metadata is None:
            return
        while True:
            try:
                await metadata.add(host.ip, self.rt.reserved_meta.pop(host.ip, None))
                return
            except OSError as exc:
                log.warning(
                    "%s: metadata server cannot listen on %s:%s (%s); retrying",
                    host.name,
                    host.ip,
                    self.rt.metadata_port,
                    exc,
                )
                await asyncio.sleep(0.5)

    # --- the end of a VM ------------------------------------------------------------

    async def kill(self, hosts: list[Host], new_state: str) -> dict[str, Any]:
        """Everything of ``hosts`` dies at once: SSH drops, processes SIGKILLed.

        A preempted host shows PREEMPTED only once its last process is gone (until
        then it is PREEMPTING, which the API still reports as READY), as on GCP.
        """
        t0 = time.monotonic()
        interim = PREEMPTING if new_state == PREEMPTED else new_state
        for host in hosts:
            host.state = interim
            if host.ready_task is not None:
                host.ready_task.cancel()
                host.ready_task = None
            if host.ssh is not None:
                host.ssh.stop()
                host.ssh = None
        killed = await self.kill_processes(hosts)
        for host in hosts:
            remove_cgroup(host.cgroup)
            host.cgroup = None
            if host.state == interim:
                host.state = new_state
        return {"killed": killed, "kill_seconds": round(time.monotonic() - t0, 4)}

    async def kill_processes(self, hosts: list[Host]) -> int:
        """SIGKILL every process of ``hosts`` until none is left (one /proc scan a round)."""
        if not hosts:
            return 0
        try:
            counts = await asyncio.to_thread(
                kill_targets, marker_value(self.rt.run_id), [self.target(h) for h in hosts]
            )
        except TimeoutError as exc:
            log.error("%s", exc)
            return 0
        return sum(counts.values())

    def give_notice(self, hosts: Iterable[Host]) -> None:
        """Metadata turns TRUE and SSH stops accepting, as on a VM that starts shutting down."""
        now = time.time()
        for host in hosts:
            host.state = PREEMPTING
            host.notice_at = now
            if host.ssh is not None:
                host.ssh.stop_listening()

    async def terminate(self, hosts: list[Host], grace: float) -> dict[str, Any]:
        """SIGTERM every process of ``hosts``; wait up to ``grace`` s for all to exit."""
        t0 = time.monotonic()
        run = marker_value(self.rt.run_id)
        targets = [self.target(h) for h in hosts]
        sent = await asyncio.to_thread(signal_targets, run, targets, signal.SIGTERM)
        deadline = t0 + grace
        left = sent
        while time.monotonic() < deadline:
            live = await asyncio.to_thread(pids_by_target, run, targets)
            left = sum(len(p) for p in live.values())
            if not left:
                break
            await asyncio.sleep(min(0.2, max(0.0, deadline - time.monotonic())))
        return {
            "sigterm": sent,
            "left_after_grace": left,
            "grace_used_s": round(time.monotonic() - t0, 3),
        }

    # --- known_hosts ------------------------------------------------------------------

    def write_known_hosts(self, hosts: Iterable[Host]) -> None:
        lines = [
            known_hosts_line(ip, self.rt.ssh_port, h.host_key)
            for h in hosts
            if h.host_key is not None and h.state != DELETED
            for ip in h.ips
        ]
        tmp = self.rt.layout.known_hosts.with_suffix(".tmp")
        tmp.write_text("".join(line + "\n" for line in lines))
        tmp.replace(self.rt.layout.known_hosts)
