"""Each value of a config checked against its domain, and the sections against each other.

``parse_config`` (the package) reads the file and builds the sections; this module says
what is wrong with a value (every problem, key and fix, not just the first) and what no two
sections may say together. Kept apart so the settings read as settings.
"""

from __future__ import annotations

import ipaddress
import math
import re
import shlex
from collections.abc import Callable, Mapping
from typing import Any

from console.config import (
    KNOWN_HOSTS_POLICIES,
    PROVIDERS,
    WANDB_MODES,
    CapacityConfig,
    ClusterConfig,
    Config,
    GkeConfig,
    RayConfig,
)
from console.config.capacity import capacity_cross_problems, capacity_value_problems
from console.config.gke import gke_cross_problems, gke_value_problems
from console.config.gke_tpu import gke_tpu_type
from console.config.names import NAME_RE as _NAME_RE
from console.config.prices import PricesConfig, prices_cross_problems, prices_value_problems
from console.config.validate import (
    Invalid,
    accelerator_type,
    directory,
    env_var_name,
    shown,
)

BAD = object()


def check_value(key: str, default: Any, value: Any, problems: list[str]) -> Any:
    if isinstance(default, bool):
        if not isinstance(value, bool):
            problems.append(f"{key} = {shown(value)}: must be true or false")
            return BAD
        return value
    if isinstance(default, int):
        if isinstance(value, bool) or not isinstance(value, int):
            problems.append(f"{key} = {shown(value)}: must be an integer")
            return BAD
        return value
    if isinstance(default, float):
        if isinstance(value, bool) or not isinstance(value, int | float):
            problems.append(f"{key} = {shown(value)}: must be a number")
            return BAD
        if not math.isfinite(value):  # TOML has nan and inf
            problems.append(f"{key} = {value}: must be a finite number")
            return BAD
        return float(value)
    if isinstance(default, str):
        if not isinstance(value, str):
            problems.append(f"{key} = {shown(value)}: must be a string")
            return BAD
        return value
    if isinstance(default, tuple):
        if not isinstance(value, list) or not all(isinstance(v, str) and v for v in value):
            problems.append(f'{key} = {shown(value)}: must be a list of names, e.g. ["a", "b"]')
            return BAD
        return tuple(value)
    if isinstance(default, Mapping):
        if not isinstance(value, Mapping) or not all(
            isinstance(k, str) and isinstance(v, int | float) and not isinstance(v, bool)
            for k, v in value.items()
        ):
            problems.append(
                f"{key} = {shown(value)}: must be a table of name = number, e.g. {{TPU = 8}}"
            )
            return BAD
        return {k: float(v) for k, v in value.items()}
    return value


_POSITIVE = {
    "cluster.hosts",
    "ssh.connect_timeout_s",
    "ssh.command_timeout_s",
    "ssh.parallelism",
    "recovery.poll_interval_s",
    "recovery.ready_timeout_s",
    "recovery.cadence_deadline_s",
    "capacity.zone_retries",
    "capacity.backoff_s",
    "capacity.backoff_max_s",
    "capacity.timeout_s",
    "gke.slices",
    "gke.pending_quota_s",
}
_NON_NEGATIVE = {
    "ssh.retries",
    "recovery.step_retries",
    "recovery.max_error_retries",
    "recovery.notice_grace_s",
    "gke.max_restarts",
    "gke.termination_grace_s",
    "gke.metrics_lag_s",
    "wandb.online_lag_s",
}
_PORTS = {"ssh.port", "ray.gcs_port", "ray.dashboard_port", "ray.client_port"}
_PORTS_OR_AUTO = {"ray.local_dashboard_port", "ray.local_client_port"}


# Keys whose type has a validator of its own (``validate``): the same door as the flags and
# script lines of that type.
_DOOR: dict[str, Callable[[str, Any], object]] = {
    "wandb.api_key_env": env_var_name,
    "cluster.accelerator_type": lambda key, value: accelerator_type(f"{key} =", value),
    "gke.tpu_type": lambda key, value: gke_tpu_type(f"{key} =", value),
    "cluster.run_dir": lambda key, value: value and directory(f"{key} =", value),
    "gke.run_dir": lambda key, value: value and directory(f"{key} =", value),
    "wandb.dir": lambda key, value: value and directory(f"{key} =", value),
}


