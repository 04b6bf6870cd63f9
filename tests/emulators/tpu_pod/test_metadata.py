"""The metadata server: every host on one socket where the kernel ties it to ``lo``."""

from __future__ import annotations

import asyncio

import pytest

from emulators.tpu_pod.metadata import MetadataServer, bind_loopback_device
from tests.support.emulator_helpers import metadata_get

HOSTS = ("127.0.0.210", "127.0.0.211")


def _tree(ip: str) -> dict[str, object] | None:
    return {"instance": {"name": f"vm-{ip}"}} if ip in HOSTS else None


async def test_one_socket_serves_each_host_from_its_own_address() -> None:
    """A 1,024-host pod's metadata was 1,024 listening sockets; now one, answering each
    host from the address its request arrived on, and no address it does not serve."""
    sock = bind_loopback_device(0)
    if sock is None:
        pytest.skip("this kernel refuses SO_BINDTODEVICE here (per-host listeners are used)")
    server = MetadataServer(_tree)
    server.port = sock.getsockname()[1]
    await server.start(sock)
    try:
        for ip in HOSTS:
            await server.add(ip)
        for ip in HOSTS:
            status, body, _ = await asyncio.to_thread(
                metadata_get, f"{ip}:{server.port}", "instance/name"
            )
            assert (status, body) == (200, f"vm-{ip}")
        status, _, _ = await asyncio.to_thread(
            metadata_get, f"127.0.0.212:{server.port}", "instance/name"
        )
        assert status == 404
        await server.remove(HOSTS[1])
        status, _, _ = await asyncio.to_thread(
            metadata_get, f"{HOSTS[1]}:{server.port}", "instance/name"
        )
        assert status == 404
    finally:
        await server.stop()
