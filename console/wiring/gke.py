"""The console on the local GKE emulator: its cluster, its access, its chaos.

With ``cluster.provider = "gke"`` and no ``gke.kubeconfig`` the console drives the emulated
GKE cluster through the same code path as a real one (kubernetes-asyncio on a kubeconfig).
What differs is decided here and nowhere else: the emulator's kubeconfig and names, that
gs:// buckets are directories of its run dir, and what only an emulator can do (preempt a
slice on command). A script's ``gke up`` / ``gke down`` use ``LocalGkeControl``.
"""

from __future__ import annotations

import os
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

from console.config import Config
from console.config.gke_tpu import TPU_TYPES
from console.services.backends.gke import EMULATED
from console.services.backends.gke.access import GkeAccess
from console.services.backends.gke.manifests import ClusterRef
from console.services.model import ActionResult, HostResult
from console.wiring.settings import polling
from emulators.gke import client as gke_client
from emulators.gke.client import GkeError, GkeInfo
from emulators.gke.layout import default_run_dir

# The emulated trainer flushes its TensorBoard events every step.
EMULATOR_METRICS_LAG_S = 1.0


def gke_run_dir(config: Config) -> Path:
    if config.gke.run_dir:
        return Path(config.gke.run_dir).expanduser()
    return default_run_dir()


def ensure_gke(config: Config, autostart: bool) -> GkeInfo:
    """The running emulator for ``gke.run_dir``; started (``gke.slices`` slices of
    ``gke.tpu_type``, checked at the door against the same table of GKE TPU types) when none
    runs and ``autostart``. ValueError naming the fix otherwise."""
    os.environ.setdefault("NO_GCE_CHECK", "True")
    run_dir = gke_run_dir(config)
    info = gke_client.status(run_dir)
    if info is None:
        if not autostart:
            raise ValueError(
                f"no GKE emulator is running for {run_dir}; start it with `phantom gke up` "
                f"(gke.run_dir = {str(run_dir)!r}), or `gke up` in a script"
            )
        try:
            info = gke_client.start(run_dir, slices=config.gke.slices, tpu_type=config.gke.tpu_type)
        except GkeError as exc:
            raise ValueError(f"the GKE emulator did not start: {exc}") from None
    return info


def gke_access(config: Config, info: GkeInfo) -> GkeAccess:
    g = config.gke
    # the slices the emulator runs (`phantom gke up --tpu-type` may have chosen another type)
    tpu = TPU_TYPES.get(info.tpu_type)
    accel = f"{info.tpu_type} ({tpu.topology})" if tpu else info.tpu_type
    return GkeAccess(
        kubeconfig=str(info.kubeconfig),
        ref=ClusterRef(
            project=g.project or info.project,
            location=g.location or info.location,
            cluster=g.cluster or info.cluster,
            namespace=g.namespace,
        ),
        context=g.context or info.context,
        gcs_root=Path(info.bucket),
        accelerator=f"{accel} x{len(info.slices)}",
        metrics_lag_s=min(g.metrics_lag_s, EMULATOR_METRICS_LAG_S),
        capacity_wait_s=g.pending_quota_s,
        poll_budget_s=polling(config).budget_s,
    )


class GkeChaos:
    """``base.Chaos`` and ``base.SliceChaos`` on the emulated cluster: a host is a node, and
    preempting it preempts its whole slice (GKE reclaims a TPU slice as one)."""

    capabilities = EMULATED

    def __init__(self, config: Config) -> None:
        self.run_dir = gke_run_dir(config)

    async def preempt_slice(self, slice_ref: str, grace_s: float | None) -> ActionResult:
        try:
            done = await gke_client.async_preempt_slice(self.run_dir, slice_ref, grace_s)
        except GkeError as exc:
            raise ValueError(f"preempt-slice {slice_ref}: {exc}") from None
        nodes = [str(n) for n in done.get("nodes", [])]
        return ActionResult(
            action="preempt_slice",
            ok=True,
            elapsed_s=0.0,
            per_host={n: HostResult(host=n, ok=True) for n in nodes},
            message=(
                f"preempted slice {done.get('slice')}: {len(nodes)} node(s), "
                f"{len(done.get('pods', []))} pod(s), grace {done.get('grace')}s"
            ),
            data={k: v for k, v in done.items() if k in ("slice", "at", "grace", "pods")},
        )

    async def preempt(self, host: str) -> ActionResult:
        return await self.preempt_slice(self._slice_of(host), None)

    async def recreate(self, host: str) -> ActionResult:
        info = await _in_thread(gke_client.restore_slice, self.run_dir, self._slice_of(host))
        return ActionResult(
            action="recreate", ok=True, elapsed_s=0.0, message=f"restored {info.slice_names}"
        )

    def _slice_of(self, host: str) -> str:
        info = gke_client.status(self.run_dir)
        if info is not None:
            for s in info.slices:
                if host == s.name or host in s.nodes:
                    return s.name
        return host


def container_signaller(config: Config) -> Callable[[str, str, int], Awaitable[None]]:
    """How the GKE backend signals a pod's trainer on the emulator (its kubelet sends the
    container's main process the signal): what a real cluster offers no call for."""
    run_dir = gke_run_dir(config)

    async def send(pod: str, container: str, sig: int) -> None:
        try:
            await _in_thread(gke_client.crash_container, run_dir, pod, container, sig)
        except GkeError as exc:
            raise ValueError(f"signal pod {pod}: {exc}") from None

    return send


async def _in_thread(fn: Any, *args: Any) -> Any:
    import asyncio

    return await asyncio.to_thread(fn, *args)


class LocalGkeControl:
    """A script's ``gke up`` / ``gke down``: the emulator's own client."""

    def __init__(self, config: Config) -> None:
        self.config = config

    async def is_up(self) -> bool:
        return await gke_client.async_status(gke_run_dir(self.config)) is not None

    async def up(
        self,
        slices: int | None,
        quota_stall: bool = False,
        *,
        recreate_delay: float | None = None,
        extra_args: list[str] | None = None,
    ) -> dict[str, Any]:
        """Start the emulator; ``recreate_delay`` / ``extra_args`` (daemon flags) let a
        benchmark run it faster than the life-like defaults."""
        kwargs: dict[str, Any] = {"extra_args": extra_args}
        if recreate_delay is not None:
            kwargs["recreate_delay"] = recreate_delay
        try:
            info = await gke_client.async_start(
                gke_run_dir(self.config),
                slices=slices or self.config.gke.slices,
                quota_stall=quota_stall,
                tpu_type=self.config.gke.tpu_type,
                **kwargs,
            )
        except GkeError as exc:
            raise ValueError(f"gke up: {exc}") from None
        return {
            "server": info.server,
            "kubeconfig": str(info.kubeconfig),
            "context": info.context,
            "tpu_type": info.tpu_type,
            "slices": [
                {"name": s.name, "state": s.state, "nodes": len(s.nodes)} for s in info.slices
            ],
            "bucket": str(info.bucket),
            "run_dir": str(info.run_dir),
        }

    async def down(self) -> bool:
        return await gke_client.async_stop(gke_run_dir(self.config))


def emulator_bucket(config: Config) -> Path:
    """Where the emulator's gs:// buckets live (also before it runs)."""
    from emulators.gke.layout import RunLayout

    return RunLayout(gke_run_dir(config).absolute()).bucket
