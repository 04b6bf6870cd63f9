"""An agent's tool call binds its JSON to the command's typed arguments and runs the command
(no script line, no parser): every tool answers with the script's parser made to raise, a
refusal or failure carries its typed reason, and the resources are the commands that stand
as documents. Every `phantom mcp` the other MCP tests start runs with the parser made to
raise too (``mcp_client.mcp_env``); the first test here shows that guard bites."""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

import console.script.parse
from console.commands import Front, offered
from console.mcp.calls import Calls, documents
from console.mcp.policy import Policy
from console.secrets import Scrubber
from console.services.jobs.spec import SpecError
from console.services.model import Reason
from tests.support import REPO
from tests.support.fake_services import FakeServices
from tests.support.mcp_client import mcp_env

# A value each argument kind takes (the fake's pod: phantom-pod, hosts 0..3).
SAMPLE: dict[str, Any] = {
    "host": "1",
    "host_or_all": "all",
    "job": "raysubmit_1",
    "str": "x",
    "slice": "x",
    "name": "w1",
    "onoff": True,
    "int": 1,
    "seconds": 1,
    "choice": None,  # its first choice
}


def _calls(fake: FakeServices) -> Calls:
    return Calls(fake, Policy.parse([], True, True), Scrubber([]))


def _args(command: Any) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for a in command.positionals:
        if a.required:
            out[a.dest] = a.choices[0] if a.kind == "choice" else SAMPLE[a.kind]
    return out


