"""The live checkpoint advice: submit -> the job's environment -> the engine's choice.

The measurements are real: preemption rows in a journal, checkpoints written by the engine's
own store (their manifests give the training rate), the engine's checkpoint lines in the
jobs' logs (the save's cost). ``Head`` stands in for the Ray head's job table (as in
tests/services/jobs/test_budget.py); the engine that reads the advice is the real one.
"""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
import time
from pathlib import Path

from console.services.jobs.registry import JobRegistry, Submitter
from console.services.jobs.spec import SubmitSpec
from console.services.ledger.advice import Advice, advise
from console.services.ledger.live import (
    LiveAdvisor,
    current_every,
    newest_job_logs,
    steps_per_s,
    with_advice,
)
from console.services.ledger.notices import Saved
from console.services.model import Event, EventKind, JobInfo, JobStatus, Update
from console.services.record.journal import Journal
from console.services.record.sink import EventSink
from engine.contract import CHECKPOINT_ADVICE_REASON, CHECKPOINT_ADVICE_STEPS, CHECKPOINT_SAVED
from engine.trainconfig import DEFAULT_CHECKPOINT_EVERY
from tests.services.ledger.test_notices import save
from tests.support.engine_helpers import engine_env


class Head:
    """The Ray head's job table: what submit, list and logs answer."""

    def __init__(self, logs: dict[str, str]) -> None:
        self.jobs: dict[str, JobInfo] = {
            job: JobInfo(job, JobStatus.SUCCEEDED, start_time=float(i))
            for i, job in enumerate(logs)
        }
        self.logs = logs
        self.specs: list[SubmitSpec] = []

    async def submit(self, spec: SubmitSpec) -> JobInfo:
        self.specs.append(spec)
        self.jobs[spec.submission_id] = JobInfo(spec.submission_id, JobStatus.RUNNING)
        return self.jobs[spec.submission_id]

    async def list_jobs(self) -> list[JobInfo]:
        return list(self.jobs.values())

    async def job_logs(self, job_id: str) -> str:
        return self.logs.get(job_id, "")


def test_steps_per_s_is_the_median_over_consecutive_saves() -> None:
    saved = [
        Saved("a", 0, 100.0),
        Saved("a", 1000, 110.0),  # 100/s
        Saved("a", 2000, 120.0),  # 100/s
        Saved("a", 3000, 400.0),  # a resume in between: 3.6/s, outvoted
        Saved("b", 500, 50.0),
        Saved("b", 1500, 60.0),  # 100/s
    ]
    assert steps_per_s(saved) == 100.0
    assert steps_per_s([Saved("a", 5, 1.0)]) is None


def test_steps_per_s_never_pairs_saves_across_a_preemption() -> None:
    """The storage keeps a few saves: two trainers' worth can be one pair each side of a
    resume, where the median of two would be half the gap's."""
    saved = [
        Saved("a", 1000, 100.0, "interval", "first"),
        Saved("a", 2000, 110.0, "interval", "first"),  # 100/s
        Saved("a", 3000, 140.0, "interval", "second"),  # across the resume: 33/s, no rate
        Saved("a", 4000, 150.0, "interval", "second"),  # 100/s
    ]
    assert steps_per_s(saved) == 100.0
    assert steps_per_s(saved[1:3]) is None


def test_current_every_reads_the_jobs_own_flag() -> None:
    assert current_every("--algo ppo --checkpoint-every 4096") == 4096
    assert current_every("--checkpoint-every=512 --algo ppo") == 512
    assert current_every("--checkpoint-every auto") == DEFAULT_CHECKPOINT_EVERY
    assert current_every("--algo 'ppo") == DEFAULT_CHECKPOINT_EVERY


def test_with_advice_replaces_the_consoles_own_and_keeps_a_users() -> None:
    advice = advise(0.05, 60.0, 100.0, 2048)
    assert isinstance(advice, Advice)
    old = {CHECKPOINT_ADVICE_STEPS: "999", CHECKPOINT_ADVICE_REASON: "Young/Daly, C=1s, M=9s"}
    resubmitted = with_advice(SubmitSpec(runtime_env={"env_vars": old}), advice)
    assert resubmitted.runtime_env["env_vars"] == advice.env()
    users = SubmitSpec(runtime_env={"env_vars": {CHECKPOINT_ADVICE_STEPS: "300"}})
    assert with_advice(users, advice) is users


