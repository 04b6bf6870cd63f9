"""The console on the local pod emulator: its pod, its access, its chaos.

With ``cluster.provider = "local"`` the console drives the emulated spot pod through the
same code paths as a real one (TPU API over gRPC, SSH, Ray, the tunnel). What differs is
decided here, and nowhere else: the emulator's address, user and key (from its status), that
its hosts share this machine's loopback and cores, where its bucket is, and the things only
an emulator can do (preempt or recreate one host on command).
"""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path

from google.cloud import tpu_v2

from console.config import Config
from console.services.backends.tpu_vm import EMULATED
from console.services.backends.tpu_vm.backend import TpuVmBackend
from console.services.backends.tpu_vm.endpoints import HostEndpoint
from console.services.backends.tpu_vm.identity import ssh_identity
from console.services.backends.tpu_vm.parts import PodAccess
from console.services.backends.tpu_vm.raycmd import GIB, MIB, RaySizing
from console.services.backends.tpu_vm.tpu import GcpTpuProvider, TpuApiError, local_client
from console.services.model import ActionResult, HostResult
from console.wiring.control import LOCAL_POD_NICE, run_dir_of
from emulators.tpu_pod import client as pod_client
from emulators.tpu_pod.client import PodError, PodInfo
from emulators.tpu_pod.layout import DEFAULT_NODE_NAME, DEFAULT_ZONE, DEFAULT_ZONES

log = logging.getLogger(__name__)

# Emulated hosts: the GCS declares a SIGKILLed raylet dead after ~4-8 s instead of Ray's
# default ~15-30 s, so a preempted worker's stale node does not hold up its rejoin.
LOCAL_RAY_ENV: Mapping[str, str] = {
    "RAY_health_check_initial_delay_ms": "0",
    "RAY_health_check_period_ms": "1000",
    "RAY_health_check_timeout_ms": "3000",  # generous: a busy 2-core box answers slowly
    "RAY_health_check_failure_threshold": "4",
}


# The emulated hosts share this machine's few cores and memory: each Ray node advertises a
# small share of them (on a real VM the host's own are the default).
LOCAL_RAY_SIZING = RaySizing(num_cpus=2, object_store_memory=256 * MIB, memory=4 * GIB)
# A head recovery resubmits the jobs, then rejoins the workers while they start on the head:
# here on the same cores, where three `ray start`s at once delayed the resumed job's first
# step (recovery bench, head/cold first-step ratio, two rounds of 3 paired samples: median
# 0.89 and 1.16 all at once, 0.70 and 0.76 one at a time; the workers step itself takes
# 3-4 s longer). A VM has CPUs of its own: there they all start at once.
LOCAL_REJOIN_PARALLELISM = 1


def ensure_pod(
    config: Config,
    autostart: bool,
    *,
    progress: Callable[[str], None] | None = None,
    until_ready: bool = True,
) -> PodInfo:
    """The running emulator for ``cluster.run_dir``; started (``cluster.hosts`` hosts, free
    ports) when none runs and ``autostart``. ValueError naming the fix otherwise.

    ``progress`` hears the start-up's lines; ``until_ready=False`` returns once the emulator
    answers with its hosts (still CREATING: the console's polls show them come up)."""
    # Nothing on the emulator path may let Google's libraries probe the link-local metadata
    # server (they do when they find no credentials).
    os.environ.setdefault("NO_GCE_CHECK", "True")
    run_dir = run_dir_of(config)
    info = pod_client.pod_status(run_dir)
    if info is None:
        if not autostart:
            raise ValueError(
                f"no pod emulator is running for {run_dir}; start it with "
                f"`phantom pod up` (cluster.run_dir = {str(run_dir)!r})"
            )
        if progress is not None:
            progress(f"starting the local pod emulator ({config.cluster.hosts} hosts)")
        zone, zones = pod_placement(config)
        placed = [] if zone == DEFAULT_ZONE else ["--zone", zone]
        if config.cluster.node_name != DEFAULT_NODE_NAME:
            placed += ["--node-name", config.cluster.node_name]
        info = pod_client.start_pod(
            run_dir,
            zones=zones or None,
            extra_args=placed or None,
            hosts=config.cluster.hosts,
            ssh_port=0,
            api_port=0,
            progress=progress,
            until_ready=until_ready,
            nice=LOCAL_POD_NICE,
        )
    if len(info.hosts) != config.cluster.hosts:
        log.warning(
            "the emulator at %s has %d hosts, the config says cluster.hosts = %d",
            run_dir,
            len(info.hosts),
            config.cluster.hosts,
        )
    return info


