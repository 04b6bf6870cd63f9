"""Bayesian search for ``method: bayes``: a Gaussian process on the runs so far, expected
improvement over the best.

W&B's own controller (the ``sweeps`` package, ``bayes_search.py``) fits a GP with a Matern
kernel to the metric of finished runs and picks the candidate with the best expected
improvement. That package pins numpy < 2, the project runs numpy 2.x, so this is the same
idea on numpy + scipy (already installed, maintained, no new dependency):

- each parameter maps to [0, 1]: ``uniform``/``q_uniform``/``int_uniform`` linearly,
  ``log_uniform_values``/``q_log_uniform_values``/``log_uniform`` in log space,
  ``values`` (categorical) by index, ``normal``/``log_normal`` through their CDF;
- the metric is standardised (negated for ``maximize``: the GP always minimises);
- GP: Matern 5/2 kernel, one length scale per dimension picked from a small grid by the
  log marginal likelihood, a noise term (the runs are noisy);
- the next point maximises expected improvement over 2,048 random candidates plus 512
  perturbations of the best run so far; it is mapped back and quantised (``q``, ints,
  categories) as the distribution says.

Until ``RANDOM_START`` runs have a metric the search draws at random, as W&B's does.
"""

from __future__ import annotations

import math
import random
from typing import Any

import numpy as np

# scipy (stats, linalg) is imported where it is used: it costs ~0.6 s of CPU, which every
# start of the emulator paid before, though only a `method: bayes` sweep needs it.

RANDOM_START = 5
_CANDIDATES = 2048
_LOCAL = 512
_LENGTHS = (0.1, 0.2, 0.35, 0.6, 1.0)
_NOISE = 1e-2


def to_unit(spec: dict[str, Any], value: Any) -> float:
    """A parameter's value on [0, 1] (the GP's space)."""
    from scipy import stats

    if "values" in spec:
        values = list(spec["values"])
        index = values.index(value) if value in values else 0
        return (index + 0.5) / len(values)
    dist = _dist(spec)
    if dist in ("normal", "log_normal"):
        x = math.log(value) if dist == "log_normal" else float(value)
        cdf = stats.norm.cdf(x, float(spec.get("mu", 0.0)), float(spec.get("sigma", 1.0)))
        return float(min(max(cdf, 1e-6), 1 - 1e-6))
    lo, hi = _bounds(spec, dist)
    logged = dist in ("log_uniform_values", "q_log_uniform_values", "log_uniform")
    x = math.log(value) if logged else float(value)
    return 0.0 if hi == lo else float((x - lo) / (hi - lo))


def from_unit(spec: dict[str, Any], u: float) -> Any:
    """The value a point of [0, 1] stands for, quantised as the distribution says."""
    from scipy import stats

    u = min(max(float(u), 0.0), 1.0)
    if "values" in spec:
        values = list(spec["values"])
        return values[min(int(u * len(values)), len(values) - 1)]
    dist = _dist(spec)
    if dist in ("normal", "log_normal"):
        x = float(
            stats.norm.ppf(min(max(u, 1e-6), 1 - 1e-6), spec.get("mu", 0.0), spec.get("sigma", 1.0))
        )
        return math.exp(x) if dist == "log_normal" else x
    lo, hi = _bounds(spec, dist)
    x = lo + u * (hi - lo)
    q = spec.get("q", 1)
    if dist == "int_uniform":
        return int(min(max(round(x), int(lo)), int(hi)))
    if dist == "q_uniform":
        return round(x / q) * q
    if dist in ("log_uniform_values", "log_uniform"):
        return math.exp(x)
    if dist == "q_log_uniform_values":
        return round(math.exp(x) / q) * q
    return x


def _dist(spec: dict[str, Any]) -> str:
    dist = spec.get("distribution")
    if dist is None:
        lo, hi = spec.get("min"), spec.get("max")
        return "int_uniform" if isinstance(lo, int) and isinstance(hi, int) else "uniform"
    return str(dist)


