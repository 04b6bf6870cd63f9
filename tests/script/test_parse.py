"""The script language: every invalid line exits 2 with its line number and runs nothing.

"Runs nothing" is proved with a recording services factory and pod control: after an
invalid script neither was even built or called, and stdout stays empty.
"""

from __future__ import annotations

import io
import json
from dataclasses import replace
from pathlib import Path

import pytest

from console import exit_codes
from console.commands.submit import COMMAND as SUBMIT
from console.commands.submit import build_spec
from console.config import ClusterConfig, Config, parse_config
from console.script.language import ACTIONS, CONTINUE_FLAG, usage_text
from console.script.main import script_main
from console.script.parse import ScriptError, parse_script, parse_seconds
from console.wiring import unbuilt_services
from tests.support import REPO
from tests.support.script_harness import Harness

ROOT = REPO
EXAMPLE = ROOT / "examples" / "preemption_drill.phantom"
GCP = parse_config(
    {"cluster": {"provider": "gcp", "project": "my-proj", "zone": "us-central2-b"}},
    source="gcp.toml",
)


def run_invalid(tmp_path: Path, text: str, config: Config | None = None) -> tuple[str, Harness]:
    """Run ``text`` as a script file; assert exit 2, nothing run, nothing on stdout."""
    path = tmp_path / "drill.phantom"
    path.write_text(text)
    h = Harness()
    out, err = io.StringIO(), io.StringIO()
    code = script_main(
        str(path),
        config or Config(),
        services_factory=h.factory,
        pod_control=h.pod(),
        stdout=out,
        stderr=err,
    )
    assert code == exit_codes.USAGE, err.getvalue()
    assert h.built == 0 and h.calls == [], "an invalid script must run nothing"
    assert out.getvalue() == ""
    return err.getvalue(), h