def pod_placement(config: Config) -> tuple[str, tuple[str, ...]]:
    """Where a local pod starts: ``cluster.zone``, among ``capacity.zones`` (empty: the
    emulator's own zones; a zone that is not one of them: that zone alone). The zone's
    place in the list picks the hosts' 127.x addresses, so pods of a fleet in different
    zones sit on different addresses. Returns (zone, zones to pass; empty: the default)."""
    zone = config.cluster.zone or DEFAULT_ZONE
    if config.capacity.zones:
        return zone, tuple(config.capacity.zones)
    return zone, (() if zone in DEFAULT_ZONES else (zone,))


def pod_access(config: Config, pod: PodInfo, state_dir: Path) -> PodAccess:
    """How the console reaches the emulated pod."""
    wandb_dir = config.wandb.dir or str(state_dir / "wandb")
    user, key = ssh_identity(config.ssh, (pod.ssh_user, Path(pod.client_key)))
    # The emulator's API is a local process: waiting for READY may ask it often.
    poll = min(0.1, config.recovery.poll_interval_s)
    return PodAccess(
        provider=EmulatedTpuProvider(pod, poll_interval_s=poll),
        ssh_user=user,
        ssh_key=key,
        endpoints=[HostEndpoint(h.name, h.ip, h.ssh_port, h.index) for h in pod.hosts],
        ray_env=LOCAL_RAY_ENV,
        ray_sizing=LOCAL_RAY_SIZING,
        ray_user_path=False,
        storage_uri=config.storage or pod.bucket_uri,
        # The "hosts" share this machine's disk: runs land where cadence reads them.
        job_env={"WANDB_DIR": str(Path(wandb_dir).expanduser())},
        wandb_dir=wandb_dir,
        shares_loopback=True,
        rejoin_parallelism=LOCAL_REJOIN_PARALLELISM,
    )


class EmulatedTpuProvider(GcpTpuProvider):
    """The emulated pod: the real API code path on an insecure loopback channel, plus what
    only the emulator offers (one host recreated or preempted through its control socket)."""

    def __init__(
        self,
        pod: PodInfo,
        client: tpu_v2.TpuAsyncClient | None = None,
        *,
        poll_interval_s: float = 0.5,
        call_timeout_s: float = 30.0,
    ) -> None:
        super().__init__(
            pod.project,
            pod.zone,
            pod.node_name,
            client,
            ssh_port=pod.ssh_port,
            accelerator_type=pod.accelerator_type,
            poll_interval_s=poll_interval_s,
            call_timeout_s=call_timeout_s,
        )
        self.pod = pod
        self.run_dir = Path(pod.run_dir)

    @property
    def client(self) -> tpu_v2.TpuAsyncClient:
        if self._client is None:
            self._client = local_client(self.pod.tpu_api)
        return self._client

    async def recreate(self, hosts: Sequence[int] | None = None) -> list[int]:
        """Single emulated hosts through the emulator; all of them through the API."""
        n = len(self.pod.hosts)
        if hosts is None or sorted(set(hosts)) == list(range(n)):
            return await super().recreate(None)
        done = []
        for index in sorted(set(hosts)):
            if not 0 <= index < n:
                raise ValueError(f"host index {index}: the pod has hosts 0..{n - 1}")
            try:
                await pod_client.async_recreate(self.run_dir, index)
            except PodError as exc:
                raise TpuApiError(f"{self.node_name}: recreate of host {index}: {exc}") from None
            done.append(index)
        return done

    async def preempt(self, host: int | str) -> PodInfo:
        """Chaos: preempt one emulated host (or "all"); the pod's status afterwards."""
        return await pod_client.async_preempt(self.run_dir, host)


class EmulatorChaos:
    """``base.Chaos`` on the emulated pod: preempt like a spot reclaim, recreate bare."""

    capabilities = EMULATED

    def __init__(self, backend: TpuVmBackend, provider: EmulatedTpuProvider) -> None:
        self.backend = backend
        self.provider = provider

    async def preempt(self, host: str) -> ActionResult:
        """Preempt ``host`` (name, IP, index) or "all"; ``per_host`` names every host taken."""
        t0 = time.monotonic()
        every = self.backend.parts.ssh.endpoints
        targets = self.backend.parts.ssh.resolve([host])  # "all" = every host
        whole = len(targets) == len(every)
        info = await self.provider.preempt("all" if whole else targets[0].index)
        if info.faithful:
            targets = list(every)  # a spot reclaim takes the whole slice
        names = [ep.name for ep in targets]
        return ActionResult(
            action="preempt",
            ok=True,
            elapsed_s=time.monotonic() - t0,
            per_host={name: HostResult(host=name, ok=True) for name in names},
            message=f"preempted {', '.join(names)}",
        )

    async def recreate(self, host: str) -> ActionResult:
        return await self.backend.recreate([host])  # the backend resolves "all" to every host