def test_the_guard_makes_the_script_parser_raise(tmp_path: Path) -> None:
    """What every MCP test's server runs under: importing the script's parser fails."""
    probe = "import console.script.parse"
    got = subprocess.run(
        [sys.executable, "-c", probe],
        cwd=REPO,
        env=mcp_env(tmp_path),
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert got.returncode != 0 and "reached for the script's parser" in got.stderr


@pytest.fixture
def parser_raises(monkeypatch: pytest.MonkeyPatch) -> None:
    def boom(*args: object, **kwargs: object) -> None:
        raise AssertionError("MCP went through the script's parser")

    monkeypatch.setattr(console.script.parse, "parse_script", boom)
    monkeypatch.setattr(console.script.parse, "_parse_line", boom)


@pytest.mark.usefixtures("parser_raises")
@pytest.mark.parametrize("scenario", ["healthy", "gke"])
async def test_every_tool_runs_its_command_without_the_parser(scenario: str) -> None:
    fake = FakeServices(scenario)
    calls = _calls(fake)
    for command in offered(Front.MCP):
        result = await calls.call(command.name, _args(command))
        if command.refusal(fake.capabilities) is not None:
            assert result.reason is Reason.UNSUPPORTED, (command.name, result)
            continue
        assert result.reason in (Reason.DONE, Reason.STEP_FAILED), (command.name, result)
    if scenario == "healthy":  # the binding is the command's: an index became a host's name
        assert fake.called("preempt")[-1].args["host"] == "all"
        assert fake.called("recreate")[-1].args["host"] == "phantom-pod-w1"
    else:
        assert fake.called("preempt_slice")[-1].args["slice_ref"] == "x"


@pytest.mark.usefixtures("parser_raises")
async def test_a_failure_keeps_its_typed_reason() -> None:
    fake = FakeServices("healthy")
    fake.b.fail.add("teardown")
    fake.b.raise_in["ray_up"] = RuntimeError("head unreachable")
    fake.b.raise_in["submit"] = SpecError({"num_nodes": "more than the pod has"})
    calls = _calls(fake)
    failed = await calls.call("teardown", {})
    assert (failed.verdict, failed.reason) == ("failed", Reason.STEP_FAILED)
    assert failed.message == "teardown failed on purpose" and failed.data["per_host"]
    error = await calls.call("ray_up", {})
    assert (error.reason, error.message) == (Reason.ERROR, "head unreachable")
    refused = await calls.call("submit", {"mode": "single"})
    assert (refused.verdict, refused.reason) == ("refused", Reason.BAD_INPUT)
    assert refused.data["problems"] == {"num_nodes": "more than the pod has"}
    bad_host = await calls.call("recreate", {"host": "w9"})
    assert bad_host.reason is Reason.BAD_INPUT and "unknown host 'w9'" in bad_host.message
    no_job = await calls.call("stop_job", {})
    assert no_job.reason is Reason.BAD_INPUT and "give job" in no_job.message
    assert not fake.called("stop_job") and not fake.called("recreate")


@pytest.mark.usefixtures("parser_raises")
async def test_the_resources_are_the_documents_read_as_commands() -> None:
    fake = FakeServices("healthy")
    calls = _calls(fake)
    found = {d.uri: d for d in documents()}
    assert set(found) == {
        "phantom://status",
        "phantom://events",
        "phantom://incidents",
        "phantom://ledger",
    }
    status = await calls.read(found["phantom://status"])
    assert status["type"] == "status" and len(status["pod"]["hosts"]) == 4
    events = await calls.read(found["phantom://events"])
    assert fake.called("events")[-1].args["limit"] == 50 and "events" in events
    fake.b.raise_in["events"] = OSError("journal gone")
    assert await calls.read(found["phantom://incidents"]) == {"error": "journal gone"}


@pytest.mark.usefixtures("parser_raises")
async def test_over_a_fleet_reads_take_every_cluster_and_acts_the_one_named() -> None:
    """Each cluster is its own services and session: a read without ``cluster`` answers for
    each (one that fails says so in its entry, the others still answer), ``last`` is the
    job submitted on the same cluster, and every call is journaled where it concerned."""
    a, b = FakeServices("healthy"), FakeServices("healthy")
    b.b.raise_in["events"] = RuntimeError("journal locked")
    calls = Calls({"pod-a": a, "pod-b": b}, Policy.parse([], True, True), Scrubber([]))

    read = await calls.answer("events", {})
    assert read.cluster is None and read.result.reason is Reason.STEP_FAILED
    assert "1 of 2 clusters did not answer: pod-b" in read.result.message
    entries = read.result.data["clusters"]
    assert [(e["cluster"], e["outcome"]) for e in entries] == [("pod-a", "ok"), ("pod-b", "failed")]
    assert entries[1]["message"] == "journal locked" and "events" in entries[0]["result"]

    unchosen = await calls.answer("submit", {"mode": "single"})
    assert (
        unchosen.result.reason is Reason.BAD_INPUT and "(pod-a, pod-b)" in unchosen.result.message
    )
    assert not a.called("submit") and not b.called("submit")
    made = await calls.answer("submit", {"mode": "single", "cluster": "pod-a"})
    assert made.cluster == "pod-a" and made.result.ok and a.called("submit")
    no_job = await calls.call("stop_job", {"cluster": "pod-b"})  # pod-b has no `last`
    assert no_job.reason is Reason.BAD_INPUT and "give job" in no_job.message
    stopped = await calls.call("stop_job", {"cluster": "pod-a"})
    assert stopped.ok and a.called("stop_job") and not b.called("stop_job")

    wrong = await calls.call("status", {"cluster": 3})
    assert wrong.reason is Reason.BAD_INPUT and "argument 'cluster'" in wrong.message
    journaled = {
        name: [c.args["action"] for c in fake.calls if c.name == "journal_call"]
        for name, fake in (("pod-a", a), ("pod-b", b))
    }
    assert journaled["pod-a"] == ["mcp:events", "mcp:submit", "mcp:submit", "mcp:stop_job",
                                  "mcp:status"]  # fmt: skip
    assert journaled["pod-b"] == ["mcp:events", "mcp:submit", "mcp:stop_job", "mcp:status"]


async def test_over_a_fleet_a_refusal_names_the_cluster_it_was_asked_of() -> None:
    """A tool a cluster's kind cannot run is refused naming that cluster and its provider
    (it said "this server drives provider 'local'" while the server drove a GKE one too)."""
    from dataclasses import replace

    from console.config import Config, parse_config

    pod = FakeServices("healthy", config=replace(Config(), name="pod-a"))
    gke = FakeServices("gke", config=replace(parse_config({"cluster": {"provider": "gke"}}), name="grpo"))  # fmt: skip
    calls = Calls({"pod-a": pod, "grpo": gke}, Policy.parse([], True, True), Scrubber([]))
    refused = await calls.call("workload_create", {"name": "w1", "cluster": "pod-a"})
    assert refused.reason is Reason.UNSUPPORTED
    assert refused.message.endswith("; cluster 'pod-a' (local) is not one"), refused.message
    refused = await calls.call("ray_up", {"cluster": "grpo"})
    assert refused.message.endswith("; cluster 'grpo' (gke) is not one"), refused.message


async def test_over_a_fleet_the_ledger_is_each_clusters_and_the_total() -> None:
    """The ledger tool and resource without ``cluster`` answer as `phantom report` does over
    a fleet: ``{"clusters": {name: ledger}, "total": {...}}`` (``ledger.fleet``), not one
    entry per cluster with no total; with ``cluster``, that cluster's ledger."""
    from tests.support.incident_rows import journaled_async
    from tests.support.ledger_rows import drill

    a, b = FakeServices("healthy"), FakeServices("healthy")
    a.events_list = await journaled_async(drill(start=time.time() - 8400, scale=20))
    calls = Calls({"pod-a": a, "pod-b": b}, Policy.parse([], True, True), Scrubber([]))
    read = await calls.answer("ledger", {})
    assert read.result.ok and read.cluster is None
    doc = read.result.data
    assert list(doc["clusters"]) == ["pod-a", "pod-b"]
    assert doc["total"]["clusters"] == ["pod-a", "pod-b"]
    assert doc["total"]["incidents"] == len(doc["clusters"]["pod-a"]["incidents"]) > 0
    (resource,) = [d for d in documents() if d.name == "ledger"]
    body = await calls.read(resource)
    assert list(body["clusters"]) == ["pod-a", "pod-b"] and "total" in body
    one = await calls.call("ledger", {"cluster": "pod-b", "since": 60})
    assert one.ok and "total" not in one.data and "headline" in one.data
    bad = await calls.call("ledger", {"since": -1})
    assert bad.reason is Reason.BAD_INPUT
