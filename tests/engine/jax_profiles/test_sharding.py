"""Sharded scoring equals single-device scoring: 8 fake CPU devices, and 2 processes.

Each scenario runs in fresh subprocesses because the device count
(``--xla_force_host_platform_device_count``) and ``jax.distributed`` must be set
before JAX initialises a backend. The single-device reference is computed in this
process with the same deterministic bank. Tolerance on divergences/scores:
``rtol = 1e-5, atol = 1e-6`` (the per-profile reductions are the same computation,
but GEMM blocking may differ with the shard size).
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import jax
import numpy as np
import pytest

from engine.jax_profiles import alpha as AL
from tests.support import REPO

RTOL, ATOL = 1e-5, 1e-6

# Shared by the workers and the in-process reference: a deterministic bank and inputs.
SETUP = textwrap.dedent(
    """
    import numpy as np
    import jax
    from engine.jax_profiles import bank as B

    def make_inputs():
        rng = np.random.default_rng(11)
        L, S, A, H, J = 3, 6, 4, 2, 5
        logits = 2.0 * rng.standard_normal((H, L, S, A))
        humans = np.exp(logits) / np.exp(logits).sum(-1, keepdims=True)
        humans[0, :, :, 3] = 0.0  # zero-probability actions
        humans = (humans / humans.sum(-1, keepdims=True)).astype(np.float32)
        mask = rng.random((L, S)) < 0.8
        mask[:, 0] = True
        bank = B.build_bank(humans, mask, key=jax.random.PRNGKey(5), epsilons=(0.1, 0.3),
                            n_biased=2, agent_kernels=humans[1:] * 0 + 0.25)
        q = rng.gamma(0.5, size=(J, L, S, A)) + 1e-3
        agents = (q / q.sum(-1, keepdims=True)).astype(np.float32)
        alphas = np.linspace(0.0, 1.0, J).astype(np.float32)
        returns = rng.standard_normal(J).astype(np.float32)
        visitation = rng.random((J, L, S)).astype(np.float32)
        return bank, alphas, agents, returns, visitation
    """
)

FAKE_DEVICES_WORKER = SETUP + textwrap.dedent(
    """
    import sys
    from engine.jax_profiles import sharding as SH
    assert jax.device_count() == 8, jax.devices()
    bank, alphas, agents, returns, visitation = make_inputs()
    mesh = SH.profile_mesh()
    sharded = SH.shard_bank(bank, mesh)
    assert sharded.n_profiles % 8 == 0
    assert len(sharded.kernels.sharding.device_set) == 8
    fn = SH.make_sharded_selection(mesh, "kl")
    out = {}
    for metric in ("kl", "js", "tv"):
        sel = SH.sharded_select_alpha(
            sharded, mesh, alphas, agents, returns, visitation, lam=0.7, metric=metric,
            selection_fn=fn if metric == "kl" else None,
        )
        assert len(sel.divergence.sharding.device_set) == 8
        for name in ("choice", "worst_profile", "worst_divergence", "robust_score",
                     "score_matrix", "divergence"):
            out[f"{metric}_{name}"] = SH.gather(getattr(sel, name))
    np.savez(sys.argv[1], **out)
    """
)

MULTI_PROCESS_WORKER = SETUP + textwrap.dedent(
    """
    import sys
    from engine.jax_profiles import sharding as SH
    coordinator, n_proc, pid, out_path = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), sys.argv[4]
    SH.initialize(coordinator, n_proc, pid, timeout_s=60)
    assert jax.process_count() == n_proc and jax.process_index() == pid
    full, alphas, agents, returns, visitation = make_inputs()
    mesh = SH.profile_mesh()
    padded = B.pad_profiles(full, mesh.size)
    start, stop = SH.local_profile_range(full.n_profiles, mesh)
    # this process holds only its slice of the bank
    local = B.make_bank(
        np.asarray(padded.kernels)[start:stop], np.asarray(padded.state_mask),
        np.asarray(padded.kinds)[start:stop], epsilon=np.asarray(padded.epsilon)[start:stop],
        contamination=np.asarray(padded.contamination)[start:stop], floor=padded.floor,
    )
    bank = SH.global_bank(local, mesh, padded.n_profiles)
    sel = SH.sharded_select_alpha(bank, mesh, alphas, agents, returns, visitation, lam=0.7)
    out = {f"kl_{name}": SH.gather(getattr(sel, name)) for name in (
        "choice", "worst_profile", "worst_divergence", "robust_score", "score_matrix",
        "divergence")}
    key = jax.random.PRNGKey(2024)
    for proc in range(n_proc):
        for step in (0, 1, 7):
            out[f"sample_{proc}_{step}"] = np.asarray(
                jax.random.uniform(SH.step_key(key, proc, step), (6,)))
    out["own_step_7"] = np.asarray(jax.random.uniform(SH.step_key(key, jax.process_index(), 7), (6,)))
    out["range"] = np.array([start, stop])
    out["devices"] = np.array([jax.device_count(), jax.local_device_count()])
    np.savez(out_path, **out)
    jax.distributed.shutdown()
    """
)


def _env(devices: int) -> dict[str, str]:
    env = dict(os.environ)
    env["XLA_FLAGS"] = f"--xla_force_host_platform_device_count={devices}"
    env["JAX_PLATFORMS"] = "cpu"
    env["PYTHONPATH"] = str(REPO) + os.pathsep + env.get("PYTHONPATH", "")
    return env


def _reference(metric: str) -> dict[str, np.ndarray]:
    scope: dict[str, object] = {}
    exec(SETUP, scope)  # the very same input construction as the workers
    bank, alphas, agents, returns, visitation = scope["make_inputs"]()  # type: ignore[operator]
    sel = AL.select_alpha(bank, alphas, agents, returns, visitation, lam=0.7, metric=metric)
    return {name: np.asarray(getattr(sel, name)) for name in sel._fields} | {
        "n_profiles": np.asarray(bank.n_profiles)
    }


def _assert_matches(got: dict[str, np.ndarray], ref: dict[str, np.ndarray], metric: str) -> None:
    p = int(ref["n_profiles"])
    div = got[f"{metric}_divergence"]
    assert div.shape[1] >= p
    # padding profiles sit after the real ones and are never the worst case
    np.testing.assert_allclose(div[:, :p], ref["divergence"], rtol=RTOL, atol=ATOL)
    np.testing.assert_allclose(
        got[f"{metric}_score_matrix"][:, :p], ref["score_matrix"], rtol=RTOL, atol=ATOL
    )
    np.testing.assert_allclose(
        got[f"{metric}_worst_divergence"], ref["worst_divergence"], rtol=RTOL, atol=ATOL
    )
    np.testing.assert_allclose(
        got[f"{metric}_robust_score"], ref["robust_score"], rtol=RTOL, atol=ATOL
    )
    np.testing.assert_array_equal(got[f"{metric}_worst_profile"], ref["worst_profile"])
    assert int(got[f"{metric}_choice"]) == int(ref["choice"])


@pytest.mark.slow
def test_eight_fake_devices_equal_single_device(tmp_path: Path) -> None:
    out = tmp_path / "fake8.npz"
    script = tmp_path / "worker.py"
    script.write_text(FAKE_DEVICES_WORKER)
    proc = subprocess.run(
        [sys.executable, str(script), str(out)],
        env=_env(8),
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stderr[-4000:]
    got = dict(np.load(out))
    for metric in ("kl", "js", "tv"):
        _assert_matches(got, _reference(metric), metric)


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.mark.slow
def test_two_processes_on_loopback_equal_single_device(tmp_path: Path) -> None:
    script = tmp_path / "worker.py"
    script.write_text(MULTI_PROCESS_WORKER)
    coordinator = f"127.0.0.1:{_free_port()}"
    outs = [tmp_path / f"proc{i}.npz" for i in range(2)]
    logs = [open(tmp_path / f"proc{i}.log", "w") for i in range(2)]  # noqa: SIM115
    procs: list[subprocess.Popen[bytes]] = []
    try:
        for i in range(2):
            procs.append(
                subprocess.Popen(
                    [sys.executable, str(script), coordinator, "2", str(i), str(outs[i])],
                    env=_env(2),  # 2 local devices per process: a 4-device global mesh
                    cwd=REPO,
                    stdout=logs[i],
                    stderr=subprocess.STDOUT,
                )
            )
        deadline = time.monotonic() + 300
        for p in procs:
            p.wait(timeout=max(1.0, deadline - time.monotonic()))
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
                p.wait()
        for f in logs:
            f.close()
    for i, p in enumerate(procs):
        log = (tmp_path / f"proc{i}.log").read_text()
        assert p.returncode == 0, f"process {i} failed:\n{log[-4000:]}"
    got = [dict(np.load(o)) for o in outs]
    ref = _reference("kl")
    for g in got:
        assert list(g["devices"]) == [4, 2]
        _assert_matches(g, ref, "kl")
    # each process held a different half of the (padded) bank
    r0, r1 = (tuple(g["range"]) for g in got)
    assert r0[1] == r1[0] and r0[0] == 0

    # same key, process index and step -> the same samples in every process (and here)
    key = jax.random.PRNGKey(2024)
    from engine.jax_profiles.sharding import step_key

    for proc in range(2):
        for step in (0, 1, 7):
            name = f"sample_{proc}_{step}"
            np.testing.assert_array_equal(got[0][name], got[1][name])
            np.testing.assert_array_equal(
                got[0][name], np.asarray(jax.random.uniform(step_key(key, proc, step), (6,)))
            )
        np.testing.assert_array_equal(got[proc]["own_step_7"], got[0][f"sample_{proc}_7"])
    assert not np.array_equal(got[0]["own_step_7"], got[1]["own_step_7"])


def test_local_profile_range_single_process() -> None:
    from engine.jax_profiles.sharding import local_profile_range, profile_mesh

    mesh = profile_mesh()
    assert local_profile_range(10, mesh) == (0, 10 + (-10) % mesh.size)