# One row per invalid case of the issue (and the brief): (script, line, fragment of message).
INVALID = [
    pytest.param(
        "ray-up\nbootstap\n",
        2,
        "unknown action 'bootstap'; did you mean 'bootstrap'",
        id="unknown-action",
    ),
    pytest.param(
        "raise-the-dead\n", 1, "unknown action 'raise-the-dead'", id="unknown-action-no-suggestion"
    ),
    pytest.param(
        'ray-up\nsubmit single --train-args "--algo ppo\n', 2, "bad quoting", id="bad-quoting"
    ),
    pytest.param("sleep\n", 1, "sleep: missing argument S", id="missing-argument"),
    pytest.param("submit\n", 1, "missing argument single|distributed|sweep", id="missing-mode"),
    pytest.param(
        "submit single\nwait-job last\n", 2, "missing argument PENDING|RUNNING", id="missing-status"
    ),
    pytest.param("pod\n", 1, "pod: needs one of up, down", id="pod-without-verb"),
    pytest.param(
        "wait-ready --timeout -5\n",
        1,
        "--timeout -5: must be 0 or more seconds",
        id="negative-timeout",
    ),
    pytest.param("sleep -1\n", 1, "must be 0 or more seconds", id="negative-sleep"),
    pytest.param("recover --timeout soon\n", 1, "'soon' is not a duration", id="bad-duration"),
    pytest.param("wait-ready --timeout\n", 1, "--timeout needs a value S", id="flag-without-value"),
    pytest.param("pod up --hosts many\n", 1, "--hosts 'many': must be an integer", id="bad-type"),
    pytest.param("pod up --hosts 0\n", 1, "--hosts 0: must be at least 1", id="out-of-range"),
    pytest.param(
        "preempt 7\n", 1, "unknown host '7': the pod has 4 host(s)", id="unknown-host-index"
    ),
    pytest.param(
        "preempt other-pod-w1\n", 1, "unknown host 'other-pod-w1'", id="unknown-host-name"
    ),
    pytest.param("bootstrap 0 127.0.0.14\n", 1, "unknown host '127.0.0.14'", id="unknown-host-ip"),
    pytest.param("recreate all\n", 1, "unknown host 'all'", id="recreate-all"),
    pytest.param(
        "pod up --hosts 2\npreempt 3\n", 2, "the pod has 2 host(s)", id="host-beyond-pod-up"
    ),
    pytest.param("wait-event preempted --host 9\n", 1, "unknown host '9'", id="wait-event-host"),
    pytest.param(
        "wait-job last SUCCEEDED\n",
        1,
        "`last` refers to the job of an earlier submit",
        id="last-without-submit",
    ),
    pytest.param("logs\n", 1, "`last` refers to the job", id="implicit-last"),
    pytest.param("wait-job abc DONE\n", 1, "'DONE': use one of PENDING", id="bad-status"),
    pytest.param("ray-up now\n", 1, "unexpected argument(s) now", id="extra-argument"),
    pytest.param(
        "wait-ready --timout 5\n",
        1,
        "unknown flag --timout; did you mean --timeout?",
        id="unknown-flag",
    ),
    pytest.param("recover --timeout 1 --timeout 2\n", 1, "--timeout given twice", id="flag-twice"),
    pytest.param(
        "ray-up --continue=yes\n", 1, "--continue takes no value", id="continue-with-value"
    ),
    pytest.param("set continue-on-error maybe\n", 1, "use on or off", id="bad-directive"),
    pytest.param(
        "set verbose on\n", 1, "'verbose': use one of continue-on-error", id="unknown-setting"
    ),
    pytest.param(
        "finally\nteardown\nfinally\n", 3, "already started on line 1", id="finally-twice"
    ),
    pytest.param(
        "submit single --runtime-env '{\"pip\": [}'\n",
        1,
        "not valid JSON",
        id="runtime-env-bad-json",
    ),
    pytest.param(
        "submit single --runtime-env missing.json\n", 1, "cannot read", id="runtime-env-unreadable"
    ),
    pytest.param(
        "submit single --runtime-env '[1, 2]'\n", 1, "cannot read", id="runtime-env-not-object"
    ),
    pytest.param(
        "submit single --runtime-env '{\"nope\": 1}'\n",
        1,
        "unknown field(s) ['nope']",
        id="runtime-env-unknown-field",
    ),
    pytest.param(
        'submit single --runtime-env \'{"env_vars": {"WANDB_API_KEY": "abcdef123456"}}\'\n',
        1,
        "do not inline secrets",
        id="runtime-env-inline-secret",
    ),
    pytest.param(
        "submit single --train-args '--alpha 2'\n",
        1,
        "submit: --train-args: --alpha 2: must be in [0, 1]",
        id="spec-alpha",
    ),
    pytest.param(
        "submit single --train-args ''\n", 1, "--train-args: required", id="spec-empty-train-args"
    ),
    pytest.param(
        "submit sweep --sweep-kind 'bad kind!'\n", 1, "--sweep-kind", id="spec-sweep-kind"
    ),
    pytest.param(
        "submit sweep --sweep-method annealing\n",
        1,
        "'annealing': use one of random, grid",
        id="sweep-method",
    ),
    pytest.param(
        "submit single --num-nodes 0\n", 1, "--num-nodes 0: must be at least 1", id="num-nodes"
    ),
    pytest.param(
        "submit sweep --sweep-args '--trial-timesteps \"3000'\n",
        1,
        "--sweep-args: bad quoting",
        id="sweep-args-quoting",
    ),
    pytest.param("wait-event Preempted!\n", 1, "not a known event kind", id="bad-event-kind"),
]


@pytest.mark.parametrize(("text", "line", "fragment"), INVALID)
def test_invalid_line_exits_2_with_line_number_and_runs_nothing(
    tmp_path: Path, text: str, line: int, fragment: str
) -> None:
    err, _ = run_invalid(tmp_path, text)
    first = err.splitlines()[0]
    assert first.startswith(f"{tmp_path / 'drill.phantom'}:{line}: "), err
    assert fragment in err, err
    assert "nothing was run" in err


