"""Two 2-host pod emulators in their own zones (pod-a on 127.0.0.x, pod-b on 127.1.0.x) and
the ``[[clusters]]`` config naming them (``fleet_toml``; with a GKE emulator, a third
cluster), for the front ends' fleet tests; every process stopped by its pid afterwards. (No
tests here.)"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from benchmarks.pods import free_ray_ports
from emulators.gke.client import GkeInfo
from emulators.tpu_pod.client import PodInfo
from tests.support.fixtures_pod import start_test_pod, stop_test_pod

NAMES = ("pod-a", "pod-b")
GKE = "grpo"  # the GKE emulator's cluster, where a test adds one


@dataclass
class TwoPods:
    config: Path
    pods: dict[str, PodInfo]


def fleet_toml(pods: dict[str, PodInfo], tmp: Path, gke: GkeInfo | None = None) -> str:
    """Both pods as [[clusters]] entries: their run dirs and zones, free Ray ports (tests
    run side by side); with ``gke``, that emulator's cluster as a third entry, ``GKE``;
    everything else, their state dirs included, the fleet's."""
    text = f"""
[ssh]
connect_timeout_s = 5.0
retries = 1
command_timeout_s = 240.0

[ray]
num_cpus = 1
object_store_mb = 100

[wandb]
mode = "offline"
dir = "{tmp / "wandb"}"

[recovery]
poll_interval_s = 0.5
ready_timeout_s = 120.0
step_retries = 2
"""
    for zone, (name, pod) in zip(("local-a", "local-b"), pods.items(), strict=True):
        ray = "\n".join(f"{k} = {v}" for k, v in free_ray_ports(pod.hosts[0].ip).items())
        text += f"""
[[clusters]]
name = "{name}"
[clusters.cluster]
provider = "local"
zone = "{zone}"
node_name = "{name}"
hosts = {len(pod.hosts)}
run_dir = "{pod.run_dir}"
[clusters.ray]
{ray}
"""
    if gke is not None:
        text += f"""
[[clusters]]
name = "{GKE}"
[clusters.cluster]
provider = "gke"
[clusters.gke]
run_dir = "{gke.run_dir}"
tpu_type = "{gke.tpu_type}"
hf_token_env = ""
"""
    return text


@contextlib.contextmanager
def two_pods(tmp_path: Path) -> Iterator[TwoPods]:
    pods: dict[str, PodInfo] = {}
    try:
        for zone, name in zip(("local-a", "local-b"), NAMES, strict=True):
            pods[name] = start_test_pod(
                tmp_path / name, hosts=2, extra_args=["--zone", zone, "--node-name", name]
            )
        config = tmp_path / "fleet.toml"
        config.write_text(fleet_toml(pods, tmp_path))
        yield TwoPods(config, pods)
    finally:
        for pod in pods.values():
            stop_test_pod(pod.run_dir)
