"""The W&B emulator's sweep controller: bayes against random, and hyperband's early stops.

    .venv/bin/python -m benchmarks.sweep_bayes [--seeds 20] [--budget 30] [--noise 0.05]

**Search.** One known objective of three parameters, the kinds a sweep file uses
(``lr``: ``log_uniform_values`` 1e-5..1e-1, ``width``: ``int_uniform`` 16..512,
``dropout``: ``uniform`` 0..0.6), maximised, with Gaussian noise on every evaluation:

    reward = 1 - (log10(lr) + 3)^2 / 4 - (log2(width) - 7)^2 / 9 - (dropout - 0.15)^2 * 2 + N(0, noise)

(best 1.0 at lr 1e-3, width 128, dropout 0.15). For each seed, a ``bayes`` and a
``random`` sweep each get ``--budget`` runs, one after another, through the controller's
own ``propose`` (the code behind ``agentHeartbeat``): each proposal is evaluated, the run
stored finished with the reward in its summary. The figure is the noise-free reward of the
best run so far (by its logged, noisy reward) after N runs, median over seeds; the ratio is
bayes' median regret (1 - reward) over random's at the full budget (< 1: bayes is better).

**Hyperband.** ``--hb-runs`` runs of ``--hb-steps`` steps, one after another, each logging
a loss curve ``final + (start - final) * exp(-step / 8) + noise``; a third of them are
clearly bad (final loss 2.0-3.0 against 0.2-1.0). After each step the controller's
``hyperband_stops`` (``min_iter: 3, eta: 3``, the rule ``agentHeartbeat`` applies) is
asked whether the run stops. Printed: the share of bad runs stopped early (the aim is at
least a third) and the share of good runs stopped.

Last line: one JSON object.
"""

from __future__ import annotations

import argparse
import json
import math
import random
import statistics
import time
from typing import Any

from emulators.wandb import sweeps as S
from emulators.wandb.state import State

PARAMS: dict[str, Any] = {
    "lr": {"distribution": "log_uniform_values", "min": 1e-5, "max": 1e-1},
    "width": {"distribution": "int_uniform", "min": 16, "max": 512},
    "dropout": {"distribution": "uniform", "min": 0.0, "max": 0.6},
}


def objective(p: dict[str, Any]) -> float:
    return float(
        1.0
        - (math.log10(p["lr"]) + 3.0) ** 2 / 4.0
        - (math.log2(p["width"]) - 7.0) ** 2 / 9.0
        - (p["dropout"] - 0.15) ** 2 * 2.0
    )


def search(method: str, seed: int, budget: int, noise: float) -> list[float]:
    """The true reward of the best-so-far run after each of ``budget`` runs."""
    state = State()
    cfg = {
        "method": method,
        "metric": {"name": "reward", "goal": "maximize"},
        "parameters": PARAMS,
    }
    S.parse_config(json.dumps(cfg))
    sweep: dict[str, Any] = {
        "key": f"bench/sweep/s{seed}",
        "entity": "bench",
        "project": "sweep",
        "name": f"{method}{seed}",
        "config": cfg,
        "handed_out": [],
        "state": "RUNNING",
    }
    rng = random.Random(seed)
    best_logged, best_true, curve = -math.inf, -math.inf, []
    for i in range(budget):
        params = S.propose(state, sweep)
        assert params is not None
        run_id = f"r{i}"
        sweep["handed_out"].append({"run_id": run_id, "params": params, "agent": "a"})
        true = objective(params)
        logged = true + rng.gauss(0.0, noise)
        run, _ = state.upsert_run("bench", "sweep", run_id, {"sweep": sweep["name"]})
        run["summary"] = {"reward": logged}
        run["state"] = "finished"
        if logged > best_logged:
            best_logged, best_true = logged, true
        curve.append(best_true)
    return curve


def hyperband(runs: int, steps: int, seed: int) -> tuple[float, float, int]:
    early = {"type": "hyperband", "min_iter": 3, "eta": 3}
    rng = random.Random(seed)
    histories: dict[str, list[float]] = {}
    bad_stopped = good_stopped = bad = 0
    for i in range(runs):
        is_bad = i % 3 == 1
        bad += is_bad
        final = rng.uniform(2.0, 3.0) if is_bad else rng.uniform(0.2, 1.0)
        start = 4.0
        rid = f"r{i}"
        histories[rid] = []
        for step in range(steps):
            loss = final + (start - final) * math.exp(-step / 8.0) + rng.gauss(0.0, 0.05)
            histories[rid].append(loss)
            if S.hyperband_stops(early, "minimize", histories, [rid]):
                bad_stopped += is_bad
                good_stopped += not is_bad
                break
    return bad_stopped / max(bad, 1), good_stopped / max(runs - bad, 1), bad


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--seeds", type=int, default=20)
    ap.add_argument("--budget", type=int, default=30)
    ap.add_argument("--noise", type=float, default=0.05)
    ap.add_argument("--hb-runs", type=int, default=30)
    ap.add_argument("--hb-steps", type=int, default=40)
    args = ap.parse_args(argv)
    if args.seeds < 1 or args.budget < 1:
        ap.error("--seeds and --budget must be >= 1")
    t0 = time.perf_counter()
    curves: dict[str, list[list[float]]] = {"bayes": [], "random": []}
    for seed in range(args.seeds):
        for method in curves:
            curves[method].append(search(method, seed, args.budget, args.noise))
    marks = sorted({n for n in (5, 10, 15, 20, 30, args.budget) if n <= args.budget})
    print(f"median true reward of the best-so-far run ({args.seeds} seeds, optimum 1.0)")
    print("runs   " + "  ".join(f"{n:>6d}" for n in marks))
    medians: dict[str, list[float]] = {}
    for method, runs in curves.items():
        medians[method] = [statistics.median(c[n - 1] for c in runs) for n in marks]
        print(f"{method:<7}" + "  ".join(f"{m:6.3f}" for m in medians[method]))
    regret = {m: 1.0 - medians[m][-1] for m in curves}
    ratio = regret["bayes"] / regret["random"] if regret["random"] > 0 else float("nan")
    wins = sum(b[-1] > r[-1] for b, r in zip(curves["bayes"], curves["random"], strict=True))
    print(
        f"median regret at {args.budget} runs: bayes {regret['bayes']:.3f}, random "
        f"{regret['random']:.3f}, bayes/random {ratio:.2f}; bayes better on {wins}/{args.seeds} seeds"
    )
    bad_share, good_share, bad = hyperband(args.hb_runs, args.hb_steps, 0)
    print(
        f"hyperband (min_iter 3, eta 3): {bad_share:.0%} of {bad} clearly bad runs stopped "
        f"early, {good_share:.0%} of the good ones"
    )
    print(
        json.dumps(
            {
                "seeds": args.seeds,
                "budget": args.budget,
                "median_best_bayes": round(medians["bayes"][-1], 4),
                "median_best_random": round(medians["random"][-1], 4),
                "regret_ratio_bayes_over_random": round(ratio, 3),
                "bayes_better_seeds": wins,
                "hyperband_bad_stopped": round(bad_share, 3),
                "hyperband_good_stopped": round(good_share, 3),
                "seconds": round(time.perf_counter() - t0, 1),
            }
        )
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
