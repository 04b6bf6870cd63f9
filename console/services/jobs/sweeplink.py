"""Where a W&B sweep is seen: its page on the W&B server the console's jobs log to.

``<server>/<entity>/<project>/sweeps/<id>``, the server being ``[wandb] base_url`` (the W&B
emulator's URL), else ``$WANDB_BASE_URL``, else W&B's own (its API host ``api.wandb.ai``
serves pages at ``wandb.ai``). A job's own ``WANDB_ENTITY`` / ``WANDB_PROJECT`` env vars win
over the config, as they do in the job. Without an entity there is no URL: W&B's default
entity belongs to the key's user, and only the server knows it.
"""

from __future__ import annotations

import os
from collections.abc import Mapping

from console.config import WandbConfig
from console.services.jobs.spec import SubmitSpec

PUBLIC_API = "https://api.wandb.ai"
PUBLIC_APP = "https://wandb.ai"
ID_PLACEHOLDER = "<id>"  # the form's preview, before W&B has given the sweep its id


def wandb_server(w: WandbConfig, environ: Mapping[str, str] | None = None) -> str:
    environ = os.environ if environ is None else environ
    base = (w.base_url or environ.get("WANDB_BASE_URL") or PUBLIC_API).rstrip("/")
    return PUBLIC_APP if base == PUBLIC_API else base


def wandb_sweep_url(
    w: WandbConfig,
    spec: SubmitSpec,
    sweep_id: str = "",
    environ: Mapping[str, str] | None = None,
) -> str:
    """The sweep page of ``spec`` (a W&B-backend sweep), or "" when it cannot be named.

    ``sweep_id``: the id learned from the job when the spec has none; with neither, the
    URL ends in ``ID_PLACEHOLDER`` (what a form shows before submitting).
    """
    if spec.mode != "sweep" or spec.sweep_backend != "wandb":
        return ""
    own = spec.runtime_env.get("env_vars") or {}

    def setting(name: str, default: str) -> str:
        value = str(own.get(name, "")) if isinstance(own, Mapping) else ""
        return default if not value or value.startswith("$") else value

    entity = setting("WANDB_ENTITY", w.entity)
    project = setting("WANDB_PROJECT", w.project)
    if not entity or not project:
        return ""
    sid = spec.sweep_id or sweep_id or ID_PLACEHOLDER
    return f"{wandb_server(w, environ)}/{entity}/{project}/sweeps/{sid}"
