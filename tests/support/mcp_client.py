"""`phantom mcp` for tests: the SDK's real ``ClientSession`` over stdio against a `phantom`
child process, every byte the server writes kept in a file (``tee``), so a test can assert
on the raw bytes (no secret in any response). The child is gone when the block ends."""

from __future__ import annotations

import contextlib
import json
import os
import shlex
import sys
from collections.abc import AsyncIterator, Sequence
from pathlib import Path
from typing import Any

from mcp import ClientSession, StdioServerParameters, stdio_client

from tests.support import REPO

FAKE_KEY = "phantom-mcp-test-wandb-key-0123456789abcdef"  # must never appear in any response


def mcp_env(tmp_path: Path, **extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("WANDB_", "PHANTOM_", "XDG_"))}
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


def body(result: Any) -> dict[str, Any]:
    """A tool result's JSON body (its one text block)."""
    (block,) = result.content
    out: dict[str, Any] = json.loads(block.text)
    return out
