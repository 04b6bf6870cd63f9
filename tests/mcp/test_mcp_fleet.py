"""`phantom mcp` over a fleet of two pod emulators, through the SDK's real client over stdio.

Every tool of a command that touches a cluster declares ``cluster``; a read without it
answers for every cluster (one entry each, naming it), with it for that one; an acting tool
without it, or with a name not in the config, is refused naming the clusters (and the close
match) and nothing happens to either pod; with it, it acts on that cluster's pod alone and is
journaled there. The resources read every cluster, or one by ``?cluster=NAME``.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest
from mcp.shared.exceptions import MCPError

from console.commands import Front, offered
from console.services.record.journal import Journal
from emulators.tpu_pod import client as pod_client
from tests.support.fleet_pods import NAMES, TwoPods, two_pods
from tests.support.mcp_client import FAKE_KEY, body, mcp_env, mcp_session


@pytest.fixture
def fleet(tmp_path: Path) -> Iterator[TwoPods]:
    with two_pods(tmp_path) as made:
        yield made


def _journal(tmp_path: Path, name: str) -> Journal:
    return Journal(tmp_path / "state" / "phantom" / "fleet" / name / "journal.sqlite")


@pytest.mark.timeout(300)
async def test_an_agent_reads_every_cluster_and_acts_on_the_one_it_names(
    fleet: TwoPods, tmp_path: Path
) -> None:
    raw = tmp_path / "mcp.raw"
    env = mcp_env(tmp_path)
    async with mcp_session(fleet.config, env, raw, ["--allow", "preempt"]) as session:
        tools = {t.name: t for t in (await session.list_tools()).tools}
        for command in offered(Front.MCP):
            assert tools[command.name].input_schema["properties"]["cluster"]["type"] == "string"

        every = body(await session.call_tool("status", {}))
        assert every["outcome"] == "ok" and "cluster" not in every
        entries = every["result"]["clusters"]
        assert [(e["cluster"], e["outcome"]) for e in entries] == [(n, "ok") for n in NAMES]
        assert [e["result"]["pod"]["node_name"] for e in entries] == list(NAMES)
        one = body(await session.call_tool("status", {"cluster": "pod-b"}))
        assert one["cluster"] == "pod-b" and one["result"]["pod"]["node_name"] == "pod-b"
        assert [h["ip"] for h in one["result"]["pod"]["hosts"]] == [
            h.ip for h in fleet.pods["pod-b"].hosts
        ]

        unchosen = await session.call_tool("preempt", {"host": "1"})
        got = body(unchosen)
        assert unchosen.is_error and got["reason"] == "bad_input"
        assert "none is chosen" in got["message"] and "2 clusters (pod-a, pod-b)" in got["message"]
        unknown = body(await session.call_tool("preempt", {"host": "1", "cluster": "pod-bb"}))
        assert unknown["reason"] == "bad_input"
        assert "'pod-bb': no such cluster" in unknown["message"]
        assert "did you mean 'pod-b'?" in unknown["message"]
        for name in NAMES:  # refused: nothing happened to either pod
            info = pod_client.pod_status(fleet.pods[name].run_dir)
            assert info is not None and {h.state for h in info.hosts} == {"READY"}

        acted = body(await session.call_tool("preempt", {"host": "1", "cluster": "pod-b"}))
        assert acted["outcome"] == "ok" and acted["cluster"] == "pod-b", acted
        b = pod_client.pod_status(fleet.pods["pod-b"].run_dir)
        a = pod_client.pod_status(fleet.pods["pod-a"].run_dir)
        assert b is not None and a is not None
        assert b.hosts[1].state != "READY" and {h.state for h in a.hosts} == {"READY"}

        templates = (await session.list_resource_templates()).resource_templates
        assert "phantom://status{?cluster}" in {t.uri_template for t in templates}
        read = await session.read_resource("phantom://status")
        doc = json.loads(read.contents[0].text)  # type: ignore[union-attr]
        assert [e["cluster"] for e in doc["clusters"]] == list(NAMES)
        read = await session.read_resource("phantom://status?cluster=pod-a")
        doc = json.loads(read.contents[0].text)  # type: ignore[union-attr]
        assert doc["pod"]["node_name"] == "pod-a"
        with pytest.raises(MCPError, match=r"no such cluster.*pod-a, pod-b"):
            await session.read_resource("phantom://status?cluster=pod-z")
    assert FAKE_KEY.encode() not in raw.read_bytes()

    with _journal(tmp_path, "pod-a") as journal:
        a_calls = [r.data for r in journal.query(limit=500) if r.actor == "mcp"]
    with _journal(tmp_path, "pod-b") as journal:
        b_calls = [r.data for r in journal.query(limit=500) if r.actor == "mcp"]
    outcomes_a = [(c["tool"], c["outcome"]) for c in a_calls if c.get("tool") == "preempt"]
    outcomes_b = [(c["tool"], c["outcome"]) for c in b_calls if c.get("tool") == "preempt"]
    # The unchosen and the unknown refusals concern the fleet; the act, pod-b alone.
    assert outcomes_a == [("preempt", "refused")] * 2
    assert outcomes_b == [("preempt", "refused")] * 2 + [("preempt", "ok")]
