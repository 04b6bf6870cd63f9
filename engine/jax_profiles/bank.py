"""Profile bank: behavioural profiles as fixed-shape device arrays.

A *profile* is a policy kernel ``K[l, s, a] = P(action a | level l, state s)`` over
``L`` levels, ``S`` states per level (padded to a common ``S``; ``state_mask[l, s]``
is False on padding and terminal states) and ``A`` actions. The bank stacks ``P``
profiles into ``kernels[P, L, S, A]`` with a ``kinds[P]`` code (human, agent,
contamination, padding), so every scoring pass has static shapes.

Estimation from trajectories (masked scatter-add + Dirichlet smoothing)
    Padded trajectories ``level, state, action: int[N, T]`` with ``mask: bool[N, T]``
    give counts ``c[l, s, a] = sum_{n,t} mask[n,t] * 1[level,state,action = l,s,a]``
    (one scatter-add; masked or out-of-range steps add nothing). With a symmetric
    Dirichlet(``prior``) prior the posterior-mean kernel is

        K[l, s, a] = (c[l, s, a] + prior) / (sum_a' c[l, s, a'] + A * prior)

    and rows with no mass at all (``prior = 0`` and no visits), or padded states,
    are uniform.

Contamination profiles (epsilon mixtures)
    ``K_eps = (1 - eps) * K_h + eps * K_c`` for a human kernel ``K_h`` and

    * ``uniform``:     ``K_c(a|s) = 1 / A`` (a random button masher);
    * ``biased``:      ``K_c(a|s) = b_a`` with ``b = softmax(z / bias_temperature)``,
      ``z ~ N(0, I_A)``, drawn once per profile and shared by all states (a player who
      favours some buttons everywhere; logistic-normal rather than Dirichlet because
      the gamma sampler's rejection loop costs seconds of XLA compile per shape);
    * ``adversarial``: ``K_c(a|s) = 1[a = argmin_a' K_h(a'|s)]`` (the human's least
      likely action; exact ties broken by a random action order per profile).

    Randomness is deterministic: human ``h`` draws from ``fold_in(key, h)``, its
    contamination slot ``i`` from row ``i`` of one ``[C, A + 1]`` threefry draw (``A``
    normals for ``z``, one word for the tie order), so a profile does not depend on
    which process or device builds it, nor on how many slots follow it.

Log kernels and the KL floor
    The bank also holds ``log_kernels = log(max(K, floor))`` (``floor`` defaults to
    ``KL_FLOOR = 1e-8``), computed once on device, because KL scoring needs only
    ``log K`` and this keeps the scoring pass to a single read of one bank-sized
    array. See ``divergence.py`` for what the floor means for KL.
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Sequence
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from engine.jax_profiles.choice import resolve_impl
from engine.jax_profiles.program_cache import CachedProgram

__all__ = [
    "AGENT",
    "CONTAMINATION",
    "CONTAMINATIONS",
    "HUMAN",
    "KIND_NAMES",
    "KL_FLOOR",
    "PADDING",
    "ProfileBank",
    "build_bank",
    "contamination_kernels",
    "count_actions",
    "empirical_kernels",
    "first_profiles",
    "kernels_from_trajectories",
    "load_bank",
    "make_bank",
    "pad_profiles",
    "sample_actions",
    "smooth_counts",
    "to_device",
]

HUMAN, AGENT, CONTAMINATION, PADDING = 0, 1, 2, 3
KIND_NAMES = ("human", "agent", "contamination", "padding")
CONTAMINATIONS = ("uniform", "biased", "adversarial")
NO_CONTAMINATION = -1
KL_FLOOR = 1e-8
_FORMAT_VERSION = 1


@jax.tree_util.register_dataclass
@dataclasses.dataclass(frozen=True)
class ProfileBank:
    """``P`` behavioural profiles over ``L`` levels, ``S`` padded states, ``A`` actions.

    A pytree (``floor`` is static), so it can be passed to jitted functions, placed
    on devices with ``jax.device_put`` and sharded along the profile axis.
    """

    kernels: jax.Array  # float32 [P, L, S, A], rows sum to 1
    log_kernels: jax.Array  # float32 [P, L, S, A], log(max(kernels, floor))
    state_mask: jax.Array  # bool [L, S]
    kinds: jax.Array  # int32 [P]: HUMAN, AGENT, CONTAMINATION or PADDING
    epsilon: jax.Array  # float32 [P]: contamination weight (0 for non-contaminated)
    contamination: jax.Array  # int32 [P]: index into CONTAMINATIONS, or -1
    # float32 [A, P, L * S]: the kernels as action planes, the operand the TPU kernels of
    # JS and TV read (pallas_kernels.py); held where ``impl="auto"`` picks them (a TPU),
    # else None. On a TPU the 4-D kernels are kept action-minor, and laying them out
    # again took 10.6 ms a pass at 4096 profiles (an extra copy of the kernels' size).
    planes: jax.Array | None = None
    floor: float = dataclasses.field(default=KL_FLOOR, metadata={"static": True})

    @property
    def n_profiles(self) -> int:
        return int(self.kernels.shape[0])

    @property
    def shape(self) -> tuple[int, int, int, int]:
        p, lv, s, a = self.kernels.shape
        return int(p), int(lv), int(s), int(a)

    @property
    def nbytes(self) -> int:
        return int(self.kernels.size) * self.kernels.dtype.itemsize

    def describe(self, index: int) -> str:
        """Human-readable name of profile ``index`` (e.g. ``contamination/adversarial@0.2``)."""
        kind = KIND_NAMES[int(self.kinds[index])]
        code = int(self.contamination[index])
        if code == NO_CONTAMINATION:
            return f"{kind}#{index}"
        return f"{kind}/{CONTAMINATIONS[code]}@{float(self.epsilon[index]):g}#{index}"

    def save(self, path: str | os.PathLike[str]) -> None:
        """Write the bank to ``path`` (``.npz``); ``log_kernels`` are recomputed on load."""
        np.savez(
            path,
            format_version=np.int32(_FORMAT_VERSION),
            kernels=np.asarray(self.kernels),
            state_mask=np.asarray(self.state_mask),
            kinds=np.asarray(self.kinds),
            epsilon=np.asarray(self.epsilon),
            contamination=np.asarray(self.contamination),
            floor=np.float64(self.floor),
        )


def _on_device(x: Any, dtype: Any) -> jax.Array:
    """``x`` as a device array of ``dtype``; host data is transferred, not traced (an
    eager ``jnp.asarray`` compiles a small program per shape and dtype)."""
    if isinstance(x, jax.Array):
        return x if x.dtype == dtype else x.astype(dtype)
    return jax.device_put(np.asarray(x, dtype))


@jax.jit
def _log_floor(kernels: jax.Array, floor: jax.Array) -> jax.Array:
    return jnp.log(jnp.maximum(kernels, floor))


def action_planes(kernels: jax.Array) -> jax.Array:
    """``[A, P, L * S]``: action ``a``'s plane holds ``kernels[p, l, s, a]`` at ``l * S + s``."""
    p, n_levels, n_states, n_actions = kernels.shape
    return kernels.reshape(p, n_levels * n_states, n_actions).transpose(2, 0, 1)


