"""The env the console gives its jobs, and the check of every job's reported env against it."""

from __future__ import annotations

import dataclasses

from console.config import parse_config
from console.secrets import MASK
from console.services.jobs.env import check_job_env, console_job_env, expected_env, masked_env
from console.services.jobs.spec import SubmitSpec, spec_metadata
from console.services.jobs.watcher import JobWatcher, env_event
from console.services.ledger.advice import advise
from console.services.model import JobInfo
from console.services.recovery.diagnosis import job_env_problems


def test_the_console_w_and_b_settings_and_jax_platform_reach_every_job() -> None:
    cfg = parse_config(
        {
            "wandb": {"mode": "online", "project": "capstone", "entity": "lab", "api_key_env": "K"},
            "ray": {"jax_platform": "cpu"},
        }
    )
    assert console_job_env(cfg.wandb, cfg.ray.jax_platform, {"WANDB_DIR": "/w"}) == {
        "WANDB_MODE": "online",
        "WANDB_PROJECT": "capstone",
        "WANDB_ENTITY": "lab",
        "WANDB_API_KEY": "$K",  # a reference, resolved at submit time, never stored
        "PHANTOM_JAX_PLATFORM": "cpu",
        "WANDB_DIR": "/w",
    }
    offline = parse_config({"ray": {"jax_platform": ""}})
    assert console_job_env(offline.wandb, offline.ray.jax_platform) == {
        "WANDB_MODE": "offline",
        "WANDB_PROJECT": "phantom",
    }


def test_jobs_log_to_the_w_and_b_server_the_console_reads_when_one_is_configured() -> None:
    emu = "http://127.0.0.1:8081"
    cfg = parse_config({"wandb": {"mode": "online", "base_url": emu}, "ray": {"jax_platform": ""}})
    assert console_job_env(cfg.wandb, cfg.ray.jax_platform)["WANDB_BASE_URL"] == emu
    offline = parse_config({"wandb": {"base_url": emu}, "ray": {"jax_platform": ""}})
    assert "WANDB_BASE_URL" not in console_job_env(
        offline.wandb, offline.ray.jax_platform
    )  # offline logs nowhere


DEFAULTS = {
    "WANDB_MODE": "online",
    "WANDB_PROJECT": "capstone",
    "WANDB_API_KEY": "$WANDB_API_KEY",
    "PHANTOM_JAX_PLATFORM": "cpu",
}


def test_a_job_submitted_by_hand_is_checked_against_the_console_defaults() -> None:
    job = JobInfo("raysubmit_1", "RUNNING", env={"WANDB_MODE": "offline", "WANDB_API_KEY": ""})
    checked = check_job_env(job, DEFAULTS)
    assert checked.env_problems == (
        "WANDB_MODE='offline', expected 'online'",
        "WANDB_PROJECT not set",
        "WANDB_API_KEY is empty",
        "PHANTOM_JAX_PLATFORM not set",
    )


def test_a_console_job_is_checked_against_what_its_own_spec_gave_it() -> None:
    spec = SubmitSpec(runtime_env={"env_vars": {"WANDB_MODE": "disabled", "HF_TOKEN": "$HF"}})
    job = JobInfo(
        "phantom-single-1",
        "RUNNING",
        metadata=spec_metadata(spec),
        env={
            "WANDB_MODE": "disabled",
            "WANDB_PROJECT": "capstone",
            "WANDB_API_KEY": MASK,
            "PHANTOM_JAX_PLATFORM": "cpu",
        },
    )
    assert expected_env(DEFAULTS, job)["WANDB_MODE"] == "disabled"
    assert expected_env(DEFAULTS, job)["WANDB_API_KEY"] is None  # presence only
    assert check_job_env(job, DEFAULTS).env_problems == ()


def test_reported_env_is_masked_before_anything_keeps_it() -> None:
    key = "k3y-0123456789abcdef"
    env = masked_env({"env_vars": {"WANDB_API_KEY": key, "ECHO": f"key={key}", "MODE": "x"}})
    assert env == {"WANDB_API_KEY": MASK, "ECHO": f"key={MASK}", "MODE": "x"}
    assert masked_env({"pip": ["gymnasium"]}) == {} and masked_env(None) == {}


def test_secret_values_are_never_compared_or_shown() -> None:
    problems = job_env_problems({"TOKEN": "abc"}, {"TOKEN": None, "MISSING_KEY": None})
    assert problems == ("MISSING_KEY not set",)


async def test_each_flagged_job_is_reported_once_and_remembered_flags_are_not() -> None:
    odd = JobInfo("a", "RUNNING", env_problems=("PHANTOM_JAX_PLATFORM not set",))
    listing = [odd, JobInfo("b", "RUNNING"), dataclasses.replace(odd, job_id="c")]

    async def list_jobs() -> list[JobInfo]:
        return listing

    watcher = JobWatcher(list_jobs)
    watcher.already_flagged(["c"])  # journaled by an earlier run
    await watcher.poll()
    assert [j.job_id for j in watcher.new_env_flags()] == ["a"]
    await watcher.poll()
    assert watcher.new_env_flags() == []
    ev = env_event(odd, 5.0)
    assert ev.kind == "job_env" and ev.data == {
        "job_id": "a",
        "problems": ["PHANTOM_JAX_PLATFORM not set"],
    }
    assert ev.message == "job a started without the expected env: PHANTOM_JAX_PLATFORM not set"


def test_jobs_get_the_checkpoint_advice_only_when_the_console_has_one() -> None:
    cfg = parse_config({"ray": {"jax_platform": ""}})
    advised = console_job_env(
        cfg.wandb, cfg.ray.jax_platform, advice=advise(1.2, 3600, 500, current_steps=2048)
    )
    assert advised["PHANTOM_CHECKPOINT_ADVICE_STEPS"] == "46077"
    assert advised["PHANTOM_CHECKPOINT_ADVICE_REASON"] == "Young/Daly, C=1.2s, M=3600s"
    none_yet = console_job_env(
        cfg.wandb, cfg.ray.jax_platform, advice=advise(1.2, None, 500, current_steps=2048)
    )
    assert not any(k.startswith("PHANTOM_CHECKPOINT_ADVICE") for k in none_yet)