@pytest.mark.parametrize("text", ["pod up\n", "pod down\n", "preempt 1\n", "recreate 2\n"])
def test_local_only_actions_are_rejected_on_gcp(tmp_path: Path, text: str) -> None:
    err, _ = run_invalid(tmp_path, "ray-up\n" + text, GCP)
    assert ":2: " in err and "only for the local emulator" in err and "'gcp'" in err


def test_every_problem_is_reported_not_just_the_first(tmp_path: Path) -> None:
    err, _ = run_invalid(
        tmp_path, "# header\nbootstap\n\nsleep -3\nray-up\npreempt 12  # comment\nlogs\n"
    )
    lines = [ln for ln in err.splitlines() if "drill.phantom:" in ln]
    assert [int(ln.split(":")[1]) for ln in lines] == [2, 4, 6, 7]
    assert "4 problem(s)" in err


def test_a_bad_submit_line_does_not_cascade_into_last_errors(tmp_path: Path) -> None:
    err, _ = run_invalid(
        tmp_path, "submit single --train-args '--alpha 9'\nwait-job last RUNNING\n"
    )
    assert ":1: " in err and ":2: " not in err


def test_unreadable_script_and_stdin(tmp_path: Path) -> None:
    h = Harness()
    err = io.StringIO()
    code = script_main(
        str(tmp_path / "nope.phantom"), Config(), services_factory=h.factory, stderr=err
    )
    assert code == exit_codes.USAGE and "cannot read script" in err.getvalue() and h.calls == []
    err = io.StringIO()
    code = script_main(
        "-",
        Config(),
        services_factory=h.factory,
        stdin=io.StringIO("ray-up\nteleport\n"),
        stdout=io.StringIO(),
        stderr=err,
    )
    assert code == exit_codes.USAGE and err.getvalue().startswith("<stdin>:2: unknown action")


def test_host_references_resolve_to_canonical_names() -> None:
    cfg = Config(cluster=ClusterConfig(node_name="spot", hosts=4))
    script = parse_script(
        "bootstrap 0 spot-w1 127.0.0.12\npreempt all\npreempt 3\nrecreate 127.0.0.13\n",
        unbuilt_services(cfg),
    )
    assert script.lines[0].args["hosts"] == ["spot-w0", "spot-w1", "spot-w2"]
    assert script.lines[1].args["host"] == "all"
    assert script.lines[2].args["host"] == "spot-w3"
    assert script.lines[3].args["host"] == "spot-w3"


def test_pod_up_hosts_widens_the_valid_hosts() -> None:
    script = parse_script(
        "pod up --hosts 8\npreempt 7\nwait-event preempted --host 127.0.0.17\n",
        unbuilt_services(Config()),
    )
    assert script.lines[1].args["host"] == "phantom-pod-w7"
    assert script.lines[2].args["host"] == "phantom-pod-w7"


def test_gcp_hosts_accept_index_name_and_runtime_ips() -> None:
    script = parse_script("bootstrap 1 phantom-pod-w2 10.130.0.7\n", unbuilt_services(GCP))
    assert script.lines[0].args["hosts"] == ["phantom-pod-w1", "phantom-pod-w2", "10.130.0.7"]


def test_directives_comments_quoting_and_continuations(tmp_path: Path) -> None:
    text = (
        "# a comment line\n"
        "\n"
        "ray-up   # trailing comment\n"
        "submit single \\\n"
        "   --train-args '--algo ppo --total-timesteps 2048 # not a comment'\n"
        "set continue-on-error on\n"
        "wait-job last RUNNING --timeout 5m\n"
        "set continue-on-error off\n"
        "logs --continue --tail=5\n"
        "sleep 1.5s\n"
        "finally\n"
        "teardown\n"
    )
    s = parse_script(text, unbuilt_services(Config()))
    assert [(st.line, st.action) for st in s.lines] == [
        (3, "ray-up"),
        (4, "submit"),
        (7, "wait-job"),
        (9, "logs"),
        (10, "sleep"),
        (12, "teardown"),
    ]
    by = {st.action: st for st in s.lines}
    assert by["submit"].args["train_args"] == "--algo ppo --total-timesteps 2048 # not a comment"
    assert by["wait-job"].args == {"job": "last", "status": "RUNNING", "timeout": 300.0}
    assert by["wait-job"].continue_on_error and not by["ray-up"].continue_on_error
    assert by["logs"].continue_on_error and by["logs"].args["tail"] == 5
    assert not by["sleep"].continue_on_error and by["sleep"].args["seconds"] == 1.5
    assert by["teardown"].always and by["teardown"].continue_on_error
    assert not by["sleep"].always


