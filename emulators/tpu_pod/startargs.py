"""Checking ``start_pod`` options before anything starts, and turning them into the
daemon's ``serve`` flags (stdlib only, like the client)."""

from __future__ import annotations

import socket
from collections.abc import Mapping, Sequence
from pathlib import Path

from emulators.tpu_pod.accelerators import parse_quota
from emulators.tpu_pod.layout import DEFAULT_ZONES, host_ip
from emulators.tpu_pod.podinfo import PodUsageError, PortInUse
from emulators.tpu_pod.zones import parse_capacity, parse_stockout, parse_zones

FAULT_KINDS = ("hang", "silent-death", "stale-api", "slow-api", "drop-forwards")


def _port_free(ip: str, port: int) -> bool:
    s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    try:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        s.bind((ip, port))
    except OSError:
        return False
    finally:
        s.close()
    return True


def check_ports(
    hosts: int,
    ssh_port: int,
    api_port: int,
    rest_port: int = 0,
    metadata_port: int = 0,
    faithful: bool = False,
) -> None:
    """Raise PortInUse naming the first taken port and the flag to change."""
    for port, flag, external in (
        (ssh_port, "--ssh-port", faithful),
        (metadata_port, "--metadata-port", False),
    ):
        if not port:
            continue
        ips = [host_ip(i) for i in range(hosts)]
        ips += [host_ip(i, external=True) for i in range(hosts)] if external else []
        for ip in ips:
            if not _port_free(ip, port):
                raise PortInUse(f"port {port} on {ip} is in use; pass {flag}")
    for port, flag in ((api_port, "--api-port"), (rest_port, "--rest-port")):
        if port and not _port_free("127.0.0.1", port):
            raise PortInUse(f"port {port} on 127.0.0.1 is in use; pass {flag}")


def pod_args(
    *,
    faithful: bool,
    rest_port: int,
    metadata_port: int,
    zones: Sequence[str] | None,
    capacity: int | str | Mapping[str, int] | None,
    stockouts: Sequence[str],
    quota: Sequence[str] = (),
    stockout_seed: int | None,
    stockout_mean: float | None,
    preempt_grace: float | None,
    chaos_notice: float | None,
    chaos_faults: Sequence[str],
    ssh_user: str | None,
    ssh_key: Path | str | None,
) -> list[str]:
    """``serve`` flags for the options that differ from the defaults, checked first."""
    args: list[str] = ["--faithful"] if faithful else []
    for flag, port in (("--rest-port", rest_port), ("--metadata-port", metadata_port)):
        if not 0 <= port <= 65535:
            raise PodUsageError(f"{flag} must be 0..65535 (0 = any free), got {port}")
        if port:
            args += [flag, str(port)]
    try:
        names = parse_zones(",".join(zones)) if zones is not None else DEFAULT_ZONES
        if zones is not None:
            args += ["--zones", ",".join(names)]
        if capacity is not None:
            text = (
                str(capacity)
                if isinstance(capacity, int | str)
                else ",".join(f"{z}:{n}" for z, n in capacity.items())
            )
            parse_capacity([text], names)
            args += ["--capacity", text]
        for item in stockouts:
            parse_stockout(item, names)
            args += ["--stockout", item]
        for item in quota:
            parse_quota([item], names)
            args += ["--quota", item]
    except ValueError as exc:
        raise PodUsageError(str(exc)) from None
    for flag, value in (
        ("--stockout-mean", stockout_mean),
        ("--preempt-grace", preempt_grace),
        ("--chaos-notice", chaos_notice),
    ):
        if value is not None:
            if value < 0 or (flag == "--stockout-mean" and value == 0):
                raise PodUsageError(f"{flag} must be a positive number of seconds, got {value}")
            args += [flag, str(value)]
    if stockout_seed is not None:
        args += ["--stockout-seed", str(stockout_seed)]
    for kind in chaos_faults:
        if kind not in FAULT_KINDS:
            raise PodUsageError(
                f"--chaos-faults: unknown fault {kind!r}; use {', '.join(FAULT_KINDS)}"
            )
    if chaos_faults:
        args += ["--chaos-faults", ",".join(chaos_faults)]
    if ssh_user is not None:
        if not ssh_user or not ssh_user.replace("_", "").replace("-", "").isalnum():
            raise PodUsageError(f"--ssh-user {ssh_user!r}: letters, digits, '-' and '_' only")
        args += ["--ssh-user", ssh_user]
    if ssh_key is not None:
        key = Path(ssh_key).expanduser().absolute()
        if not key.is_file():
            raise PodUsageError(f"--ssh-key {key}: no such file (a private key you log in with)")
        args += ["--ssh-key", str(key)]
    return args
