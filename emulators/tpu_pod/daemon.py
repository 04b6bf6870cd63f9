"""The long-running emulator process: wiring, start-up, control channel, shut-down.

Started detached by ``client.start_pod`` as ``python -m emulators.tpu_pod serve``.
One asyncio loop owns all state; the CLI talks to it over a JSON-lines unix
socket (see ``client.request``). The parts:

- ``hosts``: VM lifecycle (sandbox, SSH servers, notice, kill);
- ``nodes`` / ``api_state``: nodes in zones and the TPU API's view of them;
- ``zones``: capacity and stockouts; ``queued``: queued resources;
- ``chaos``: the seeded reclaim schedule and faults;
- ``tpu_api`` (gRPC), ``rest_api`` (HTTP/JSON), ``metadata`` (per-host GCE metadata).
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import logging
import os
import secrets
import shutil
import signal
import socket
import sys
from pathlib import Path
from typing import Any

import asyncssh
import grpc
from google.cloud.tpu_v2.types import cloud_tpu

from emulators.kit.control import start_control_server
from emulators.kit.layout import read_path
from emulators.tpu_pod import accelerators, chaos
from emulators.tpu_pod.api_state import PodState
from emulators.tpu_pod.chaos import FAULT_KINDS, Faults, chaos_schedule, host_fault_status
from emulators.tpu_pod.children import wait_children_with_pidfds
from emulators.tpu_pod.hosts import DELETED, Host, HostLifecycle, Runtime
from emulators.tpu_pod.layout import host_ip, resolve_host_ref
from emulators.tpu_pod.limits import FdLimitError, ensure_fds
from emulators.tpu_pod.metadata import MetadataServer, bind_loopback_device
from emulators.tpu_pod.nodes import Node
from emulators.tpu_pod.operations import ApiError, OperationStore
from emulators.tpu_pod.pgrepshim import write_wrapper as write_pgrep_wrapper
from emulators.tpu_pod.procs import kill_marked, make_run_cgroup, marker_value, remove_cgroup
from emulators.tpu_pod.queued import QueuedResources
from emulators.tpu_pod.rayshim import write_wrapper
from emulators.tpu_pod.rest_api import RestApi
from emulators.tpu_pod.settings import DaemonConfig, StartupError
from emulators.tpu_pod.sshd import bind_socket, fingerprint, public_line
from emulators.tpu_pod.tpu_api import TpuApi, serve
from emulators.tpu_pod.zones import Capacity, seeded_windows

log = logging.getLogger("phantom.pod")

# GCE's values of instance/maintenance-event (compute/docs/metadata/getting-live-migration-notice)
MAINTENANCE_EVENTS = ("NONE", "MIGRATE_ON_HOST_MAINTENANCE", "TERMINATE_ON_HOST_MAINTENANCE")

__all__ = ["DaemonConfig", "PodDaemon", "StartupError", "chaos_schedule", "run_daemon"]


def reserve_common_port(
    ips: list[str], port: int, flag: str = "--ssh-port", attempts: int = 50
) -> list[socket.socket]:
    """Bind (not listen) ``port`` on every IP; with port 0 find one free on all.

    The sockets are handed to the servers later, so no one can take the port in
    between. Raises StartupError naming the taken address and ``flag``.
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
                    f"port {port} on {taken} is in use; pass {flag}", exit_code=2
                ) from exc
    raise StartupError(f"found no port free on all of {ips[0]}..{ips[-1]}; pass {flag}")


