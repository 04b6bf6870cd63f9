"""`phantom mcp` for tests: the SDK's real ``ClientSession`` over stdio against a `phantom`
child process, every byte the server writes kept in a file (``tee``), so a test can assert
on the raw bytes (no secret in any response); or `phantom mcp --http` as a child process
(``mcp_http_server``), ready once it says where it listens. The child is gone when the
block ends."""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import re
import shlex
import signal
import sys
from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from mcp import ClientSession, StdioServerParameters, stdio_client

from tests.support import REPO
from tests.support.waiting import until

FAKE_KEY = "phantom-mcp-test-wandb-key-0123456789abcdef"  # must never appear in any response


# On the server's path: the script's parser raises there (``script_raises/sitecustomize.py``).
SCRIPT_RAISES = REPO / "tests" / "support" / "script_raises"


def mcp_env(tmp_path: Path, **extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("WANDB_", "PHANTOM_", "XDG_"))}
    path = [str(SCRIPT_RAISES), *filter(None, [os.environ.get("PYTHONPATH")])]
    env.update(
        {
            "RAY_USAGE_STATS_ENABLED": "0",
            "WANDB_MODE": "offline",
            "WANDB_SILENT": "true",
            "WANDB_DIR": str(tmp_path / "wandb"),
            "WANDB_API_KEY": FAKE_KEY,
            "PHANTOM_NO_CONFIG_DISCOVERY": "1",
            "NO_GCE_CHECK": "True",
            "XDG_STATE_HOME": str(tmp_path / "state"),
            "XDG_CONFIG_HOME": str(tmp_path / "config"),
            "PYTHONUNBUFFERED": "1",
            "PYTHONPATH": os.pathsep.join(path),
            **extra,
        }
    )
    return env


@contextlib.asynccontextmanager
async def mcp_session(
    config: Path, env: dict[str, str], raw: Path, args: Sequence[str] = ()
) -> AsyncIterator[ClientSession]:
    """An initialized session with `phantom --config CONFIG mcp ARGS`; what it wrote to
    stdout (the protocol's bytes) lands in ``raw``."""
    argv = [sys.executable, "-m", "console.cli", "--config", str(config), "mcp", *args]
    line = f"set -o pipefail; {shlex.join(argv)} | tee -a {shlex.quote(str(raw))}"
    params = StdioServerParameters(command="bash", args=["-c", line], env=env, cwd=str(REPO))
    with (raw.parent / f"{raw.stem}.stderr").open("a") as errlog:
        async with (
            stdio_client(params, errlog=errlog) as (read, write),
            ClientSession(read, write) as session,
        ):
            await session.initialize()
            yield session


READY = re.compile(r"phantom mcp: listening on (http://\S+/mcp)")


@dataclass
class HttpServer:
    """A `phantom mcp --http` child: its URL (from its ready line) and its stderr so far."""

    proc: asyncio.subprocess.Process
    url: str = ""
    stderr: list[str] = field(default_factory=list)

    async def stop(self, sig: int = signal.SIGTERM, timeout_s: float = 60.0) -> int:
        """Send ``sig`` and wait for the exit; its exit code."""
        if self.proc.returncode is None:
            self.proc.send_signal(sig)
        return await asyncio.wait_for(self.proc.wait(), timeout_s)


@contextlib.asynccontextmanager
async def mcp_http_server(
    config: Path,
    env: dict[str, str],
    args: Sequence[str] = (),
    listen: str = "127.0.0.1:0",
    ready_s: float = 120.0,
) -> AsyncIterator[HttpServer]:
    """`phantom --config CONFIG mcp --http LISTEN ARGS`, yielded once its stderr says
    ``listening on URL`` (an event, not a wait); stopped (SIGTERM, then SIGKILL) at the end
    if the test did not stop it."""
    argv = [sys.executable, "-m", "console.cli", "--config", str(config), "mcp"]
    proc = await asyncio.create_subprocess_exec(
        *argv, "--http", listen, *args,
        cwd=str(REPO), env=env, start_new_session=True,
        stdin=asyncio.subprocess.DEVNULL, stdout=asyncio.subprocess.DEVNULL,
        stderr=asyncio.subprocess.PIPE,
    )  # fmt: skip
    server = HttpServer(proc)
    ready: asyncio.Future[str] = asyncio.get_running_loop().create_future()

    async def drain() -> None:
        assert proc.stderr is not None
        async for raw in proc.stderr:
            line = raw.decode(errors="replace").rstrip("\n")
            server.stderr.append(line)
            found = READY.search(line)
            if found and not ready.done():
                ready.set_result(found.group(1))

    draining = asyncio.create_task(drain())
    try:
        # The exit code, not wait(): on 3.11 wait() also waits for the pipes to close.
        await until(
            lambda: ready.done() or proc.returncode is not None,
            ready_s,
            "phantom mcp --http to say where it listens",
        )
        if not ready.done():
            said = "\n".join(server.stderr[-40:])
            raise AssertionError(f"phantom mcp --http ended (rc {proc.returncode}):\n{said}")
        server.url = ready.result()
        yield server
    finally:
        if proc.returncode is None:
            try:
                await server.stop(signal.SIGTERM, 30.0)
            except TimeoutError:
                os.killpg(proc.pid, signal.SIGKILL)
                await proc.wait()
        try:
            await asyncio.wait_for(draining, 30.0)
        except TimeoutError:
            raise AssertionError(
                "phantom mcp --http exited but its stderr is still open: a process it "
                "started outlived it"
            ) from None


def body(result: Any) -> dict[str, Any]:
    """A tool result's JSON body (its one text block)."""
    (block,) = result.content
    out: dict[str, Any] = json.loads(block.text)
    return out
