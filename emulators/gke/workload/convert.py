"""Emulated HF <-> MaxText checkpoint conversion, runnable as a Job's container command.

``python -m emulators.gke.workload.convert direction=to_maxtext|to_huggingface
src=URI base_output_directory=URI [layers=N] [layer_time=S]``

to_maxtext: reads a Hugging Face model directory (``src``, with config.json) — or, with no
``src``, stands in for the download, which needs the token named by ``hf_token_env``
(HF_TOKEN; never printed) — and writes ``{base_output_directory}/0/items`` as MaxText does.
to_huggingface: reads a MaxText checkpoint (``.../<step>/items``) and writes config.json and
safetensors shards. Output appears atomically (temporary name, then rename).
"""

from __future__ import annotations

import json
import os
import shutil
import sys
import time
from pathlib import Path

from emulators.gke.workload.grpo import log, parse
from emulators.gke.workload.storage import StorageError, local_path

HF_CONFIG = {
    "architectures": ["GptOssForCausalLM"],
    "model_type": "gpt_oss",
    "num_hidden_layers": 24,
    "hidden_size": 2880,
    "num_local_experts": 32,
}


def _finish(tmp: Path, final: Path) -> None:
    if final.exists():
        shutil.rmtree(final)
    final.parent.mkdir(parents=True, exist_ok=True)
    os.rename(tmp, final)


def main(argv: list[str] | None = None) -> int:
    cfg = parse(sys.argv[1:] if argv is None else argv)
    direction = cfg.get("direction", "")
    if direction not in ("to_maxtext", "to_huggingface"):
        log("ERROR: direction must be to_maxtext or to_huggingface")
        return 2
    layers = int(cfg.get("layers", "24"))
    layer_time = float(cfg.get("layer_time", "0.05"))
    token_env = cfg.get("hf_token_env", "HF_TOKEN")
    try:
        out = local_path(cfg.get("base_output_directory", ""))
        src = local_path(cfg["src"]) if cfg.get("src") else None
    except StorageError as exc:
        log(f"ERROR: {exc}")
        return 2
    if not cfg.get("base_output_directory"):
        log("ERROR: base_output_directory is required")
        return 2
    if direction == "to_maxtext":
        if src is None:
            if not os.environ.get(token_env):
                log(f"ERROR: no src and ${token_env} is not set: cannot download from Hugging Face")
                return 1
            log(f"Downloading gpt-oss-20b from Hugging Face (token from ${token_env}) [emulated]")
        elif not (src / "config.json").is_file():
            log(f"ERROR: {cfg['src']} is not a Hugging Face checkpoint (no config.json)")
            return 1
        final = out / "0" / "items"
    else:
        if src is None or not src.is_dir():
            log(f"ERROR: MaxText checkpoint {cfg.get('src', '')} does not exist")
            return 1
        final = out
    tmp = final.parent / f".{final.name}.converting-{os.getpid()}"
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)
    for i in range(layers):
        time.sleep(layer_time)
        log(f"Converting layer {i + 1}/{layers}")
        if direction == "to_huggingface":
            (tmp / f"model-{i + 1:05d}-of-{layers:05d}.safetensors").write_bytes(b"\0" * 64)
    if direction == "to_maxtext":
        (tmp / "state.json").write_text(
            json.dumps({"converted_from": cfg.get("src") or "hub", "layers": layers})
        )
        (final.parent / "_CHECKPOINT_METADATA").parent.mkdir(parents=True, exist_ok=True)
    else:
        (tmp / "config.json").write_text(json.dumps(HF_CONFIG))
    _finish(tmp, final)
    if direction == "to_maxtext":
        (final.parent / "_CHECKPOINT_METADATA").write_text(json.dumps({"step": 0}))
    log(f"Conversion complete: wrote {final}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
