"""Engine: behaviour env family, checkpoint storage, exact totals, CLI errors, smoke, resume."""

from __future__ import annotations

import dataclasses
import json
import signal
import subprocess
import sys
from pathlib import Path

import gymnasium as gym
import numpy as np
import pytest

from engine import envs
from engine.storage import MANIFEST, FsspecCheckpointStore, build_manifest
from engine.train import TrainConfig, learn_exactly, make_vec_env
from tests.support.engine_helpers import engine_env, wandb_records
from tests.support.forked_python import ForkedPython
from tests.support.trained_runs import SMOKE, TrainedRun
from tests.support.waiting import wait_until


def run_train(tmp_path: Path, args: list[str], **kw: object) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "engine.train", *args],
        cwd=tmp_path,
        env=engine_env(tmp_path),
        capture_output=True,
        text=True,
        timeout=300,
        **kw,  # type: ignore[arg-type]
    )


# ------------------------------------------------------------------ env family (the contract)


def test_family_contract_shapes_and_determinism() -> None:
    fam = envs.make_family("maze", n_levels=6, size=5, seed=3)
    L, S, A = fam.n_levels, fam.n_states, fam.n_actions
    assert (L, S, A, fam.obs_dim) == (6, 25, 4, 75)
    assert fam.state_mask.dtype == bool and fam.state_mask.shape == (L, S)
    assert fam.observations.dtype == np.float32 and fam.observations.shape == (L, S, fam.obs_dim)
    assert fam.human_kernel.dtype == np.float32 and fam.human_kernel.shape == (L, S, A)
    np.testing.assert_allclose(fam.human_kernel.sum(-1), 1.0, atol=1e-6)
    padded = ~fam.state_mask
    np.testing.assert_allclose(fam.human_kernel[padded], 0.25, atol=1e-6)
    again = envs.make_family("maze", n_levels=6, size=5, seed=3)
    np.testing.assert_array_equal(fam.human_kernel, again.human_kernel)
    np.testing.assert_array_equal(fam.observations, again.observations)
    other = envs.make_family("maze", n_levels=6, size=5, seed=4)
    assert not np.array_equal(fam.state_mask, other.state_mask)
    # level i depends only on (seed, i): a bigger family starts with the same levels
    bigger = envs.make_family("maze", n_levels=8, size=5, seed=3)
    np.testing.assert_array_equal(bigger.human_kernel[:6], fam.human_kernel)


def test_human_is_boltzmann_rational() -> None:
    """The human prefers actions that shorten the path: it reaches goals far more than chance."""
    fam = envs.make_family(n_levels=8, seed=0)
    demos = fam.demonstrations(200, 40, seed=1)
    human_success = np.mean([not demos.mask[i, -1] for i in range(200)])
    uniform = dataclasses.replace(fam, human_kernel=np.full_like(fam.human_kernel, 0.25))
    chance = uniform.demonstrations(200, 40, seed=1)
    chance_success = np.mean([not chance.mask[i, -1] for i in range(200)])
    assert human_success > chance_success + 0.2


def test_demonstrations_are_deterministic_and_valid() -> None:
    fam = envs.make_family(n_levels=4, seed=0)
    d1 = fam.demonstrations(n_episodes=16, max_steps=30, seed=7)
    d2 = fam.demonstrations(n_episodes=16, max_steps=30, seed=7)
    for a, b in zip(d1, d2, strict=True):
        np.testing.assert_array_equal(a, b)
    assert d1.level.dtype == d1.state.dtype == d1.action.dtype == np.int32
    assert d1.mask.dtype == bool and d1.mask.shape == (16, 30)
    for i in range(16):
        n = int(d1.mask[i].sum())
        assert n >= 1 and d1.mask[i, :n].all() and not d1.mask[i, n:].any()  # prefix mask
        lvl = int(d1.level[i, 0])
        assert fam.state_mask[lvl, d1.state[i, :n]].all()  # only real states
        assert ((d1.action[i, :n] >= 0) & (d1.action[i, :n] < fam.n_actions)).all()
        # consecutive states follow the level's transitions
        nxt = fam.transitions[lvl, d1.state[i, : n - 1], d1.action[i, : n - 1]]
        np.testing.assert_array_equal(nxt, d1.state[i, 1:n])


