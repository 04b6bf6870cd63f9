"""Offline stays the default (issue 21, item 5): with no [wandb] online, the console builds
no W&B API source and a one-shot cadence read never loads the W&B public API (wandb.apis.public)."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path

from console.config import parse_config
from console.services.cadence.tracker import sources_from_config

ROOT = Path(__file__).resolve().parents[3]


def test_the_default_config_reads_offline_files_only_and_loads_no_wandb_api(
    tmp_path: Path,
) -> None:
    assert [s.kind for s in sources_from_config(parse_config({}).wandb)] == ["offline"]
    probe = textwrap.dedent(
        f"""
        import json, sys
        from console.config import Config
        from console.services.cadence.snapshot import read_cadence
        from console.services.cadence.tracker import sources_from_config
        sources = sources_from_config(Config().wandb, environ={{"WANDB_DIR": {str(tmp_path)!r}}})
        read_cadence(sources, stall_factor=5, deadline_s=30)
        print(json.dumps(sorted(m for m in sys.modules if m.startswith("wandb.apis.public"))))
        """
    )
    proc = subprocess.run(
        [sys.executable, "-c", probe], cwd=ROOT, capture_output=True, text=True, timeout=120
    )
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout.splitlines()[-1]) == []