def _bounds(spec: dict[str, Any], dist: str) -> tuple[float, float]:
    lo, hi = float(spec["min"]), float(spec["max"])
    if dist in ("log_uniform_values", "q_log_uniform_values"):
        return math.log(lo), math.log(hi)
    return lo, hi


def _matern52(a: np.ndarray, b: np.ndarray, lengths: np.ndarray) -> np.ndarray:
    diff = (a[:, None, :] - b[None, :, :]) / lengths
    r = np.sqrt(np.maximum((diff**2).sum(-1), 0.0))
    s5 = math.sqrt(5.0) * r
    return (1.0 + s5 + 5.0 / 3.0 * r**2) * np.exp(-s5)


def _fit(x: np.ndarray, y: np.ndarray) -> tuple[np.ndarray, Any, np.ndarray]:
    """(length scales, Cholesky factor, alpha) with the best log marginal likelihood over
    a grid of one shared length scale (few runs: a richer fit would overfit)."""
    from scipy.linalg import cho_factor, cho_solve

    best: tuple[float, np.ndarray, Any, np.ndarray] | None = None
    n = len(x)
    for ell in _LENGTHS:
        lengths = np.full(x.shape[1], ell)
        k = _matern52(x, x, lengths) + _NOISE * np.eye(n)
        try:
            chol = cho_factor(k, lower=True)
        except np.linalg.LinAlgError:
            continue
        alpha = cho_solve(chol, y)
        ll = -0.5 * float(y @ alpha) - float(np.log(np.diag(chol[0])).sum())
        if best is None or ll > best[0]:
            best = (ll, lengths, chol, alpha)
    if best is None:  # pragma: no cover - the noise term keeps K positive definite
        raise np.linalg.LinAlgError("no length scale gave a positive definite kernel")
    return best[1], best[2], best[3]


def expected_improvement(x: np.ndarray, y: np.ndarray, candidates: np.ndarray) -> np.ndarray:
    """EI of each candidate under the GP fitted to (x, y); y is minimised."""
    from scipy import stats
    from scipy.linalg import cho_solve

    lengths, chol, alpha = _fit(x, y)
    ks = _matern52(candidates, x, lengths)
    mu = ks @ alpha
    v = cho_solve(chol, ks.T)
    var = np.maximum(1.0 + _NOISE - (ks * v.T).sum(1), 1e-12)
    sd = np.sqrt(var)
    best = float(y.min())
    z = (best - mu) / sd
    ei: np.ndarray = (best - mu) * stats.norm.cdf(z) + sd * stats.norm.pdf(z)
    return ei


def suggest(
    params: dict[str, dict[str, Any]],
    observed: list[tuple[dict[str, Any], float]],
    goal: str,
    rng: random.Random,
    sample: Any,
) -> dict[str, Any]:
    """The next run's parameters from the (parameters, metric) of finished runs.

    ``sample(spec, rng)`` draws one value at random (the random search's draw): used for
    the first runs and for a parameter fixed by ``value``."""
    free = sorted(n for n, s in params.items() if "value" not in s)
    fixed = {n: s["value"] for n, s in params.items() if "value" in s}
    usable = [(p, m) for p, m in observed if all(n in p for n in free) and math.isfinite(m)]
    if len(usable) < RANDOM_START or not free:
        return {n: sample(spec, rng) for n, spec in params.items()}
    x = np.array([[to_unit(params[n], p[n]) for n in free] for p, _ in usable])
    y = np.array([m for _, m in usable], dtype=float)
    if goal == "maximize":
        y = -y
    y = (y - y.mean()) / (y.std() or 1.0)
    gen = np.random.default_rng(rng.getrandbits(64))
    best_x = x[int(np.argmin(y))]
    local = np.clip(best_x + gen.normal(0.0, 0.08, size=(_LOCAL, len(free))), 0.0, 1.0)
    candidates = np.vstack([gen.random((_CANDIDATES, len(free))), local])
    ei = expected_improvement(x, y, candidates)
    pick = candidates[int(np.argmax(ei))]
    out = {n: from_unit(params[n], u) for n, u in zip(free, pick, strict=True)}
    return {**fixed, **out}
