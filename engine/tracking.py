"""The W&B run lifecycle (metric writers: ``engine.metrics``; modes: ``engine.envvars``).

The W&B API key is never handled here: wandb reads ``WANDB_API_KEY`` from the
environment itself. Nothing in this module prints configuration values that
could contain secrets.
"""

from __future__ import annotations

import contextlib
import hashlib
import re
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any


def wandb_run_id(run_name: str, project: str | None) -> str:
    """Deterministic W&B run id for a run name, so a resumed trainer continues the same run."""
    slug = re.sub(r"[^A-Za-z0-9_-]+", "-", run_name).strip("-")[:40] or "run"
    digest = hashlib.sha1(f"{project or ''}/{run_name}".encode()).hexdigest()[:8]
    return f"{slug}-{digest}"


def artifact_name(algo: str, run_name: str) -> str:
    slug = re.sub(r"[^A-Za-z0-9_.-]+", "-", run_name).strip("-.")[:80] or "run"
    return f"phantom-{slug}" if slug.startswith(f"{algo}-") else f"phantom-{algo}-{slug}"


def start_wandb(
    mode: str,
    project: str | None,
    entity: str | None,
    run_name: str,
    config: dict[str, Any],
    resume_id: str | None,
    directory: str | None = None,
    reuse: bool = True,
) -> Any:
    """Start (or continue) a W&B run; reuses a run an agent already started (unless
    ``reuse`` is False: that run's session is gone, see ``end_preempted``)."""
    import wandb

    if reuse and wandb.run is not None:  # started by a W&B sweep agent: log into that run
        wandb.run.config.update(config, allow_val_change=True)
        run = wandb.run
    else:
        run = wandb.init(
            project=project or "phantom",
            entity=entity,
            name=run_name,
            id=resume_id or wandb_run_id(run_name, project),
            resume="allow",
            mode=mode,  # type: ignore[arg-type]
            config=config,
            job_type="train",
            dir=directory,
            settings=wandb.Settings(console="off", x_disable_stats=True),
        )
    run.define_metric("global_step")
    run.define_metric("*", step_metric="global_step")
    return run


@dataclass(frozen=True)
class ModelArtifact:
    """Weights to log as a version of the run's ``model`` artifact (``artifact_name``)."""

    name: str
    files: tuple[Path, ...]
    aliases: tuple[str, ...]
    metadata: dict[str, Any]

    def log_to(self, run: Any) -> None:
        import wandb

        artifact = wandb.Artifact(name=self.name, type="model", metadata=self.metadata)
        for path in self.files:
            artifact.add_file(str(path), name=path.name)
        run.log_artifact(artifact, aliases=list(self.aliases))


def log_final_artifact(
    run: Any, algo: str, run_name: str, files: list[Path], step: int, metadata: dict[str, Any]
) -> str:
    """Log final weights as an artifact with aliases ``latest`` and ``step-<N>``."""
    name = artifact_name(algo, run_name)
    ModelArtifact(name, tuple(files), ("latest", f"step-{step}"), metadata).log_to(run)
    return name


def notice_artifact(
    algo: str, run_name: str, files: list[Path], step: int, metadata: dict[str, Any]
) -> ModelArtifact:
    """The checkpoint written on a preemption notice, as a version of the same artifact:
    aliases ``latest``, ``step-<N>`` and ``preempted``; ``use_notice_artifact`` finds it."""
    return ModelArtifact(
        artifact_name(algo, run_name),
        tuple(files),
        ("latest", f"step-{step}", "preempted"),
        {**metadata, "trigger": "notice"},
    )


def use_notice_artifact(run: Any, algo: str, run_name: str, step: int) -> str:
    """The resumed run uses the notice checkpoint's artifact (lineage: logged by the run
    before its notice, used by the same run id after). Raises what ``use_artifact`` raises,
    e.g. when the notice's end never reached W&B. Returns the reference used."""
    ref = f"{artifact_name(algo, run_name)}:step-{step}"
    run.use_artifact(ref)
    return ref


def end_preempted(
    run: Any,
    row: dict[str, float],
    summary: dict[str, Any],
    code: int,
    reopen: Callable[[], Any],
    artifact: ModelArtifact | None = None,
) -> Any:
    """End a W&B run after a preemption notice: ``preempting``, its last row, its summary,
    the notice checkpoint's ``artifact``, then ``finish(code)`` (which waits for the upload);
    the run on the server ends ``preempted``, not ``running``.

    A spot VM's shutdown sends SIGTERM to every process, wandb-core included, which exits
    at once with what it had not sent yet (its file stream sends every 15 s). Its own
    session does not protect it and signal masks do not (the Go runtime takes SIGTERM
    back). So when the first session is gone, a fresh one (``reopen``: the same run id,
    ``resume="allow"``), started after the signal, writes the end. Returns the run that
    was ended."""
    import wandb

    with contextlib.suppress(Exception):  # any failure of the dead session: open a new one
        _end(run, row, summary, code, artifact)
        return run
    with contextlib.suppress(Exception):
        wandb.teardown()  # forget the dead service, so the next init starts its own
    again = reopen()
    _end(again, row, summary, code, artifact)
    return again


def _end(
    run: Any,
    row: dict[str, float],
    summary: dict[str, Any],
    code: int,
    artifact: ModelArtifact | None,
) -> None:
    run.mark_preempting()
    if row:
        run.log(row)
    run.summary.update(summary)
    if artifact is not None:
        artifact.log_to(run)
    run.finish(exit_code=code)
