"""`phantom mcp` on the pod emulator through the SDK's real client over stdio.

Read-only by default: every MCP row of the action table is a tool with its schema; status,
events, incidents, the resources and the prompts answer; an acting tool is refused naming
the flag that allows it; bad input (unknown tool, missing or mistyped argument, a verb this
provider lacks) is an error result and the server keeps serving; every call is journaled
by `mcp` with its arguments masked; the W&B key never appears in the bytes it wrote.
With `--allow preempt,recover,submit` (slow: the recovery starts Ray): a worker preempted
through MCP, recovered through MCP, the incident in the events; then, on the Ray the
recovery started, a real job submitted through MCP and a line it printed read back through
`logs` (its tail) and `search_logs`.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest
from mcp import ClientSession

from benchmarks.pods import pod_toml
from console.commands import Front, offered
from emulators.tpu_pod.client import PodInfo
from tests.support import REPO
from tests.support.mcp_client import FAKE_KEY, body, mcp_env, mcp_session
from tests.support.waiting import until

MCP_ROWS = {a.name: a for a in offered(Front.MCP)}


def _config(pod: PodInfo, tmp_path: Path) -> Path:
    path = tmp_path / "phantom.toml"
    path.write_text(pod_toml(pod, tmp_path, poll_s=0.5, extra="auto = false\n"))
    return path


@pytest.mark.timeout(300)
async def test_a_read_only_server_reads_refuses_and_keeps_serving(
    quiet_pod: PodInfo, tmp_path: Path
) -> None:
    raw = tmp_path / "mcp.raw"
    config = _config(quiet_pod, tmp_path)
    async with mcp_session(config, mcp_env(tmp_path), raw) as session:
        tools = {t.name: t for t in (await session.list_tools()).tools}
        assert set(tools) == set(MCP_ROWS)
        for name, tool in tools.items():
            assert tool.input_schema == MCP_ROWS[name].input_schema(), name
            assert tool.annotations is not None
            assert tool.annotations.read_only_hint is (not MCP_ROWS[name].acts)

        status = await session.call_tool("status", {})
        assert not status.is_error, body(status)
        pod = body(status)["result"]["pod"]
        assert len(pod["hosts"]) == len(quiet_pod.hosts) and pod["ready_hosts"] == 4

        refused = body(await session.call_tool("preempt", {"host": "1"}))
        assert (refused["outcome"], refused["reason"]) == ("refused", "not_allowed")
        assert "--allow preempt" in refused["message"]
        teardown = body(await session.call_tool("teardown", {}))
        assert "--allow-destructive" in teardown["message"]

        bad: dict[str, tuple[str, dict[str, Any], str, str]] = {
            "unknown": ("recover_everything", {}, "unknown_action", "unknown tool"),
            "missing": ("search_logs", {"job": "x"}, "bad_input", "'text' is a required"),
            "mistyped": ("events", {"limit": "ten"}, "bad_input", "argument 'limit'"),
            "unsupported": ("preempt_slice", {"slice": "0"}, "unsupported", "GKE emulator"),
            "extra": ("status", {"verbose": True}, "bad_input", "verbose"),
        }
        for case, (name, args, reason, words) in bad.items():
            result = await session.call_tool(name, args)
            assert result.is_error, case
            got = body(result)
            assert got["reason"] == reason and words in got["message"], (case, got)

        events = await session.call_tool("events", {"limit": 200, "kind": FAKE_KEY})
        assert not events.is_error and body(events)["result"]["events"] == []
        incidents = await session.call_tool("incidents", {})
        assert not incidents.is_error
        uris = {str(r.uri) for r in (await session.list_resources()).resources}
        assert uris == {"phantom://status", "phantom://events", "phantom://incidents",
                        "phantom://ledger"}  # fmt: skip
        ledger = await session.read_resource("phantom://ledger")
        assert ledger.contents and ledger.contents[0].text.startswith("{")  # type: ignore[union-attr]
        prompts = {p.name for p in (await session.list_prompts()).prompts}
        assert {"diagnose-stalled-run", "recover-after-preemption"} <= prompts
        prompt = await session.get_prompt("recover-after-preemption", {"run": "r1"})
        assert "recover" in prompt.messages[0].content.text  # type: ignore[union-attr]

        # Still serving after every refusal; each call above is in the journal, by mcp.
        rows = body(await session.call_tool("events", {"limit": 100, "kind": "action"}))
        calls = [e for e in rows["result"]["events"] if e.get("actor") == "mcp"]
        by_tool = {e["tool"]: e for e in calls}
        assert {"status", "preempt", "teardown", "recover_everything", "preempt_slice"} <= set(
            by_tool
        )
        assert by_tool["preempt"]["outcome"] == "refused"
        assert by_tool["preempt"]["reason"] == "not_allowed"
        assert by_tool["preempt"]["args"] == {"host": "1"}
    assert FAKE_KEY.encode() not in raw.read_bytes()
    assert (
        b'"tool": "status"' in raw.read_bytes() or b'\\"tool\\": \\"status\\"' in raw.read_bytes()
    )


TRANSCRIPT = REPO / "docs" / "mcp-transcript.md"


class Transcript:
    """What an agent asked and what it was told, kept short (the fields a reader follows)."""

    def __init__(self) -> None:
        self.lines: list[str] = []

    async def call(self, session: ClientSession, tool: str, args: dict[str, Any]) -> dict[str, Any]:
        got = body(await session.call_tool(tool, args))
        self.lines.append(f"→ `{tool}` {json.dumps(args)}")
        self.lines.append(f"← {got['outcome']} ({got['reason']}): {got['message']}")
        return got

    def note(self, text: str) -> None:
        self.lines.append(f"  {text}")

    def write(self, path: Path) -> None:
        head = (
            "# An agent diagnoses a preemption (recorded by "
            "tests/mcp/test_mcp_pod.py::test_an_agent_diagnoses_a_preemption)\n\n"
            "`phantom mcp --allow preempt` on the local pod emulator; the agent preempts a "
            "worker (a drill), finds it in the events and the status, and asks to recover, "
            "which this server was not allowed to do.\n\n```text\n"
        )
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(head + "\n".join(self.lines) + "\n```\n")


@pytest.mark.timeout(300)
async def test_an_agent_diagnoses_a_preemption(pod: PodInfo, tmp_path: Path) -> None:
    """An allowed preempt reaches the emulated host, the detector's event comes back through
    `events`, `status` shows the host down, and recover stays refused (only preempt was
    allowed). The calls are the README's transcript (``PHANTOM_RECORD_TRANSCRIPT=1``)."""
    raw = tmp_path / "mcp.raw"
    config = _config(pod, tmp_path)
    log = Transcript()
    async with mcp_session(config, mcp_env(tmp_path), raw, ["--allow", "preempt"]) as session:
        secret_host = body(await session.call_tool("preempt", {"host": FAKE_KEY}))
        assert secret_host["reason"] == "bad_input" and "unknown host" in secret_host["message"]
        before = await log.call(session, "status", {})
        log.note(f"hosts READY: {before['result']['pod']['ready_hosts']} of {len(pod.hosts)}")
        done = await log.call(session, "preempt", {"host": "1"})
        assert done["outcome"] == "ok" and done["result"]["ok"] is True

        async def seen() -> bool:
            got = body(await session.call_tool("events", {"limit": 50, "kind": "preempted"}))
            return any(e["host"].endswith("-w1") for e in got["result"]["events"])

        await until(seen, 60, "a preempted event for worker 1")
        found = await log.call(session, "events", {"limit": 5, "kind": "preempted"})
        for e in found["result"]["events"]:
            log.note(f"{e['kind']} {e['host']}: {e['message']}")
        after = await log.call(session, "status", {})
        host = next(h for h in after["result"]["pod"]["hosts"] if h["name"].endswith("-w1"))
        assert host["tpu_state"] != "READY"
        log.note(f"{host['name']}: tpu_state {host['tpu_state']}, ssh {host['ssh']}")
        refused = await log.call(session, "recover", {})
        assert refused["reason"] == "not_allowed" and "--allow recover" in refused["message"]
    assert FAKE_KEY.encode() not in raw.read_bytes()
    if os.environ.get("PHANTOM_RECORD_TRANSCRIPT"):
        log.write(TRANSCRIPT)