def _planes_program(bank: ProfileBank) -> ProfileBank:
    return dataclasses.replace(bank, planes=action_planes(bank.kernels))


def holds_planes(backend: str | None = None) -> bool:
    """Whether a bank built on ``backend`` (default: JAX's) holds its action planes: where
    ``impl="auto"`` scores JS or TV with the Pallas kernels (``choice.AUTO``)."""
    return any(resolve_impl(m, "auto", backend) == "pallas" for m in ("js", "tv"))


def with_planes(bank: ProfileBank, hold: bool = True) -> ProfileBank:
    """The bank holding its action planes (``hold=False``: without them)."""
    if not hold:
        return bank if bank.planes is None else dataclasses.replace(bank, planes=None)
    if bank.planes is not None:
        return bank
    return _planes(bank)


def make_bank(
    kernels: Any,
    state_mask: Any,
    kinds: Any,
    *,
    epsilon: Any = None,
    contamination: Any = None,
    floor: float = KL_FLOOR,
) -> ProfileBank:
    """Assemble a bank from kernels ``[P, L, S, A]`` (validated, on the default device)."""
    k = _on_device(kernels, jnp.float32)
    if k.ndim != 4:
        raise ValueError(f"kernels must have shape [P, L, S, A], got {tuple(k.shape)}")
    p, n_levels, n_states, _ = k.shape
    mask = _on_device(state_mask, jnp.bool_)
    if mask.shape != (n_levels, n_states):
        raise ValueError(
            f"state_mask must have shape [L, S] = {(n_levels, n_states)}, got {tuple(mask.shape)}"
        )
    kinds_a = _on_device(
        np.reshape(kinds, -1) if not isinstance(kinds, jax.Array) else kinds.reshape(-1), jnp.int32
    )
    if kinds_a.shape != (p,):
        raise ValueError(f"kinds must have one entry per profile ({p}), got {kinds_a.shape[0]}")
    # host-side defaults: an eager jnp.zeros / jnp.full would compile a program per shape
    eps = _on_device(np.zeros(p, np.float32) if epsilon is None else epsilon, jnp.float32)
    code = _on_device(
        np.full(p, NO_CONTAMINATION, np.int32) if contamination is None else contamination,
        jnp.int32,
    )
    if not 0.0 < floor < 1.0:
        raise ValueError(f"floor must be in (0, 1), got {floor}")
    bank = ProfileBank(
        kernels=k,
        log_kernels=_log_floor(k, np.float32(floor)),
        state_mask=mask,
        kinds=kinds_a,
        epsilon=eps,
        contamination=code,
        floor=float(floor),
    )
    return with_planes(bank, holds_planes())