def test_reward_mixes_task_and_scaled_human_loglik() -> None:
    env = gym.make(envs.ENV_ID, alpha=0.0).unwrapped
    fam = env.family
    env.reset(seed=0)
    for alpha in (0.0, 0.3, 1.0):
        env.set_alpha(alpha)
        env.reset(seed=1)
        lvl, s = env.level, env.state
        _, reward, terminated, _, info = env.step(2)
        log_pi = float(np.log(fam.human_kernel[lvl, s, 2]))
        r_task = envs.GOAL_REWARD if terminated else -envs.STEP_COST
        h = max(log_pi, envs.LOG_FLOOR) / abs(envs.LOG_FLOOR)
        assert -1.0 <= h <= 0.0
        assert reward == pytest.approx((1 - alpha) * r_task + alpha * h, rel=1e-5)
        assert info["r_task"] == r_task and info["log_pi_human"] == pytest.approx(log_pi, 1e-5)
    with pytest.raises(ValueError, match="alpha"):
        env.set_alpha(1.5)


def test_observation_table_matches_env() -> None:
    env = envs.BehaviourEnv(envs.make_family(n_levels=3), alpha=0.2)
    for seed in range(5):
        obs, info = env.reset(seed=seed)
        np.testing.assert_array_equal(obs, env.family.observations[info["level"], info["state"]])
        obs, *_ = env.step(1)
        np.testing.assert_array_equal(obs, env.family.observations[env.level, env.state])


# ------------------------------------------------------------------ storage


def _ckpt_dir(tmp_path: Path, name: str, payload: bytes) -> Path:
    d = tmp_path / name
    d.mkdir()
    (d / "model.zip").write_bytes(payload)
    return d


@pytest.mark.parametrize("root", ["local", "memory"])
def test_store_latest_skips_partial_and_corrupt(tmp_path: Path, root: str) -> None:
    storage = str(tmp_path / "bucket") if root == "local" else f"memory://t-{tmp_path.name}"
    store = FsspecCheckpointStore(storage, "run", keep=2)
    assert store.latest() is None
    for step in (100, 200):
        d = _ckpt_dir(tmp_path, f"c{step}", f"model-{step}".encode())
        store.save(d, step, build_manifest(d, step, {}), {})
    # a newer checkpoint that lost its manifest (killed mid-upload) is never taken
    store.fs.makedirs(f"{store.ckpt_path}/step-000000000300", exist_ok=True)
    store.fs.pipe_file(f"{store.ckpt_path}/step-000000000300/model.zip", b"partial")
    latest = store.latest()
    assert latest is not None and latest.step == 200
    got = store.fetch(latest, tmp_path / "fetched")
    assert (got / "model.zip").read_bytes() == b"model-200"
    # truncated data file: size mismatch -> falls back to the previous one
    store.fs.pipe_file(f"{store.ckpt_path}/step-000000000200/model.zip", b"mod")
    latest = store.latest()
    assert latest is not None and latest.step == 100


def test_store_prunes_old_and_publishes_atomically(tmp_path: Path) -> None:
    store = FsspecCheckpointStore(f"file://{tmp_path}/bucket", "r", keep=2)
    for step in (1, 2, 3, 4):
        d = _ckpt_dir(tmp_path, f"c{step}", b"x" * step)
        store.save(d, step, build_manifest(d, step, {"kind": "ckpt"}), {})
    names = sorted(p.name for p in (tmp_path / "bucket/r/checkpoints").iterdir())
    assert names == ["step-000000000003", "step-000000000004"]  # no .tmp-* left behind
    manifest = json.loads((tmp_path / f"bucket/r/checkpoints/{names[-1]}/{MANIFEST}").read_text())
    assert manifest["step"] == 4 and manifest["files"]["model.zip"]["size"] == 4


# ------------------------------------------------------------------ exact totals