@pytest.mark.slow
@pytest.mark.e2e
@pytest.mark.timeout(900)
async def test_an_allowed_recover_brings_the_preempted_worker_back(
    pod: PodInfo, tmp_path: Path
) -> None:
    """`--allow preempt,recover,submit`: preempt a worker, recover (the whole loop, Ray
    included), and the incident is in the events and the incidents, recovered. On that Ray
    (no second cluster), a real engine.train job submitted through MCP: the line it prints
    at start comes back through `logs` (tail) and `search_logs`."""
    raw = tmp_path / "mcp.raw"
    config = _config(pod, tmp_path)
    args = ["--allow", "preempt,recover,submit"]
    async with mcp_session(config, mcp_env(tmp_path), raw, args) as session:
        assert not (await session.call_tool("preempt", {"host": "1"})).is_error
        recovered = await session.call_tool("recover", {"timeout": 600})
        assert not recovered.is_error, body(recovered)
        assert body(recovered)["result"]["result"] == "ok"
        got = body(await session.call_tool("events", {"limit": 500}))
        kinds = [e["kind"] for e in got["result"]["events"]]
        assert "recovery_started" in kinds and "recovered" in kinds
        incidents = body(await session.call_tool("incidents", {}))["result"]["incidents"]
        assert incidents, got
        status = body(await session.call_tool("status", {}))["result"]
        assert status["pod"]["ready_hosts"] == len(pod.hosts)

        await _job_logs_through_mcp(session)
    assert FAKE_KEY.encode() not in raw.read_bytes()