# --------------------------------------------------------------------------- trajectories


def count_actions(
    level: jax.Array,
    state: jax.Array,
    action: jax.Array,
    mask: jax.Array,
    n_levels: int,
    n_states: int,
    n_actions: int,
) -> jax.Array:
    """Masked scatter-add of padded trajectories ``[N, T]`` into counts ``[L, S, A]``.

    Steps with ``mask`` False or any index out of range contribute nothing.
    """
    valid = (
        mask
        & (level >= 0)
        & (level < n_levels)
        & (state >= 0)
        & (state < n_states)
        & (action >= 0)
        & (action < n_actions)
    )
    flat = (level * n_states + state) * n_actions + action
    flat = jnp.where(valid, flat, 0).reshape(-1)
    counts = jnp.zeros(n_levels * n_states * n_actions, jnp.float32)
    counts = counts.at[flat].add(valid.reshape(-1).astype(jnp.float32), mode="drop")
    return counts.reshape(n_levels, n_states, n_actions)


def smooth_counts(counts: jax.Array, state_mask: jax.Array, prior: float | jax.Array) -> jax.Array:
    """Dirichlet posterior mean of counts ``[..., L, S, A]``; empty and padded rows uniform."""
    n_actions = counts.shape[-1]
    alpha = counts + prior
    total = alpha.sum(axis=-1, keepdims=True)
    uniform = jnp.full_like(alpha, 1.0 / n_actions)
    smoothed = alpha / jnp.where(total > 0, total, 1.0)
    keep = (total > 0) & state_mask[..., None]
    return jnp.where(keep, smoothed, uniform)


def _kernels_from_trajectories(
    level: jax.Array,
    state: jax.Array,
    action: jax.Array,
    mask: jax.Array,
    state_mask: jax.Array,
    prior: jax.Array,
    n_actions: int,
) -> jax.Array:
    n_levels, n_states = state_mask.shape
    counts = count_actions(level, state, action, mask, n_levels, n_states, n_actions)
    return smooth_counts(counts, state_mask, prior)


_kernels_jit = jax.jit(_kernels_from_trajectories, static_argnames=("n_actions",))


def _kernels_batched(
    level: jax.Array,
    state: jax.Array,
    action: jax.Array,
    mask: jax.Array,
    state_mask: jax.Array,
    prior: jax.Array,
    n_actions: int,
) -> jax.Array:
    def one(lv: jax.Array, st: jax.Array, ac: jax.Array, m: jax.Array) -> jax.Array:
        return _kernels_from_trajectories(lv, st, ac, m, state_mask, prior, n_actions)

    return jax.vmap(one)(level, state, action, mask)


_kernels_batched_jit = jax.jit(_kernels_batched, static_argnames=("n_actions",))


