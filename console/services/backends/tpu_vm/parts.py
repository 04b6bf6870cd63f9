"""The pod's parts, built once from the backend's settings: TPU API, SSH (actions and probes), host keys,
Ray over SSH, the tunnel and the Ray jobs client.

``PodAccess`` is what differs between a real pod and the emulator, decided by the
composition root (``console.wiring``) and never by a check of the provider here.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from console.config import RayConfig
from console.services.backends.tpu_vm import raycmd
from console.services.backends.tpu_vm.endpoints import HostEndpoint
from console.services.backends.tpu_vm.hostkeys import HostKeyEvent, HostKeyPolicy
from console.services.backends.tpu_vm.identity import known_hosts_path
from console.services.backends.tpu_vm.jobs import JobService
from console.services.backends.tpu_vm.ray import RayOps
from console.services.backends.tpu_vm.settings import TpuVmSettings
from console.services.backends.tpu_vm.ssh import SshFanout
from console.services.backends.tpu_vm.tpu import TpuProvider
from console.services.backends.tpu_vm.tunnel import Forward, Tunnel, default_forwards


@dataclass(frozen=True)
class PodAccess:
    """How to reach one pod, and what its hosts are like."""

    provider: TpuProvider
    ssh_user: str
    ssh_key: str | os.PathLike[str]
    endpoints: Sequence[HostEndpoint] = ()  # known up front (emulator); gcp: the first GetNode
    ray_env: Mapping[str, str] = field(default_factory=dict)  # extra env of `ray start`
    # Node sizing where the config leaves it at 0; by default the host's own (not passed).
    ray_sizing: raycmd.RaySizing = field(default_factory=raycmd.RaySizing)
    ray_user_path: bool = True  # Ray lives in ~/.local/bin (pip --user on a TPU VM)
    storage_uri: str = ""  # checkpoint storage every node reaches
    job_env: Mapping[str, str] = field(default_factory=dict)  # env defaults of submitted jobs
    wandb_dir: str = ""  # where offline runs land and cadence reads them ("" = nowhere)
    # The hosts share this machine's loopback: the head's 127.0.0.1:<port> is ours, so a
    # tunnel end on the same port would collide with the dashboard itself.
    shares_loopback: bool = False
    # Concurrent `ray start`s when a recovery rejoins the workers (None: all at once, each
    # on a VM of its own). Where the hosts share this machine's cores, the rejoins run while
    # the resubmitted jobs start on the head and take the CPU those need.
    rejoin_parallelism: int | None = None


class PodParts:
    def __init__(
        self,
        settings: TpuVmSettings,
        access: PodAccess,
        *,
        state_dir: Path,
        clock: Callable[[], float] = time.time,
        on_host_key: Callable[[HostKeyEvent], None] | None = None,
        on_tunnel_change: Callable[[bool, str], None] | None = None,
    ) -> None:
        polling = self.polling = settings.polling
        ssh = settings.ssh
        self.ray_cfg = settings.ray  # what the parts read of the settings after they are built
        self.accelerator_type = settings.accelerator_type  # until the API says
        self.access = access
        self.provider = access.provider
        # A poll must finish in about one interval: a hung layer is reported as unknown.
        self.poll_budget_s = polling.budget_s
        self.endpoints: list[HostEndpoint] = list(access.endpoints)
        self.host_keys = HostKeyPolicy(
            ssh.known_hosts_policy,
            known_hosts_path(ssh, state_dir),
            api_keys=access.provider.host_keys,
            on_event=on_host_key,
        )
        self.ssh = SshFanout.from_config(
            ssh,
            self.endpoints,
            self.host_keys,
            user=access.ssh_user,
            key_path=access.ssh_key,
        )
        # Reachability probes: no retries and a short connect timeout, so a poll of a
        # half-dead host costs one interval, not the action fan-out's patient retries.
        self.probe = SshFanout(
            self.endpoints,
            user=access.ssh_user,
            client_keys=[access.ssh_key],
            host_keys=self.host_keys,
            parallelism=ssh.parallelism,
            connect_timeout_s=settings.probe_connect_s,
            command_timeout_s=self.poll_budget_s,
            retries=0,
            proxy_command=ssh.proxy_command,
        )
        # A session on the connection the fan-out already holds (a notice watcher keeps one
        # open to every host) proves the host's sshd answers, as a new connection would,
        # without a second connection a host: at 1,024 hosts that was 1,024 sockets on each
        # side and as many key exchanges. A probe that finds none makes it (with its short
        # timeout) and the fan-out keeps it.
        self.probe.borrow_from = self.ssh
        head = self.endpoints[0] if self.endpoints else HostEndpoint("head", "127.0.0.1")
        self.ray = RayOps(
            self.ssh,
            head=head,
            workers=self.endpoints[1:],
            ray_cfg=settings.ray,
            bootstrap_command=settings.bootstrap_command,
            user_path=access.ray_user_path,
            node_options=self._node_options,
            dashboard_url=self.dashboard_url,
            # Recovery steps ask the state API too, over SSH before the tunnel is back;
            # polls bound their own calls to poll_budget_s.
            api_timeout_s=max(10.0, self.poll_budget_s),
            # Waits for a node to register: each extra poll is added to an MTTR.
            poll_interval_s=polling.node_wait_s,
        )
        self.tunnel = Tunnel(
            lambda: self.ssh.connect(self.ray.head.name),
            self._forwards(head),
            on_change=on_tunnel_change,
            backoff_initial_s=polling.brief_s,
            backoff_max_s=polling.budget_s,
        )
        self.jobs = JobService(
            f"http://127.0.0.1:{settings.ray.local_dashboard_port}",
            clock=clock,
            timeout_s=max(5.0, self.poll_budget_s),
        )

    @property
    def head(self) -> HostEndpoint:
        return self.ray.head

    def dashboard_url(self) -> str | None:
        if not self.tunnel.is_up:
            return None
        return self.tunnel.url(self.ray_cfg.dashboard_port)

    def set_endpoints(self, endpoints: Sequence[HostEndpoint]) -> None:
        """The TPU API reported the workers' addresses (first poll, or a recreated node)."""
        eps = list(endpoints)
        if not eps or eps == self.endpoints:
            return
        self.endpoints = eps
        self.ssh.set_endpoints(eps)
        self.probe.set_endpoints(eps)
        self.ray.set_hosts(eps[0], eps[1:])
        self.tunnel.set_forwards(self._forwards(eps[0]))

    def _forwards(self, head: HostEndpoint) -> list[Forward]:
        forwards = default_forwards(self.ray_cfg, head.ip)
        if self.access.shares_loopback:
            forwards = [(lh, 0 if lp == rp else lp, rh, rp) for lh, lp, rh, rp in forwards]
        return forwards

    def forget(self, name: str) -> None:
        """A host was recreated: its connections are dead and its host key is gone."""
        self.ssh.drop(name)
        self.probe.drop(name)

    def _node_options(self, ep: HostEndpoint) -> raycmd.RayNodeOptions:
        cfg = self.ray_cfg
        size = config_sizing(cfg).over(self.access.ray_sizing)
        return raycmd.RayNodeOptions(
            node_ip=ep.ip,
            num_cpus=size.num_cpus,
            resources=dict(cfg.resources),
            object_store_memory=size.object_store_memory,
            memory=size.memory,
            node_name=ep.name,
            user_path=self.access.ray_user_path,
            env=dict(self.access.ray_env),
        )

    async def close(self) -> None:
        await self.tunnel.close()
        await self.probe.close()
        await self.ssh.close()
        await self.provider.close()


def config_sizing(cfg: RayConfig) -> raycmd.RaySizing:
    """What ``[ray]`` sets explicitly (0 = not set: the access's default, else the host's)."""
    return raycmd.RaySizing(
        num_cpus=cfg.num_cpus or None,
        object_store_memory=cfg.object_store_mb * raycmd.MIB or None,
        memory=cfg.memory_mb * raycmd.MIB or None,
    )
