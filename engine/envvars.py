"""Environment variables the engine reads, in one place (read by name; values never logged
when they could be secret).

===================== ======================================================================
``PHANTOM_STORAGE``   default ``--storage`` of ``engine.train`` (and ``<it>/sweeps`` for
                      ``engine.sweep``): the pod's shared bucket the console sets for jobs
``PHANTOM_JAX_PLATFORM`` the JAX platform(s) of this trainer, e.g. ``cpu`` for SB3 agents on a
                      TPU host so that many agents do not all try to open the TPU; copied to
                      ``JAX_PLATFORMS`` before anything imports jax (it wins over a different
                      ``JAX_PLATFORMS``, with a log line)
``PHANTOM_HOST_IP``   this host's address as the pod emulator publishes it (node name in
                      checkpoints when not inside Ray)
``PHANTOM_NOTICE_GRACE_S`` seconds between a preemption notice and the kill (default 30, as on
                      a GCE spot VM); a trainer that starts while another one is still writing
                      its notice checkpoint waits at most this long for it
``PHANTOM_CHECKPOINT_ADVICE_STEPS`` the interval ``--checkpoint-every auto`` takes (env
                      steps, set by the console when it has advice; unset: the default)
``PHANTOM_CHECKPOINT_ADVICE_REASON`` why (free text the console sets beside it, repeated in
                      the engine's log line)
``WANDB_MODE``        default of ``--wandb`` (online, offline, disabled; ``dryrun`` and
                      ``run`` are wandb's aliases of offline and online)
``WANDB_PROJECT``     default of ``--wandb-project``
``WANDB_ENTITY``      default of ``--wandb-entity``
``WANDB_DIR``         where W&B writes runs (default: next to the run's checkpoints)
``WANDB_API_KEY``     read by wandb itself; the engine only checks that it is set for online
===================== ======================================================================
"""

from __future__ import annotations

import os
import re
import sys

from engine.logs import log

WANDB_MODES = ("online", "offline", "disabled")
_WANDB_ALIASES = {"dryrun": "offline", "run": "online"}
DEFAULT_NOTICE_GRACE_S = 30.0
# JAX platform names (jax_platforms accepts a comma-separated priority list of these)
_JAX_PLATFORM = re.compile(r"^(cpu|tpu|gpu|cuda|rocm|metal)(,(cpu|tpu|gpu|cuda|rocm|metal))*$")


class EnvError(ValueError):
    """An environment variable has a value the engine cannot use (a usage error)."""


def wandb_mode_default() -> str:
    """``--wandb``'s default: ``$WANDB_MODE`` (aliases resolved) or offline."""
    raw = (os.environ.get("WANDB_MODE") or "").strip().lower()
    if not raw:
        return "offline"
    mode = _WANDB_ALIASES.get(raw, raw)
    if mode not in WANDB_MODES:
        raise EnvError(
            f"WANDB_MODE={raw!r} is not one of {', '.join(WANDB_MODES)}; "
            "set it to offline (or pass --wandb offline)"
        )
    return mode


def wandb_defaults() -> dict[str, str | None]:
    """W&B settings a job takes from its environment when no flag is given."""
    return {
        "mode": wandb_mode_default(),
        "project": os.environ.get("WANDB_PROJECT") or None,
        "entity": os.environ.get("WANDB_ENTITY") or None,
        "dir": os.environ.get("WANDB_DIR") or None,
    }


def notice_grace_s() -> float:
    raw = os.environ.get("PHANTOM_NOTICE_GRACE_S", "")
    if not raw.strip():
        return DEFAULT_NOTICE_GRACE_S
    try:
        value = float(raw)
    except ValueError:
        raise EnvError(
            f"PHANTOM_NOTICE_GRACE_S={raw!r} is not a number of seconds; e.g. 30"
        ) from None
    if not 0 <= value <= 3600:
        raise EnvError(f"PHANTOM_NOTICE_GRACE_S={raw!r} must be in [0, 3600] seconds")
    return value


# What the console passes a job for --checkpoint-every auto (re-exported by engine.contract):
# the advised interval in env steps and, optional free text, why.
CHECKPOINT_ADVICE_STEPS = "PHANTOM_CHECKPOINT_ADVICE_STEPS"
CHECKPOINT_ADVICE_REASON = "PHANTOM_CHECKPOINT_ADVICE_REASON"
_MAX_ADVICE_STEPS = 10**12


def checkpoint_advice() -> tuple[int, str] | None:
    """The console's advised checkpoint interval (env steps) and why, or None when unset.

    Raises EnvError naming the variable when it is set to something not a positive integer.
    """
    raw = os.environ.get(CHECKPOINT_ADVICE_STEPS, "")
    if not raw.strip():
        return None
    try:
        steps = int(raw.strip())
    except ValueError:
        raise EnvError(
            f"{CHECKPOINT_ADVICE_STEPS}={raw[:40]!r} is not a whole number of env steps "
            "(e.g. 4096); unset it for the default, or pass --checkpoint-every N"
        ) from None
    if not 1 <= steps <= _MAX_ADVICE_STEPS:
        raise EnvError(
            f"{CHECKPOINT_ADVICE_STEPS}={raw[:40]!r} must be in [1, {_MAX_ADVICE_STEPS}] env "
            "steps; unset it for the default, or pass --checkpoint-every N"
        )
    reason = " ".join(os.environ.get(CHECKPOINT_ADVICE_REASON, "").split())[:200]
    return steps, reason


def jax_platform_request() -> str | None:
    """The validated ``PHANTOM_JAX_PLATFORM`` value (lower case), or None when unset."""
    raw = os.environ.get("PHANTOM_JAX_PLATFORM", "").strip().lower()
    if not raw:
        return None
    if not _JAX_PLATFORM.match(raw):
        raise EnvError(
            f"PHANTOM_JAX_PLATFORM={raw!r} is not a JAX platform; use cpu (SB3 agents on a "
            "TPU host), tpu, gpu, or a comma list such as tpu,cpu"
        )
    return raw


def apply_jax_platform() -> str | None:
    """Honour ``PHANTOM_JAX_PLATFORM``: set ``JAX_PLATFORMS`` for this process and its children.

    Call it before anything imports jax (the engine's entry points do, first thing). If jax
    is already imported its config is updated as well, which works until a backend is
    initialised. Returns the platform applied, or None. Raises EnvError on a bad value.
    """
    platform = jax_platform_request()
    if platform is None:
        return None
    current = os.environ.get("JAX_PLATFORMS", "")
    if current and current.lower() != platform:
        log(f"JAX_PLATFORMS={current} overridden by PHANTOM_JAX_PLATFORM={platform}")
    os.environ["JAX_PLATFORMS"] = platform
    if "jax" in sys.modules:
        import jax

        jax.config.update("jax_platforms", platform)
    return platform
