"""A script's ``pod up`` / ``pod down`` on the local emulator (cheap to import: the
emulator's stdlib client only)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from console.config import Config
from emulators.tpu_pod import client as pod_client
from emulators.tpu_pod.layout import default_run_dir

# The console's own emulated pod runs on the console's cores at the lowest CPU priority: its
# hosts stand in for remote machines, and a training job on them must not take the frames of
# the console beside it (benchmarks.tui --load measures the difference).
LOCAL_POD_NICE = 19


def run_dir_of(config: Config) -> Path:
    if config.cluster.run_dir:
        return Path(config.cluster.run_dir).expanduser()
    return default_run_dir()


class LocalPodControl:
    """A script's ``pod up`` / ``pod down``: the emulator's own client."""

    def __init__(self, config: Config) -> None:
        self.config = config

    async def is_up(self) -> bool:
        return await pod_client.async_pod_status(run_dir_of(self.config)) is not None

    async def up(
        self, hosts: int, *, ready_delay: float | None, ssh_port: int | None
    ) -> dict[str, Any]:
        kwargs: dict[str, Any] = {"hosts": hosts}
        if ready_delay is not None:
            kwargs["ready_delay"] = ready_delay
        # Any free port unless asked: a fixed one collides with other pods on this machine;
        # the services read the real port from the emulator's status.
        kwargs["ssh_port"] = 0 if ssh_port is None else ssh_port
        kwargs["nice"] = LOCAL_POD_NICE
        info = await pod_client.async_start_pod(run_dir_of(self.config), **kwargs)
        return {
            "node_name": info.node_name,
            "state": info.state,
            "tpu_api": info.tpu_api,
            "hosts": [{"name": h.name, "ip": h.ip, "ssh_port": h.ssh_port} for h in info.hosts],
            "run_dir": str(info.run_dir),
        }

    async def down(self) -> bool:
        return await pod_client.async_stop_pod(run_dir_of(self.config))