def test_sweep_args_reach_the_sweep_command_line() -> None:
    """`--sweep-args` passes engine.sweep flags the other options do not name, word by word."""
    s = parse_script(
        "submit sweep --run-cap 4 --sweep-args '--trial-timesteps 3000 --max-failures 10'\n",
        unbuilt_services(Config()),
    )
    spec = build_spec(SUBMIT.make(s.lines[0].args), Config().runtime_env)
    assert spec.sweep_args == "--trial-timesteps 3000 --max-failures 10"
    assert spec.entrypoint().endswith(
        "--run-cap 4 --num-nodes 1 --agents-per-node 1 "
        "--tpu-per-task 0 --trial-timesteps 3000 --max-failures 10"
    )


def test_runtime_env_file_is_relative_to_the_script(tmp_path: Path) -> None:
    (tmp_path / "env.json").write_text(json.dumps({"pip": ["gymnasium"], "env_vars": {"A": "1"}}))
    s = parse_script(
        "submit single --runtime-env env.json\n", unbuilt_services(Config()), base_dir=tmp_path
    )
    assert s.lines[0].args["runtime_env"] == {"pip": ["gymnasium"], "env_vars": {"A": "1"}}


def test_durations() -> None:
    assert parse_seconds("90") == 90 and parse_seconds("1.5") == 1.5
    assert parse_seconds("90s") == 90 and parse_seconds("5m") == 300
    assert parse_seconds("1h") == 3600 and parse_seconds("250ms") == 0.25
    for bad in ("-1", "abc", "5 m", "inf", ""):
        with pytest.raises(ValueError, match=r"duration|0 or more|finite"):
            parse_seconds(bad)


def test_parse_error_is_structured() -> None:
    with pytest.raises(ScriptError) as info:
        parse_script("ray-up\nnope\n", unbuilt_services(Config()), name="x.phantom")
    assert [(i.line, i.render("x.phantom").split(":")[0]) for i in info.value.issues] == [
        (2, "x.phantom")
    ]


def test_usage_text_comes_from_the_same_table() -> None:
    text = usage_text()
    for adef in ACTIONS.values():
        assert adef.name in text
        for flag in adef.flags:
            assert flag.name in text, flag.name
    assert CONTINUE_FLAG.name in text
    assert max(len(line) for line in text.splitlines()) <= 80


def test_shipped_example_is_valid_for_the_default_config() -> None:
    s = parse_script(EXAMPLE.read_text(), unbuilt_services(Config()), name=str(EXAMPLE))
    actions = [st.action for st in s.lines]
    for needed in (
        "pod up",
        "wait-ready",
        "bootstrap",
        "ray-up",
        "tunnel",
        "submit",
        "preempt",
        "recover",
        "wait-job",
        "teardown",
        "pod down",
    ):
        assert needed in actions
    assert actions.index("preempt") < actions.index("recover") < actions.index("teardown")
    assert [st.action for st in s.lines if st.always] == ["teardown", "pod down"]


def test_shipped_example_is_rejected_on_gcp_with_line_numbers(tmp_path: Path) -> None:
    h = Harness()
    err = io.StringIO()
    code = script_main(
        str(EXAMPLE),
        replace(GCP),
        services_factory=h.factory,
        pod_control=h.pod(),
        stdout=io.StringIO(),
        stderr=err,
    )
    assert code == exit_codes.USAGE and h.calls == []
    assert "only for the local emulator" in err.getvalue()
