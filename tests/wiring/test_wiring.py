"""The composition root: what it builds for each provider, and what it refuses."""

from __future__ import annotations

import shlex
from pathlib import Path

import asyncssh
import pytest

from console.config import Config, ConfigError, parse_config
from console.services.backends.tpu_vm import raycmd
from console.services.backends.tpu_vm.backend import TpuVmBackend
from console.services.backends.tpu_vm.endpoints import HostEndpoint
from console.services.facade import Facade
from console.wiring import make_services
from console.wiring.pod import LOCAL_RAY_SIZING
from emulators.tpu_pod.client import PodInfo


def test_local_without_a_running_pod_names_the_run_dir(tmp_path: Path) -> None:
    cfg = parse_config({"cluster": {"run_dir": str(tmp_path / "nopod")}})
    with pytest.raises(ValueError, match=r"no pod emulator is running for .*nopod.*phantom pod up"):
        make_services(cfg, state_dir=tmp_path / "state", autostart_pod=False)


def gcp_config(tmp_path: Path, **sections: dict[str, object]) -> Config:
    key = asyncssh.generate_private_key("ssh-ed25519")
    key_path = tmp_path / "id_ed25519"
    key.write_private_key(str(key_path))
    return parse_config(
        {
            "cluster": {"provider": "gcp", "project": "my-proj", "zone": "us-central2-b"},
            "ssh": {"user": "me", "key": str(key_path)},
            **sections,
        }
    )


@pytest.fixture
def gcp_services(tmp_path: Path):  # type: ignore[no-untyped-def]
    svc = make_services(gcp_config(tmp_path), state_dir=tmp_path / "state")
    try:
        yield svc
    finally:
        svc.close_journal()


async def test_chaos_is_local_only(gcp_services) -> None:  # type: ignore[no-untyped-def]
    with pytest.raises(
        ValueError, match=r"only available with cluster\.provider = 'local'.*\(gcp\)"
    ):
        await gcp_services.preempt("0")
    with pytest.raises(ValueError, match=r"cluster 'phantom-pod' \(gcp\) is not one"):
        await gcp_services.recreate("0")
    # the recovery the watchdog drives exists for every provider
    assert gcp_services.watchdog.auto is True
    assert [s.name for s in gcp_services.watchdog.runner.plan.steps] == [
        "orphans",
        "recreate",
        "wait_ready",
        "bootstrap",
        "head",
        "tunnel",
        "resubmit",
        "workers",
    ]


SIZING_FLAGS = ("--num-cpus", "--memory", "--object-store-memory")


def sizing(command: str) -> dict[str, str]:
    """The sizing flags of a `ray start` command line."""
    argv = shlex.split(command.replace(raycmd.TEMP_DIR_SHELL, "/tmp/ray"))
    return {a.split("=")[0]: a.split("=", 1)[1] for a in argv if a.startswith(SIZING_FLAGS)}


def ray_commands(svc: Facade) -> list[str]:
    assert isinstance(svc.backend, TpuVmBackend)
    ray = svc.backend.parts.ray
    return [ray.head_command(), ray.worker_command(HostEndpoint("pod-w1", "10.130.0.3", 22, 1))]


def test_gcp_ray_nodes_are_sized_by_their_host(gcp_services: Facade) -> None:
    """A 240-vCPU TPU VM host must not advertise the emulator's 2 CPUs to Ray."""
    for command in ray_commands(gcp_services):
        assert sizing(command) == {}, command


def test_gcp_ray_sizing_only_when_configured(tmp_path: Path) -> None:
    cfg = gcp_config(tmp_path, ray={"num_cpus": 200, "memory_mb": 1024, "object_store_mb": 0})
    svc = make_services(cfg, state_dir=tmp_path / "state")
    try:
        for command in ray_commands(svc):
            assert sizing(command) == {"--num-cpus": "200", "--memory": str(1024 * raycmd.MIB)}
    finally:
        svc.close_journal()


def test_the_emulator_sets_its_small_sizing_explicitly(pod: PodInfo, tmp_path: Path) -> None:
    cfg = parse_config({"cluster": {"run_dir": str(pod.run_dir)}})
    svc = make_services(cfg, state_dir=tmp_path / "state", autostart_pod=False)
    try:
        for command in ray_commands(svc):
            assert sizing(command) == {
                "--num-cpus": str(LOCAL_RAY_SIZING.num_cpus),
                "--memory": str(LOCAL_RAY_SIZING.memory),
                "--object-store-memory": str(LOCAL_RAY_SIZING.object_store_memory),
            }
    finally:
        svc.close_journal()


def test_rejoins_one_at_a_time_only_where_the_hosts_share_cores(
    pod: PodInfo, gcp_services: Facade, tmp_path: Path
) -> None:
    """A TPU VM host has its own CPUs: a recovery rejoins every worker at once there. The
    emulator's hosts share this machine's: one `ray start` at a time, beside the resubmitted
    job's start on the head."""
    assert isinstance(gcp_services.backend, TpuVmBackend)
    assert gcp_services.backend.rejoin_parallelism is None
    cfg = parse_config({"cluster": {"run_dir": str(pod.run_dir)}})
    svc = make_services(cfg, state_dir=tmp_path / "state", autostart_pod=False)
    try:
        assert isinstance(svc.backend, TpuVmBackend)
        assert svc.backend.rejoin_parallelism == 1
    finally:
        svc.close_journal()