def _check_trajectories(
    level: Any, state: Any, action: Any, mask: Any, n_levels: int, n_states: int, n_actions: int
) -> None:
    arrays = {"level": level, "state": state, "action": action, "mask": mask}
    shapes = {name: np.shape(v) for name, v in arrays.items()}
    if len(set(shapes.values())) != 1:
        raise ValueError(f"trajectory arrays must share one shape, got {shapes}")
    if len(shapes["mask"]) not in (2, 3):
        raise ValueError(f"trajectories must be [N, T] or [P, N, T], got {shapes['mask']}")
    # Only host arrays are checked: checking device arrays would force a sync.
    m = mask if isinstance(mask, np.ndarray) else None
    for name, arr, bound in (
        ("level", level, n_levels),
        ("state", state, n_states),
        ("action", action, n_actions),
    ):
        if m is None or not isinstance(arr, np.ndarray) or not m.any():
            continue
        vals = arr[m]
        if vals.min() < 0 or vals.max() >= bound:
            raise ValueError(
                f"trajectory field {name!r} has values outside [0, {bound}) on unmasked steps; "
                "fix the indices or set mask=False on padding steps"
            )


def kernels_from_trajectories(
    level: Any,
    state: Any,
    action: Any,
    mask: Any,
    state_mask: Any,
    n_actions: int,
    prior: float = 1.0,
) -> jax.Array:
    """Smoothed kernels from padded trajectories.

    ``[N, T]`` inputs give one kernel ``[L, S, A]``; ``[P, N, T]`` inputs give ``P``
    kernels ``[P, L, S, A]`` in one vmapped call.
    """
    sm = jnp.asarray(state_mask, dtype=bool)
    if sm.ndim != 2:
        raise ValueError(f"state_mask must be [L, S], got shape {tuple(sm.shape)}")
    if prior < 0:
        raise ValueError(f"prior must be >= 0, got {prior}")
    _check_trajectories(level, state, action, mask, sm.shape[0], sm.shape[1], n_actions)
    args = (
        jnp.asarray(level, jnp.int32),
        jnp.asarray(state, jnp.int32),
        jnp.asarray(action, jnp.int32),
        jnp.asarray(mask, bool),
        sm,
        jnp.float32(prior),
    )
    fn = _kernels_jit if args[0].ndim == 2 else _kernels_batched_jit
    return fn(*args, n_actions=n_actions)


@jax.jit
def sample_actions(
    key: jax.Array, kernel: jax.Array, level: jax.Array, state: jax.Array
) -> jax.Array:
    """Sample ``action ~ kernel[level, state]`` for index arrays of any shape."""
    logits = jnp.log(kernel[level, state])
    return jax.random.categorical(key, logits, axis=-1).astype(jnp.int32)


@jax.jit
def _sample_profiles(
    key: jax.Array, kernels: jax.Array, level: jax.Array, state: jax.Array
) -> jax.Array:
    keys = jax.vmap(lambda i: jax.random.fold_in(key, i))(jnp.arange(kernels.shape[0]))
    return jax.vmap(sample_actions, in_axes=(0, 0, None, None))(keys, kernels, level, state)


def empirical_kernels(
    key: jax.Array,
    kernels: Any,
    level: Any,
    state: Any,
    mask: Any,
    state_mask: Any,
    prior: float = 1.0,
) -> jax.Array:
    """Finite-sample estimates of ``kernels [P, L, S, A]`` on the visits ``[N, T]``.

    Profile ``p`` samples its actions with ``fold_in(key, p)`` and is re-estimated by
    ``kernels_from_trajectories``: an "agent" profile as it would be measured.
    """
    k = jnp.asarray(kernels, jnp.float32)
    lv = jnp.asarray(level, jnp.int32)
    st = jnp.asarray(state, jnp.int32)
    actions = _sample_profiles(key, k, lv, st)
    p = k.shape[0]
    rep = (p, *lv.shape)
    return kernels_from_trajectories(
        jnp.broadcast_to(lv, rep),
        jnp.broadcast_to(st, rep),
        actions,
        jnp.broadcast_to(jnp.asarray(mask, bool), rep),
        state_mask,
        k.shape[-1],
        prior,
    )


# --------------------------------------------------------------------------- contamination