@pytest.mark.parametrize(
    ("algo", "n_envs", "steps", "hparams"),
    [
        ("ppo", 2, 262, {"n_steps": 64, "batch_size": 32, "n_epochs": 1}),
        ("a2c", 3, 99, {"n_steps": 7}),
        ("dqn", 2, 50, {"learning_starts": 10, "train_freq": 4, "buffer_size": 500}),
    ],
)
def test_learn_exactly_never_overshoots(algo: str, n_envs: int, steps: int, hparams: dict) -> None:
    from stable_baselines3.common.logger import Logger

    from engine.learning import fresh_model

    cfg = TrainConfig(algo=algo, n_envs=n_envs, env="CartPole-v1", hparams=hparams, seed=1)
    venv = make_vec_env(cfg, None)
    model = fresh_model(cfg, venv)
    model.set_logger(Logger(folder=None, output_formats=[]))
    learn_exactly(model, steps, callback=None, log_interval=1)
    assert model.num_timesteps == steps
    learn_exactly(model, n_envs * 5, callback=None, log_interval=1)
    assert model.num_timesteps == steps + n_envs * 5
    if algo != "dqn":
        assert (
            model.rollout_buffer.buffer_size == hparams["n_steps"]
        )  # restored after the remainder
    venv.close()


# ------------------------------------------------------------------ CLI


@pytest.mark.parametrize(
    ("args", "needle"),
    [
        (["--algo", "sac"], "--algo"),
        (["--alpha", "1.5"], "--alpha"),
        (["--alpha", "auto", "--env", "CartPole-v1"], "--alpha auto"),
        (["--total-timesteps", "0"], "--total-timesteps"),
        (["--total-timesteps", "5001", "--n-envs", "2"], "--n-envs"),
        (["--env", "NoSuchEnv-v0"], "--env"),
        (["--storage", "nosuchproto://x/y"], "--storage"),
        (["--device", "tpu"], "--device"),
        (["--hparams", '{"no_such_kwarg": 1}'], "--hparams"),
        (["--hparams", '{"n_steps": -4}'], "--hparams"),
        (["--wandb", "online"], "WANDB_API_KEY"),
        (["--run-name", "../escape"], "--run-name"),
    ],
)
def test_bad_flags_exit_2_and_write_nothing(
    python: ForkedPython, tmp_path: Path, args: list[str], needle: str
) -> None:
    proc = python(["-m", "engine.train", *SMOKE, *args], cwd=tmp_path, env=engine_env(tmp_path))
    assert proc.returncode == 2, proc.stderr
    last = proc.stderr.strip().splitlines()[-1]
    assert "error:" in last and needle in last
    assert proc.stdout == ""
    assert sorted(p.name for p in tmp_path.iterdir()) == ["wandb-dir"]
    assert not any((tmp_path / "wandb-dir").iterdir())


def test_smoke_command_checkpoint_and_offline_artifact(smoke_run: TrainedRun) -> None:
    """The seed's smoke command, as written, in a fresh directory (tests/engine/conftest.py's
    ``smoke_run``, which test_envvars reads too)."""
    proc, tmp_path = smoke_run.proc, smoke_run.cwd
    assert proc.returncode == 0, proc.stderr[-3000:]
    result = smoke_run.result
    assert result["num_timesteps"] == 5000 and result["resumed_from_step"] == 0
    run_dir = tmp_path / "runs" / result["run_name"]
    steps = sorted(p.name for p in (run_dir / "checkpoints").iterdir())
    assert steps[-1] == "step-000000005000"
    assert (run_dir / "final" / "model.zip").exists() and (run_dir / "final" / MANIFEST).exists()
    assert list((run_dir / "tensorboard").glob("events.out.tfevents.*"))
    assert "progress step=" in proc.stderr
    wandb_files = list((tmp_path / "wandb-dir").glob("wandb/offline-run-*/run-*.wandb"))
    assert len(wandb_files) == 1
    records = wandb_records(wandb_files[0])
    artifacts = [r.artifact for r in records if r.WhichOneof("record_type") == "artifact"]
    assert len(artifacts) == 1
    assert artifacts[0].type == "model" and artifacts[0].name == result["wandb_artifact"]
    assert set(artifacts[0].aliases) == {"latest", "step-5000"}
    assert "model.zip" in {e.path for e in artifacts[0].manifest.contents}
    history = [r for r in records if r.WhichOneof("record_type") == "history"]
    assert history, "metrics reached W&B"


