"""What the console submitted: the registry's persistence and lineage, sweep ids learned."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest

from console.services.jobs.registry import JobRegistry, SubmittedJob, Submitter
from console.services.jobs.spec import SubmitSpec
from console.services.model import JobInfo, Update
from console.services.record.journal import Journal
from console.services.record.sink import EventSink
from engine.contract import SWEEP_ID_RE


def test_registry_persists_specs_and_lineage(tmp_path: Path) -> None:
    path = tmp_path / "state" / "journal.sqlite"
    reg = JobRegistry(Journal(path))
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
    again = JobRegistry(Journal(path))  # another front end, or a restart, reads the same
    a, b = again.get("a"), again.get("b")
    assert a is not None and b is not None
    assert a.superseded_by == "b" and b.resubmitted_from == "a"
    assert [j.job_id for j in again.current()] == ["b"] and again.ids() == {"a", "b"}
    # the relaunch keeps every field and pins the SAME sweep id; secrets stay references
    assert b.spec.sweep_id == "ppo_rl_study-random-cap4-s42"
    assert b.spec.run_cap == 4 and b.spec.train_args == spec.train_args
    assert b.spec.runtime_env == {"env_vars": {"WANDB_API_KEY": "$WANDB_API_KEY"}}
    assert "--sweep-id ppo_rl_study-random-cap4-s42" in b.spec.entrypoint()


def test_an_older_consoles_jobs_json_is_imported_once(tmp_path: Path) -> None:
    legacy = tmp_path / "jobs.json"
    row = {
        "job_id": "old-1",
        "spec": {"mode": "single", "train_args": "--algo ppo", "runtime_env": {}},
        "submitted_at": 5.0,
        "sweep_id": "",
    }
    legacy.write_text(json.dumps({"jobs": [row, {"job_id": "bad"}]}))
    reg = JobRegistry(Journal(tmp_path / "j.sqlite"), legacy_json=legacy)
    job = reg.get("old-1")
    assert job is not None and job.spec.train_args == "--algo ppo" and job.state == "submitted"
    assert reg.get("bad") is None  # a broken row is skipped, not fatal
    assert not legacy.exists() and (tmp_path / "jobs.json.imported").exists()


def test_a_corrupt_legacy_file_is_left_alone(tmp_path: Path) -> None:
    legacy = tmp_path / "jobs.json"
    legacy.write_text("{not json")
    reg = JobRegistry(Journal(tmp_path / "j.sqlite"), legacy_json=legacy)
    assert reg.current() == []
    reg.add(SubmittedJob(job_id="x", spec=SubmitSpec(), submitted_at=0.0))
    assert reg.get("x") is not None and legacy.exists()


@pytest.mark.parametrize(
    ("line", "sweep_id"),
    [
        ("[sweep] W&B sweep abc123xy: 8 agents", "abc123xy"),
        ("[sweep] starting sweep ppo_rl_study-random-cap6-s42: random, 6 sample(s)", None),
        ("[sweep] resuming sweep ppo_rl_study-random-cap6-s42 from file:///b/x", None),
    ],
)
def test_sweep_id_is_learned_from_the_engine_log(line: str, sweep_id: str | None) -> None:
    m = SWEEP_ID_RE.search("noise\n" + line + "\n")
    assert m is not None
    assert m.group(1) == (sweep_id or "ppo_rl_study-random-cap6-s42")


# -- submitting exactly once, also across a crash -------------------------------------------------


class Cluster:
    """A cluster that, like Ray, refuses a second job under an id it already has, and can
    lose its answer after it accepted a job (the console's connection dropped)."""

    def __init__(self) -> None:
        self.jobs: dict[str, SubmitSpec] = {}
        self.down = False
        self.lose_answer = False

    async def submit(self, spec: SubmitSpec) -> JobInfo:
        if self.down:
            raise ConnectionError("dashboard unreachable")
        if spec.submission_id in self.jobs:
            raise RuntimeError(f"Job with submission_id {spec.submission_id} already exists")
        self.jobs[spec.submission_id] = spec
        if self.lose_answer:
            raise ConnectionError("connection reset after the request was sent")
        return JobInfo(spec.submission_id, "PENDING")

    async def job_status(self, job_id: str) -> JobInfo:
        if self.down or job_id not in self.jobs:
            raise LookupError(job_id)
        return JobInfo(job_id, "RUNNING")

    async def job_logs(self, job_id: str) -> str:
        return ""


def _submitter(tmp_path: Path) -> tuple[Submitter, Cluster, list[Update]]:
    journal = Journal(tmp_path / "journal.sqlite")
    published: list[Update] = []
    cluster = Cluster()
    sink = EventSink(journal, published.append)
    return (
        Submitter(cluster, JobRegistry(journal), sink, published.append),  # type: ignore[arg-type]
        cluster,
        published,
    )


async def test_a_job_accepted_whose_answer_was_lost_is_adopted_not_doubled(
    tmp_path: Path,
) -> None:
    sub, cluster, _ = _submitter(tmp_path)
    cluster.lose_answer = True
    info = await sub.submit(SubmitSpec(train_args="--algo ppo"), "user")
    assert list(cluster.jobs) == [info.job_id]
    job = sub.registry.get(info.job_id)
    assert job is not None and job.state == "submitted"


async def test_a_failed_submit_leaves_nothing_recorded(tmp_path: Path) -> None:
    sub, cluster, _ = _submitter(tmp_path)
    cluster.down = True
    with pytest.raises(ConnectionError):
        await sub.submit(SubmitSpec(), "user")
    assert sub.registry.all() == [] and cluster.jobs == {}


async def test_a_resubmission_cut_short_by_a_crash_is_sent_once_under_its_recorded_id(
    tmp_path: Path,
) -> None:
    sub, cluster, _ = _submitter(tmp_path)
    first = await sub.submit(SubmitSpec(mode="sweep", sweep_id="s-1", run_cap=4), "user")
    # The console recorded the replacement, sent it, and died before hearing back.
    replacement = dataclasses.replace(
        sub.registry.get(first.job_id).relaunch_spec(),  # type: ignore[union-attr]
        submission_id="phantom-sweep-replacement",
    )
    sub.registry.add(
        SubmittedJob(
            job_id=replacement.submission_id,
            spec=replacement,
            submitted_at=2.0,
            actor="watchdog",
            resubmitted_from=first.job_id,
            state="pending",
        )
    )
    cluster.jobs[replacement.submission_id] = replacement
    # The next owner's recovery resubmits: the same id again, adopted, never a second job.
    res = await sub.resubmit([first.job_id])
    assert res.ok and res.data["resubmitted"] == {first.job_id: replacement.submission_id}
    assert len(cluster.jobs) == 2
    again = await sub.resubmit([first.job_id])  # and a third attempt does nothing at all
    assert again.data["resubmitted"] == {first.job_id: replacement.submission_id}
    assert len(cluster.jobs) == 2
    assert cluster.jobs[replacement.submission_id].sweep_id == "s-1"  # the same sweep
    job = sub.registry.get(replacement.submission_id)
    assert job is not None and job.state == "submitted"


async def test_a_replacement_lost_with_a_later_head_is_resubmitted_not_taken_as_done(
    tmp_path: Path,
) -> None:
    """Issue 45: a watcher resubmitted the sweep, was SIGKILLed, and its successor rebuilt the
    head: the replacement went down with that head. Resubmitting the job the recovery owed
    must send the sweep again (same sweep id), not answer with the dead replacement."""
    sub, cluster, _ = _submitter(tmp_path)
    first = await sub.submit(SubmitSpec(mode="sweep", sweep_id="s-1", run_cap=4), "user")
    res = await sub.resubmit([first.job_id])  # the first head lost: X -> Y
    second = res.data["resubmitted"][first.job_id]
    assert second != first.job_id and second in cluster.jobs
    cluster.jobs.clear()  # the next head knows nothing of Y
    res = await sub.resubmit([first.job_id])  # the recovery owed X: the chain goes on
    third = res.data["resubmitted"][first.job_id]
    assert res.ok and third not in (first.job_id, second)
    assert list(cluster.jobs) == [third] and cluster.jobs[third].sweep_id == "s-1"
    y = sub.registry.get(second)
    assert y is not None and y.superseded_by == third
    # Asked again on the same head (a retried step), nothing more is sent.
    again = await sub.resubmit([first.job_id, second])
    assert set(again.data["resubmitted"].values()) == {third} and len(cluster.jobs) == 1