def check_domain(key: str, value: Any, problems: list[str]) -> None:
    door = _DOOR.get(key)
    if door is not None:
        try:
            door(key, value)
        except Invalid as exc:
            problems.append(str(exc))
        return
    if key == "cluster.provider" and value not in PROVIDERS:
        problems.append(f"{key} = {shown(value)}: allowed values are {', '.join(PROVIDERS)}")
    elif key == "ssh.known_hosts_policy" and value not in KNOWN_HOSTS_POLICIES:
        problems.append(
            f"{key} = {shown(value)}: allowed values are {', '.join(KNOWN_HOSTS_POLICIES)}"
        )
    elif key == "wandb.mode" and value not in WANDB_MODES:
        problems.append(f"{key} = {shown(value)}: allowed values are {', '.join(WANDB_MODES)}")
    elif key == "cluster.node_name" and not _NAME_RE.match(value):
        problems.append(
            f"{key} = {shown(value)}: lower-case letters, digits and '-', starting with a letter"
        )
    elif key in _PORTS and not 1 <= value <= 65535:
        problems.append(f"{key} = {shown(value)}: a TCP port between 1 and 65535")
    elif key in _PORTS_OR_AUTO and not 0 <= value <= 65535:
        problems.append(f"{key} = {shown(value)}: a TCP port between 1 and 65535, or 0 for auto")
    elif key in _POSITIVE and value <= 0:
        problems.append(f"{key} = {shown(value)}: must be greater than 0")
    elif key.startswith("capacity."):
        problems += capacity_value_problems(key, value)
    elif key == "cluster.hosts" and value > 1024:
        problems.append(f"{key} = {shown(value)}: at most 1024 hosts")
    elif key == "recovery.stall_factor" and value <= 1:
        problems.append(f"{key} = {shown(value)}: must be greater than 1 (k x the median interval)")
    elif key in ("ray.num_cpus", "ray.memory_mb") and value < 0:
        problems.append(f"{key} = {shown(value)}: must be 0 (the host's own) or more")
    elif key == "ray.object_store_mb" and value != 0 and value < 75:
        problems.append(
            f"{key} = {shown(value)}: at least 75 (Ray's minimum), or 0 for Ray's default"
        )
    elif key in _NON_NEGATIVE and value < 0:
        problems.append(f"{key} = {shown(value)}: must be 0 or more")
    elif key.startswith("gke."):
        problems += gke_value_problems(key, value)
    elif key.startswith("prices."):
        problems += prices_value_problems(key, value)
    elif key == "wandb.base_url" and value and not value.startswith(("http://", "https://")):
        problems.append(f"{key} = {shown(value)}: a URL such as http://127.0.0.1:PORT, or empty")

    elif key == "cluster.api_endpoint" and value.startswith(("http://", "grpc://")):
        try:
            loopback_endpoint(value)
        except ValueError as exc:
            problems.append(str(exc))
    elif key == "ssh.proxy_command" and value:
        _check_proxy_command(key, value, problems)
    elif key == "ray.jax_platform" and not re.match(r"^([a-z]+(,[a-z]+)*)?$", value):
        problems.append(
            f'{key} = {shown(value)}: a JAX platform name or list, e.g. "cpu", "tpu" or "tpu,cpu"'
        )
    elif key == "ray.resources":
        for name, amount in value.items():
            if amount < 0:
                problems.append(f"{key}.{name} = {amount!r}: must be 0 or more")


def loopback_endpoint(endpoint: str) -> str:
    """ "http://127.0.0.1:PORT[/]" (or grpc://, or bare) -> "127.0.0.1:PORT". A plain-text
    endpoint carries no TLS and anonymous credentials, so only loopback is accepted: raises
    ValueError naming the field and the fix otherwise."""
    hostport = endpoint.removeprefix("http://").removeprefix("grpc://").rstrip("/")
    host, _, port = hostport.rpartition(":")
    host = host.strip("[]")
    try:
        loopback = host == "localhost" or ipaddress.ip_address(host).is_loopback
    except ValueError:
        loopback = False
    if not loopback or not port.isdigit():
        raise ValueError(
            f"cluster.api_endpoint = {endpoint!r}: a plain-text endpoint (no TLS, anonymous "
            "credentials) must be http://127.0.0.1:PORT on loopback; for Google's API give "
            "host:port (TLS) or leave it empty"
        )
    return hostport


PROXY_TOKENS = re.compile(r"%(.)")


def _check_proxy_command(key: str, value: str, problems: list[str]) -> None:
    try:
        argv = shlex.split(value)
    except ValueError as exc:
        problems.append(f"{key} = {shown(value)}: bad quoting ({exc})")
        return
    if not argv:
        problems.append(f"{key}: empty; leave it out to connect directly")
    bad = sorted({t for t in PROXY_TOKENS.findall(value) if t not in "hprn%"})
    if bad:
        problems.append(
            f"{key} = {shown(value)}: unknown token(s) {', '.join('%' + t for t in bad)}; "
            "use %h (host), %p (port), %r (user), %n (worker name) or %%"
        )


def tunnel_port_problems(config: Config) -> list[str]:
    """The local ends of the Ray tunnel, once resolved (``Config.__post_init__``; a fleet
    member's are moved up by its index): a local pod's are its ports + 10000, which a port
    above 55535 pushes past 65535, where no socket can listen."""
    problems = []
    ray = config.ray
    for key, port, local in (
        ("dashboard_port", ray.dashboard_port, ray.local_dashboard_port),
        ("client_port", ray.client_port, ray.local_client_port),
    ):
        if local > 65535:
            problems.append(
                f"ray.{key} = {port}: its tunnel's local end would be port {local}, past "
                f"65535 (a local pod's is the port + 10000, a fleet's n-th cluster's + n); "
                f"choose a lower ray.{key} or set ray.local_{key}"
            )
    return problems


def cross_check(sections: dict[str, Any], problems: list[str]) -> None:
    cluster: ClusterConfig = sections.get("cluster", ClusterConfig())
    # The GCP-faithful emulator on loopback answers for its own project and zones.
    emulated = cluster.api_endpoint.startswith(("http://", "grpc://"))
    if cluster.provider == "gcp" and not emulated:
        if cluster.project in ("", "phantom-local"):
            problems.append("cluster.project: required for provider 'gcp' (your GCP project id)")
        if cluster.zone in ("", "local-a"):
            problems.append("cluster.zone: required for provider 'gcp' (e.g. us-central2-b)")
    problems += capacity_cross_problems(cluster, sections.get("capacity", CapacityConfig()))
    problems += prices_cross_problems(sections.get("prices", PricesConfig()))
    if cluster.provider == "gke":
        problems += gke_cross_problems(sections.get("gke", GkeConfig()))
    ray: RayConfig = sections.get("ray", RayConfig())
    ports = [ray.gcs_port, ray.dashboard_port, ray.client_port]
    if len(set(ports)) != len(ports):
        problems.append(f"ray: gcs_port, dashboard_port and client_port must differ, got {ports}")
