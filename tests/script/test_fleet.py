"""A script over a ``[[clusters]]`` fleet: each line acts on the cluster ``use NAME`` chose
or its own ``--cluster NAME`` names, in that cluster's own services (built only there, at
its first line); a fleet of several with none chosen, a name not in the config, ``last``
of another cluster: refused before anything is built, naming the line, the name and the
clusters there are. The services are the one ``FakeServices`` per cluster (its calls
recorded by cluster); the emulators' clients the recording ``FakePod``. And a real `phantom
--script` over two pod emulators: each line reaches its own cluster's pod."""

from __future__ import annotations

import io
import json
import subprocess
from pathlib import Path
from typing import Any

from console import exit_codes
from console.config import Config
from console.config.fleet import Fleet, parse_fleet
from console.script.language import usage_text
from console.script.main import script_main
from emulators.tpu_pod import client as pod_client
from tests.script.test_e2e import phantom_argv
from tests.support.fake_services import Behaviour, Call, FakeServices
from tests.support.fleet_pods import two_pods
from tests.support.script_harness import FakePod
from tests.support.watcher import watch_env

FLEET = {
    "clusters": [
        {"name": "pod-a", "cluster": {"node_name": "pod-a"}},
        {"name": "pod-b", "cluster": {"node_name": "pod-b", "hosts": 2}},
    ]
}


class Recorder:
    """Every cluster's calls, by cluster, and which clusters' services were built."""

    def __init__(self) -> None:
        self.calls: dict[str, list[str]] = {}
        self.built: list[str] = []

    def factory(self, config: Config) -> FakeServices:
        self.built.append(config.name)
        record = self.calls.setdefault(config.name, [])

        def on_call(call: Call) -> None:
            record.append(call.name)

        return FakeServices("idle", config=config, behaviour=Behaviour(), on_call=on_call)


def run(
    tmp_path: Path, text: str, fleet: Fleet | Config, cluster: str | None = None
) -> tuple[int, list[dict[str, Any]], str, Recorder, dict[str, FakePod]]:
    path = tmp_path / "s.phantom"
    path.write_text(text)
    rec = Recorder()
    names = fleet.names if isinstance(fleet, Fleet) else (fleet.name,)
    pods = {
        n: FakePod(lambda call, n=n: rec.calls.setdefault(n, []).append(call.name)) for n in names
    }
    out, err = io.StringIO(), io.StringIO()
    code = script_main(
        str(path),
        fleet,
        cluster=cluster,
        services_factory=rec.factory,
        pod_control=pods,
        stdout=out,
        stderr=err,
    )
    lines = [json.loads(line) for line in out.getvalue().splitlines()]
    return code, lines, err.getvalue(), rec, pods