def _slot_draws(key: jax.Array, n_slots: int, n_actions: int) -> tuple[jax.Array, jax.Array]:
    """``(z [C, A] standard normal, offset [C] in [0, A))`` from one threefry draw of
    ``[C, A + 1]`` words: slot ``i`` reads row ``i`` (threefry is partitionable: a word
    depends on its index, not on ``C``). One draw, not a split, a normal and a randint
    per slot: each threefry call is a loop XLA compiles, seconds of a cold build on a TPU."""
    bits = jax.random.bits(key, (n_slots, n_actions + 1), jnp.uint32)
    # as jax.random.normal: a uniform in (-1, 1) from 23 mantissa bits, then erf^-1
    one = jax.lax.bitcast_convert_type(
        (bits[:, :n_actions] >> 9) | jnp.uint32(0x3F800000), jnp.float32
    )
    lo = float(np.nextafter(np.float32(-1.0), np.float32(0.0)))
    u = jnp.maximum(lo, 2.0 * (one - 1.0) - 1.0)
    z = np.float32(np.sqrt(2.0)) * jax.lax.erf_inv(u)
    offset = (bits[:, n_actions] % jnp.uint32(n_actions)).astype(jnp.int32)
    return z, offset


def _contaminate_one(
    z: jax.Array,
    offset: jax.Array,
    human: jax.Array,
    state_mask: jax.Array,
    code: jax.Array,
    eps: jax.Array,
    bias_temperature: jax.Array,
) -> jax.Array:
    n_actions = human.shape[-1]
    uniform = jnp.full_like(human, 1.0 / n_actions)
    bias = jax.nn.softmax(z / bias_temperature)
    biased = jnp.broadcast_to(bias.astype(human.dtype), human.shape)
    # exact ties (e.g. several zero-probability actions) go to the first tied action in
    # an action order rotated by a random offset per profile
    order = (jnp.arange(n_actions) - offset) % n_actions
    tied = human == human.min(axis=-1, keepdims=True)
    least = jnp.argmin(jnp.where(tied, order, n_actions), axis=-1)
    adversarial = jax.nn.one_hot(least, n_actions, dtype=human.dtype)
    other = jnp.select([code == 0, code == 1], [uniform, biased], adversarial)
    mixed = (1.0 - eps) * human + eps * other
    return jnp.where(state_mask[..., None], mixed, uniform)


def _contaminate_slots(
    key: jax.Array,
    human: jax.Array,
    state_mask: jax.Array,
    codes: jax.Array,
    eps: jax.Array,
    bias_temperature: jax.Array,
) -> jax.Array:
    z, offset = _slot_draws(key, codes.shape[0], human.shape[-1])
    one = jax.vmap(_contaminate_one, in_axes=(0, 0, None, None, 0, 0, None))
    return one(z, offset, human, state_mask, codes, eps, bias_temperature)


_contaminate_batch = jax.jit(_contaminate_slots)


def _assemble_program(
    key: jax.Array,
    humans: jax.Array,
    agents: jax.Array,
    state_mask: jax.Array,
    codes: jax.Array,
    eps: jax.Array,
    bias_temperature: jax.Array,
    floor: jax.Array,
) -> tuple[jax.Array, jax.Array]:
    """``build_bank``'s device work as one program (one compile per shape): the
    contaminations of every human (human ``h`` keyed ``fold_in(key, h)``), the
    concatenation and the log kernels."""
    keys = jax.vmap(lambda h: jax.random.fold_in(key, h))(jnp.arange(humans.shape[0]))
    per_human = jax.vmap(_contaminate_slots, in_axes=(0, 0, None, None, None, None))
    mixed = per_human(keys, humans, state_mask, codes, eps, bias_temperature)
    kernels = jnp.concatenate([humans, agents, mixed.reshape(-1, *humans.shape[1:])])
    return kernels, jnp.log(jnp.maximum(kernels, floor))


# kept on disk compiled inside a compilation_cache() block (program_cache.py)
_assemble = CachedProgram(_assemble_program)


