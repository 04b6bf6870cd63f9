"""`phantom status [--json]`: one snapshot, then exit; clear failure when unreachable."""

from __future__ import annotations

import io
import json
from pathlib import Path

import pytest

from console.config import Config, ConfigError, parse_config
from console.script.main import script_main
from console.status import render_table, status_main
from emulators.tpu_pod.client import PodInfo
from tests.support.fake_services import Behaviour
from tests.support.script_harness import Harness


def run_status(h: Harness, *, as_json: bool) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    code = status_main(
        Config(), as_json=as_json, services_factory=h.factory, stdout=out, stderr=err
    )
    return code, out.getvalue(), err.getvalue()


def test_json_snapshot_is_one_object_with_every_layer() -> None:
    h = Harness()
    code, out, err = run_status(h, as_json=True)
    assert code == 0, err
    lines = out.splitlines()
    assert len(lines) == 1
    snap = json.loads(lines[0])
    assert snap["type"] == "status" and snap["reachable"] is True
    assert snap["pod"]["node_name"] == "phantom-pod" and snap["pod"]["ready_hosts"] == 4
    assert [h["name"] for h in snap["pod"]["hosts"]][:2] == ["phantom-pod-w0", "phantom-pod-w1"]
    assert snap["ray"] == {
        "alive_nodes": 4,
        "hosts": 4,
        "dead_hosts": [],
        "duplicate_hosts": [],
        "dashboard_url": "http://127.0.0.1:8265",
        "tunnel_up": True,
    }
    assert snap["jobs"] == []
    assert snap["cadence"][0]["run_id"] == "a1b2c3" and snap["cadence"][0]["stalled"] is False
    assert snap["recovery"]["active"] is False
    # A status query never starts the watchdog/pollers, and always closes what it opened.
    assert h.names(reads=False) == ["refresh", "stop"]


def test_table_without_json_fits_80_columns() -> None:
    code, out, _ = run_status(Harness(), as_json=False)
    assert code == 0
    assert "phantom-pod-w3" in out and "127.0.0.13" in out and "READY" in out
    assert "ray 4/4 alive" in out and "ppo_rl_study-00" in out and "recovery: idle" in out
    assert max(len(line) for line in out.splitlines()) <= 80
    with_json = json.loads(run_status(Harness(), as_json=True)[1])
    assert render_table(with_json) + "\n" == out


def test_unreachable_cluster_is_non_zero_with_a_clear_message() -> None:
    code, out, err = run_status(Harness(Behaviour(reachable=False)), as_json=True)
    assert code == 1
    snap = json.loads(out)
    assert snap["reachable"] is False and "TPU API unreachable" in snap["unreachable_reason"]
    assert "phantom status: cluster 'phantom-pod' unreachable: TPU API unreachable" in err
    assert "phantom pod up" in err


def test_services_that_cannot_be_built_are_unreachable_not_a_traceback() -> None:
    h = Harness(Behaviour(raise_in={"refresh": RuntimeError("the state API went away")}))
    code, out, err = run_status(h, as_json=True)
    assert code == 1
    assert err.startswith("phantom status: cannot reach the local cluster 'phantom-pod': ")
    assert "RuntimeError: the state API went away" in err and "Traceback" not in err
    # --json: stdout still carries one object a monitor can parse, saying why
    (line,) = out.splitlines()
    problem = json.loads(line)
    assert problem["ok"] is False and problem["exit_code"] == 1
    assert "the state API went away" in problem["error"]

    def no_pod(config: Config) -> None:
        raise ValueError("no pod emulator is running for /x; start it with `phantom pod up`")

    err_io, out_io = io.StringIO(), io.StringIO()
    code = status_main(
        Config(),
        as_json=False,
        services_factory=no_pod,  # type: ignore[arg-type]
        stdout=out_io,
        stderr=err_io,
    )
    assert code == 1 and "no pod emulator is running" in err_io.getvalue()
    assert "ValueError" not in err_io.getvalue() and out_io.getvalue() == ""  # no JSON asked


