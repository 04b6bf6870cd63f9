"""The notice watcher's shell loop against a GCE metadata server (the emulator's, on loopback).

The loop runs here under bash with the host's ``GCE_METADATA_HOST``, as it runs on a VM: it
prints the value it read, long-polls for a change, and prints the change the moment the
long-poll answers it, without another request first.
"""

from __future__ import annotations

import asyncio
import contextlib
import os

import pytest

from console.services.backends.tpu_vm.notice import WATCH_COMMAND
from emulators.tpu_pod.metadata import MetadataServer, bind_loopback_device
from tests.support.waiting import until

IP = "127.0.0.214"


async def test_the_watcher_prints_the_change_its_long_poll_answered() -> None:
    """At 1,024 hosts a notice took the watcher a second request (a sed, a curl and a GET
    after the long-poll had already said TRUE) before it printed it: ~0.1 s of a loaded host.
    Now the long-poll's own answer is printed: one read of the value after the change."""
    sock = bind_loopback_device(0)
    if sock is None:
        pytest.skip("this kernel refuses SO_BINDTODEVICE here (per-host listeners are used)")
    value = {"preempted": "FALSE"}
    reads: list[str] = []

    def tree(ip: str) -> dict[str, object] | None:
        if ip != IP:
            return None
        reads.append(value["preempted"])
        return {"instance": {"preempted": value["preempted"]}}

    server = MetadataServer(tree)
    server.port = sock.getsockname()[1]
    await server.start(sock)
    await server.add(IP)
    env = {**os.environ, "GCE_METADATA_HOST": f"{IP}:{server.port}"}
    proc = await asyncio.create_subprocess_exec(
        "bash",
        "-c",
        WATCH_COMMAND,
        env=env,
        stdin=asyncio.subprocess.DEVNULL,
        stdout=asyncio.subprocess.PIPE,
    )
    try:
        assert proc.stdout is not None
        first = await asyncio.wait_for(proc.stdout.readline(), 30)
        assert first.decode().strip() == "PREEMPTED=FALSE"
        # The first read, then the long-poll's read on arrival: it waits for a change now.
        await until(lambda: len(reads) >= 2, 30, "the watcher's long-poll")
        before = len(reads)
        value["preempted"] = "TRUE"
        await server.changed([IP])
        line = await asyncio.wait_for(proc.stdout.readline(), 30)
        assert line.decode().strip() == "PREEMPTED=TRUE"
        assert reads[before:] == ["TRUE"], "a second request before the change was printed"
        proc.terminate()  # the VM's shutdown SIGTERM: the loop says so and ends
        rest = await asyncio.wait_for(proc.stdout.read(), 30)
        assert rest.decode().split()[-1:] == ["TERM"]
        assert await asyncio.wait_for(proc.wait(), 30) == 0
    finally:
        with contextlib.suppress(ProcessLookupError):
            proc.kill()
        await proc.wait()
        await server.stop()


async def test_sigterm_during_the_long_poll_ends_the_watcher_at_once() -> None:
    """bash runs a trap only once its foreground command ends: a SIGTERM that came while the
    long-poll's curl waited (up to its 60 s) was heard a minute late, and the loop's TERM line
    with it (a loaded make test read nothing in 30 s). The curl is waited on in the
    background now, a wait a trapped signal ends."""
    sock = bind_loopback_device(0)
    if sock is None:
        pytest.skip("this kernel refuses SO_BINDTODEVICE here (per-host listeners are used)")
    reads: list[str] = []

    def tree(ip: str) -> dict[str, object] | None:
        if ip != IP:
            return None
        reads.append("FALSE")
        return {"instance": {"preempted": "FALSE", "maintenance-event": "NONE"}}

    server = MetadataServer(tree)
    server.port = sock.getsockname()[1]
    await server.start(sock)
    await server.add(IP)
    env = {**os.environ, "GCE_METADATA_HOST": f"{IP}:{server.port}"}
    proc = await asyncio.create_subprocess_exec(
        "bash", "-c", WATCH_COMMAND, env=env,
        stdin=asyncio.subprocess.DEVNULL, stdout=asyncio.subprocess.PIPE,
    )  # fmt: skip
    try:
        assert proc.stdout is not None
        # both keys read once, then both long-polls arrived: their curls wait on the server
        await until(lambda: len(reads) >= 4, 30, "the watcher's long-polls")
        proc.terminate()
        rest = await asyncio.wait_for(proc.stdout.read(), 30)  # EOF: every child gone too
        assert rest.decode().split()[-1:] == ["TERM"]
        assert await asyncio.wait_for(proc.wait(), 30) == 0
    finally:
        with contextlib.suppress(ProcessLookupError):
            proc.kill()
        await proc.wait()
        await server.stop()