def contamination_kernels(
    key: jax.Array,
    human: Any,
    state_mask: Any,
    epsilons: Sequence[float] = (0.05, 0.1, 0.2, 0.4),
    contaminations: Sequence[str] = CONTAMINATIONS,
    n_biased: int = 2,
    bias_temperature: float = 0.5,
) -> tuple[jax.Array, np.ndarray, np.ndarray]:
    """Epsilon-mixtures of one human kernel ``[L, S, A]``.

    Returns ``(kernels [C, L, S, A], epsilon [C], contamination code [C])``. For each
    ``eps`` in order: one ``uniform``, ``n_biased`` ``biased`` draws, one
    ``adversarial`` (restricted to the names in ``contaminations``). Slot ``i`` uses
    row ``i`` of one threefry draw from ``key`` (module doc).
    """
    code_a, eps_a = _contamination_slots(epsilons, contaminations, n_biased, bias_temperature)
    h = jnp.asarray(human, jnp.float32)
    sm = jnp.asarray(state_mask, bool)
    if not code_a.size:
        empty = jnp.asarray(np.zeros((0, *h.shape), np.float32))
        return empty, eps_a, code_a
    kernels = _contaminate_batch(
        key, h, sm, jnp.asarray(code_a), jnp.asarray(eps_a), np.float32(bias_temperature)
    )
    return kernels, eps_a, code_a


def _contamination_slots(
    epsilons: Sequence[float],
    contaminations: Sequence[str],
    n_biased: int,
    bias_temperature: float,
) -> tuple[np.ndarray, np.ndarray]:
    """Validated ``(code [C], epsilon [C])`` of one human's contamination slots."""
    unknown = [c for c in contaminations if c not in CONTAMINATIONS]
    if unknown:
        raise ValueError(
            f"unknown contamination kind(s) {unknown}; choose from {', '.join(CONTAMINATIONS)}"
        )
    bad_eps = [e for e in epsilons if not 0.0 <= e <= 1.0]
    if bad_eps:
        raise ValueError(f"epsilons must lie in [0, 1], got {bad_eps}")
    if n_biased < 0:
        raise ValueError(f"n_biased must be >= 0, got {n_biased}")
    if not bias_temperature > 0:
        raise ValueError(f"bias_temperature must be > 0, got {bias_temperature}")
    codes: list[int] = []
    eps_list: list[float] = []
    for eps in epsilons:
        for name in CONTAMINATIONS:
            if name not in contaminations:
                continue
            reps = n_biased if name == "biased" else 1
            codes += [CONTAMINATIONS.index(name)] * reps
            eps_list += [float(eps)] * reps
    return np.asarray(codes, np.int32), np.asarray(eps_list, np.float32)


def build_bank(
    human_kernels: Any,
    state_mask: Any,
    *,
    key: jax.Array,
    agent_kernels: Any = None,
    epsilons: Sequence[float] = (0.05, 0.1, 0.2, 0.4),
    contaminations: Sequence[str] = CONTAMINATIONS,
    n_biased: int = 2,
    bias_temperature: float = 0.5,
    floor: float = KL_FLOOR,
    device: Any = None,
) -> ProfileBank:
    """Bank of humans ``[H, L, S, A]`` (or one ``[L, S, A]``), optional agents, and the
    contamination profiles of every human, placed on ``device`` (or a sharding) once.

    Profile order: humans, agents, then the contaminations of human 0, 1, ...
    The device work is one jitted program (``_assemble``), compiled once per shape; inside
    a ``compilation_cache()`` block a new process loads it compiled (``program_cache.py``).
    """
    humans = np.asarray(human_kernels, np.float32)
    if humans.ndim == 3:
        humans = humans[None]
    if humans.ndim != 4:
        raise ValueError(f"human_kernels must be [H, L, S, A] or [L, S, A], got {humans.shape}")
    agents = np.zeros((0, *humans.shape[1:]), np.float32)
    if agent_kernels is not None:
        agents = np.asarray(agent_kernels, np.float32)
        if agents.ndim == 3:
            agents = agents[None]
        if agents.shape[1:] != humans.shape[1:]:
            raise ValueError(
                f"agent_kernels must have shape [J, {', '.join(map(str, humans.shape[1:]))}], "
                f"got {tuple(agents.shape)}"
            )
    mask = np.asarray(state_mask, bool)
    if mask.shape != humans.shape[1:3]:
        raise ValueError(
            f"state_mask must have shape [L, S] = {humans.shape[1:3]}, got {mask.shape}"
        )
    if not 0.0 < floor < 1.0:
        raise ValueError(f"floor must be in (0, 1), got {floor}")
    codes, eps = _contamination_slots(epsilons, contaminations, n_biased, bias_temperature)
    n_h, n_a, n_c = humans.shape[0], agents.shape[0], codes.size
    kernels, log_kernels = _assemble(
        key,
        humans,
        agents,
        mask,
        codes,
        eps,
        np.float32(bias_temperature),
        np.float32(floor),
    )
    bank = ProfileBank(
        kernels=kernels,
        log_kernels=log_kernels,
        state_mask=jax.device_put(mask),
        kinds=jax.device_put(
            np.concatenate(
                [
                    np.full(n_h, HUMAN, np.int32),
                    np.full(n_a, AGENT, np.int32),
                    np.full(n_h * n_c, CONTAMINATION, np.int32),
                ]
            )
        ),
        epsilon=jax.device_put(
            np.concatenate([np.zeros(n_h + n_a, np.float32), np.tile(eps, n_h)])
        ),
        contamination=jax.device_put(
            np.concatenate([np.full(n_h + n_a, NO_CONTAMINATION, np.int32), np.tile(codes, n_h)])
        ),
        floor=float(floor),
    )
    # placed by a Sharding (along profiles) the bank keeps to the XLA paths: no planes
    hold = holds_planes() and not isinstance(device, jax.sharding.Sharding)
    return to_device(with_planes(bank, hold), device)


