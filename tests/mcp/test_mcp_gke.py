"""`phantom mcp` on the GKE emulator through the SDK's real client over stdio: a workload
created through MCP (allowed), its status in `status` and its log through `logs` and
`search_logs`; the TPU VM verbs are refused as this provider's backend lacks them; the HF
token and the W&B key never appear in the bytes the server wrote."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from mcp import ClientSession

from emulators.gke import client as gke_client
from tests.support.fixtures_gke import start_cluster, stop_cluster
from tests.support.gke_services import FAKE_TOKEN
from tests.support.mcp_client import FAKE_KEY, body, mcp_env, mcp_session
from tests.support.waiting import until


@pytest.fixture
def gke(tmp_path_factory: pytest.TempPathFactory) -> Iterator[gke_client.GkeInfo]:
    run_dir = tmp_path_factory.mktemp("gke")
    info = start_cluster(run_dir, recreate_delay=1.0)
    try:
        yield info
    finally:
        stop_cluster(run_dir)


def _config(run_dir: Path, tmp_path: Path) -> Path:
    path = tmp_path / "phantom.toml"
    path.write_text(
        f"""
[cluster]
provider = "gke"

[gke]
run_dir = "{run_dir}"

[recovery]
poll_interval_s = 0.5
ready_timeout_s = 60.0
auto = false
"""
    )
    return path


async def _workload(session: ClientSession, name: str) -> dict[str, Any] | None:
    status = body(await session.call_tool("status", {}))["result"]
    return next((w for w in status["pod"].get("workloads") or [] if w["name"] == name), None)


@pytest.mark.timeout(300)
async def test_workload_status_and_logs_through_mcp(
    gke: gke_client.GkeInfo, tmp_path: Path
) -> None:
    raw = tmp_path / "mcp.raw"
    env = mcp_env(tmp_path, HF_TOKEN=FAKE_TOKEN)
    args = ["--allow", "workload_create"]
    async with mcp_session(_config(gke.run_dir, tmp_path), env, raw, args) as session:
        ray_up = body(await session.call_tool("ray_up", {}))
        assert ray_up["reason"] == "unsupported" and "TPU VM pod" in ray_up["message"]
        created = await session.call_tool(
            "workload_create", {"name": "grpo", "env": ["STEPS=40", "STEP_TIME=0.1"]}
        )
        assert not created.is_error, body(created)

        async def running() -> bool:
            w = await _workload(session, "grpo")
            return w is not None and w["status"] in ("RUNNING", "SUCCEEDED")

        await until(running, 120, "workload grpo RUNNING in status")

        async def logged() -> bool:
            got = body(await session.call_tool("logs", {"job": "grpo", "tail": 50}))
            return got["outcome"] == "ok" and bool(got["result"]["lines"])

        await until(logged, 120, "grpo's coordinator log through `logs`")
        found = body(await session.call_tool("search_logs", {"job": "grpo", "text": "step"}))
        assert found["outcome"] == "ok", found
        assert all("step" in hit["text"] for hit in found["result"]["lines"])
        deleted = body(await session.call_tool("workload_delete", {"name": "grpo"}))
        assert deleted["reason"] == "not_allowed"  # destructive: its own flag
    data = raw.read_bytes()
    assert FAKE_TOKEN.encode() not in data and FAKE_KEY.encode() not in data