@pytest.mark.parametrize(
    ("ray", "message"),
    [
        ({"num_cpus": -1}, r"ray\.num_cpus = -1: must be 0 \(the host's own\) or more"),
        ({"object_store_mb": 50}, r"ray\.object_store_mb = 50: at least 75"),
    ],
)
def test_bad_sizing_is_named(ray: dict[str, object], message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        parse_config({"ray": ray})


def test_gke_without_a_running_emulator_names_its_run_dir(tmp_path: Path) -> None:
    cfg = parse_config({"cluster": {"provider": "gke"}, "gke": {"run_dir": str(tmp_path / "g")}})
    with pytest.raises(ValueError, match=r"no GKE emulator is running for .*phantom gke up"):
        make_services(cfg, state_dir=tmp_path / "state", autostart_pod=False)


def real_gke(kubeconfig: Path) -> dict[str, str]:
    """A [gke] table for a real cluster (a kubeconfig, not the emulator)."""
    return {
        "kubeconfig": str(kubeconfig),
        "project": "p",
        "location": "us-central1",
        "cluster": "c",
        "base_output_directory": "gs://bucket/runs",
    }


async def test_gke_with_a_kubeconfig_has_no_chaos_and_no_pod_actions(tmp_path: Path) -> None:
    kubeconfig = tmp_path / "kubeconfig"
    kubeconfig.write_text("apiVersion: v1\nkind: Config\nclusters: []\ncontexts: []\n")
    cfg = parse_config(
        {
            "cluster": {"provider": "gke"},
            "gke": real_gke(kubeconfig),
        }
    )
    svc = make_services(cfg, state_dir=tmp_path / "state")
    try:
        assert svc.chaos is None
        with pytest.raises(
            ValueError, match=r"only available on the local GKE emulator.*kubeconfig"
        ):
            await svc.preempt_slice("0")
        with pytest.raises(ValueError, match=r"cluster 'c' \(gke\) has no TPU VMs or Ray"):
            await svc.teardown()
        assert [s.name for s in svc.watchdog.runner.plan.steps] == ["nodes", "release", "resubmit"]
    finally:
        svc.close_journal()


def test_gke_with_a_kubeconfig_requires_the_link_names(tmp_path: Path) -> None:
    kubeconfig = tmp_path / "kubeconfig"
    kubeconfig.write_text("apiVersion: v1\n")

    with pytest.raises(ConfigError) as err:
        parse_config({"cluster": {"provider": "gke"}, "gke": {"kubeconfig": str(kubeconfig)}})
    text = "\n".join(err.value.problems)
    for key in ("gke.project", "gke.location", "gke.cluster", "gke.base_output_directory"):
        assert key in text


def test_the_built_services_can_what_the_wiring_says(gcp_services, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    """What the first frame and the script parser read (``capabilities_for``) is what the
    built services declare: the backend's own set, and no emulator verb on a real pod."""
    from console.services.capabilities import Capability
    from console.wiring import capabilities_for

    assert gcp_services.capabilities == capabilities_for(gcp_config(tmp_path))
    assert Capability.RAY in gcp_services.capabilities
    assert Capability.POD_EMULATOR not in gcp_services.capabilities


async def test_a_fleets_refusals_name_the_cluster_and_its_provider(tmp_path: Path) -> None:
    """Each cluster's services refuse what its kind cannot do naming that cluster: in a
    fleet "this console drives provider 'gke'" did not say which of its clusters it meant."""
    from console.config.fleet import parse_fleet
    from console.services.jobs.spec import SubmitSpec
    from console.services.jobs.workload import WorkloadSpec

    kubeconfig = tmp_path / "kubeconfig"
    kubeconfig.write_text("apiVersion: v1\nkind: Config\nclusters: []\ncontexts: []\n")
    key = asyncssh.generate_private_key("ssh-ed25519")
    key.write_private_key(str(tmp_path / "id_ed25519"))
    fleet = parse_fleet(
        {
            "ssh": {"user": "me", "key": str(tmp_path / "id_ed25519")},
            "clusters": [
                {
                    "name": "pod-a",
                    "cluster": {"provider": "gcp", "project": "p", "zone": "us-central2-b"},
                },
                {
                    "name": "grpo",
                    "cluster": {"provider": "gke"},
                    "gke": real_gke(kubeconfig),
                },
            ],
        },
        source="fleet.toml",
    )
    pod_a, grpo = (
        make_services(c, state_dir=tmp_path / c.name, autostart_pod=False) for c in fleet.members
    )
    try:
        with pytest.raises(ValueError, match=r"cluster 'pod-a' \(gcp\) is not one"):
            await pod_a.preempt("0")
        with pytest.raises(ValueError, match=r"cluster 'pod-a' \(gcp\) has no workloads"):
            await pod_a.create_workload(WorkloadSpec(name="w"), "test")
        with pytest.raises(ValueError, match=r"cluster 'grpo' \(gke\) has no TPU VMs or Ray"):
            await grpo.teardown()
        with pytest.raises(ValueError, match=r"cluster 'grpo' \(gke\) is not: it has a gke"):
            await grpo.preempt_slice("0")
        with pytest.raises(ValueError, match=r"cluster 'grpo' \(gke\) runs workloads"):
            await grpo.submit(SubmitSpec(), "test")
    finally:
        pod_a.close_journal()
        grpo.close_journal()
