"""Benchmark: one full scoring + robust-selection pass, JAX vs a NumPy Python loop.

    python -m benchmarks.jax_profiles [--profiles 256 --levels 16 --states 1536
                                         --actions 4 --candidates 16 --metric kl]

Defaults: 256 profiles x 16 levels x 1536 states x 4 actions = 100.7 MB of float32
kernels (the bank also holds the same-sized log kernels), 16 agent candidates.

Measured in the same run:

* JAX: ``alpha.selection_pass`` compiled ahead of time (compile time printed
  separately), then the median wall time of single passes with
  ``block_until_ready``, interleaved with the copy and loop timings so that load from
  other processes affects both sides of each ratio alike;
* baseline: NumPy with a Python loop over candidates and profiles (the per-pair
  formula of ``divergence.py``, same log-floored bank), then the same selection;
* reference: NumPy vectorised (one float32 matmul), printed for context;
* bandwidth: bytes the JAX pass must read (bank log kernels or kernels, agents,
  visitation) / median time, against a NumPy copy of a bank-sized array counted as
  read + write bytes (STREAM convention);
* KL only, for context: the pass's matrix product alone, on operands prepared before the
  timing, as the same fraction of copy: how much of the pass is the product (with 16
  candidates on a 2-core CPU it is compute-bound, not bandwidth-bound). Its weighted agents
  come from memory while the pass's are fresh in cache, so it is not a strict bound.

The last line is one JSON object with the figures.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import statistics
import sys
import time
from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from engine.jax_profiles.alpha import robust_set, selection_pass
from engine.jax_profiles.bank import ProfileBank, build_bank, make_bank, to_device
from engine.jax_profiles.divergence import METRICS

EPSILONS = (0.05, 0.1, 0.2, 0.3, 0.4)
N_BIASED = 4
PER_HUMAN = 1 + len(EPSILONS) * (2 + N_BIASED)  # human + uniform/adversarial/biased draws


def _parse(argv: list[str] | None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(
        prog="python -m benchmarks.jax_profiles",
        description="Time one scoring + robust alpha selection pass: JAX vs NumPy loop.",
    )
    ap.add_argument("--profiles", type=int, default=256, help="bank profiles P (default 256)")
    ap.add_argument("--levels", type=int, default=16, help="levels L (default 16)")
    ap.add_argument("--states", type=int, default=1536, help="padded states per level S")
    ap.add_argument("--actions", type=int, default=4, help="actions A (default 4)")
    ap.add_argument("--candidates", type=int, default=16, help="agent candidates C (default 16)")
    ap.add_argument("--metric", choices=METRICS, default="kl", help="divergence (default kl)")
    ap.add_argument("--repeats", type=int, default=20, help="timed JAX passes (median)")
    ap.add_argument("--baseline-repeats", type=int, default=3, help="timed NumPy-loop passes")
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args(argv)
    for name in ("profiles", "levels", "states", "actions", "candidates", "repeats"):
        if getattr(args, name) < 1:
            ap.error(f"--{name} must be >= 1")
    if args.actions < 2:
        ap.error("--actions must be >= 2")
    if args.baseline_repeats < 1:
        ap.error("--baseline-repeats must be >= 1")
    return args


def _product(log_kernels: jax.Array, wq: jax.Array) -> jax.Array:
    """``[P, X] x [J, X] -> [P, J]``: the matrix product of ``divergence._kl_total``."""
    flat = log_kernels.reshape(log_kernels.shape[0], -1)
    hi = jax.lax.Precision.HIGHEST
    return jax.lax.dot_general(flat, wq, (((1,), (1,)), ((), ())), precision=hi)


def _median_time(fn: Callable[[], Any], repeats: int) -> float:
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def _make_inputs(
    args: argparse.Namespace,
) -> tuple[ProfileBank, np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    p, n_levels, n_states, n_actions, c = (
        args.profiles,
        args.levels,
        args.states,
        args.actions,
        args.candidates,
    )
    # synthetic inputs in NumPy: eager JAX ops would each pay an XLA compile here
    rng = np.random.default_rng(args.seed)
    n_humans = math.ceil(p / PER_HUMAN)
    shape = (n_humans, n_levels, n_states, n_actions)
    # peaked human kernels with some exactly-zero actions (exercises the KL floor)
    logits = (2.0 * rng.standard_normal(shape)).astype(np.float32)
    humans = np.exp(logits - logits.max(-1, keepdims=True))
    zero = (rng.random(shape) < 0.1) & (logits.argmax(-1)[..., None] != np.arange(n_actions))
    humans[zero] = 0.0
    humans /= humans.sum(-1, keepdims=True)
    state_mask = np.ones((n_levels, n_states), bool)
    # levels have different numbers of real states; the rest is padding
    n_valid = rng.integers(max(1, n_states // 2), n_states + 1, size=n_levels)
    for lv, n in enumerate(n_valid):
        state_mask[lv, n:] = False
    full = build_bank(
        humans,
        state_mask,
        key=jax.random.PRNGKey(args.seed),
        epsilons=EPSILONS,
        n_biased=N_BIASED,
    )
    bank = to_device(
        make_bank(
            np.asarray(full.kernels)[:p],
            state_mask,
            np.asarray(full.kinds)[:p],
            epsilon=np.asarray(full.epsilon)[:p],
            contamination=np.asarray(full.contamination)[:p],
            floor=full.floor,
        )
    )
    del full
    alphas = np.linspace(0.0, 1.0, c).astype(np.float32)
    task_logits = 5.0 * rng.standard_normal((n_levels, n_states, n_actions))
    task = np.exp(task_logits - task_logits.max(-1, keepdims=True))
    task /= task.sum(-1, keepdims=True)
    mix = alphas[:, None, None, None]
    agents = ((1.0 - mix) * task[None] + mix * humans[0][None]).astype(np.float32)
    returns = (1.0 - alphas**2 + 0.05 * rng.standard_normal(c)).astype(np.float32)
    visitation = rng.random((c, n_levels, n_states)).astype(np.float32)
    return bank, alphas, agents, returns, visitation


def _per_state_numpy(metric: str, q: np.ndarray, logq: np.ndarray, k: np.ndarray) -> np.ndarray:
    """The per-state divergence of one (agent, profile) pair: [L, S]."""
    if metric == "kl":
        return (q * (logq - k)).sum(-1)  # k holds the floored log kernel
    if metric == "tv":
        return 0.5 * np.abs(q - k).sum(-1)
    m = 0.5 * (q + k)
    with np.errstate(divide="ignore", invalid="ignore"):
        klogk = np.where(k > 0, k * np.log(np.where(k > 0, k, 1.0)), 0.0)
        mlogm = np.where(m > 0, m * np.log(np.where(m > 0, m, 1.0)), 0.0)
    return np.maximum(0.5 * (q * logq).sum(-1) + 0.5 * klogk.sum(-1) - mlogm.sum(-1), 0.0)


def numpy_loop_pass(
    metric: str,
    profiles: np.ndarray,
    state_mask: np.ndarray,
    in_set: np.ndarray,
    alphas: np.ndarray,
    agents: np.ndarray,
    returns: np.ndarray,
    visitation: np.ndarray,
    lam: float = 1.0,
) -> tuple[int, np.ndarray]:
    """The baseline: Python loops over candidates and profiles, then selection."""
    n_cand, n_prof = agents.shape[0], profiles.shape[0]
    w = np.where(state_mask[None], visitation, 0.0)
    w = w / w.sum(axis=(1, 2), keepdims=True)
    div = np.zeros((n_cand, n_prof), np.float32)
    for c in range(n_cand):
        q = np.where(state_mask[..., None], agents[c], 0.0)
        logq = np.log(np.where(q > 0, q, 1.0))
        for p in range(n_prof):
            div[c, p] = np.sum(w[c] * _per_state_numpy(metric, q, logq, profiles[p]))
    worst = np.where(in_set[None], div, -np.inf).max(axis=1)
    span = returns.max() - returns.min()
    rn = (returns - returns.min()) / span if span > 0 else np.zeros_like(returns)
    robust = rn - lam * worst
    return int(np.argmax(robust)), div


def main(argv: list[str] | None = None) -> int:
    args = _parse(argv)
    dev = jax.devices()[0]
    print(
        f"jax {jax.__version__} on {dev.platform} ({jax.device_count()} device(s)); "
        f"OPENBLAS_CORETYPE={os.environ.get('OPENBLAS_CORETYPE', '<unset>')}"
    )
    t0 = time.perf_counter()
    bank, alphas, agents, returns, visitation = _make_inputs(args)
    p, n_levels, n_states, n_actions = bank.shape
    print(
        f"bank: P={p} L={n_levels} S={n_states} A={n_actions}: {bank.nbytes / 1e6:.1f} MB of kernels "
        f"(+ same-size log kernels), {args.candidates} candidates, metric={args.metric}; "
        f"built in {time.perf_counter() - t0:.1f} s"
    )
    if bank.nbytes < 100e6 or p < 256:
        print("note: smaller than the target size (>= 256 profiles and >= 100 MB)")

    in_set = robust_set(bank)
    dev_args = (
        bank,
        jnp.asarray(alphas),
        jnp.asarray(agents),
        jnp.asarray(returns),
        jnp.asarray(visitation),
        in_set,
        jnp.float32(1.0),
    )
    jitted = jax.jit(selection_pass, static_argnames=("metric",))
    t0 = time.perf_counter()
    compiled = jitted.lower(*dev_args, metric=args.metric).compile()
    compile_s = time.perf_counter() - t0
    print(f"jax compile: {compile_s:.3f} s (excluded from pass times)")

    def jax_pass() -> Any:
        return jax.block_until_ready(compiled(*dev_args))

    for _ in range(2):
        result = jax_pass()

    profiles_host = np.asarray(bank.log_kernels if args.metric == "kl" else bank.kernels)
    mask_host = np.asarray(bank.state_mask)
    in_set_host = np.asarray(in_set)
    copy_dst = np.empty_like(profiles_host)
    np.copyto(copy_dst, profiles_host)

    def copy_pass() -> None:
        np.copyto(copy_dst, profiles_host)

    # KL only: the pass's matrix product alone, on operands prepared outside the timing (the
    # weighted agents, as the pass makes them): how much of the pass is the product.
    product_pass: Callable[[], Any] | None = None
    if args.metric == "kl":
        w_host = np.where(np.asarray(bank.state_mask)[None], visitation, 0.0)
        w_host = w_host / w_host.sum(axis=(1, 2), keepdims=True)
        wq_dev = jnp.asarray((w_host[..., None] * agents).reshape(args.candidates, -1), jnp.float32)
        product = jax.jit(_product).lower(bank.log_kernels, wq_dev).compile()

        def product_pass() -> Any:
            return jax.block_until_ready(product(bank.log_kernels, wq_dev))

        product_pass()

    def loop_pass() -> tuple[int, np.ndarray]:
        return numpy_loop_pass(
            args.metric, profiles_host, mask_host, in_set_host, alphas, agents, returns, visitation
        )

    # Interleaved so that load from other processes hits both sides of each ratio alike.
    jax_times: list[float] = []
    copy_times: list[float] = []
    product_times: list[float] = []
    for _ in range(args.repeats):
        jax_times.append(_median_time(jax_pass, 1))
        copy_times.append(_median_time(copy_pass, 1))
        if product_pass is not None:
            product_times.append(_median_time(product_pass, 1))
            copy_times.append(_median_time(copy_pass, 1))
    choice_np, div_np = loop_pass()  # warm-up and agreement check
    loop_times: list[float] = []
    for _ in range(args.baseline_repeats):
        loop_times.append(_median_time(loop_pass, 1))
        jax_times.extend(_median_time(jax_pass, 1) for _ in range(3))
    jax_s = statistics.median(jax_times)
    loop_s = statistics.median(loop_times)
    copy_s = statistics.median(copy_times)
    print(f"jax pass (scoring + selection): median {jax_s * 1e3:.2f} ms over {len(jax_times)}")
    print(
        f"numpy python-loop pass: median {loop_s * 1e3:.1f} ms over {args.baseline_repeats} "
        f"({args.candidates * p} pairs)"
    )
    div_jax = np.asarray(result.divergence)
    max_err = float(np.abs(div_jax - div_np).max())
    same_choice = int(result.choice) == choice_np
    print(f"agreement: max |D_jax - D_numpy| = {max_err:.2e}, same choice: {same_choice}")

    matmul_s: float | None = None
    if args.metric == "kl":
        flat = profiles_host.reshape(p, -1)
        w = np.where(mask_host[None], visitation, 0.0)
        w = (w / w.sum(axis=(1, 2), keepdims=True)).astype(np.float32)

        def vectorised_pass() -> int:
            q = np.where(mask_host[..., None], agents, 0.0).astype(np.float32)
            wq = (w[..., None] * q).reshape(args.candidates, -1)
            logq = np.log(np.where(q > 0, q, 1.0)).reshape(args.candidates, -1)
            # [P, X] @ [X, C]: OpenBLAS is ~40x slower on the [C, X] @ [X, P] orientation
            div = (wq * logq).sum(1)[:, None] - (flat @ wq.T).T
            worst = np.where(in_set_host[None], div, -np.inf).max(axis=1)
            span = returns.max() - returns.min()
            rn = (returns - returns.min()) / span if span > 0 else np.zeros_like(returns)
            return int(np.argmax(rn - worst))

        vectorised_pass()
        matmul_s = _median_time(vectorised_pass, max(3, args.baseline_repeats))
        print(f"numpy vectorised (one matmul) pass, for context: median {matmul_s * 1e3:.2f} ms")

    copy_bw = 2 * profiles_host.nbytes / copy_s
    bytes_read = profiles_host.nbytes + agents.nbytes + visitation.nbytes
    jax_bw = bytes_read / jax_s
    speedup = loop_s / jax_s
    fraction = jax_bw / copy_bw
    print(
        f"numpy copy bandwidth: {copy_bw / 1e9:.2f} GB/s (read + write of {profiles_host.nbytes / 1e6:.0f} MB)"
    )
    print(f"jax pass bandwidth: {jax_bw / 1e9:.2f} GB/s ({bytes_read / 1e6:.0f} MB read per pass)")
    print(f"speedup vs numpy loop: {speedup:.1f}x; bandwidth fraction of copy: {fraction:.2f}")
    product_s = statistics.median(product_times) if product_times else None
    product_fraction = None
    if product_s is not None:
        product_fraction = bytes_read / product_s / copy_bw
        print(
            f"the product alone (operands prepared beforehand), for context: median "
            f"{product_s * 1e3:.2f} ms = {product_fraction:.2f} of copy bandwidth"
        )
    figures = {
        "speedup_vs_numpy_loop": round(speedup, 2),
        "bandwidth_fraction": round(fraction, 3),
        "compile_s": round(compile_s, 3),
        "jax_pass_ms": round(jax_s * 1e3, 3),
        "numpy_loop_pass_ms": round(loop_s * 1e3, 1),
        "numpy_matmul_pass_ms": None if matmul_s is None else round(matmul_s * 1e3, 3),
        "product_only_ms": None if product_s is None else round(product_s * 1e3, 3),
        "product_only_fraction": None if product_fraction is None else round(product_fraction, 3),
        "speedup_vs_numpy_matmul": None if matmul_s is None else round(matmul_s / jax_s, 2),
        "jax_bandwidth_gbs": round(jax_bw / 1e9, 3),
        "copy_bandwidth_gbs": round(copy_bw / 1e9, 3),
        "bank_mb": round(bank.nbytes / 1e6, 1),
        "profiles": p,
        "candidates": args.candidates,
        "metric": args.metric,
        "max_abs_err": max_err,
        "same_choice": same_choice,
        "platform": dev.platform,
    }
    print(json.dumps(figures))
    return 0


if __name__ == "__main__":
    sys.exit(main())
