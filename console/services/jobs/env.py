"""The environment the console gives the jobs it submits, and what it expects to find there.

Every job gets the console's W&B settings (``WANDB_MODE``/``WANDB_PROJECT``/``WANDB_ENTITY``,
``WANDB_BASE_URL`` when ``wandb.base_url`` is set, and the key as a ``$NAME`` reference when online: resolved from the submitting machine's
environment at submit time, never stored) and ``PHANTOM_JAX_PLATFORM``, the checkpoint
advice when the console has one (``PHANTOM_CHECKPOINT_ADVICE_STEPS`` and its reason, read by
the engine's ``--checkpoint-every auto``; nothing without advice), plus what the backend adds (the emulator's ``WANDB_DIR``). A job's own ``runtime_env.env_vars`` win.

For every job it sees, the console compares the runtime env the cluster reports with those
values (a job's own spec, when phantom submitted it, says what it was given); a job missing
one is flagged (``JobInfo.env_problems``, worded in ``recovery.diagnosis``).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any

from console.config import WandbConfig
from console.secrets import Scrubber, is_secret_name
from console.services.jobs.spec import spec_from_metadata
from console.services.ledger.advice import Advice, NoAdvice, advice_env
from console.services.model import JobInfo
from console.services.recovery.diagnosis import job_env_problems

JAX_PLATFORM = "PHANTOM_JAX_PLATFORM"


def console_job_env(
    w: WandbConfig,
    jax_platform: str = "",
    extra: Mapping[str, str] | None = None,
    advice: Advice | NoAdvice | None = None,
) -> dict[str, str]:
    """The env vars every submitted job gets by default (``$NAME`` values are references):
    where runs log (``[wandb]``), ``ray.jax_platform``, the advice, then ``extra``."""
    env = {"WANDB_MODE": w.mode, "WANDB_PROJECT": w.project}
    if w.entity:
        env["WANDB_ENTITY"] = w.entity
    if w.mode == "online":
        env["WANDB_API_KEY"] = f"${w.api_key_env}"
        if w.base_url:  # another W&B server (the emulator's): the jobs log where we read
            env["WANDB_BASE_URL"] = w.base_url
    if jax_platform:
        env[JAX_PLATFORM] = jax_platform
    env.update(advice_env(advice))
    env.update(extra or {})
    return env


def expected_env(defaults: Mapping[str, str], job: JobInfo) -> dict[str, str | None]:
    """What ``job`` should have: ``defaults``, overridden by its own spec's env vars when
    phantom submitted it. None: must be set, value not compared (secrets, references)."""
    spec = spec_from_metadata(job.metadata)
    own: Mapping[str, Any] = (spec.runtime_env.get("env_vars") or {}) if spec else {}
    out: dict[str, str | None] = {}
    for name, default in defaults.items():
        value = str(own.get(name, default))
        out[name] = None if is_secret_name(name) or value.startswith("$") else value
    return out


def masked_env(runtime_env: Mapping[str, Any] | None) -> dict[str, str]:
    """The env vars of a runtime env as the cluster reports it, secret values masked."""
    env_vars = (runtime_env or {}).get("env_vars") or {}
    if not isinstance(env_vars, Mapping):
        return {}
    plain = {str(k): str(v) for k, v in env_vars.items()}
    masked = Scrubber(environ=plain).data(plain)
    return {str(k): str(v) for k, v in masked.items()}


def check_job_env(job: JobInfo, defaults: Mapping[str, str]) -> JobInfo:
    """``job`` with ``env_problems`` filled in from its reported env."""
    problems = job_env_problems(job.env, expected_env(defaults, job))
    return dataclasses.replace(job, env_problems=problems)
