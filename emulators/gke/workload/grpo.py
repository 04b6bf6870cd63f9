"""Emulated GRPO trainer (MaxText + Tunix, GPT-OSS 20B): small, CPU, no model download.

``python -m emulators.gke.workload.grpo key=value ...`` with MaxText-style
overrides. It prints MaxText-like lines, writes TensorBoard events with tensorboard's
own writer under ``{base_output_directory}/{run_name}/tensorboard/`` using the tags Tunix
writes (``<prefix>/<mode>/<name>``, see TUNIX_TAGS), checkpoints every
``checkpoint_period`` steps under ``.../checkpoints/<step>/`` (atomically), resumes from
the latest complete checkpoint, and on SIGTERM saves the step it reached and exits 143
(resumable) so a preemption with notice loses no step.

It can be asked for a checkpoint now, and trains on, when its container names the signal that
asks (``PHANTOM_CHECKPOINT_SIGNAL=SIGUSR2``): after the step in progress the coordinator saves
a checkpoint at that step, and every process says so in one line (``ASKED_LINE``). Without
the variable the signal keeps its default action, as a trainer that takes no asks would.
"""

from __future__ import annotations

import math
import os
import random
import re
import signal
import socket
import sys
import time
from pathlib import Path
from types import FrameType

from emulators.gke.workload.storage import (
    StorageError,
    latest_checkpoint,
    local_path,
    read_state,
    remove_stale_tmp,
    write_checkpoint,
)

# Tunix's RL metrics logger writes f"{prefix}/{mode}/{name}" where the buffered metric
# "a/b/c" is split into prefix "a" and name "b/c", and names without "/" get prefix
# "global" (tunix/rl/rl_cluster.py, tunix/sft/metrics_logger.py MetricsLogger.log).
TUNIX_TAGS = (
    "rewards/train/mean",  # reward_manager: rewards/mean
    "rewards/train/sum",
    "rewards/train/min",
    "rewards/train/max",
    "rewards/train/score/mean",  # grpo_learner: rewards/score/mean ("score/mean" in the doc)
    "completions/train/mean_length",
    "completions/train/max_length",
    "completions/train/min_length",
    "global/train/actor_dequeue_time",  # rl_learner: actor_dequeue_time (async rollout)
    "perf/train/global_step_time",  # perf/export.py: perf/global_step_time
    "perf/train/mean/rollout_time",
    "perf/train/sum/rollout_time",
    "perf/train/weight_sync_time",
    "actor/train/loss",  # peft_trainer with metrics_prefix "actor"
    "actor/train/perplexity",
    "actor/train/learning_rate",
)

EXIT_PREEMPTED = 143  # 128 + SIGTERM: in xpk's restart-on-exit-codes (42, 127-255)
ASK_ENV = "PHANTOM_CHECKPOINT_SIGNAL"  # the signal that asks for a checkpoint now
# After the log prefix; the console finds it in the pod's log (the path: the coordinator's).
ASKED_LINE = "Asked for a checkpoint ({signal}): {what} at step {step}; training on"


def log(msg: str) -> None:
    print(f"I{time.strftime('%m%d %H:%M:%S')} {os.getpid()} {msg}", flush=True)


def parse(argv: list[str]) -> dict[str, str]:
    cfg: dict[str, str] = {}
    for arg in argv:
        if arg.endswith((".yml", ".yaml")):
            cfg["config_file"] = arg
            continue
        key, sep, value = arg.partition("=")
        if not sep:
            raise SystemExit(f"error: expected key=value, got {arg!r}")
        cfg[key.strip()] = value
    return cfg


def process_index() -> int:
    """0 for the coordinator host: completion index 0 of the first slice's job."""
    idx = int(os.environ.get("JOB_COMPLETION_INDEX", "0") or 0)
    m = re.search(r"-(\d+)-(\d+)$", os.environ.get("HOSTNAME", ""))
    slice_id = int(os.environ.get("MEGASCALE_SLICE_ID", m.group(1) if m else "0") or 0)
    return slice_id * 1000 + idx