class PodDaemon:
    def __init__(self, cfg: DaemonConfig) -> None:
        self.cfg = cfg
        if cfg.zone not in cfg.zones:
            raise StartupError(
                f"--zone {cfg.zone!r} is not one of --zones {','.join(cfg.zones)}", exit_code=2
            )
        digest = hashlib.sha256(str(cfg.run_dir.resolve()).encode()).hexdigest()[:10]
        self.rt = Runtime(cfg, secrets.token_hex(6), Path("/tmp") / f"phpod-{digest}")
        self.layout = self.rt.layout
        self.life = HostLifecycle(self.rt)
        windows: dict[str, list[Any]] = {z: [] for z in cfg.zones}
        if cfg.stockout_seed is not None:
            windows = seeded_windows(cfg.stockout_seed, cfg.zones, cfg.stockout_mean)
        for zone, window in cfg.stockouts:
            windows[zone].append(window)
        self.capacity = Capacity(cfg.zones, cfg.capacity, windows)
        self.faults = Faults()
        self.pod = PodState(self.rt, self.life, self.capacity, self.faults)
        self.queued = QueuedResources(self.pod)
        self.pod.queued = self.queued
        self.ops = OperationStore()
        self.api = TpuApi(self.pod, self.queued, self.ops)
        self.rest = RestApi(self.api)
        self.rt.metadata = MetadataServer(self.pod.metadata_tree)
        self._metadata_sock: socket.socket | None = None  # every host's, where the kernel allows
        self.api_port = cfg.api_port
        self._stop = asyncio.Event()

    # --- status ------------------------------------------------------------------------

    def status(self) -> dict[str, Any]:
        cfg, rt = self.cfg, self.rt
        node = self.pod.primary()
        hosts = node.hosts if node is not None else []
        zone = node.zone.name if node is not None else cfg.zone
        return {
            "run_dir": str(cfg.run_dir),
            "pid": os.getpid(),
            "run_id": rt.run_id,
            "tpu_api": f"127.0.0.1:{self.api_port}",
            "rest_api": f"127.0.0.1:{self.rest.port}",
            "project": cfg.project,
            "zone": zone,
            "node_name": cfg.node_name,
            "node_path": node.path
            if node is not None
            else f"projects/{cfg.project}/locations/{zone}/nodes/{cfg.node_name}",
            "accelerator_type": node.accelerator_type if node else cfg.accelerator_type,
            "state": node.state() if node is not None else "NOT_FOUND",
            "faithful": cfg.faithful,
            "ssh_user": cfg.ssh_user,
            "client_key": str(cfg.ssh_key or self.layout.client_key),
            "known_hosts": str(self.layout.known_hosts),
            "metadata_port": rt.metadata_port,
            "bucket": str(self.layout.bucket),
            "bucket_uri": self.layout.bucket.as_uri(),
            "ready_delay": cfg.ready_delay,
            "preempt_grace": cfg.preempt_grace,
            "chaos": (
                {
                    "seed": cfg.chaos_seed,
                    "interval": cfg.chaos_interval,
                    "notice": cfg.chaos_notice,
                    "faults": list(cfg.chaos_faults),
                }
                if cfg.chaos_interval
                else None
            ),
            "hosts": [self._host_status(h) for h in hosts],
            "nodes": [
                {
                    "path": n.path,
                    "name": n.name,
                    "zone": n.zone.name,
                    "slot": n.slot,
                    "state": n.state(),
                    "hosts": len(n.hosts),
                    "first_ip": n.hosts[0].ip,
                    "queued_resource": n.queued_resource,
                }
                for n in self.pod.nodes.values()
            ],
            "zones": self.capacity.status(self.pod.used()),
            "queued_resources": self.queued.status(),
            "faults": self.faults.status(),
            "events": list(rt.events)[-20:],
        }

    def _host_status(self, h: Host) -> dict[str, Any]:
        return {
            "index": h.index,
            "name": h.name,
            "ip": h.ip,
            "external_ip": h.external_ip,
            "ssh_port": self.rt.ssh_port,
            "metadata": f"{h.ip}:{self.rt.metadata_port}",
            "state": h.state,
            "generation": h.generation,
            "host_key_fingerprint": fingerprint(h.host_key) if h.host_key else "",
            "host_key": public_line(h.host_key) if h.host_key else "",
            "sandbox": str(self.life.sandbox(h)),
            "notice_at": h.notice_at,
            "faults": host_fault_status(h.faults),
        }

    # --- verbs of the control channel ------------------------------------------------------

    def _resolve(self, ref: str) -> tuple[Node, list[Host]]:
        """A host reference: index/name/IP of the pod's node, any node's IP, or "all"."""
        ref = ref.strip()
        node = self.pod.primary()
        found = self.pod.host_by_ip(ref)
        if found is not None:
            return found[0], [found[1]]
        if node is None:
            raise ApiError(grpc.StatusCode.FAILED_PRECONDITION, "the pod has no node")
        if ref.lower() == "all":
            return node, list(node.hosts)
        try:
            ips = [h.ips for h in node.hosts]
            return node, [node.hosts[resolve_host_ref(ref, node.name, len(node.hosts), ips)]]
        except ValueError as exc:
            raise ApiError(grpc.StatusCode.INVALID_ARGUMENT, str(exc)) from exc

    def _grace(self, notice: Any) -> float:
        if notice is None:
            return 0.0
        if notice == "default":
            return self.cfg.preempt_grace
        try:
            grace = float(notice)
        except (TypeError, ValueError):
            grace = -1.0
        if grace < 0:
            raise ApiError(
                grpc.StatusCode.INVALID_ARGUMENT,
                f"--notice must be a number of seconds >= 0, got {notice!r}",
            )
        return grace

    async def preempt(
        self, ref: str, notice: Any = None, wait: bool = True, source: str = "command"
    ) -> None:
        node, hosts = self._resolve(ref)
        grace = self._grace(notice)
        if self.cfg.faithful:
            hosts = list(node.hosts)  # a spot reclaim takes the whole slice
        work = self.pod.preempt(node, hosts, grace, source)
        if grace > 0 and not wait:
            self.rt.spawn(work)
            await asyncio.sleep(0)  # the task gives notice before its first await
        else:
            await work

    async def recreate(self, ref: str) -> None:
        node, hosts = self._resolve(ref)
        if self.cfg.faithful:
            if ref.strip().lower() != "all":
                raise ApiError(
                    grpc.StatusCode.FAILED_PRECONDITION,
                    "GCP-faithful mode: a TPU pod slice cannot recreate single workers; "
                    "delete the node and create it again (DeleteNode + CreateNode, e.g. "
                    "`gcloud compute tpus tpu-vm delete` then `create`), or `recreate all`",
                )
            if node.exists and not node.deleting:
                await self.pod.replace(node)
                return
        await self.pod.recreate(node, hosts)

    async def fault(self, req: dict[str, Any]) -> None:
        kind = str(req.get("kind", ""))
        ref = str(req.get("host", ""))
        if kind == "clear" and ref.strip().lower() == "all":
            await chaos.clear(self.pod, None, self.pod.all_hosts())
            return
        node, hosts = self._resolve(ref)
        if kind == "clear":
            await chaos.clear(self.pod, node, hosts)
            return
        seconds, duration = req.get("seconds"), req.get("duration")
        try:
            chaos.check_fault(kind, seconds, duration)
        except ValueError as exc:
            raise ApiError(grpc.StatusCode.INVALID_ARGUMENT, str(exc)) from None
        await chaos.inject(self.pod, node, hosts, kind, seconds, duration)

    async def maintenance(self, ref: str, event: str) -> None:
        """Set ``instance/maintenance-event`` of ``ref``'s hosts (GCE sets it about 60 s
        before a host maintenance: the VM is live-migrated, or terminated; NONE after)."""
        if event not in MAINTENANCE_EVENTS:
            raise ApiError(
                grpc.StatusCode.INVALID_ARGUMENT,
                f"maintenance event {event!r}: use one of {', '.join(MAINTENANCE_EVENTS)}",
            )
        node, hosts = self._resolve(ref)
        for h in hosts:
            h.maintenance_event = event
        self.rt.event("maintenance", node=node.path, hosts=[h.name for h in hosts], value=event)
        await self.rt.notify(hosts)

    def zone_control(self, req: dict[str, Any]) -> None:
        zone = str(req.get("zone", ""))
        if zone not in self.capacity.zones:
            raise ApiError(
                grpc.StatusCode.INVALID_ARGUMENT,
                f"unknown zone {zone!r}; zones are {list(self.capacity.zones)}",
            )
        capacity, stockout = req.get("capacity"), req.get("stockout_s")
        if capacity is not None and (not isinstance(capacity, int) or capacity < 0):
            raise ApiError(
                grpc.StatusCode.INVALID_ARGUMENT, f"--capacity must be >= 0, got {capacity!r}"
            )
        if stockout is not None and (not isinstance(stockout, int | float) or stockout < 0):
            raise ApiError(
                grpc.StatusCode.INVALID_ARGUMENT,
                f"--stockout must be >= 0 seconds (0 = until cleared), got {stockout!r}",
            )
        self.capacity.set(zone, capacity, stockout, bool(req.get("clear")))
        self.rt.event(
            "zone", zone=zone, **{k: v for k, v in req.items() if k not in ("op", "zone")}
        )

    # --- control channel -----------------------------------------------------------------

    async def _dispatch(self, req: dict[str, Any]) -> dict[str, Any]:
        op = req.get("op")
        try:
            if op == "status":
                pass
            elif op == "preempt":
                await self.preempt(
                    str(req.get("host", "")), req.get("notice"), bool(req.get("wait", True))
                )
            elif op == "recreate":
                await self.recreate(str(req.get("host", "")))
            elif op == "fault":
                await self.fault(req)
            elif op == "maintenance":
                await self.maintenance(str(req.get("host", "")), str(req.get("event", "")))
            elif op == "zone":
                self.zone_control(req)
            elif op == "shutdown":
                self._stop.set()
                return {"ok": True, "pid": os.getpid()}
            else:
                return {"ok": False, "code": 2, "error": f"unknown op {op!r}"}
        except ApiError as exc:
            code = 2 if exc.code == grpc.StatusCode.INVALID_ARGUMENT else 1
            return {"ok": False, "code": code, "error": str(exc)}
        return {"ok": True, "status": self.status()}

    # --- start-up ----------------------------------------------------------------------------

    def _prepare_run_dir(self) -> None:
        run_dir = self.cfg.run_dir
        run_dir.mkdir(parents=True, exist_ok=True)
        old = self.layout.run_id_file
        if old.exists():
            # A previous daemon died without cleaning up: its hosts' processes go now.
            old_id = old.read_text().strip()
            old_cg = read_path(self.layout.cgroup_file)
            if old_id:
                kill_marked(marker_value(old_id), old_cg)
            remove_cgroup(old_cg)
        self.layout.run_id_file.write_text(self.rt.run_id + "\n")
        self.rt.run_cgroup = make_run_cgroup(self.rt.run_id)
        self.layout.cgroup_file.write_text(f"{self.rt.run_cgroup or ''}\n")
        log.info(
            "process tracking: marker + descendants%s",
            f" + cgroup {self.rt.run_cgroup}" if self.rt.run_cgroup else " (no usable cgroup)",
        )
        self.layout.pid_file.write_text(f"{os.getpid()}\n")
        shutil.rmtree(self.layout.hosts_dir, ignore_errors=True)
        self.layout.hosts_dir.mkdir()
        self.layout.bucket.mkdir(exist_ok=True)
        write_wrapper(self.layout.shim_bin)
        write_pgrep_wrapper(self.layout.shim_bin)
        shutil.rmtree(self.rt.short_tmp_root, ignore_errors=True)
        self._load_keys()

    def _load_keys(self) -> None:
        key_path = self.layout.client_key
        try:
            self.rt.client_key = asyncssh.read_private_key(key_path)
        except (OSError, asyncssh.KeyImportError):
            self.rt.client_key = asyncssh.generate_private_key(
                "ssh-ed25519", comment=f"{self.cfg.ssh_user}@phantom-pod"
            )
            key_path.unlink(missing_ok=True)
            self.rt.client_key.write_private_key(key_path)
            key_path.chmod(0o600)
            self.rt.client_key.write_public_key(key_path.with_name("client_key.pub"))
        user_key = self.rt.client_key.convert_to_public()
        if self.cfg.ssh_key is not None:
            user_key = _public_key(self.cfg.ssh_key)
        self.rt.base_authorized = {self.cfg.ssh_user: frozenset([user_key.public_data])}

    def _reserve_ports(self) -> None:
        """The first node's SSH and metadata ports on each of its addresses."""
        z = self.capacity.zone(self.cfg.zone).index
        internal = [host_ip(i, z) for i in range(self.cfg.hosts)]
        external = [host_ip(i, z, external=True) for i in range(self.cfg.hosts)]
        ssh_ips = internal + (external if self.cfg.faithful else [])
        socks = reserve_common_port(ssh_ips, self.cfg.ssh_port)
        self.rt.ssh_port = socks[0].getsockname()[1]
        self.rt.reserved_ssh = dict(zip(ssh_ips, socks, strict=True))
        assert self.rt.metadata is not None
        try:
            shared = bind_loopback_device(self.cfg.metadata_port)
        except OSError as exc:
            raise StartupError(
                f"port {self.cfg.metadata_port} is in use on a loopback address; "
                "pass --metadata-port",
                exit_code=2,
            ) from exc
        if shared is not None:
            self._metadata_sock = shared
            self.rt.metadata_port = shared.getsockname()[1]
        else:
            socks = reserve_common_port(internal, self.cfg.metadata_port, "--metadata-port")
            self.rt.metadata_port = socks[0].getsockname()[1]
            self.rt.reserved_meta = dict(zip(internal, socks, strict=True))
        self.rt.metadata.port = self.rt.metadata_port

    async def run(self) -> int:
        loop = asyncio.get_running_loop()
        wait_children_with_pidfds()
        try:
            control = await start_control_server(self.layout.control_address, self._dispatch)
        except OSError as exc:
            raise StartupError(
                f"the pod emulator is already running for {self.cfg.run_dir}"
            ) from exc
        grpc_server: grpc.aio.Server | None = None
        try:
            self._prepare_run_dir()
            self._reserve_ports()
            assert self.rt.metadata is not None
            await self.rt.metadata.start(self._metadata_sock)
            try:
                grpc_server, self.api_port = await serve(self.api, self.cfg.api_port)
                await self.rest.start(self.cfg.rest_port)
            except OSError as exc:
                raise StartupError(str(exc), exit_code=2) from exc
            for sig in (signal.SIGTERM, signal.SIGINT):
                loop.add_signal_handler(sig, self._stop.set)
            log.info(
                "serving run_dir=%s run_id=%s ssh_port=%s tpu_api=127.0.0.1:%s "
                "rest=127.0.0.1:%s metadata_port=%s faithful=%s",
                self.cfg.run_dir,
                self.rt.run_id,
                self.rt.ssh_port,
                self.api_port,
                self.rest.port,
                self.rt.metadata_port,
                self.cfg.faithful,
            )
            spec = cloud_tpu.Node(
                accelerator_type=self._first_type(),
                network_config=cloud_tpu.NetworkConfig(enable_external_ips=self.cfg.faithful),
                scheduling_config=cloud_tpu.SchedulingConfig(spot=True),
            )
            parent = f"projects/{self.cfg.project}/locations/{self.cfg.zone}"
            _, created = self.pod.create_node(
                parent, self.cfg.node_name, spec, ignore_capacity=True, hosts=self.cfg.hosts
            )
            self.rt.spawn(self.queued.run())
            self.rt.spawn(self._chaos_after(created))
            await self._stop.wait()
            log.info("shutting down")
        finally:
            await self._shutdown(control, grpc_server)
        return 0

    def _first_type(self) -> str:
        """The pod's first node's type. Faithful: one of ``--accelerator-type``'s
        generation with ``--hosts`` hosts (v4-16 for 2), so that a re-create of the node
        from its own spec (as the console's recovery does) gets the same hosts back."""
        name = self.cfg.accelerator_type
        if not self.cfg.faithful:
            return name
        try:
            shape = accelerators.parse(name)
        except ValueError:
            return name
        same = (
            accelerators.for_hosts(shape, self.cfg.hosts)
            if shape.hosts != self.cfg.hosts
            else shape
        )
        return same.type if same is not None else name

    async def _chaos_after(self, created: Any) -> None:
        # Chaos starts once the first boot is READY, like spot reclaims of a live VM.
        with contextlib.suppress(ApiError):
            await created
        if not self.cfg.chaos_interval:
            return
        node = self.pod.primary()
        await chaos.run_chaos(
            self.cfg.chaos_seed,
            self.cfg.chaos_interval,
            len(node.hosts) if node is not None else self.cfg.hosts,
            tuple(k for k in self.cfg.chaos_faults if k in FAULT_KINDS),
            lambda target: self.preempt(target, self.cfg.chaos_notice or None, source="chaos"),
            self._chaos_fault,
        )

    async def _chaos_fault(self, target: str, kind: str, seconds: float) -> None:
        node, hosts = self._resolve(target)
        if kind == "slow-api":
            await chaos.inject(self.pod, node, hosts, kind, min(5.0, seconds / 2), seconds, "chaos")
        else:
            await chaos.inject(self.pod, node, hosts, kind, seconds, None, "chaos")

    async def _shutdown(self, control: asyncio.Server, grpc_server: grpc.aio.Server | None) -> None:
        for task in list(self.rt.tasks):
            task.cancel()
        self.ops.cancel_all()
        self.rt.close_reserved()
        hosts = self.pod.all_hosts()
        last = self.pod.last
        if last is not None and last.path not in self.pod.nodes:
            hosts += last.hosts
        await self.life.kill([h for h in hosts if h.state != DELETED or h.ssh], DELETED)
        # A last sweep over the whole run catches anything of older generations.
        await asyncio.to_thread(kill_marked, marker_value(self.rt.run_id), self.rt.run_cgroup)
        remove_cgroup(self.rt.run_cgroup)
        if grpc_server is not None:
            await grpc_server.stop(grace=0.2)
        await self.rest.stop()
        if self.rt.metadata is not None:
            await self.rt.metadata.stop()
        control.close()
        shutil.rmtree(self.rt.short_tmp_root, ignore_errors=True)
        with contextlib.suppress(FileNotFoundError):
            self.layout.pid_file.unlink()
        log.info("stopped")


def _public_key(path: Path) -> asyncssh.SSHKey:
    """The public half of the user's key: ``PATH.pub`` if present, else from ``PATH``."""
    for candidate in (Path(f"{path}.pub"), path):
        with contextlib.suppress(OSError, asyncssh.KeyImportError):
            if candidate.suffix == ".pub":
                return asyncssh.read_public_key(candidate)
            return asyncssh.read_private_key(candidate).convert_to_public()
    raise StartupError(
        f"--ssh-key {path}: cannot read an SSH key there (need an unencrypted private key "
        "or its .pub beside it)",
        exit_code=2,
    )


def run_daemon(cfg: DaemonConfig) -> int:
    logging.basicConfig(
        stream=sys.stderr,
        level=logging.INFO,
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
    )
    logging.getLogger("asyncssh").setLevel(logging.WARNING)
    logging.getLogger("aiohttp.access").setLevel(logging.WARNING)
    try:
        ensure_fds(cfg.hosts)
    except FdLimitError as exc:
        log.error("error: %s", exc)
        return 2
    try:
        return asyncio.run(PodDaemon(cfg).run())
    except StartupError as exc:
        log.error("error: %s", exc)
        return exc.exit_code
