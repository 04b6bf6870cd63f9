"""Connecting the engine's drivers (sweep, distributed launcher) to a Ray cluster.

``connect`` checks that an explicit ``host:port`` / ``ray://host:port`` address answers
before handing it to ``ray.init`` (which would otherwise retry for a minute), so a wrong
``--address`` fails in about a second with a message naming it.
"""

from __future__ import annotations

import os
import socket

CONNECT_TIMEOUT_S = 2.0


def _host_port(address: str) -> tuple[str, int] | None:
    if address in ("auto", "local"):
        return None
    hostport = address.removeprefix("ray://")
    host, _, port = hostport.rpartition(":")
    return host.strip("[]"), int(port)


def check_reachable(address: str | None, flag: str = "--address") -> None:
    """Raise ConnectionError naming ``flag`` unless ``address`` accepts a TCP connection."""
    target = address or os.environ.get("RAY_ADDRESS") or None
    if target is None or ("://" in target and not target.startswith("ray://")):
        return  # a local cluster is started, or the job supervisor's own address is used
    hp = _host_port(target)
    if hp is None:
        return
    try:
        with socket.create_connection(hp, timeout=CONNECT_TIMEOUT_S):
            pass
    except OSError as exc:
        source = flag if address else "RAY_ADDRESS"
        raise ConnectionError(
            f"no Ray cluster answers at {source} {target} ({exc.strerror or exc}); start Ray "
            "there or give the head's GCS address (host:6379) or ray://host:10001"
        ) from None


def connect(address: str | None) -> None:
    """``ray.init`` the driver, job logs streamed to it; raises ConnectionError fast."""
    check_reachable(address)
    import ray

    ray.init(address=address, log_to_driver=True)


def smallest_node_cpus() -> float:
    """CPUs of the smallest alive node that has any (the per-node budget of a sweep)."""
    import ray

    cpus = [
        float(n.get("Resources", {}).get("CPU", 0))
        for n in ray.nodes()
        if n.get("Alive") and n.get("Resources", {}).get("CPU", 0) > 0
    ]
    if not cpus:
        raise RuntimeError("no alive Ray node with CPUs")
    return min(cpus)