def metric_values(step: int, attempt: int, step_time: float) -> dict[str, float]:
    rng = random.Random(step * 7919 + attempt)
    progress = 1 - math.exp(-step / 40)
    reward = 0.15 + 0.7 * progress + rng.uniform(-0.05, 0.05)
    length = 180 + 220 * progress + rng.uniform(-15, 15)
    rollout = step_time * 0.6 * rng.uniform(0.9, 1.1)
    loss = 0.9 * (1 - progress) + 0.05 + rng.uniform(-0.02, 0.02)
    return {
        "rewards/train/mean": reward,
        "rewards/train/sum": reward * 4,
        "rewards/train/min": reward - 0.3,
        "rewards/train/max": reward + 0.2,
        "rewards/train/score/mean": reward - 0.04,
        "completions/train/mean_length": length,
        "completions/train/max_length": length + 300,
        "completions/train/min_length": max(length - 150, 1),
        "global/train/actor_dequeue_time": step_time * 0.05 * rng.uniform(0.5, 1.5),
        "perf/train/global_step_time": step_time * rng.uniform(0.95, 1.05),
        "perf/train/mean/rollout_time": rollout,
        "perf/train/sum/rollout_time": rollout * 4,
        "perf/train/weight_sync_time": step_time * 0.02,
        "actor/train/loss": loss,
        "actor/train/perplexity": math.exp(loss),
        "actor/train/learning_rate": 3e-6,
    }


class TensorBoard:
    """tensorboard's own EventFileWriter; one new event file per process, as in life."""

    def __init__(self, logdir: Path, flush_steps: int = 1) -> None:
        """``flush_steps``: the steps a metrics logger buffers before it writes and flushes
        them (1: each step at once). Between flushes the newest steps are on no disk; a
        SIGKILL loses them, a SIGTERM's close writes them."""
        from tensorboard.compat.proto import event_pb2, summary_pb2
        from tensorboard.summary.writer.event_file_writer import EventFileWriter

        logdir.mkdir(parents=True, exist_ok=True)
        self._event, self._summary = event_pb2.Event, summary_pb2.Summary
        self._writer = EventFileWriter(str(logdir), flush_secs=3600)
        self._every = max(1, flush_steps)
        self._held: list[object] = []

    def scalars(self, step: int, values: dict[str, float]) -> None:
        summary = self._summary(
            value=[self._summary.Value(tag=t, simple_value=float(v)) for t, v in values.items()]
        )
        self._held.append(self._event(wall_time=time.time(), step=step, summary=summary))
        if len(self._held) >= self._every:
            self.flush()

    def flush(self) -> None:
        for event in self._held:
            self._writer.add_event(event)
        self._held.clear()
        self._writer.flush()

    def close(self) -> None:
        self.flush()
        self._writer.close()


