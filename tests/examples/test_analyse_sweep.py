"""examples/analyse_sweep.py against the W&B emulator, on a sweep shaped like seed 000's:
runs in the sweep log ``eval/mean_reward`` and their final weights through the engine's
own ``log_final_artifact`` (aliases ``latest``, ``step-N``)."""

from __future__ import annotations

import re
import sys
import textwrap
from pathlib import Path

from tests.support.fixtures_wandb import WandbEmu, run_client, wandb_emu

__all__ = ["wandb_emu"]

REPO = Path(__file__).resolve().parents[2]
PY = sys.executable

SEED = textwrap.dedent(
    """
    import pathlib, sys, wandb
    sys.path.insert(0, sys.argv[1])
    from engine.tracking import log_final_artifact
    sid = wandb.sweep(
        {"method": "random", "metric": {"name": "eval/mean_reward", "goal": "maximize"},
         "parameters": {"learning_rate": {"values": [0.1, 0.01, 0.001]},
                        "gamma": {"values": [0.9, 0.99]}}},
        entity="lab", project="seed000")
    # run, learning_rate, gamma, reward (c3 is the best, c5 the worst: left out of the top 5)
    for rid, lr, gamma, reward in (("c0", 0.1, 0.99, 120.0), ("c1", 0.01, 0.99, 300.0),
                                   ("c2", 0.001, 0.99, 250.0), ("c3", 0.01, 0.9, 480.0),
                                   ("c4", 0.001, 0.9, 90.0), ("c5", 0.1, 0.9, 10.0)):
        run = wandb.init(entity="lab", project="seed000", id=rid, config={
            "learning_rate": lr, "gamma": gamma, "algo": "ppo", "env": "CartPole-v1"},
            settings=wandb.Settings(sweep_id=sid))
        run.log({"global_step": 4096, "eval/mean_reward": reward})
        weights = pathlib.Path(f"model-{rid}.zip")
        weights.write_text(f"weights of {rid}")
        log_final_artifact(run, "ppo", f"{sid}-{rid}", [weights], 4096, {"step": 4096})
        run.finish()
    print(sid)
    """
)


def test_analyse_sweep_prints_the_top_runs_and_downloads_the_best_checkpoint(
    wandb_emu: WandbEmu, tmp_path: Path
) -> None:
    env = wandb_emu.env(tmp_path / "home")
    seeded = run_client([PY, "-c", SEED, str(REPO)], env, tmp_path, timeout=240)
    assert seeded.returncode == 0, seeded.stderr
    sweep_id = seeded.stdout.strip().splitlines()[-1]
    out = tmp_path / "out"
    done = run_client(
        [PY, str(REPO / "examples/analyse_sweep.py"), f"lab/seed000/{sweep_id}", "--out", str(out)],
        env,
        tmp_path,
    )
    assert done.returncode == 0, done.stderr
    lines = done.stdout.strip().splitlines()
    assert "maximize eval/mean_reward): top 5 of 6" in lines[0]
    header = lines[1].split()
    assert header == ["#", "run", "state", "eval/mean_reward", "gamma", "learning_rate"]
    table = [line.split() for line in lines[2:7]]
    assert [row[1] for row in table] == ["c3", "c1", "c2", "c0", "c4"]
    assert table[0] == ["1", "c3", "finished", "480", "0.9", "0.01"]
    # no row of the worst run anywhere (a word match: the random sweep id may hold "c5")
    assert not any("c5" in line.split() for line in lines), done.stdout
    name = f"phantom-ppo-{sweep_id}-c3"
    assert re.search(
        rf"best run c3: checkpoint {name}:latest \(v0, aliases latest, step-4096\)", lines[-1]
    )
    assert (out / name / "model-c3.zip").read_text() == "weights of c3"
    assert wandb_emu.trap.seen == []


def test_analyse_sweep_names_a_bad_path_and_an_unknown_sweep(
    wandb_emu: WandbEmu, tmp_path: Path
) -> None:
    env = wandb_emu.env(tmp_path / "home")
    script = str(REPO / "examples/analyse_sweep.py")
    bad = run_client([PY, script, "lab/only-two"], env, tmp_path)
    assert bad.returncode == 2
    assert "write ENTITY/PROJECT/SWEEP_ID" in bad.stderr
    assert "Traceback" not in bad.stderr
    unknown = run_client([PY, script, "lab/seed000/nosuch"], env, tmp_path)
    assert unknown.returncode == 2, unknown.stderr
    assert "sweep lab/seed000/nosuch: not found" in unknown.stderr
    assert "Traceback" not in unknown.stderr