@pytest.mark.slow
def test_sigkill_mid_run_resumes_to_exact_total(tmp_path: Path) -> None:
    args = [
        "--algo", "ppo", "--env", "CartPole-v1", "--total-timesteps", "12000",
        "--checkpoint-every", "1500", "--n-envs", "2", "--run-name", "killme",
        "--wandb", "disabled", "--hparams", '{"n_steps": 256}',
    ]  # fmt: skip
    ckpts = tmp_path / "runs" / "killme" / "checkpoints"
    proc = subprocess.Popen(
        [sys.executable, "-m", "engine.train", *args],
        cwd=tmp_path,
        env=engine_env(tmp_path),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:

        def saved() -> bool:
            assert proc.poll() is None, "trainer ended before it could be killed"
            return (ckpts / "step-000000003000" / MANIFEST).exists()

        wait_until(saved, 120, "a checkpoint at 3000 steps", 0.05)
        proc.send_signal(signal.SIGKILL)
    finally:
        proc.kill()
        proc.wait()
    valid = [p for p in ckpts.iterdir() if (p / MANIFEST).exists()]
    last_step = max(int(p.name.split("-")[1]) for p in valid)
    assert last_step < 12000

    again = run_train(tmp_path, args)
    assert again.returncode == 0, again.stderr[-3000:]
    result = json.loads(again.stdout.strip().splitlines()[-1])
    assert result["resumed_from_step"] == last_step
    assert f"at step {last_step}" in again.stderr and "resuming killme" in again.stderr
    assert result["num_timesteps"] == 12000
    final = json.loads((tmp_path / "runs/killme/final" / MANIFEST).read_text())
    assert final["step"] == 12000

    # running it once more finds the finished run and does not train past the total
    third = run_train(tmp_path, args)
    assert third.returncode == 0
    assert json.loads(third.stdout.strip().splitlines()[-1])["num_timesteps"] == 12000


@pytest.mark.slow
def test_alpha_auto_trains(tmp_path: Path) -> None:
    pytest.importorskip("engine.jax_profiles.online")
    proc = run_train(
        tmp_path,
        ["--algo", "ppo", "--total-timesteps", "2048", "--alpha", "auto", "--wandb", "disabled",
         "--checkpoint-every", "1024", "--run-name", "auto"],
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-3000:]
    manifest = json.loads((tmp_path / "runs/auto/final" / MANIFEST).read_text())
    assert 0.0 <= manifest["alpha_current"] <= 1.0
    assert "alpha=" in proc.stderr


def test_dqn_checkpoint_carries_replay_buffer_and_vecnormalize(tmp_path: Path) -> None:
    """In-process: checkpoints hold the replay buffer and VecNormalize stats; resuming
    with a higher total continues from them instead of starting over."""
    from engine.train import run_training

    cfg = TrainConfig(
        algo="dqn",
        env="CartPole-v1",
        total_timesteps=400,
        checkpoint_every=200,
        storage=str(tmp_path / "runs"),
        run_name="dqn-vn",
        wandb="disabled",
        vec_normalize=True,
        eval_episodes=1,
        hparams={"learning_starts": 50, "buffer_size": 1000},
    )
    first = run_training(cfg)
    assert first.num_timesteps == 400 and first.resumed_from_step == 0
    ckpt = tmp_path / "runs/dqn-vn/checkpoints/step-000000000400"
    assert {p.name for p in ckpt.iterdir()} == {
        "model.zip", "replay_buffer.pkl", "vecnormalize.pkl", MANIFEST,
    }  # fmt: skip

    cfg.total_timesteps = 600
    second = run_training(cfg)
    assert second.resumed_from_step == 400 and second.num_timesteps == 600


def test_hparams_table_matches_sb3_signatures() -> None:
    """engine.trainconfig.HPARAMS (checked without importing SB3) is exactly what each SB3
    algorithm accepts, minus what the engine sets itself and class-valued arguments."""
    import inspect

    from engine.learning import algo_class
    from engine.trainconfig import HPARAMS

    owned = {"self", "policy", "env", "seed", "device", "verbose", "tensorboard_log"}
    owned |= {"_init_setup_model", "rollout_buffer_class", "replay_buffer_class"}
    for algo, allowed in HPARAMS.items():
        params = set(inspect.signature(algo_class(algo).__init__).parameters) - owned
        assert allowed == params, (algo, sorted(allowed ^ params))
