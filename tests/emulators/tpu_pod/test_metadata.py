"""The metadata server: every host on one socket where the kernel ties it to ``lo``."""

from __future__ import annotations

import asyncio

import pytest

from emulators.tpu_pod.metadata import MetadataServer, bind_loopback_device
from tests.support.emulator_helpers import metadata_get
from tests.support.waiting import until

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


async def test_a_change_to_one_host_wakes_only_its_long_poll() -> None:
    """A notice to one host of a 1,024-host pod woke every host's ``wait_for_change``
    long-poll, and each re-read its whole tree (itself 1,024 endpoints long): ~0.6 s of the
    daemon's loop at 1,024 hosts, before it answered the notice or a GetNode. A change
    to some hosts re-reads theirs only; a change to all (None) still wakes every one."""
    sock = bind_loopback_device(0)
    if sock is None:
        pytest.skip("this kernel refuses SO_BINDTODEVICE here (per-host listeners are used)")
    value = dict.fromkeys(HOSTS, "FALSE")
    reads = dict.fromkeys(HOSTS, 0)

    def tree(ip: str) -> dict[str, object] | None:
        if ip not in HOSTS:
            return None
        reads[ip] += 1
        return {"instance": {"preempted": value[ip]}}

    server = MetadataServer(tree)
    server.port = sock.getsockname()[1]
    await server.start(sock)
    polls: dict[str, asyncio.Task[tuple[int, str, dict[str, str]]]] = {}
    try:
        for ip in HOSTS:
            await server.add(ip)
        polls = {
            ip: asyncio.create_task(
                asyncio.to_thread(
                    metadata_get,
                    f"{ip}:{server.port}",
                    "instance/preempted",
                    wait_for_change="true",
                    timeout_sec="30",
                )
            )
            for ip in HOSTS
        }
        # Each long-poll reads its tree once when it arrives, then waits.
        await until(lambda: all(reads[ip] == 1 for ip in HOSTS), 10, "both long-polls waiting")
        first, other = HOSTS
        value[first] = "TRUE"
        await server.changed([first])
        status, body, _ = await asyncio.wait_for(polls[first], 10)
        assert (status, body) == (200, "TRUE")
        assert reads[other] == 1, "the other host's long-poll was woken and re-read its tree"
        assert not polls[other].done()
        value[other] = "TRUE"
        await server.changed()  # any host may have changed: every long-poll re-reads
        status, body, _ = await asyncio.wait_for(polls[other], 10)
        assert (status, body) == (200, "TRUE")
    finally:
        await server.stop()
        for task in polls.values():
            if not task.done():
                task.cancel()
