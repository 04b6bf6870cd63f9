"""What the console submitted: the registry's persistence and lineage, sweep ids learned."""

from __future__ import annotations

from pathlib import Path

import pytest

from console.services.submissions import _SWEEP_ID_RE, JobRegistry, SubmittedJob
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


@pytest.mark.parametrize(
    ("line", "sweep_id"),
    [
        ("[sweep] W&B sweep abc123xy: 8 agents", "abc123xy"),
        ("[sweep] starting sweep ppo_rl_study-random-cap6-s42: random, 6 sample(s)", None),
        ("[sweep] resuming sweep ppo_rl_study-random-cap6-s42 from file:///b/x", None),
    ],
)
def test_sweep_id_is_learned_from_the_engine_log(line: str, sweep_id: str | None) -> None:
    m = _SWEEP_ID_RE.search("noise\n" + line + "\n")
    assert m is not None
    assert m.group(1) == (sweep_id or "ppo_rl_study-random-cap6-s42")
