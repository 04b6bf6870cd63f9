"""Scripts the emulated workload image ships on PATH (written into the run dir's bin/)."""

from __future__ import annotations

from pathlib import Path

# The seed submits `run_gptoss_20b_rl.sh` with its variables in the environment. The
# stand-in keeps the variables' names and runs the emulated GRPO trainer in their place.
# `exec` so the trainer is the process that receives the kubelet's SIGTERM.
RUN_GPTOSS = r"""#!/usr/bin/env bash
# Emulated run_gptoss_20b_rl.sh: GRPO on GPT-OSS 20B (MaxText + Tunix), CPU stand-in.
set -euo pipefail
: "${BASE_OUTPUT_DIRECTORY:?set BASE_OUTPUT_DIRECTORY (gs://bucket/path or file://...)}"
RUN_NAME="${RUN_NAME:-${WORKLOAD_NAME:-gptoss-20b-rl}}"
exec python -m emulators.gke.workload.grpo \
  model_name=gpt-oss-20b \
  base_output_directory="${BASE_OUTPUT_DIRECTORY}" \
  run_name="${RUN_NAME}" \
  load_parameters_path="${MAXTEXT_CKPT_PATH:-}" \
  steps="${STEPS:-100}" \
  checkpoint_period="${CHECKPOINT_PERIOD:-20}" \
  step_time="${STEP_TIME:-1.0}" \
  tb_flush_steps="${TB_FLUSH_STEPS:-1}" \
  final_save_time="${FINAL_SAVE_TIME:-0}" \
  hf_token_env=HF_TOKEN \
  enable_tunix_perf_metrics=true \
  "$@"
"""

CONVERT = r"""#!/usr/bin/env bash
# Emulated HF <-> MaxText checkpoint conversion (to_maxtext / to_huggingface).
set -euo pipefail
exec python -m emulators.gke.workload.convert "$@"
"""

SCRIPTS = {
    "run_gptoss_20b_rl.sh": RUN_GPTOSS,
    "convert_checkpoint.sh": CONVERT,
}


def install_scripts(bin_dir: Path) -> None:
    bin_dir.mkdir(parents=True, exist_ok=True)
    for name, text in SCRIPTS.items():
        path = bin_dir / name
        path.write_text(text)
        path.chmod(0o755)
