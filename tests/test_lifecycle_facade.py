"""Fast checks of the ClusterServices facade: job registry, factory errors, provider guards."""

from __future__ import annotations

from pathlib import Path

import asyncssh
import pytest

from console.config import parse_config
from console.services.cluster import (
    JobRegistry,
    SubmittedJob,
    _ClusterOps,
    make_services,
)
from console.services.submit import SubmitSpec


def test_registry_persists_specs_and_lineage(tmp_path: Path) -> None:
    path = tmp_path / "state" / "jobs.json"
    reg = JobRegistry(path)
    spec = SubmitSpec(
        mode="sweep",
        train_args="--algo ppo --total-timesteps 100",
        runtime_env={"env_vars": {"WANDB_API_KEY": "$WANDB_API_KEY"}},
        run_cap=4,
    )
    reg.add(SubmittedJob(job_id="a", spec=spec, submitted_at=1.0, actor="user"))
    reg.update("a", sweep_id="ppo_rl_study-random-cap4-s42")
    reg.add(
        SubmittedJob(
            job_id="b",
            spec=reg.get("a").relaunch_spec(),  # type: ignore[union-attr]
            submitted_at=2.0,
            actor="watchdog",
            resubmitted_from="a",
        )
    )
    again = JobRegistry(path)  # a console restart reads the same history
    a, b = again.get("a"), again.get("b")
    assert a is not None and b is not None
    assert a.superseded_by == "b" and b.resubmitted_from == "a"
    assert [j.job_id for j in again.current()] == ["b"]
    # the relaunch keeps every field and pins the SAME sweep id; secrets stay references
    assert b.spec.sweep_id == "ppo_rl_study-random-cap4-s42"
    assert b.spec.run_cap == 4 and b.spec.train_args == spec.train_args
    assert b.spec.runtime_env == {"env_vars": {"WANDB_API_KEY": "$WANDB_API_KEY"}}
    assert "--sweep-id ppo_rl_study-random-cap4-s42" in b.spec.entrypoint()
    assert "$WANDB_API_KEY" in path.read_text()


def test_registry_survives_a_corrupt_file(tmp_path: Path) -> None:
    path = tmp_path / "jobs.json"
    path.write_text("{not json")
    reg = JobRegistry(path)
    assert reg.current() == []
    reg.add(SubmittedJob(job_id="x", spec=SubmitSpec(), submitted_at=0.0))
    assert JobRegistry(path).get("x") is not None


def test_local_without_a_running_pod_names_the_run_dir(tmp_path: Path) -> None:
    cfg = parse_config({"cluster": {"run_dir": str(tmp_path / "nopod")}})
    with pytest.raises(ValueError, match=r"no pod emulator is running for .*nopod.*phantom pod up"):
        make_services(cfg, state_dir=tmp_path / "state", autostart_pod=False)


@pytest.fixture
def gcp_services(tmp_path: Path):  # type: ignore[no-untyped-def]
    key = asyncssh.generate_private_key("ssh-ed25519")
    key_path = tmp_path / "id_ed25519"
    key.write_private_key(str(key_path))
    cfg = parse_config(
        {
            "cluster": {"provider": "gcp", "project": "my-proj", "zone": "us-central2-b"},
            "ssh": {"user": "me", "key": str(key_path)},
        }
    )
    svc = make_services(cfg, state_dir=tmp_path / "state")
    try:
        yield svc
    finally:
        svc.close_journal()


async def test_chaos_is_local_only(gcp_services) -> None:  # type: ignore[no-untyped-def]
    with pytest.raises(ValueError, match="only available with cluster.provider = 'local'.*'gcp'"):
        await gcp_services.preempt("0")
    with pytest.raises(ValueError, match="provider 'gcp'"):
        await gcp_services.recreate("0")
    assert isinstance(gcp_services._ops, _ClusterOps)
    # the ops the watchdog drives exist for every provider
    assert gcp_services.watchdog.auto is True


def test_snapshot_warns_about_preemption_duplicates_and_tunnel(gcp_services) -> None:  # type: ignore[no-untyped-def]
    from console.services.watchdog import HostObservation, Observation

    obs = Observation(
        at=100.0,
        hosts=(
            HostObservation("pod-w0", "10.0.0.2", "READY", ssh_ok=True, ray_alive=1),
            HostObservation("pod-w1", "10.0.0.3", "READY", ssh_ok=True, ray_alive=2),
            HostObservation("pod-w2", "10.0.0.4", "PREEMPTED", ssh_ok=False, preempted_at=90.0),
        ),
        head="pod-w0",
        ray_reachable=True,
        tunnel_up=False,
    )
    snap = gcp_services._make_snapshot(obs, None, None)
    text = " | ".join(snap.warnings)
    assert "pod-w2 (10.0.0.4) preempted at" in text
    assert "2 live Ray nodes on 10.0.0.3 (pod-w1): duplicate" in text
    assert "tunnel to the head down" in text
    by_name = {h.name: h for h in snap.hosts}
    assert by_name["pod-w2"].ssh == "down" and by_name["pod-w2"].ray_state == "-"
    assert by_name["pod-w1"].ray_nodes == 2 and by_name["pod-w0"].ray_state == "ALIVE"
    assert snap.ray_alive == 2 and not snap.tunnel_up


@pytest.mark.parametrize(
    ("line", "sweep_id"),
    [
        ("[sweep] W&B sweep abc123xy: 8 agents", "abc123xy"),
        ("[sweep] starting sweep ppo_rl_study-random-cap6-s42: random, 6 sample(s)", None),
        ("[sweep] resuming sweep ppo_rl_study-random-cap6-s42 from file:///b/x", None),
    ],
)
def test_sweep_id_is_learned_from_the_engine_log(line: str, sweep_id: str | None) -> None:
    from console.services.cluster import _SWEEP_ID_RE

    m = _SWEEP_ID_RE.search("noise\n" + line + "\n")
    assert m is not None
    assert m.group(1) == (sweep_id or "ppo_rl_study-random-cap6-s42")
