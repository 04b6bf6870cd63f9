"""Launch one engine.train trainer per Ray node; see engine/distributed.py.

Example (seed 000)::

    python scripts/ray_distributed_train.py \\
        --train-args "--algo ppo --total-timesteps 100000 --alpha 0.4 --device cpu" \\
        --num-nodes 4 --tpu-per-task 8 --base-seed 42
"""

from __future__ import annotations

import sys
from pathlib import Path

# Run as a file (python scripts/...), the repo root is not on sys.path: add it so the
# uploaded working dir's `engine` package is the one imported.
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from engine.distributed import main
from engine.notice import exit_with

if __name__ == "__main__":
    exit_with(main())  # after a notice without the teardown: the grace is running
