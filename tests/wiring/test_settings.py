"""Every service's slice of the config is built once, in the wiring: the waits derived from
the poll interval come from one place, and no service takes the whole ``Config``."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from console.config import (
    ClusterConfig,
    Config,
    GkeConfig,
    RayConfig,
    RecoveryConfig,
    SshConfig,
    parse_config,
)
from console.wiring.settings import (
    gke_settings,
    polling,
    service_settings,
    tpu_vm_settings,
    workload_defaults,
)

SERVICES = Path(__file__).resolve().parents[2] / "console" / "services"


@pytest.mark.parametrize(
    ("interval", "budget", "retry", "brief", "node_wait", "wake", "alive", "client", "lost"),
    [
        (5.0, 10.0, 1.0, 0.5, 0.25, 5.0, 30.0, 2.0, 15.0),  # the default
        (0.5, 2.0, 0.5, 0.5, 0.25, 0.5, 30.0, 0.5, 2.0),  # a drill's fast poll
        (0.1, 2.0, 0.1, 0.1, 0.1, 0.2, 30.0, 0.2, 2.0),
        (20.0, 40.0, 1.0, 0.5, 0.25, 5.0, 120.0, 2.0, 60.0),  # a patient one
    ],
)
def test_every_wait_is_derived_once_from_the_poll_interval(
    interval: float,
    budget: float,
    retry: float,
    brief: float,
    node_wait: float,
    wake: float,
    alive: float,
    client: float,
    lost: float,
) -> None:
    p = polling(parse_config({"recovery": {"poll_interval_s": interval}}))
    assert (p.interval_s, p.budget_s, p.retry_s, p.brief_s, p.node_wait_s) == (
        interval,
        budget,
        retry,
        brief,
        node_wait,
    )
    assert (p.wake_s, p.alive_s, p.client_s, p.lost_grace_s) == (wake, alive, client, lost)


def test_the_slices_carry_what_the_config_says() -> None:
    cfg = Config(
        cluster=ClusterConfig(provider="gcp", project="p", zone="us-central2-b", hosts=8),
        recovery=RecoveryConfig(poll_interval_s=2.0, ready_timeout_s=90.0),
        ssh=SshConfig(connect_timeout_s=7.0),
        ray=RayConfig(jax_platform="tpu"),
        runtime_env={"pip": ["numpy"]},
    )
    s = service_settings(cfg)
    assert (s.cluster.provider, s.cluster.zone, s.cluster.hosts) == ("gcp", "us-central2-b", 8)
    assert not s.cluster.gke and not s.cluster.emulated
    assert s.polling == polling(cfg) and s.recovery is cfg.recovery
    assert s.dashboard_port == cfg.ray.local_dashboard_port == 8265  # gcp: no offset
    assert dict(s.runtime_env) == {"pip": ["numpy"]}
    assert s.ledger.hosts == 8 and s.ledger.pricing.region == "us-central2"
    pod = tpu_vm_settings(cfg)
    assert pod.probe_connect_s == 2.0  # the interval, under ssh.connect_timeout_s
    assert pod.job_env["PHANTOM_JAX_PLATFORM"] == "tpu" and pod.ready_timeout_s == 90.0
    assert pod.bootstrap_command  # the default filled in, not ""
    assert gke_settings(cfg).ready_timeout_s == 90.0


def test_the_workload_defaults_write_to_the_emulators_bucket_only_on_the_emulator() -> None:
    emulated = workload_defaults(parse_config({"cluster": {"provider": "gke"}}))
    assert emulated.base_output_directory.startswith("gs://phantom-bucket/")
    real = Config(cluster=ClusterConfig(provider="gke"), gke=GkeConfig(kubeconfig="/k"))
    assert workload_defaults(real).base_output_directory == ""
    named = emulated.but("w", slices=2, image=None)
    assert (named.name, named.slices, named.image) == ("w", 2, emulated.image)


def _whole_config_uses(path: Path) -> list[str]:
    """Where a module names the whole ``Config`` (an import of it, an annotation)."""
    tree = ast.parse(path.read_text(), str(path))
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module == "console.config":
            found += [f"import at line {node.lineno}" for a in node.names if a.name == "Config"]
        elif isinstance(node, ast.Name) and node.id == "Config":
            found.append(f"Config at line {node.lineno}")
    return found


def test_no_service_takes_the_whole_config() -> None:
    """A service reads its slice; the wiring alone builds slices from the whole config."""
    uses = {
        str(p.relative_to(SERVICES)): u
        for p in sorted(SERVICES.rglob("*.py"))
        if (u := _whole_config_uses(p))
    }
    assert uses == {}
