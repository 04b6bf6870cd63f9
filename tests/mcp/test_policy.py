"""Who may act through MCP: reads always, acting tools only when allowed by name or by
--allow-all, destroying ones only with --allow-destructive as well; a bad --allow names the
tools there are."""

from __future__ import annotations

import pytest

from console.commands import Effect, Front, by_name, offered
from console.mcp.policy import Policy, PolicyError

MCP = list(offered(Front.MCP))


def test_read_only_by_default_reads_always() -> None:
    policy = Policy()
    for action in MCP:
        refused = policy.refusal(action)
        assert (refused is None) is (not action.acts), action.name
        if refused is not None:
            flag = "--allow-destructive" if action.effect is Effect.DESTROYS else "--allow"
            assert flag in refused


def test_allow_names_tools_or_script_verbs() -> None:
    policy = Policy.parse(["preempt,recover", "ray-up"], False, False)
    assert policy.allowed == {"preempt", "recover", "ray_up"}
    assert policy.refusal(by_name("recover")) is None
    assert policy.refusal(by_name("submit")) is not None


def test_allow_all_stops_short_of_destroying() -> None:
    policy = Policy.parse([], True, False)
    for action in MCP:
        assert (policy.refusal(action) is None) is (action.effect is not Effect.DESTROYS)
    everything = Policy.parse([], True, True)
    assert all(everything.refusal(a) is None for a in MCP)


@pytest.mark.parametrize(
    ("allow", "words"),
    [("teardown", "--allow-destructive"), ("frobnicate", "no such tool"), ("pod-up", "no such")],
)
def test_a_bad_allow_is_refused_naming_the_fix(allow: str, words: str) -> None:
    with pytest.raises(PolicyError, match=words):
        Policy.parse([allow], False, False)