async def test_a_submitted_job_gets_the_advice_and_the_engine_takes_it(tmp_path: Path) -> None:
    now = time.time()
    journal = Journal(tmp_path / "journal.sqlite")
    # an hour watched, a reclaim every 10 minutes (hosts w-0 and the head lost together)
    journal.record_event(Event(now - 3600, EventKind.RECOVERED, "recovered"))
    for i in range(1, 7):
        at = now - 3600 + 600 * i - 30
        journal.record_event(Event(at, EventKind.PREEMPTED, "w-0 preempted", host="w-0"))
        journal.record_event(Event(at + 0.5, EventKind.HEAD_LOST, "head lost", host="w-0"))
    storage = tmp_path / "bucket"
    for step, at in ((1000, now - 100), (3000, now - 90), (5000, now - 80)):  # 200 steps/s
        save(storage, "earlier-run", step, at)
    lines = [
        "[engine] " + CHECKPOINT_SAVED.format(step=s, uri=f"/b/step-{s}", seconds=c)
        for s, c in ((256, 0.2), (512, 0.3), (768, 0.25))
    ]
    head = Head({"earlier": "\n".join(["starting", *lines])})
    published: list[Update] = []
    advisor = LiveAdvisor(
        journal,
        str(storage),
        hosts=4,
        job_logs=lambda: newest_job_logs(head.list_jobs, head.job_logs),
        clock=lambda: now,
    )
    submitter = Submitter(
        head,  # type: ignore[arg-type]
        JobRegistry(journal),
        EventSink(journal, published.append),
        published.append,
        advise=advisor.advised,
    )
    await submitter.submit(SubmitSpec(train_args="--algo ppo --checkpoint-every auto"), "user")

    want = advise(0.25, 600.0, 200.0, DEFAULT_CHECKPOINT_EVERY)
    assert isinstance(want, Advice) and advisor.last == want
    (sent,) = head.specs
    env = sent.runtime_env["env_vars"]
    assert env == want.env() and env[CHECKPOINT_ADVICE_REASON] == "Young/Daly, C=0.25s, M=600s"
    steps = int(env[CHECKPOINT_ADVICE_STEPS])
    assert 3000 < steps < 4000  # Daly's ~17.6 s of training at 200 steps/s

    # The engine given that environment says what it chose and takes it. It chooses while
    # parsing its flags, so a --validate-only run (no SB3, no torch: ~0.3 s of CPU where a
    # tiny real run cost 3 s) shows it; that a real run then checkpoints at the advised
    # interval is tests/engine/test_checkpoint_auto.py's
    # test_auto_run_checkpoints_at_the_advised_interval.
    proc = await asyncio.to_thread(
        subprocess.run,
        [sys.executable, "-m", "engine.train", "--algo", "ppo", "--env", "CartPole-v1",
         "--total-timesteps", "128", "--checkpoint-every", "auto", "--wandb", "disabled",
         "--eval-episodes", "1", "--hparams", '{"n_steps": 64}', "--run-name", "adv",
         "--validate-only"],
        cwd=tmp_path, env=engine_env(tmp_path, **env), capture_output=True, text=True,
        timeout=300,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-3000:]
    chose = f"[engine] checkpoint every {steps} steps (advice from the console: {want.reason})"
    assert chose in proc.stderr, proc.stderr[-2000:]
    assert json.loads(proc.stdout)["config"]["checkpoint_every"] == steps
    journal.close()


async def test_a_resubmission_without_the_old_head_keeps_the_last_cost(tmp_path: Path) -> None:
    journal = Journal(tmp_path / "journal.sqlite")
    logs = ["[engine] " + CHECKPOINT_SAVED.format(step=256, uri="/b", seconds=0.4)]
    calls = {"n": 0}

    async def job_logs() -> list[str]:
        calls["n"] += 1
        if calls["n"] > 1:
            raise ConnectionError("the head is gone")
        return logs

    advisor = LiveAdvisor(journal, "", hosts=1, job_logs=job_logs, clock=time.time)
    first = await advisor.advise(SubmitSpec())
    assert advisor.cost_s == 0.4 and "no preemption seen yet" in first.render()
    await advisor.advise(SubmitSpec())
    assert advisor.cost_s == 0.4
    journal.close()