def pad_profiles(bank: ProfileBank, multiple: int) -> ProfileBank:
    """Append uniform ``PADDING`` profiles so the profile count divides by ``multiple``.

    Padding profiles are never in a robust set, so scores on real profiles are unchanged.
    """
    if multiple < 1:
        raise ValueError(f"multiple must be >= 1, got {multiple}")
    p, n_levels, n_states, n_actions = bank.shape
    extra = (-p) % multiple
    if extra == 0:
        return bank
    pad = jnp.full((extra, n_levels, n_states, n_actions), 1.0 / n_actions, jnp.float32)
    return make_bank(
        jnp.concatenate([jnp.asarray(bank.kernels), pad]),
        bank.state_mask,
        jnp.concatenate([jnp.asarray(bank.kinds), jnp.full(extra, PADDING, jnp.int32)]),
        epsilon=jnp.concatenate([jnp.asarray(bank.epsilon), jnp.zeros(extra, jnp.float32)]),
        contamination=jnp.concatenate(
            [jnp.asarray(bank.contamination), jnp.full(extra, NO_CONTAMINATION, jnp.int32)]
        ),
        floor=bank.floor,
    )


def _first_program(bank: ProfileBank, n: int) -> ProfileBank:
    return dataclasses.replace(
        bank,
        kernels=bank.kernels[:n],
        log_kernels=bank.log_kernels[:n],
        planes=None if bank.planes is None else bank.planes[:, :n],
        kinds=bank.kinds[:n],
        epsilon=bank.epsilon[:n],
        contamination=bank.contamination[:n],
    )


_first = CachedProgram(_first_program, static_argnames=("n",))
_planes = CachedProgram(_planes_program)


def first_profiles(bank: ProfileBank, n: int) -> ProfileBank:
    """The bank's first ``n`` profiles, sliced where the bank is (one small program, no
    round trip through the host)."""
    if not 1 <= n <= bank.n_profiles:
        raise ValueError(f"n must be in [1, {bank.n_profiles}], got {n}")
    return bank if n == bank.n_profiles else _first(bank, n=n)


def to_device(bank: ProfileBank, device: Any = None) -> ProfileBank:
    """Place every array of the bank on ``device`` (a Device or Sharding) once."""
    if device is None:
        return jax.block_until_ready(bank)
    return jax.block_until_ready(jax.device_put(bank, device))


def load_bank(path: str | os.PathLike[str], device: Any = None) -> ProfileBank:
    """Read a bank written by ``ProfileBank.save`` and place it on ``device``."""
    with np.load(path) as data:
        missing = {"format_version", "kernels", "state_mask", "kinds"} - set(data.files)
        if missing:
            raise ValueError(f"{path}: not a profile bank file (missing {sorted(missing)})")
        version = int(data["format_version"])
        if version != _FORMAT_VERSION:
            raise ValueError(
                f"{path}: bank format version {version}, this code reads {_FORMAT_VERSION}"
            )
        bank = make_bank(
            data["kernels"],
            data["state_mask"],
            data["kinds"],
            epsilon=data["epsilon"],
            contamination=data["contamination"],
            floor=float(data["floor"]),
        )
    return to_device(bank, device)
