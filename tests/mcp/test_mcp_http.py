"""`phantom mcp --http` (streamable HTTP on loopback) on the pod emulator, through the SDK's
real streamable HTTP client: it says where it listens (port 0: a free one), an agent
initializes, lists the tools, reads, gets bad input answered as over stdio while the server
keeps serving, a request naming a foreign host is refused (DNS rebinding), and SIGTERM
stops it cleanly with an agent still connected. A non-loopback bind and a port in use are
usage errors (exit 2) before anything is started."""

from __future__ import annotations

import asyncio
import signal
import socket
import subprocess
import sys
import urllib.error
import urllib.request
from pathlib import Path

import httpx2
import pytest
from mcp import ClientSession
from mcp.client.streamable_http import streamable_http_client
from mcp.shared.exceptions import MCPError

from benchmarks.pods import pod_toml
from console.commands import Front, offered
from emulators.tpu_pod.client import PodInfo
from tests.support import REPO
from tests.support.mcp_client import FAKE_KEY, body, mcp_env, mcp_http_server

MCP_TOOLS = {a.name for a in offered(Front.MCP)}


def _config(pod: PodInfo, tmp_path: Path) -> Path:
    path = tmp_path / "phantom.toml"
    path.write_text(pod_toml(pod, tmp_path, poll_s=0.5, extra="auto = false\n"))
    return path


def _foreign_host_status(url: str) -> int:
    """What the server answers a POST whose Host is not loopback (a page that rebound
    evil.example to 127.0.0.1 sends exactly that)."""
    port = url.split(":")[2].split("/")[0]
    req = urllib.request.Request(
        url,
        data=b'{"jsonrpc": "2.0", "id": 1, "method": "ping"}',
        headers={
            "Host": f"evil.example:{port}",
            "Content-Type": "application/json",
            "Accept": "application/json, text/event-stream",
        },
    )
    try:
        with urllib.request.urlopen(req, timeout=30) as resp:
            return int(resp.status)
    except urllib.error.HTTPError as exc:
        return exc.code


@pytest.mark.timeout(300)
async def test_an_agent_over_streamable_http_reads_is_refused_and_sigterm_stops_it(
    quiet_pod: PodInfo, tmp_path: Path
) -> None:
    config = _config(quiet_pod, tmp_path)
    async with mcp_http_server(config, mcp_env(tmp_path)) as server:
        assert server.url.startswith("http://127.0.0.1:") and not server.url.endswith(":0/mcp")
        async with (
            streamable_http_client(server.url) as (read, write),
            ClientSession(read, write) as session,
        ):
            init = await session.initialize()
            assert init.server_info.name == "phantom"
            tools = {t.name for t in (await session.list_tools()).tools}
            assert tools == MCP_TOOLS

            status = await session.call_tool("status", {})
            assert not status.is_error, body(status)
            assert body(status)["result"]["pod"]["ready_hosts"] == len(quiet_pod.hosts)

            # Bad input as over stdio: an error result naming the problem, the server serves on.
            unknown = await session.call_tool("recover_everything", {})
            assert unknown.is_error
            got = body(unknown)
            assert got["reason"] == "unknown_action" and "unknown tool" in got["message"]
            mistyped = body(await session.call_tool("events", {"limit": "ten"}))
            assert mistyped["reason"] == "bad_input" and "argument 'limit'" in mistyped["message"]
            refused = body(await session.call_tool("preempt", {"host": "1"}))
            assert refused["reason"] == "not_allowed" and "--allow preempt" in refused["message"]
            with pytest.raises(MCPError, match="unknown resource"):
                await session.read_resource("phantom://nothing")
            again = await session.call_tool("status", {})
            assert not again.is_error
            assert FAKE_KEY not in str(again.content)

            assert await asyncio.to_thread(_foreign_host_status, server.url) == 421

            # SIGTERM with the agent still connected: the server ends its sessions, stops
            # the services and exits 0 (not killed by the signal).
            rc = await server.stop(signal.SIGTERM)
    assert rc == 0, "\n".join(server.stderr[-40:])
    assert server.stderr[-1] == "phantom mcp: stopped", server.stderr[-40:]
    assert not any("Traceback" in line for line in server.stderr), server.stderr[-40:]


def _phantom_mcp(config: Path, tmp_path: Path, *args: str) -> subprocess.CompletedProcess[str]:
    argv = [sys.executable, "-m", "console.cli", "--config", str(config), "mcp", *args]
    return subprocess.run(
        argv, cwd=REPO, env=mcp_env(tmp_path), capture_output=True, text=True, timeout=120
    )


@pytest.mark.timeout(300)
def test_http_off_loopback_or_on_a_busy_port_is_a_usage_error(
    quiet_pod: PodInfo, tmp_path: Path
) -> None:
    config = _config(quiet_pod, tmp_path)
    wide = _phantom_mcp(config, tmp_path, "--http", "0.0.0.0:0")
    assert wide.returncode == 2, wide.stderr
    assert "--http 0.0.0.0:0: only loopback" in wide.stderr and "Traceback" not in wide.stderr
    assert "serving" not in wide.stderr  # refused before the services were built

    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen(1)
        port = busy.getsockname()[1]
        taken = _phantom_mcp(config, tmp_path, "--http", f"127.0.0.1:{port}")
    assert taken.returncode == 2, taken.stderr
    assert f"--http 127.0.0.1:{port}: cannot listen there" in taken.stderr, taken.stderr
    assert "Traceback" not in taken.stderr and "serving" not in taken.stderr


@pytest.mark.timeout(300)
async def test_a_ping_after_the_server_stopped_fails_at_once(
    quiet_pod: PodInfo, tmp_path: Path
) -> None:
    """The last notes had the SDK's ``send_ping()`` hang once the server was gone. With mcp
    2.3 it does not, ours or the SDK's: the server ends its sessions and exits, the ping's
    POST is refused, and the SDK tears its transport down (the ping cancelled, the
    ``ConnectError`` raised out of ``streamable_http_client``). A hang here fails on the
    test's timeout."""
    config = _config(quiet_pod, tmp_path)
    failed: list[BaseException] = []
    async with mcp_http_server(config, mcp_env(tmp_path)) as server:
        try:
            async with (
                streamable_http_client(server.url) as (read, write),
                ClientSession(read, write) as session,
            ):
                await session.initialize()
                await session.send_ping()
                assert await server.stop(signal.SIGTERM) == 0, server.stderr[-40:]
                await session.send_ping()
        except* httpx2.ConnectError as group:
            failed.extend(group.exceptions)
    assert failed, "the ping after the server's exit answered"