def test_config_error_is_exit_2() -> None:
    def bad(config: Config) -> None:
        raise ConfigError("c.toml", ["ssh.key = '/nope': file not found"])

    err, out = io.StringIO(), io.StringIO()
    assert status_main(Config(), as_json=True, services_factory=bad, stdout=out, stderr=err) == 2  # type: ignore[arg-type]
    assert "ssh.key" in err.getvalue()
    assert json.loads(out.getvalue()) == {
        "type": "status",
        "ok": False,
        "reachable": False,
        "exit_code": 2,
        "error": "phantom: invalid config c.toml:\n  - ssh.key = '/nope': file not found",
    }


def test_a_job_without_the_expected_env_is_named_under_the_jobs() -> None:
    snap = json.loads(run_status(Harness(), as_json=True)[1])
    snap["jobs"] = [
        {
            "job_id": "raysubmit_byhand",
            "status": "RUNNING",
            "entrypoint": "python -m engine.train",
            "env_problems": ["PHANTOM_JAX_PLATFORM not set", "WANDB_MODE not set"],
        },
        {"job_id": "phantom-single-1", "status": "RUNNING", "env_problems": []},
    ]
    lines = render_table(snap).splitlines()
    assert (
        "job raysubmit_byhand started without the expected env: PHANTOM_JAX_PLATFORM not set; "
        "WANDB_MODE not set"
    ) in lines
    assert not any("phantom-single-1 started" in line for line in lines)


def test_status_and_the_script_status_name_the_zone_the_node_is_in(
    pod: PodInfo, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """On the default emulator: `phantom status --json` and the in-run `status` agree."""
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "state"))
    config = parse_config({"cluster": {"run_dir": str(pod.run_dir)}})
    out, err = io.StringIO(), io.StringIO()
    assert status_main(config, as_json=True, stdout=out, stderr=err) == 0, err.getvalue()
    assert json.loads(out.getvalue())["pod"]["zone"] == pod.zone == "local-a"
    out = io.StringIO()
    assert status_main(config, as_json=False, stdout=out, stderr=err) == 0, err.getvalue()
    assert out.getvalue().startswith("pod phantom-pod (local, ") and ", local-a)" in out.getvalue()
    script = tmp_path / "s.phantom"
    script.write_text("status\n")
    out, err = io.StringIO(), io.StringIO()
    assert script_main(str(script), config, stdout=out, stderr=err) == 0, err.getvalue()
    step = next(json.loads(x) for x in out.getvalue().splitlines() if '"step"' in x)
    assert step["result"]["pod"]["zone"] == "local-a", step


def test_a_fleets_unreachable_clusters_are_each_named_by_their_fleet_name() -> None:
    """Two clusters that keep the default node name: each one's line said "cluster
    'phantom-pod' unreachable", not which of the fleet's it was."""
    from console.config.fleet import parse_fleet
    from console.status import status_fleet_main

    fleet = parse_fleet(
        {"clusters": [{"name": "pod-a"}, {"name": "pod-b", "cluster": {"zone": "local-b"}}]}
    )
    for behaviour, words in (
        (Behaviour(reachable=False), "phantom status: cluster {!r} unreachable"),
        (
            Behaviour(raise_in={"refresh": RuntimeError("gone")}),
            "phantom status: cannot reach the local cluster {!r}",
        ),
    ):
        out, err = io.StringIO(), io.StringIO()
        code = status_fleet_main(
            fleet,
            as_json=True,
            services_factory=Harness(behaviour).factory,
            stdout=out,
            stderr=err,
        )
        assert code == 1
        for name in ("pod-a", "pod-b"):
            assert words.format(name) in err.getvalue(), err.getvalue()
        assert "'phantom-pod'" not in err.getvalue()
