"""The long-running emulator process: hosts, SSH servers, TPU API, chaos, control.

Started detached by ``client.start_pod`` as ``python -m console.emulator serve``.
One asyncio loop owns all state; the CLI talks to it over a JSON-lines unix
socket (see ``client.request``).
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import json
import logging
import os
import random
import secrets
import shutil
import signal
import socket
import sys
import time
from collections import deque
from collections.abc import Coroutine, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import asyncssh
import grpc
from google.cloud.tpu_v2.types import cloud_tpu
from google.protobuf import timestamp_pb2

from console.emulator.layout import (
    MARKER_ENV,
    SSH_USER,
    RunLayout,
    host_ip,
    host_name,
    node_path,
    resolve_host_ref,
)
from console.emulator.procs import (
    CGROUP_ENV,
    kill_marked,
    make_host_cgroup,
    make_run_cgroup,
    marker_value,
    remove_cgroup,
)
from console.emulator.rayshim import write_wrapper
from console.emulator.sshd import (
    HostContext,
    HostSSH,
    bind_socket,
    fingerprint,
    known_hosts_line,
    public_line,
)
from console.emulator.tpu_api import ApiError, TpuApi, serve

log = logging.getLogger("phantom.pod")

SYSTEM_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"

# Host (VM) states shown by `pod status`; the node state uses the real API names.
CREATING, READY, PREEMPTED, DELETING, DELETED = (
    "CREATING",
    "READY",
    "PREEMPTED",
    "DELETING",
    "DELETED",
)


class StartupError(Exception):
    """A problem that stops the daemon from starting; exit code 2 for config errors."""

    def __init__(self, message: str, exit_code: int = 1) -> None:
        super().__init__(message)
        self.exit_code = exit_code


@dataclass(frozen=True)
class DaemonConfig:
    run_dir: Path
    hosts: int
    ssh_port: int
    api_port: int
    ready_delay: float
    project: str
    zone: str
    node_name: str
    accelerator_type: str
    chaos_seed: int | None = None
    chaos_interval: float | None = None


@dataclass
class Host:
    index: int
    name: str
    ip: str
    state: str = DELETED
    generation: int = 0
    host_key: asyncssh.SSHKey | None = None
    ssh: HostSSH | None = None
    ready_task: asyncio.Task[None] | None = None
    preempted_at: float | None = None
    cgroup: Path | None = None
    reserved_sock: socket.socket | None = field(default=None, repr=False)


def _timestamp(seconds: float) -> timestamp_pb2.Timestamp:
    ts = timestamp_pb2.Timestamp()
    ts.FromNanoseconds(int(seconds * 1e9))
    return ts


def reserve_common_port(ips: list[str], port: int, attempts: int = 50) -> list[socket.socket]:
    """Bind (not listen) ``port`` on every IP; with port 0 find one free on all.

    The sockets are handed to the SSH servers later, so no one can take the
    port in between. Raises StartupError naming the taken address.
    """
    for _ in range(attempts if port == 0 else 1):
        socks: list[socket.socket] = []
        try:
            first = bind_socket(ips[0], port)
            socks.append(first)
            chosen = first.getsockname()[1]
            for ip in ips[1:]:
                socks.append(bind_socket(ip, chosen))
            return socks
        except OSError as exc:
            for s in socks:
                s.close()
            if port != 0:
                taken = ips[len(socks)]
                raise StartupError(
                    f"port {port} on {taken} is in use; pass --ssh-port", exit_code=2
                ) from exc
    raise StartupError(f"found no port free on all of {ips[0]}..{ips[-1]}; pass --ssh-port")


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


class PodDaemon:
    def __init__(self, cfg: DaemonConfig) -> None:
        self.cfg = cfg
        self.layout = RunLayout(cfg.run_dir)
        self.project = cfg.project
        self.zone = cfg.zone
        self.run_id = secrets.token_hex(6)
        self.hosts = [Host(i, host_name(cfg.node_name, i), host_ip(i)) for i in range(cfg.hosts)]
        self.ssh_port = cfg.ssh_port
        self.api_port = cfg.api_port
        self.node_exists = False
        self.node_deleting = False
        self.node_id = int.from_bytes(secrets.token_bytes(6), "big")
        self.create_time = time.time()
        self.events: deque[dict[str, Any]] = deque(maxlen=100)
        self.client_key: asyncssh.SSHKey | None = None
        self.run_cgroup: Path | None = None
        self._lock = asyncio.Lock()
        self._changed = asyncio.Condition()
        self._stop = asyncio.Event()
        self._tasks: set[asyncio.Task[Any]] = set()
        digest = hashlib.sha256(str(cfg.run_dir.resolve()).encode()).hexdigest()[:10]
        # Short per-host TMPDIRs: Ray puts unix sockets under $TMPDIR/ray/session_*/
        # and AF_UNIX paths are capped at 107 bytes, too short for sandbox paths.
        self.short_tmp_root = Path("/tmp") / f"phpod-{digest}"

    # --- naming --------------------------------------------------------------

    @property
    def node_path(self) -> str:
        return node_path(self.project, self.zone, self.cfg.node_name)

    def _short_tmp(self, host: Host) -> Path:
        return self.short_tmp_root / f"w{host.index}"

    def _marker(self, host: Host) -> str:
        return marker_value(self.run_id, host.name, host.generation)

    # --- state ---------------------------------------------------------------

    def node_state(self) -> str:
        if not self.node_exists:
            return "NOT_FOUND"
        if self.node_deleting:
            return "DELETING"
        states = [h.state for h in self.hosts]
        if PREEMPTED in states:
            return "PREEMPTED"
        if all(s == CREATING for s in states):
            return "CREATING"
        if CREATING in states:
            return "REPAIRING"
        return "READY"

    def _event(self, kind: str, **fields: Any) -> None:
        event = {"t": round(time.time(), 3), "kind": kind, **fields}
        self.events.append(event)
        log.info("event %s", json.dumps(event))

    async def _notify(self) -> None:
        async with self._changed:
            self._changed.notify_all()

    def _spawn(self, coro: Coroutine[Any, Any, Any]) -> asyncio.Task[Any]:
        task = asyncio.ensure_future(coro)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
        return task

    def status(self) -> dict[str, Any]:
        return {
            "run_dir": str(self.cfg.run_dir),
            "pid": os.getpid(),
            "run_id": self.run_id,
            "tpu_api": f"127.0.0.1:{self.api_port}",
            "project": self.project,
            "zone": self.zone,
            "node_name": self.cfg.node_name,
            "node_path": self.node_path,
            "accelerator_type": self.cfg.accelerator_type,
            "state": self.node_state(),
            "ssh_user": SSH_USER,
            "client_key": str(self.layout.client_key),
            "known_hosts": str(self.layout.known_hosts),
            "bucket": str(self.layout.bucket),
            "bucket_uri": self.layout.bucket.as_uri(),
            "ready_delay": self.cfg.ready_delay,
            "chaos": (
                {"seed": self.cfg.chaos_seed, "interval": self.cfg.chaos_interval}
                if self.cfg.chaos_interval
                else None
            ),
            "hosts": [
                {
                    "index": h.index,
                    "name": h.name,
                    "ip": h.ip,
                    "ssh_port": self.ssh_port,
                    "state": h.state,
                    "generation": h.generation,
                    "host_key_fingerprint": fingerprint(h.host_key) if h.host_key else "",
                    "host_key": public_line(h.host_key) if h.host_key else "",
                    "sandbox": str(self.layout.sandbox(h.name)),
                }
                for h in self.hosts
            ],
            "events": list(self.events)[-20:],
        }

    def _write_known_hosts(self) -> None:
        lines = [
            known_hosts_line(h.ip, self.ssh_port, h.host_key)
            for h in self.hosts
            if h.host_key is not None and h.state != DELETED
        ]
        tmp = self.layout.known_hosts.with_suffix(".tmp")
        tmp.write_text("".join(line + "\n" for line in lines))
        tmp.replace(self.layout.known_hosts)

    # --- host lifecycle ------------------------------------------------------

    def _host_env(self, host: Host) -> dict[str, str]:
        sandbox = self.layout.sandbox(host.name)
        venv_bin = os.path.dirname(sys.executable)
        return {
            "HOME": str(sandbox),
            "USER": SSH_USER,
            "LOGNAME": SSH_USER,
            "SHELL": "/bin/bash",
            "LANG": "C.UTF-8",
            # The shim dir comes first so `ray stop` only stops this host's Ray.
            "PATH": f"{self.layout.shim_bin}:{venv_bin}:{sandbox}/.local/bin:{SYSTEM_PATH}",
            "TMPDIR": str(self._short_tmp(host)),
            "PHANTOM_HOST": host.name,
            "PHANTOM_HOST_IP": host.ip,
            MARKER_ENV: self._marker(host),
            **({CGROUP_ENV: str(host.cgroup)} if host.cgroup else {}),
        }

    def _wipe_sandbox(self, host: Host) -> None:
        shutil.rmtree(self.layout.hosts_dir / host.name, ignore_errors=True)
        link = self._short_tmp(host)
        with contextlib.suppress(FileNotFoundError):
            link.unlink()

    def _make_sandbox(self, host: Host) -> None:
        sandbox = self.layout.sandbox(host.name)
        (sandbox / "tmp").mkdir(parents=True, exist_ok=True)
        (sandbox / ".local" / "bin").mkdir(parents=True, exist_ok=True)
        self.short_tmp_root.mkdir(mode=0o700, exist_ok=True)
        link = self._short_tmp(host)
        with contextlib.suppress(FileNotFoundError):
            link.unlink()
        link.symlink_to(sandbox / "tmp")

    def _boot(self, host: Host) -> None:
        """Create a fresh VM for ``host``: new sandbox and host key, CREATING."""
        host.generation += 1
        host.host_key = asyncssh.generate_private_key("ssh-ed25519")
        host.preempted_at = None
        self._wipe_sandbox(host)
        remove_cgroup(host.cgroup)
        host.cgroup = make_host_cgroup(self.run_cgroup, f"{host.name}-g{host.generation}")
        host.state = CREATING
        host.ready_task = self._spawn(self._become_ready(host, host.generation))

    async def _become_ready(self, host: Host, generation: int) -> None:
        await asyncio.sleep(self.cfg.ready_delay)
        assert host.host_key is not None and self.client_key is not None
        self._make_sandbox(host)
        ctx = HostContext(
            name=host.name,
            ip=host.ip,
            port=self.ssh_port,
            sandbox=self.layout.sandbox(host.name),
            env=self._host_env(host),
            user=SSH_USER,
            client_key=self.client_key,
            host_key=host.host_key,
            cgroup=host.cgroup,
        )
        ssh = HostSSH(ctx)
        while True:
            sock, host.reserved_sock = host.reserved_sock, None
            try:
                await ssh.start(sock)
                break
            except OSError as exc:
                log.warning(
                    "%s: cannot listen on %s:%s (%s); retrying",
                    host.name,
                    host.ip,
                    self.ssh_port,
                    exc,
                )
                await asyncio.sleep(0.5)
        if host.generation != generation or host.state != CREATING:
            ssh.stop()  # preempted/deleted while booting
            return
        host.ssh = ssh
        host.state = READY
        self._write_known_hosts()
        self._event("ready", hosts=[host.name], generation=generation)
        await self._notify()

    async def _kill_hosts(self, hosts: list[Host], new_state: str) -> dict[str, Any]:
        """Everything of ``hosts`` dies at once: SSH drops, processes SIGKILLed."""
        t0 = time.monotonic()
        for host in hosts:
            host.state = new_state
            if host.ready_task is not None:
                host.ready_task.cancel()
                host.ready_task = None
            if host.ssh is not None:
                host.ssh.stop()
                host.ssh = None
        results = await asyncio.gather(
            *(
                asyncio.to_thread(kill_marked, marker_value(self.run_id, h.name), h.cgroup)
                for h in hosts
            ),
            return_exceptions=True,
        )
        killed = 0
        for host, res in zip(hosts, results, strict=True):
            if isinstance(res, BaseException):
                log.error("%s: %s", host.name, res)
            else:
                killed += res
                remove_cgroup(host.cgroup)
                host.cgroup = None
        return {"killed": killed, "kill_seconds": round(time.monotonic() - t0, 4)}

    def _resolve(self, ref: str) -> list[Host]:
        if ref.strip().lower() == "all":
            return list(self.hosts)
        try:
            return [self.hosts[resolve_host_ref(ref, self.cfg.node_name, len(self.hosts))]]
        except ValueError as exc:
            raise ApiError(grpc.StatusCode.INVALID_ARGUMENT, str(exc)) from exc

    async def preempt(self, ref: str, source: str = "command") -> None:
        targets = self._resolve(ref)
        async with self._lock:
            live = [h for h in targets if h.state in (CREATING, READY)]
            if not live:
                return
            now = time.time()
            for h in live:
                h.preempted_at = now
            result = await self._kill_hosts(live, PREEMPTED)
            self._event("preempt", hosts=[h.name for h in live], source=source, **result)
        await self._notify()

    async def recreate(self, ref: str) -> None:
        targets = self._resolve(ref)
        async with self._lock:
            if not self.node_exists or self.node_deleting:
                raise ApiError(
                    grpc.StatusCode.FAILED_PRECONDITION,
                    f"node {self.cfg.node_name} does not exist; create it first (CreateNode)",
                )
            await self._kill_hosts(targets, CREATING)
            for host in targets:
                self._boot(host)
            self._write_known_hosts()
            self._event("recreate", hosts=[h.name for h in targets])
        await self._notify()

    # --- TPU API backend -----------------------------------------------------

    def _node_pb(self) -> cloud_tpu.Node:
        state = self.node_state()
        symptoms = [
            cloud_tpu.Symptom(
                create_time=_timestamp(h.preempted_at or time.time()),
                symptom_type=cloud_tpu.Symptom.SymptomType.SYMPTOM_TYPE_UNSPECIFIED,
                details=f"worker {h.index} ({h.ip}) was preempted",
                worker_id=str(h.index),
            )
            for h in self.hosts
            if h.state == PREEMPTED
        ]
        health = cloud_tpu.Node.Health.HEALTHY if state == "READY" else None
        unhealthy = [h.name for h in self.hosts if h.state != READY]
        return cloud_tpu.Node(
            name=self.node_path,
            description="phantom local spot pod emulator",
            accelerator_type=self.cfg.accelerator_type,
            state=getattr(cloud_tpu.Node.State, state),
            health=health or cloud_tpu.Node.Health.HEALTH_UNSPECIFIED,
            health_description=(f"hosts not ready: {', '.join(unhealthy)}" if unhealthy else ""),
            runtime_version="tpu-ubuntu2204-base",
            cidr_block="127.0.0.0/24",
            create_time=_timestamp(self.create_time),
            scheduling_config=cloud_tpu.SchedulingConfig(spot=True),
            network_config=cloud_tpu.NetworkConfig(network="default", subnetwork="default"),
            network_endpoints=[
                cloud_tpu.NetworkEndpoint(ip_address=h.ip, port=self.ssh_port) for h in self.hosts
            ],
            labels={"emulator": "phantom"},
            id=self.node_id,
            api_version=cloud_tpu.Node.ApiVersion.V2,
            symptoms=symptoms,
        )

    def _require_node(self, name: str) -> None:
        if name != self.node_path or not self.node_exists:
            raise ApiError(grpc.StatusCode.NOT_FOUND, f"node {name!r} not found")

    def node(self, name: str) -> cloud_tpu.Node:
        self._require_node(name)
        return self._node_pb()

    def nodes(self) -> list[cloud_tpu.Node]:
        return [self._node_pb()] if self.node_exists else []

    def guest_attributes(
        self, name: str, query_path: str, worker_ids: list[str]
    ) -> list[cloud_tpu.GuestAttributes]:
        self._require_node(name)
        ids = worker_ids or [str(h.index) for h in self.hosts]
        out = []
        for wid in ids:
            if not (wid.isdigit() and int(wid) < len(self.hosts)):
                raise ApiError(
                    grpc.StatusCode.INVALID_ARGUMENT,
                    f"worker id {wid!r} out of range 0..{len(self.hosts) - 1}",
                )
            host = self.hosts[int(wid)]
            items = []
            if host.state == READY and host.host_key is not None:
                blob = public_line(host.host_key)
                # GCE publishes host keys as namespace "hostkeys", key = algorithm;
                # "ssh-host-key" carries the whole known_hosts-ready line.
                candidates = [
                    ("hostkeys", "ssh-ed25519", blob.split()[1]),
                    ("hostkeys", "ssh-host-key", blob),
                ]
                path = query_path.strip("/")
                for ns, key, value in candidates:
                    if path in ("", ns, f"{ns}/{key}"):
                        items.append(
                            cloud_tpu.GuestAttributesEntry(namespace=ns, key=key, value=value)
                        )
            out.append(
                cloud_tpu.GuestAttributes(
                    query_path=query_path,
                    query_value=cloud_tpu.GuestAttributesValue(items=items),
                )
            )
        return out

    def create_node(
        self, node_id: str, node: cloud_tpu.Node
    ) -> Coroutine[Any, Any, cloud_tpu.Node]:
        if node_id != self.cfg.node_name:
            raise ApiError(
                grpc.StatusCode.INVALID_ARGUMENT,
                f"the emulator hosts one node named {self.cfg.node_name!r}, not {node_id!r}",
            )
        if self.node_exists:
            raise ApiError(
                grpc.StatusCode.ALREADY_EXISTS, f"node {self.node_path!r} already exists"
            )
        self.node_exists = True
        self.node_deleting = False
        self.create_time = time.time()
        self.node_id = int.from_bytes(secrets.token_bytes(6), "big")
        for host in self.hosts:
            self._boot(host)
        self._write_known_hosts()
        self._event("create", hosts=[h.name for h in self.hosts])
        return self._wait_created()

    async def _wait_created(self) -> cloud_tpu.Node:
        async with self._changed:
            await self._changed.wait_for(lambda: self.node_state() not in ("CREATING", "REPAIRING"))
        state = self.node_state()
        if state != "READY":
            raise ApiError(grpc.StatusCode.ABORTED, f"node became {state} while being created")
        return self._node_pb()

    def delete_node(self, name: str) -> Coroutine[Any, Any, None]:
        self._require_node(name)
        if self.node_deleting:
            raise ApiError(grpc.StatusCode.FAILED_PRECONDITION, f"node {name!r} is being deleted")
        self.node_deleting = True
        return self._delete()

    async def _delete(self) -> None:
        async with self._lock:
            result = await self._kill_hosts(self.hosts, DELETING)
            self._event("delete", hosts=[h.name for h in self.hosts], **result)
            await asyncio.sleep(self.cfg.ready_delay / 2)
            for host in self.hosts:
                self._wipe_sandbox(host)
                host.state = DELETED
                host.host_key = None
            self.node_exists = False
            self.node_deleting = False
            self._write_known_hosts()
        await self._notify()

    # --- chaos ---------------------------------------------------------------

    async def _chaos_after(self, created: Coroutine[Any, Any, cloud_tpu.Node]) -> None:
        # Chaos starts once the first boot is READY, like spot reclaims of a live VM.
        await created
        assert self.cfg.chaos_interval
        await self._chaos(self.cfg.chaos_seed, self.cfg.chaos_interval)

    async def _chaos(self, seed: int | None, interval: float) -> None:
        for delay, target in chaos_schedule(seed, interval, len(self.hosts)):
            await asyncio.sleep(delay)
            # A reclaim of a host that is not up is a no-op, so the sequence of
            # (delay, target) depends on the seed alone.
            await self.preempt(target, source="chaos")

    # --- control channel -----------------------------------------------------

    async def _control(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            line = await reader.readline()
            reply = await self._dispatch(json.loads(line or b"{}"))
        except json.JSONDecodeError as exc:
            reply = {"ok": False, "code": 2, "error": f"bad request: {exc}"}
        try:
            writer.write(json.dumps(reply).encode() + b"\n")
            await writer.drain()
        finally:
            writer.close()

    async def _dispatch(self, req: dict[str, Any]) -> dict[str, Any]:
        op = req.get("op")
        try:
            if op == "status":
                pass
            elif op == "preempt":
                await self.preempt(str(req.get("host", "")))
            elif op == "recreate":
                await self.recreate(str(req.get("host", "")))
            elif op == "shutdown":
                self._stop.set()
                return {"ok": True, "pid": os.getpid()}
            else:
                return {"ok": False, "code": 2, "error": f"unknown op {op!r}"}
        except ApiError as exc:
            code = 2 if exc.code == grpc.StatusCode.INVALID_ARGUMENT else 1
            return {"ok": False, "code": code, "error": str(exc)}
        return {"ok": True, "status": self.status()}

    # --- main ----------------------------------------------------------------

    def _prepare_run_dir(self) -> None:
        run_dir = self.cfg.run_dir
        run_dir.mkdir(parents=True, exist_ok=True)
        old = self.layout.run_id_file
        if old.exists():
            # A previous daemon died without cleaning up: its hosts' processes go now.
            old_id = old.read_text().strip()
            old_cg = self._read_cgroup_file()
            if old_id:
                kill_marked(marker_value(old_id), old_cg)
            remove_cgroup(old_cg)
        self.layout.run_id_file.write_text(self.run_id + "\n")
        self.run_cgroup = make_run_cgroup(self.run_id)
        self.layout.cgroup_file.write_text(f"{self.run_cgroup or ''}\n")
        log.info(
            "process tracking: marker + descendants%s",
            f" + cgroup {self.run_cgroup}" if self.run_cgroup else " (no usable cgroup)",
        )
        self.layout.pid_file.write_text(f"{os.getpid()}\n")
        shutil.rmtree(self.layout.hosts_dir, ignore_errors=True)
        self.layout.hosts_dir.mkdir()
        self.layout.bucket.mkdir(exist_ok=True)
        write_wrapper(self.layout.shim_bin)
        shutil.rmtree(self.short_tmp_root, ignore_errors=True)
        key_path = self.layout.client_key
        try:
            self.client_key = asyncssh.read_private_key(key_path)
        except (OSError, asyncssh.KeyImportError):
            self.client_key = asyncssh.generate_private_key(
                "ssh-ed25519", comment=f"{SSH_USER}@phantom-pod"
            )
            key_path.unlink(missing_ok=True)
            self.client_key.write_private_key(key_path)
            key_path.chmod(0o600)
            self.client_key.write_public_key(key_path.with_name("client_key.pub"))

    def _read_cgroup_file(self) -> Path | None:
        try:
            text = self.layout.cgroup_file.read_text().strip()
        except OSError:
            return None
        return Path(text) if text else None

    async def run(self) -> int:
        loop = asyncio.get_running_loop()
        try:
            control = await asyncio.start_unix_server(
                self._control, path=self.layout.control_address
            )
        except OSError as exc:
            raise StartupError(
                f"the pod emulator is already running for {self.cfg.run_dir}"
            ) from exc
        grpc_server: grpc.aio.Server | None = None
        try:
            self._prepare_run_dir()
            socks = reserve_common_port([h.ip for h in self.hosts], self.cfg.ssh_port)
            self.ssh_port = socks[0].getsockname()[1]
            for host, sock in zip(self.hosts, socks, strict=True):
                host.reserved_sock = sock
            api = TpuApi(self)
            try:
                grpc_server, self.api_port = await serve(api, self.cfg.api_port)
            except OSError as exc:
                raise StartupError(str(exc), exit_code=2) from exc
            for sig in (signal.SIGTERM, signal.SIGINT):
                loop.add_signal_handler(sig, self._stop.set)
            log.info(
                "serving run_dir=%s run_id=%s ssh_port=%s tpu_api=127.0.0.1:%s",
                self.cfg.run_dir,
                self.run_id,
                self.ssh_port,
                self.api_port,
            )
            created = self.create_node(self.cfg.node_name, cloud_tpu.Node())
            if self.cfg.chaos_interval:
                self._spawn(self._chaos_after(created))
            else:
                self._spawn(created)
            await self._stop.wait()
            log.info("shutting down")
        finally:
            await self._shutdown(control, grpc_server)
        return 0

    async def _shutdown(self, control: asyncio.Server, grpc_server: grpc.aio.Server | None) -> None:
        for task in list(self._tasks):
            task.cancel()
        for host in self.hosts:
            if host.reserved_sock is not None:
                host.reserved_sock.close()
                host.reserved_sock = None
        await self._kill_hosts(self.hosts, DELETED)
        # A last sweep over the whole run catches anything of older generations.
        await asyncio.to_thread(kill_marked, marker_value(self.run_id), self.run_cgroup)
        remove_cgroup(self.run_cgroup)
        if grpc_server is not None:
            await grpc_server.stop(grace=0.2)
        control.close()
        shutil.rmtree(self.short_tmp_root, ignore_errors=True)
        with contextlib.suppress(FileNotFoundError):
            self.layout.pid_file.unlink()
        log.info("stopped")


def run_daemon(cfg: DaemonConfig) -> int:
    logging.basicConfig(
        stream=sys.stderr,
        level=logging.INFO,
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
    )
    logging.getLogger("asyncssh").setLevel(logging.WARNING)
    try:
        return asyncio.run(PodDaemon(cfg).run())
    except StartupError as exc:
        log.error("error: %s", exc)
        return exc.exit_code