PROBE = "mcp-logs-probe"  # the run name: engine.train prints "[engine] run NAME: ..." at start


async def _job_logs_through_mcp(session: ClientSession) -> None:
    """Submit a small real training job through MCP and read back, through the `logs` and
    `search_logs` tools, the line it printed."""
    train = f"--algo ppo --total-timesteps 512 --device cpu --eval-episodes 1 --run-name {PROBE}"
    submitted = await session.call_tool("submit", {"mode": "single", "train_args": train})
    assert not submitted.is_error, body(submitted)
    job_id = body(submitted)["result"]["job_id"]
    said = f"[engine] run {PROBE}: ppo on "
    last: dict[str, Any] = {}

    async def printed() -> bool:
        nonlocal last
        last = body(await session.call_tool("logs", {"job": job_id, "tail": 200}))
        return last["outcome"] == "ok" and any(said in line for line in last["result"]["lines"])

    try:
        await until(printed, 300, f"{said!r} in job {job_id}'s log through `logs`")
    except AssertionError as exc:
        raise AssertionError(f"{exc}; last answer: {json.dumps(last)[-3000:]}") from None
    assert last["result"]["job_id"] == job_id
    tail = body(await session.call_tool("logs", {"job": job_id, "tail": 3}))["result"]
    assert len(tail["lines"]) <= 3 and tail["total_lines"] >= len(tail["lines"])

    found = body(await session.call_tool("search_logs", {"job": job_id, "text": said}))
    assert found["outcome"] == "ok", found
    hits = found["result"]["lines"]
    assert found["result"]["job_id"] == job_id and found["result"]["matching_lines"] == len(hits)
    assert len(hits) == 1 and said in hits[0]["text"], hits
    assert hits[0]["line"] <= found["result"]["total_lines"]
    none = body(await session.call_tool("search_logs", {"job": job_id, "text": "no-such-line-x"}))
    assert none["outcome"] == "ok" and none["result"]["lines"] == []