def main(argv: list[str] | None = None) -> int:
    cfg = parse(sys.argv[1:] if argv is None else argv)
    stop = {"signal": 0}

    def on_term(signum: int, _frame: FrameType | None) -> None:
        # Finish the current step, then save and exit; a second SIGTERM changes nothing.
        stop["signal"] = signum

    signal.signal(signal.SIGTERM, on_term)
    asked = {"signal": ""}
    ask_name = os.environ.get(ASK_ENV, "")
    if ask_name:

        def on_ask(signum: int, _frame: FrameType | None) -> None:
            asked["signal"] = signal.Signals(signum).name

        signal.signal(signal.Signals[ask_name], on_ask)
    run_name = cfg.get("run_name") or "grpo-run"
    base = cfg.get("base_output_directory", "")
    steps = int(cfg.get("steps", "100"))
    period = max(int(cfg.get("checkpoint_period", "20")), 1)
    step_time = float(cfg.get("step_time", "1.0"))
    token_env = cfg.get("hf_token_env", "HF_TOKEN")
    for key in (
        "model_name",
        "run_name",
        "base_output_directory",
        "load_parameters_path",
        "steps",
        "checkpoint_period",
        "enable_tunix_perf_metrics",
    ):
        log(f"Config param {key}: {cfg.get(key, '')}")
    log(
        f"Config param hf_access_token: {'<set from $' + token_env + '>' if os.environ.get(token_env) else '<unset>'}"
    )
    if not base:
        log("ERROR: base_output_directory is required")
        return 2
    try:
        out = local_path(base) / run_name
        params = cfg.get("load_parameters_path", "")
        if params and not local_path(params).exists():
            log(f"ERROR: load_parameters_path {params} does not exist")
            return 1
    except StorageError as exc:
        log(f"ERROR: {exc}")
        return 2
    pid = process_index()
    writer = pid == 0
    ckpt_dir = out / "checkpoints"
    log(
        f"System Information: Jax Version: 0.7.2 (emulated), host {os.environ.get('HOSTNAME') or socket.gethostname()}, "
        f"process_index {pid}, devices: 4 x TPU v5p (emulated on CPU)"
    )
    start, attempt = 0, 0
    latest = latest_checkpoint(ckpt_dir)
    if latest is None:
        log("No existing checkpoints found, not restoring checkpoint.")
        if params:
            log(f"Loading parameters from {params}")
    else:
        state = read_state(ckpt_dir, latest)
        start, attempt = latest, int(str(state.get("attempt", 0))) + 1
        log(f"Restoring checkpoint from {ckpt_dir / str(latest)} (step {latest})")
    tb = None
    if writer:
        remove_stale_tmp(ckpt_dir)
        ckpt_dir.mkdir(parents=True, exist_ok=True)
        tb = TensorBoard(out / "tensorboard", int(cfg.get("tb_flush_steps") or 1))
        log(f"TensorBoard logs: {out / 'tensorboard'}")
    step = start
    try:
        while step < steps:
            if stop["signal"]:
                break
            t0 = time.monotonic()
            deadline = t0 + step_time
            while time.monotonic() < deadline:
                time.sleep(min(0.05, max(deadline - time.monotonic(), 0)))
            step += 1
            elapsed = time.monotonic() - t0
            values = metric_values(step, attempt, elapsed)
            print(
                f"completed step: {step}, seconds: {elapsed:.3f}, TFLOP/s/device: "
                f"{180.0 * step_time / max(elapsed, 1e-6):.3f}, Tokens/s/device: "
                f"{values['completions/train/mean_length'] * 8 / max(elapsed, 1e-6):.3f}, "
                f"total_weights: 8192, loss: {values['actor/train/loss']:.3f}",
                flush=True,
            )
            if tb is not None:
                tb.scalars(step, values)
                if step % period == 0 or step == steps:
                    path = write_checkpoint(ckpt_dir, step, {"step": step, "attempt": attempt})
                    log(f"Saved a checkpoint at step {step} to {path}")
            if asked["signal"] and not stop["signal"]:
                name, asked["signal"] = asked["signal"], ""
                what = "the coordinator saves it"
                if tb is not None:
                    path = write_checkpoint(ckpt_dir, step, {"step": step, "attempt": attempt})
                    what = f"saved a checkpoint to {path}"
                log(ASKED_LINE.format(signal=name, what=what, step=step))
        if stop["signal"]:
            if tb is not None and step > start:
                path = write_checkpoint(ckpt_dir, step, {"step": step, "attempt": attempt})
                log(
                    f"Preemption notice (SIGTERM): saved a checkpoint at step {step} to {path}; "
                    f"exiting {EXIT_PREEMPTED} to resume from it"
                )
            else:
                log(f"Preemption notice (SIGTERM) at step {step}; exiting {EXIT_PREEMPTED}")
            return EXIT_PREEMPTED
        final = float(cfg.get("final_save_time", "0") or 0)
        if tb is not None and final > 0 and step >= steps:
            # The writer's end: its final save and upload, the others' processes gone.
            log(f"Waiting for the final checkpoint to be written ({final:g}s)")
            end = time.monotonic() + final
            while time.monotonic() < end and not stop["signal"]:
                time.sleep(min(0.05, max(end - time.monotonic(), 0)))
        log(f"Training completed: {steps} steps, run {run_name}")
        return 0
    finally:
        if tb is not None:
            tb.close()


if __name__ == "__main__":
    sys.exit(main())
