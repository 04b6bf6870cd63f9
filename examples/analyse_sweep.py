"""After a sweep: the best runs by the sweep's metric, how their configs differ, and the
best run's checkpoint on disk. Read through the public W&B API (``wandb.Api()``), so it
works against wandb.ai and against the local W&B server (``phantom wandb up``) alike.

    WANDB_BASE_URL=http://127.0.0.1:PORT WANDB_API_KEY=... \\
        .venv/bin/python examples/analyse_sweep.py ENTITY/PROJECT/SWEEP_ID [--top 5] [--out DIR]

Seed 000's sweep (``engine.sweep --backend wandb``) logs, per run, the metric of its spec
(``eval/mean_reward`` by default) and its final weights as a ``model`` artifact with the
aliases ``latest`` and ``step-N`` (``engine.tracking.log_final_artifact``). Prints:

1. the top runs by the sweep's metric and goal (the server sorts: ``order=``);
2. the config keys whose values differ among them (the ones that matter), one column each;
3. where the best run's checkpoint was downloaded to, fetched by its ``latest`` alias.

Exit codes: 0 done, 2 usage (a bad path, no such sweep, a sweep without a metric), 1 when
the best run logged no checkpoint.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

EX_USAGE = 2


def _fmt(value: Any) -> str:
    if isinstance(value, float):
        return f"{value:.4g}"
    return str(value)


def differing_keys(configs: list[dict[str, Any]]) -> list[str]:
    """Config keys whose values are not all the same across the runs (``_wandb`` aside)."""
    keys = sorted({k for c in configs for k in c if not k.startswith("_")})
    return [k for k in keys if len({repr(c.get(k)) for c in configs}) > 1]


def analyse(path: str, top: int, out: Path) -> int:
    import wandb
    from wandb.errors import CommError

    parts = path.strip("/").split("/")
    if len(parts) != 3 or not all(parts):
        print(f"error: sweep path {path!r}: write ENTITY/PROJECT/SWEEP_ID", file=sys.stderr)
        return EX_USAGE
    entity, project, sweep_id = parts
    api = wandb.Api()
    try:
        sweep = api.sweep(path)
    except (CommError, ValueError) as exc:
        print(f"error: sweep {path}: not found ({exc})", file=sys.stderr)
        return EX_USAGE
    metric = (sweep.config or {}).get("metric") or {}
    name, goal = metric.get("name"), metric.get("goal", "minimize")
    if not name:
        print(f"error: sweep {path} has no metric to rank its runs by", file=sys.stderr)
        return EX_USAGE
    order = ("-" if goal == "maximize" else "+") + f"summary_metrics.{name}"
    runs = api.runs(
        f"{entity}/{project}",
        filters={"$and": [{"sweep": sweep_id}, {f"summary_metrics.{name}": {"$exists": True}}]},
        order=order,
        per_page=top,
    )[:top]
    if not runs:
        print(f"sweep {path}: no run has logged {name} yet")
        return 0
    configs = [{k: v for k, v in r.config.items()} for r in runs]
    keys = differing_keys(configs)
    print(f"sweep {path} ({sweep.state}, {goal} {name}): top {len(runs)} of {len(sweep.runs)}")
    header = ["#", "run", "state", name, *keys]
    rows = [
        [str(i + 1), r.id, r.state, _fmt(r.summary.get(name)), *(_fmt(c.get(k)) for k in keys)]
        for i, (r, c) in enumerate(zip(runs, configs, strict=True))
    ]
    widths = [max(len(row[i]) for row in [header, *rows]) for i in range(len(header))]
    for row in [header, *rows]:
        print("  ".join(cell.ljust(w) for cell, w in zip(row, widths, strict=True)).rstrip())
    if not keys:
        print("(their configs do not differ)")

    best = runs[0]
    models = [a for a in best.logged_artifacts() if a.type == "model"]
    if not models:
        print(f"error: best run {best.id} logged no model artifact", file=sys.stderr)
        return 1
    collection = models[-1].name.split(":")[0]
    artifact = api.artifact(f"{entity}/{project}/{collection}:latest")
    where = artifact.download(root=str(out / collection))
    files = sorted(p.name for p in Path(where).iterdir())
    print(
        f"best run {best.id}: checkpoint {collection}:latest ({artifact.version}, "
        f"aliases {', '.join(sorted(artifact.aliases))}) downloaded to {where}: {', '.join(files)}"
    )
    return 0


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("sweep", help="ENTITY/PROJECT/SWEEP_ID")
    ap.add_argument("--top", type=int, default=5, help="how many runs to show (default 5)")
    ap.add_argument("--out", default="best-checkpoint", help="where to download it")
    args = ap.parse_args(argv)
    if args.top < 1:
        ap.error("--top must be >= 1")
    return analyse(args.sweep, args.top, Path(args.out))


if __name__ == "__main__":
    raise SystemExit(main())
