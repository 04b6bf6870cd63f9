"""The composition root: what it builds for each provider, and what it refuses."""

from __future__ import annotations

from pathlib import Path

import asyncssh
import pytest

from console.config import parse_config
from console.wiring import make_services


def test_local_without_a_running_pod_names_the_run_dir(tmp_path: Path) -> None:
    cfg = parse_config({"cluster": {"run_dir": str(tmp_path / "nopod")}})
    with pytest.raises(ValueError, match=r"no pod emulator is running for .*nopod.*phantom pod up"):
        make_services(cfg, state_dir=tmp_path / "state", autostart_pod=False)


@pytest.fixture
def gcp_services(tmp_path: Path):  # type: ignore[no-untyped-def]
    key = asyncssh.generate_private_key("ssh-ed25519")
    key_path = tmp_path / "id_ed25519"
    key.write_private_key(str(key_path))
    cfg = parse_config(
        {
            "cluster": {"provider": "gcp", "project": "my-proj", "zone": "us-central2-b"},
            "ssh": {"user": "me", "key": str(key_path)},
        }
    )
    svc = make_services(cfg, state_dir=tmp_path / "state")
    try:
        yield svc
    finally:
        svc.close_journal()


async def test_chaos_is_local_only(gcp_services) -> None:  # type: ignore[no-untyped-def]
    with pytest.raises(ValueError, match=r"only available with cluster\.provider = 'local'.*'gcp'"):
        await gcp_services.preempt("0")
    with pytest.raises(ValueError, match="provider 'gcp'"):
        await gcp_services.recreate("0")
    # the recovery the watchdog drives exists for every provider
    assert gcp_services.watchdog.auto is True
    assert [s.name for s in gcp_services.watchdog.runner.plan.steps] == [
        "recreate",
        "wait_ready",
        "bootstrap",
        "head",
        "workers",
        "tunnel",
        "resubmit",
    ]


def test_gke_without_a_running_emulator_names_its_run_dir(tmp_path: Path) -> None:
    cfg = parse_config({"cluster": {"provider": "gke"}, "gke": {"run_dir": str(tmp_path / "g")}})
    with pytest.raises(ValueError, match=r"no GKE emulator is running for .*phantom gke up"):
        make_services(cfg, state_dir=tmp_path / "state", autostart_pod=False)


async def test_gke_with_a_kubeconfig_has_no_chaos_and_no_pod_actions(tmp_path: Path) -> None:
    kubeconfig = tmp_path / "kubeconfig"
    kubeconfig.write_text("apiVersion: v1\nkind: Config\nclusters: []\ncontexts: []\n")
    cfg = parse_config(
        {
            "cluster": {"provider": "gke"},
            "gke": {
                "kubeconfig": str(kubeconfig),
                "project": "p",
                "location": "us-central1",
                "cluster": "c",
                "base_output_directory": "gs://bucket/runs",
            },
        }
    )
    svc = make_services(cfg, state_dir=tmp_path / "state")
    try:
        assert svc.chaos is None
        with pytest.raises(
            ValueError, match=r"only available on the local GKE emulator.*kubeconfig"
        ):
            await svc.preempt_slice("0")
        with pytest.raises(ValueError, match=r"provider 'gke' has no TPU VMs or Ray"):
            await svc.teardown()
        assert [s.name for s in svc.watchdog.runner.plan.steps] == ["nodes", "resubmit"]
    finally:
        svc.close_journal()


def test_gke_with_a_kubeconfig_requires_the_link_names(tmp_path: Path) -> None:
    kubeconfig = tmp_path / "kubeconfig"
    kubeconfig.write_text("apiVersion: v1\n")
    from console.config import ConfigError

    with pytest.raises(ConfigError) as err:
        parse_config({"cluster": {"provider": "gke"}, "gke": {"kubeconfig": str(kubeconfig)}})
    text = "\n".join(err.value.problems)
    for key in ("gke.project", "gke.location", "gke.cluster", "gke.base_output_directory"):
        assert key in text
