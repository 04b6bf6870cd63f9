"""One training run as a small state object: set up (fresh or resumed), train in chunks that
end at checkpoint boundaries, checkpoint, and finish; or, on a preemption notice, checkpoint
at the step reached and raise ``TrainingPreempted``.

Preemption safety
    Every ``checkpoint_every`` steps the model (plus the replay buffer for DQN and
    VecNormalize statistics when used) is written through a ``CheckpointStore``
    (``engine.storage``: atomic, manifest last). On start the latest complete checkpoint is
    loaded and training continues with ``reset_num_timesteps=False``; stderr says which
    checkpoint and step. A notice (SIGTERM, see ``engine.notice``) adds one checkpoint at the
    exact step reached, so a resumed run loses no step. A checkpoint asked for
    (``engine.notice.ASK_SIGNAL``) is the same checkpoint without the stop: training goes on.

Outputs
    Progress lines and events on stderr; metrics to TensorBoard (``<run dir>/tensorboard``)
    and to W&B (online, offline or disabled). Final weights go to ``<run>/final`` and to a
    W&B artifact with aliases ``latest`` and ``step-<N>``.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import socket
import sys
import tempfile
import time
import uuid
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from engine.contract import CHECKPOINT_SAVED, TRAINER_STEP
from engine.envvars import DEFAULT_NOTICE_GRACE_S, EnvError, notice_grace_s
from engine.exit_codes import EX_FAILURE, EX_PREEMPTED
from engine.learning import (
    StepGate,
    algo_class,
    alpha_value,
    evaluate,
    fresh_model,
    learn_exactly,
    make_vec_env,
)
from engine.logs import log
from engine.notice import CheckpointAsk, PreemptionNotice, TrainingPreempted, notice_line
from engine.storage import (
    MANIFEST,
    CheckpointInfo,
    CheckpointStore,
    FsspecCheckpointStore,
    build_manifest,
    local_run_dir,
)
from engine.trainconfig import TrainConfig, TrainResult, UsageError, validate_config


def node_name() -> str:
    """Where this trainer runs: the Ray node IP inside Ray, else the host's IP as the
    pod emulator publishes it (``PHANTOM_HOST_IP``), else the host name."""
    if "ray" in sys.modules:
        import ray

        if ray.is_initialized():
            return str(ray.util.get_node_ip_address())
    return os.environ.get("PHANTOM_HOST_IP") or socket.gethostname()


def check_resume_compatible(cfg: TrainConfig, info: CheckpointInfo) -> None:
    saved = info.manifest.get("config", {})
    for key, flag in (("algo", "--algo"), ("env", "--env"), ("n_envs", "--n-envs")):
        if key in saved and saved[key] != getattr(cfg, key):
            raise UsageError(
                f"{flag} {getattr(cfg, key)} differs from the checkpoint at {info.uri} "
                f"({flag} {saved[key]}); resume with the same value or pick a new --run-name"
            )
    if info.step > cfg.total_timesteps:
        raise UsageError(
            f"--total-timesteps {cfg.total_timesteps} is below the checkpoint step {info.step} "
            f"({info.uri}); raise it or pick a new --run-name"
        )


class Trainer:
    """Train (resuming if a checkpoint exists) until exactly ``cfg.total_timesteps``."""

    def __init__(
        self,
        cfg: TrainConfig,
        store: CheckpointStore | None = None,
        extra_callbacks: Sequence[Any] = (),
        notice: PreemptionNotice | None = None,
        node: str | None = None,
        ask: CheckpointAsk | None = None,
    ) -> None:
        if not cfg.run_name:
            validate_config(cfg, local_checks=False)
        self.cfg = cfg
        self.store: CheckpointStore = store or FsspecCheckpointStore(
            cfg.storage, cfg.run_name, keep=cfg.keep_checkpoints
        )
        self.extra_callbacks = list(extra_callbacks)
        self.notice = notice or PreemptionNotice()
        self.ask = ask or CheckpointAsk()  # a checkpoint now, and train on (engine.notice)
        self.node = node or node_name()
        self.attempt = uuid.uuid4().hex[:12]
        self.started = time.monotonic()
        self.latest: CheckpointInfo | None = None
        self.model: Any = None
        self.venv: Any = None
        self.vecnorm: Any = None
        self.auto_cb: Any = None
        self.alpha0: float | None = None
        self.wandb_run: Any = None
        self._wandb_reopen: Any = None  # the same W&B run in a fresh session (after a notice)
        self.progress: Any = None
        self.gate: StepGate | None = None
        self.callback: Any = None
        self.log_interval = 1
        self.work = Path(".")
        self.saved_step: int | None = None  # step of the newest complete checkpoint
        self.checkpoint_uri: str | None = None
        self.snapshot_dir: Path | None = None  # local copy of the newest checkpoint's files
        self.preempted = False
        self.training_stopped: float | None = None  # monotonic end of the last learn call
        self._saved: tuple[int, str, float] | None = None  # a save whose pause is not over

    @property
    def resumed_from_step(self) -> int:
        return self.latest.step if self.latest else 0

    # ------------------------------------------------------------------ setup
    def _load_or_create(self) -> None:
        from stable_baselines3.common.vec_env import VecNormalize

        cfg = self.cfg
        self.venv = make_vec_env(cfg, self.alpha0)
        if self.latest is not None:
            ckpt_dir = self.store.fetch(self.latest, self.work / "resume")
            log(
                f"resuming {cfg.run_name} from checkpoint {self.latest.uri} at step "
                f"{self.latest.step}"
            )
            if (ckpt_dir / "vecnormalize.pkl").exists():
                self.vecnorm = self.venv = VecNormalize.load(
                    str(ckpt_dir / "vecnormalize.pkl"), self.venv
                )
            elif cfg.vec_normalize:
                self.vecnorm = self.venv = VecNormalize(self.venv)
            self.model = algo_class(cfg.algo).load(
                str(ckpt_dir / "model.zip"), env=self.venv, device=cfg.device
            )
            if (ckpt_dir / "replay_buffer.pkl").exists():
                self.model.load_replay_buffer(str(ckpt_dir / "replay_buffer.pkl"))
            if self.model.num_timesteps != self.latest.step:
                raise RuntimeError(
                    f"checkpoint {self.latest.uri} says step {self.latest.step} but model has "
                    f"{self.model.num_timesteps}"
                )
            self.saved_step, self.checkpoint_uri = self.latest.step, self.latest.uri
        else:
            log(f"starting {cfg.run_name} from scratch (no checkpoint in {self.store.description})")
            if cfg.vec_normalize:
                self.vecnorm = self.venv = VecNormalize(self.venv)
            try:
                self.model = fresh_model(cfg, self.venv)
            except (ValueError, TypeError, AssertionError) as exc:
                raise UsageError(f"--hparams {json.dumps(cfg.hparams)}: {exc}") from None

    def _start_outputs(self) -> None:
        from stable_baselines3.common.logger import Logger, TensorBoardOutputFormat

        from engine.metrics import ProgressWriter, WandbWriter
        from engine.tracking import start_wandb

        cfg = self.cfg
        run_dir = local_run_dir(cfg.storage, cfg.run_name)
        tb_dir = run_dir / "tensorboard"
        try:  # checked up front (check_storage_writable); this catches what changed since
            tb_dir.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise UsageError(
                f"--storage: {cfg.storage!r}: TensorBoard's directory {tb_dir} cannot be "
                f"created ({exc.strerror or exc}); choose a writable directory"
            ) from None
        self.progress = ProgressWriter(
            cfg.total_timesteps, min_interval_steps=cfg.log_every, on_dump=self.log_step
        )
        writers: list[Any] = [self.progress, TensorBoardOutputFormat(str(tb_dir))]
        # no W&B session for a run that is already being preempted: checkpoint first
        if cfg.wandb != "disabled" and not self.notice.requested:

            def start(resume_id: str | None, reuse: bool = True) -> Any:
                return start_wandb(
                    cfg.wandb,
                    cfg.wandb_project,
                    cfg.wandb_entity,
                    cfg.run_name,
                    {**cfg.to_dict(), "resumed_from_step": self.resumed_from_step},
                    resume_id,
                    # offline runs stay next to the checkpoints (for `wandb sync`) unless
                    # WANDB_DIR says otherwise
                    directory=os.environ.get("WANDB_DIR") or str(run_dir),
                    reuse=reuse,
                )

            self.wandb_run = start(
                self.latest.manifest.get("wandb_run_id") if self.latest else None
            )
            run_id = str(self.wandb_run.id)
            # the same run in a fresh session, after a notice took wandb-core down
            self._wandb_reopen = lambda: start(run_id, reuse=False)
            writers.append(WandbWriter(self.wandb_run, lambda: self.notice.requested))
            self._use_notice_artifact()
        self.model.set_logger(Logger(folder=str(tb_dir), output_formats=writers))

    def _build_callbacks(self) -> None:
        from stable_baselines3.common.callbacks import BaseCallback, CallbackList
        from stable_baselines3.common.on_policy_algorithm import OnPolicyAlgorithm

        total = self.cfg.total_timesteps
        trainer = self

        class _Bookkeeping(BaseCallback):
            """Global progress for schedules; alpha in the logs."""

            def _on_training_start(self) -> None:
                self.model._total_timesteps = total

            def _on_rollout_end(self) -> None:
                alpha = trainer.alpha_now()
                if alpha is not None:
                    self.logger.record("behaviour/alpha", float(alpha))

            def _on_training_end(self) -> None:
                # the loop stops here: a save's pause starts at the learn call's end
                trainer.training_stopped = time.monotonic()

            def _on_rollout_start(self) -> None:
                trainer.log_saved()  # ... and ends when the next learn call collects again

            def _on_step(self) -> bool:
                return True

        # stops collection at the next step for a notice, or for a checkpoint asked now
        self.gate = StepGate(lambda: self.notice.requested or self.ask.pending)
        callbacks: list[Any] = [self.gate, _Bookkeeping()]
        if self.auto_cb is not None:
            callbacks.append(self.auto_cb)
        callbacks.extend(self.extra_callbacks)
        self.callback = CallbackList(callbacks)
        if isinstance(self.model, OnPolicyAlgorithm):
            steps = self.model.n_steps * self.model.n_envs
            self.log_interval = max(1, self.cfg.log_every // steps)
        else:
            self.log_interval = 4  # episodes

    def setup(self) -> None:
        import torch

        cfg = self.cfg
        torch.set_num_threads(cfg.torch_threads)
        waiter = getattr(self.store, "wait_for_notice", None)
        if waiter is not None:
            waiter()  # a previous attempt may still be writing its notice checkpoint
        self.latest = self.store.latest()
        if self.latest is not None:
            check_resume_compatible(cfg, self.latest)
        self.alpha0 = alpha_value(cfg)
        if cfg.alpha == "auto":
            saved = self.latest.manifest.get("alpha_current") if self.latest else None
            self.alpha0 = float(saved) if saved is not None else 0.5
            try:
                from engine.jax_profiles.online import AutoAlphaCallback
            except ImportError as exc:
                raise UsageError(
                    f"--alpha auto needs engine.jax_profiles.online.AutoAlphaCallback ({exc})"
                ) from None
        self.work = Path(tempfile.mkdtemp(prefix=f"phantom-{cfg.run_name}-"))
        self._load_or_create()
        if cfg.is_behaviour_env and cfg.alpha == "auto":
            family = self.venv.get_attr("family")[0]
            self.auto_cb = AutoAlphaCallback(
                family, alpha0=float(self.alpha0 or 0.5), seed=cfg.seed, verbose=0
            )
        self._start_outputs()  # first writes happen here, after every check
        self._build_callbacks()

    # ------------------------------------------------------------------ checkpoints
    def alpha_now(self) -> float | None:
        return self.auto_cb.alpha if self.auto_cb is not None else self.alpha0

    def _snapshot(self, kind: str, trigger: str) -> tuple[Path, dict[str, Any]]:
        model = self.model
        out = self.work / f"{kind}-{model.num_timesteps}-{trigger}"
        if out.exists():
            shutil.rmtree(out)
        out.mkdir(parents=True)
        model.save(str(out / "model.zip"))
        if kind == "ckpt" and getattr(model, "replay_buffer", None) is not None:
            model.save_replay_buffer(str(out / "replay_buffer.pkl"))
        if self.vecnorm is not None:
            self.vecnorm.save(str(out / "vecnormalize.pkl"))
        alpha = self.alpha_now()
        manifest = build_manifest(
            out,
            model.num_timesteps,
            {
                "kind": kind,
                "trigger": trigger,
                "run_name": self.cfg.run_name,
                "config": self.cfg.to_dict(),
                "alpha_current": None if alpha is None else float(alpha),
                "wandb_run_id": getattr(self.wandb_run, "id", None),
                "attempt": self.attempt,
                "node": self.node,
                "resumed_from_step": self.resumed_from_step,
            },
        )
        return out, manifest

    def metrics_now(self, extra: dict[str, float] | None = None) -> dict[str, Any]:
        values = self.progress.last_values if self.progress is not None else {}
        return {
            "num_timesteps": int(self.model.num_timesteps),
            "resumed_from_step": self.resumed_from_step,
            "attempt": self.attempt,
            "node": self.node,
            **values,
            **(extra or {}),
        }

    def checkpoint(self, trigger: str) -> str:
        """Write a complete checkpoint at the current step (``interval``, ``total``, ``notice``).

        Its line (``CHECKPOINT_SAVED``) gives the pause the save causes to training, not the
        write alone: from the end of the learn call before it (its last update) to the first
        rollout of the next one (serialisation, upload, manifest, pruning, and every
        callback's training end/start hooks and SB3's set-up, which each chunk's learn call
        runs once more). So an interval save is logged when training resumes.
        """
        stopped = self.training_stopped if self.training_stopped is not None else time.monotonic()
        self.training_stopped = None
        out, manifest = self._snapshot("ckpt", trigger)
        uri = self.store.save(out, self.model.num_timesteps, manifest, self.metrics_now())
        self._keep_snapshot(out)
        self.saved_step, self.checkpoint_uri = int(self.model.num_timesteps), uri
        self.log_step(self.saved_step)
        if trigger != "notice":
            self.log_saved()  # an earlier one still pending ends here
            self._saved = (self.saved_step, uri, stopped)
            if trigger not in ("interval", "asked"):  # no training follows
                self.log_saved()
        return uri

    def _answer_ask(self) -> None:
        """A checkpoint asked for: written at the step reached, then training goes on."""
        uri = self.checkpoint("asked")
        log(self.ask.answer(int(self.model.num_timesteps), uri))
        if self.gate is not None:
            self.gate.stopped = False

    def log_step(self, step: int) -> None:
        """The step line (``TRAINER_STEP``): the ledger counts redone work from these."""
        log(
            TRAINER_STEP.format(
                run=self.cfg.run_name,
                attempt=self.attempt,
                resumed_from=self.resumed_from_step,
                step=int(step),
                at=time.time(),
            )
        )

    def _keep_snapshot(self, out: Path) -> None:
        """Keep the newest checkpoint's local files (the previous ones go): a notice logs
        them to W&B without reading the checkpoint back from the bucket."""
        if self.snapshot_dir is not None and self.snapshot_dir != out:
            shutil.rmtree(self.snapshot_dir, ignore_errors=True)
        self.snapshot_dir = out

    def log_saved(self) -> None:
        """Log the pending save's line with its pause up to now (no-op without one)."""
        if self._saved is None:
            return
        step, uri, stopped = self._saved
        self._saved = None
        log(CHECKPOINT_SAVED.format(step=step, uri=uri, seconds=time.monotonic() - stopped))

    def _preempted(self) -> TrainingPreempted:
        """Checkpoint at the step reached (unless one is there already), log, build the error."""
        self.log_saved()  # a save just before the notice: training paused until now
        step = int(self.model.num_timesteps)
        if self.saved_step != step or self.checkpoint_uri is None:
            try:
                grace = notice_grace_s()
            except EnvError:  # checked at start; never let it stop the checkpoint
                grace = DEFAULT_NOTICE_GRACE_S
            begin = getattr(self.store, "begin_notice", None)
            if begin is not None:
                begin(
                    {
                        "step": step,
                        "node": self.node,
                        "host": socket.gethostname(),
                        "pid": os.getpid(),
                        "attempt": self.attempt,
                        "noticed_unix": self.notice.received_unix,
                        "deadline_unix": (self.notice.received_unix or time.time()) + grace,
                    }
                )
            self.checkpoint("notice")
        assert self.checkpoint_uri is not None
        self.preempted = True
        error = TrainingPreempted(
            step, self.checkpoint_uri, self.notice.elapsed(), self.notice.source or "notice"
        )
        log(notice_line(error.step, error.uri, error.seconds, error.source))
        try:
            # before the marker goes: a retry of this trainer waits for it, so the resumed
            # run starts after this one ended and finds the checkpoint's artifact
            self.close_wandb()
        finally:
            end = getattr(self.store, "end_notice", None)
            if end is not None:
                end()
        return error

    # ------------------------------------------------------------------ the run
    def _train_to_total(self) -> bool:
        """Train in checkpoint-sized chunks; False when a notice stopped it."""
        model, total, every = self.model, self.cfg.total_timesteps, self.cfg.checkpoint_every
        while model.num_timesteps < total:
            if self.notice.requested:
                return False
            if self.ask.pending:
                self._answer_ask()
            chunk_end = min((model.num_timesteps // every + 1) * every, total)
            steps = chunk_end - model.num_timesteps
            if not learn_exactly(model, steps, self.callback, self.log_interval, self.gate):
                if self.notice.requested:
                    return False
                continue  # stopped for a checkpoint asked now: answered at the loop's top
            if chunk_end < total:
                self.checkpoint("interval")
        return not self.notice.requested

    def _finish(self) -> TrainResult:
        from engine.tracking import log_final_artifact

        cfg, model = self.cfg, self.model
        eval_metrics = evaluate(model, cfg, self.vecnorm, cfg.eval_episodes, self.alpha_now())
        if self.notice.requested:
            raise self._preempted()
        if eval_metrics:
            for key, value in eval_metrics.items():
                model.logger.record(key, value)
            model.logger.dump(step=model.num_timesteps)
        final_dir, final_manifest = self._snapshot("final", "total")
        final_uri = self.store.save_final(
            final_dir, model.num_timesteps, final_manifest, self.metrics_now(eval_metrics)
        )
        self.log_step(model.num_timesteps)
        log(f"final weights step={model.num_timesteps} at {final_uri}")
        artifact = wandb_dir = None
        if self.wandb_run is not None:
            files = sorted(p for p in final_dir.iterdir() if p.name != MANIFEST)
            artifact = log_final_artifact(
                self.wandb_run,
                cfg.algo,
                cfg.run_name,
                files,
                model.num_timesteps,
                {"run_name": cfg.run_name, "step": model.num_timesteps, "final_uri": final_uri},
            )
            self.wandb_run.summary.update({**eval_metrics, "num_timesteps": model.num_timesteps})
            wandb_dir = str(getattr(self.wandb_run, "dir", "") or "") or None
            log(f"W&B artifact {artifact} aliases latest, step-{model.num_timesteps}")
            self.wandb_run.finish()
            self.wandb_run = None
        return TrainResult(
            run_name=cfg.run_name,
            algo=cfg.algo,
            env=cfg.env,
            seed=cfg.seed,
            num_timesteps=int(model.num_timesteps),
            total_timesteps=cfg.total_timesteps,
            resumed_from_step=self.resumed_from_step,
            resumed_from=self.latest.uri if self.latest else None,
            final_uri=final_uri,
            checkpoint_uri=self.checkpoint_uri,
            wall_seconds=time.monotonic() - self.started,
            metrics={**self.progress.last_values, **eval_metrics},
            wandb_artifact=artifact,
            wandb_run_dir=wandb_dir,
            wandb_mode=cfg.wandb,
            attempt=self.attempt,
            node=self.node,
        )

    def run(self) -> TrainResult:
        """Set up, train to the total, finish. Raises TrainingPreempted after a notice
        checkpoint, UsageError for config problems found late (nothing written then)."""
        try:
            with self.ask.installed(self.cfg.run_name):
                self.setup()
                trained = self._train_to_total()
            if not trained:
                raise self._preempted()
            if self.saved_step != self.model.num_timesteps:
                self.checkpoint("total")  # before evaluation: a notice there finds it ready
            return self._finish()
        finally:
            self.log_saved()
            self.close()

    def _end_wandb_preempted(self) -> None:
        """The run's last row (at the notice checkpoint's step) and summary reach W&B, and
        the run ends preempted, even when the notice's SIGTERM took wandb-core down."""
        from engine.tracking import end_preempted

        step = int(self.model.num_timesteps) if self.model is not None else 0
        values = self.progress.last_values if self.progress is not None else {}
        row = {**values, "global_step": float(step)}
        summary = {
            "num_timesteps": step,
            "preempted_at_step": step,
            "checkpoint_uri": self.checkpoint_uri,
        }
        end_preempted(
            self.wandb_run, row, summary, EX_PREEMPTED, self._wandb_reopen, self._notice_artifact()
        )

    def _notice_artifact(self) -> Any:
        """The notice checkpoint's weights (as the final artifact's: no replay buffer) as a
        version of the run's model artifact; None without the checkpoint's local files."""
        from engine.tracking import notice_artifact

        snap, step = self.snapshot_dir, self.saved_step
        if snap is None or step is None or not snap.is_dir():
            return None
        files = sorted(p for p in snap.iterdir() if p.name not in (MANIFEST, "replay_buffer.pkl"))
        metadata = {
            "run_name": self.cfg.run_name,
            "step": step,
            "checkpoint_uri": self.checkpoint_uri,
            "node": self.node,
            "attempt": self.attempt,
        }
        return notice_artifact(self.cfg.algo, self.cfg.run_name, files, step, metadata)

    def _use_notice_artifact(self) -> None:
        """A run resumed from a notice checkpoint uses that checkpoint's artifact (online)."""
        from engine.tracking import use_notice_artifact

        latest = self.latest
        if latest is None or latest.manifest.get("trigger") != "notice":
            return
        if self.cfg.wandb != "online":  # the SDK resolves an artifact by name on the server
            return
        try:
            ref = use_notice_artifact(self.wandb_run, self.cfg.algo, self.cfg.run_name, latest.step)
        except Exception as exc:  # lineage only: the checkpoint itself came from the store
            log(f"W&B artifact of the notice checkpoint not used: {type(exc).__name__}: {exc}")
            return
        log(f"W&B run uses artifact {ref} (the notice checkpoint resumed from)")

    def close_wandb(self) -> None:
        """End the W&B run: preempted (with its notice checkpoint) or failed; no-op without one."""
        if self.wandb_run is None:
            return
        try:
            if self.preempted:
                self._end_wandb_preempted()
            else:
                self.wandb_run.finish(exit_code=EX_FAILURE)
        except Exception as exc:  # never let W&B hide the real outcome: say it, go on
            log(f"W&B run could not be ended: {type(exc).__name__}: {exc}")
        self.wandb_run = None

    def close(self) -> None:
        self.close_wandb()
        if self.model is not None and getattr(self.model, "_logger", None) is not None:
            with contextlib.suppress(Exception):
                self.model.logger.close()
        if self.venv is not None:
            self.venv.close()
        if self.work != Path("."):
            shutil.rmtree(self.work, ignore_errors=True)


def run_training(
    cfg: TrainConfig,
    store: CheckpointStore | None = None,
    extra_callbacks: Sequence[Any] = (),
    notice: PreemptionNotice | None = None,
    node: str | None = None,
) -> TrainResult:
    """Train until exactly ``cfg.total_timesteps`` (see ``Trainer``).

    Without a ``notice`` one is made, handling SIGTERM while training when called on the
    main thread. Raises TrainingPreempted after a notice checkpoint.
    """
    if notice is not None:
        return Trainer(cfg, store, extra_callbacks, notice, node).run()
    with PreemptionNotice().installed() as own:
        return Trainer(cfg, store, extra_callbacks, own, node).run()