def steps(lines: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [x for x in lines if x["type"] == "step"]


def test_use_and_a_lines_own_cluster_choose_where_each_line_acts(tmp_path: Path) -> None:
    fleet = parse_fleet(FLEET, source="fleet.toml")
    text = (
        "sleep 0\n"  # touches no cluster: needs none chosen
        "use pod-a\n"
        "ray-up\n"
        "use pod-b\n"
        "bootstrap 1\n"  # pod-b has 2 hosts: host 1 is there
        "status --cluster pod-a\n"
        "status\n"
    )
    code, lines, err, rec, _ = run(tmp_path, text, fleet)
    assert code == exit_codes.OK, err
    ran = steps(lines)
    assert [(s["action"], s.get("cluster")) for s in ran] == [
        ("sleep", None),
        ("ray-up", "pod-a"),
        ("bootstrap", "pod-b"),
        ("status", "pod-a"),
        ("status", "pod-b"),
    ]
    assert list(ran[1]) == ["type", "n", "line", "cluster", "action", "ok", "elapsed_s", "result"]
    assert "ray_up" in rec.calls["pod-a"] and "ray_up" not in rec.calls["pod-b"]
    assert "bootstrap" in rec.calls["pod-b"] and "bootstrap" not in rec.calls["pod-a"]
    assert sorted(rec.built) == ["pod-a", "pod-b"]  # each cluster's own, once


def test_the_command_lines_cluster_is_chosen_before_the_first_use(tmp_path: Path) -> None:
    fleet = parse_fleet(FLEET, source="fleet.toml")
    code, lines, err, rec, _ = run(tmp_path, "ray-up\nuse pod-a\nstatus\n", fleet, "pod-b")
    assert code == exit_codes.OK, err
    assert [s["cluster"] for s in steps(lines)] == ["pod-b", "pod-a"]
    assert "ray_up" in rec.calls["pod-b"]


def test_a_fleet_of_several_with_no_cluster_chosen_runs_nothing(tmp_path: Path) -> None:
    fleet = parse_fleet(FLEET, source="fleet.toml")
    code, lines, err, rec, _ = run(tmp_path, "sleep 0\nstatus\nray-up\nuse pod-b\nstatus\n", fleet)
    assert code == exit_codes.USAGE and lines == []
    assert "s.phantom:2: status acts on one cluster and none is chosen" in err
    assert "fleet.toml has 2 clusters (pod-a, pod-b)" in err and "use NAME" in err
    assert "s.phantom:3:" in err and "s.phantom:5" not in err  # after `use`: fine
    assert "nothing was run" in err and rec.built == [] and rec.calls == {}


def test_a_cluster_not_in_the_config_is_named_with_the_clusters_there(tmp_path: Path) -> None:
    fleet = parse_fleet(FLEET, source="fleet.toml")
    text = "use pod-c\nstatus\nray-up --cluster pod-bb\nstatus --cluster\nuse pod-a\nsleep 1 --cluster pod-a\n"
    code, lines, err, rec, pods = run(tmp_path, text, fleet)
    assert code == exit_codes.USAGE and lines == []
    assert "s.phantom:1: use 'pod-c': no such cluster in fleet.toml; did you mean" in err
    assert "(its clusters: pod-a, pod-b)" in err
    assert "s.phantom:2:" not in err  # after a `use` that named no cluster: one problem, not two
    assert "s.phantom:3: ray-up: --cluster 'pod-bb': no such cluster" in err
    assert "did you mean 'pod-b'?" in err
    assert "s.phantom:4: status: --cluster needs a value NAME" in err
    assert "s.phantom:6: sleep: --cluster: sleep acts on no cluster" in err
    assert rec.built == [] and all(not p.up_now for p in pods.values())


def test_a_verb_a_clusters_kind_cannot_run_is_refused_naming_that_cluster(
    tmp_path: Path,
) -> None:
    """The refusal names the cluster the line chose (it said "this config (fleet.toml)
    drives provider 'local'", the same for every cluster of the file)."""
    fleet = parse_fleet(FLEET, source="fleet.toml")
    code, lines, err, rec, _ = run(tmp_path, "workload create w --cluster pod-b\n", fleet)
    assert code == exit_codes.USAGE and lines == [] and rec.built == []
    assert "only for cluster.provider = 'gke'; cluster 'pod-b' of fleet.toml is provider " in err


def test_ledger_with_no_cluster_chosen_reads_every_cluster_and_the_fleets_total(
    tmp_path: Path,
) -> None:
    """`ledger` before any `use` (or on a fleet with none chosen) answers for the fleet as
    `phantom report` does: each cluster's ledger and their total (it was refused, and each
    cluster's ledger had no total); after `use`, the chosen cluster's alone."""
    fleet = parse_fleet(FLEET, source="fleet.toml")
    code, lines, err, rec, _ = run(tmp_path, "ledger --since 3600\nuse pod-b\nledger\n", fleet)
    assert code == exit_codes.OK, err
    whole, one = steps(lines)
    assert "cluster" not in whole and one["cluster"] == "pod-b"
    doc = whole["result"]
    assert list(doc["clusters"]) == ["pod-a", "pod-b"] and doc["notes"] == []
    assert doc["total"]["clusters"] == ["pod-a", "pod-b"]
    walls = [c["wall_s"] for c in doc["clusters"].values()]
    assert doc["total"]["wall_s"] == round(sum(walls), 3)
    assert "clusters" not in one["result"] and "headline" in one["result"]
    assert sorted(rec.built) == ["pod-a", "pod-b"]  # each cluster's own services read it


def test_a_fleets_ledger_names_a_cluster_it_cannot_reach_and_totals_the_others(
    tmp_path: Path,
) -> None:
    """A cluster whose services cannot be had (its pod emulator down) is a note of the
    fleet's ledger, as one whose journal cannot be read is; the others are still totalled."""
    fleet = parse_fleet(FLEET, source="fleet.toml")
    rec = Recorder()

    def factory(config: Config) -> FakeServices:
        if config.name == "pod-b":
            raise ValueError("no pod emulator is running for pod-b; start it: phantom pod up")
        return rec.factory(config)

    path = tmp_path / "s.phantom"
    path.write_text("ledger\n")
    out, err = io.StringIO(), io.StringIO()
    code = script_main(str(path), fleet, services_factory=factory, stdout=out, stderr=err)
    assert code == exit_codes.OK, err.getvalue()
    (step,) = steps([json.loads(line) for line in out.getvalue().splitlines()])
    doc = step["result"]
    assert list(doc["clusters"]) == ["pod-a"] and doc["total"]["clusters"] == ["pod-a"]
    assert doc["notes"] == [
        "pod-b: its journal was not read (no pod emulator is running for pod-b; start it: "
        "phantom pod up); the total leaves it out"
    ]


def test_pod_up_on_a_cluster_whose_pod_runs_names_it_and_its_pod_down(tmp_path: Path) -> None:
    """It said "already running for this config; `phantom pod down` it", which in a fleet
    is every cluster's config, and a bare `pod down` is none of its pods."""
    fleet = parse_fleet(FLEET, source="fleet.toml")
    path = tmp_path / "s.phantom"
    path.write_text("pod up --cluster pod-b\n")
    pods = {n: FakePod(lambda _call: None, up=n == "pod-b") for n in fleet.names}
    out, err = io.StringIO(), io.StringIO()
    code = script_main(
        str(path),
        fleet,
        services_factory=Recorder().factory,
        pod_control=pods,
        stdout=out,
        stderr=err,
    )
    assert code == exit_codes.FAILED
    (step,) = steps([json.loads(line) for line in out.getvalue().splitlines()])
    assert step["result"]["error"] == (
        "a pod emulator is already running for cluster 'pod-b' (local); `phantom --cluster "
        "pod-b pod down` it first, or remove `pod up` from the script"
    )


def test_last_refers_to_a_job_submitted_on_the_same_cluster(tmp_path: Path) -> None:
    fleet = parse_fleet(FLEET, source="fleet.toml")
    text = "use pod-a\nsubmit single\nuse pod-b\nwait-job last RUNNING\nwait-job last RUNNING --cluster pod-a\n"
    code, _, err, rec, _ = run(tmp_path, text, fleet)
    assert code == exit_codes.USAGE
    assert "s.phantom:4: wait-job: `last` refers to the job of an earlier submit" in err
    assert "on this cluster" in err and "s.phantom:5" not in err and rec.built == []


def test_a_fleet_of_one_needs_no_cluster_and_knows_its_name(tmp_path: Path) -> None:
    text = "status\nuse phantom-pod\nstatus --cluster phantom-pod\n"
    code, lines, err, _, _ = run(tmp_path, text, Config(name="phantom-pod"))
    assert code == exit_codes.OK, err
    assert all("cluster" not in s for s in steps(lines))  # a [cluster] config's lines as ever
    code, _, err, _, _ = run(tmp_path, "use pod-a\n", Config(name="phantom-pod"))
    assert code == exit_codes.USAGE and "use 'pod-a': no such cluster" in err
    assert "(its clusters: phantom-pod)" in err


def test_a_fleet_s_interrupt_cleanup_and_pod_up_are_per_cluster(tmp_path: Path) -> None:
    """`pod up` reaches the pod of the line's cluster; `finally` undoes only what the script
    started on each."""
    fleet = parse_fleet(FLEET, source="fleet.toml")
    text = "use pod-b\npod up --hosts 2\nfinally\npod down\npod down --cluster pod-a\n"
    code, lines, err, rec, _ = run(tmp_path, text, fleet)
    assert code == exit_codes.OK, err
    assert rec.calls["pod-b"] == ["pod.up", "pod.down"] and "pod-a" not in rec.calls
    skipped = steps(lines)[-1]
    assert (
        skipped["cluster"] == "pod-a" and "did not bring a pod up" in skipped["result"]["skipped"]
    )


def test_the_reference_says_how_to_choose_a_cluster() -> None:
    text = usage_text()
    assert "use NAME" in text and "--cluster NAME" in text
    assert max(len(line) for line in text.splitlines()) <= 80


def test_a_real_script_acts_on_each_pod_of_a_fleet(tmp_path: Path) -> None:
    """`phantom --cluster pod-a --script` over two pod emulators (real SSH, real TPU API on
    loopback): the lines before `use` act on pod-a, a line's --cluster on pod-b alone."""
    text = "status\npreempt 1 --cluster pod-b\nuse pod-b\nstatus\n"
    (tmp_path / "s.phantom").write_text(text)
    with two_pods(tmp_path) as fleet:
        proc = subprocess.run(
            phantom_argv("--config", str(fleet.config), "--cluster", "pod-a", "--script",
                         str(tmp_path / "s.phantom")),
            env=watch_env(tmp_path),
            capture_output=True,
            text=True,
            timeout=240,
        )  # fmt: skip
        assert proc.returncode == exit_codes.OK, proc.stderr[-2000:]
        ran = steps([json.loads(line) for line in proc.stdout.splitlines()])
        assert [(s["action"], s["cluster"], s["ok"]) for s in ran] == [
            ("status", "pod-a", True),
            ("preempt", "pod-b", True),
            ("status", "pod-b", True),
        ]
        assert ran[0]["result"]["pod"]["node_name"] == "pod-a"
        assert ran[2]["result"]["pod"]["node_name"] == "pod-b"
        a = pod_client.pod_status(fleet.pods["pod-a"].run_dir)
        b = pod_client.pod_status(fleet.pods["pod-b"].run_dir)
        assert a is not None and b is not None
        assert {h.state for h in a.hosts} == {"READY"} and b.hosts[1].state != "READY"
