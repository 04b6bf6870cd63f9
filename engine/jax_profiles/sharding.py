"""Scale-out: the profile bank sharded along the profile axis, one process or many.

Mesh and layout
    A 1-D ``Mesh`` with axis ``"profiles"`` over the devices (all processes' devices
    in a multi-process run). Bank leaves with a leading profile axis use
    ``NamedSharding(mesh, P("profiles"))``; ``state_mask`` is replicated. The profile
    count is padded with ``PADDING`` profiles to a multiple of the mesh size; padding is
    outside every robust set, so it never changes a result.

The sharded pass (``jax.shard_map``; ``pmap`` is in maintenance)
    Each shard scores the agents against its ``P / n`` profiles (a local ``[P/n, C]``
    divergence block: one local matrix product for KL), takes its local masked worst
    case, and the worst case is reduced across shards:

        worst[c] = pmax_shards(max_{p in shard, p in R} D[c, p])
        worst_profile[c] = pmin_shards(global index of the local argmax, where the local
                                       max equals worst[c])         (first on ties)

    so selection sees exactly what the single-device pass sees. The full ``[C, P]``
    score matrix stays sharded along P; selection outputs are replicated.

Multi-process (``jax.distributed``)
    ``initialize`` joins the processes (coordinator bound to the given address only,
    e.g. loopback); every process builds or loads *its own slice* of the bank
    (``local_profile_range``), ``global_bank`` assembles the global sharded array from
    the process-local slices without moving them, the same jitted shard_map runs on
    every process, and ``gather`` brings sharded results to each host.

PRNG
    Per-process, per-step randomness uses ``step_key(key, process_index, step) =
    fold_in(fold_in(key, process_index), step)``: any process that asks for the same
    (key, process index, step) gets the same samples, and runs are reproducible across
    nodes. Bank contents never depend on the process layout (contamination keys are per
    profile slot, see ``bank.py``).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import Mesh, NamedSharding
from jax.sharding import PartitionSpec as P

from engine.jax_profiles.alpha import AlphaSelection, finish_selection, masked_worst, robust_set
from engine.jax_profiles.bank import ProfileBank, pad_profiles, with_planes
from engine.jax_profiles.divergence import total_divergences, validate_agents

__all__ = [
    "PROFILE_AXIS",
    "bank_shardings",
    "gather",
    "global_bank",
    "initialize",
    "local_profile_range",
    "make_sharded_selection",
    "profile_mesh",
    "shard_bank",
    "sharded_select_alpha",
    "step_key",
]

PROFILE_AXIS = "profiles"
_INT_MAX = np.iinfo(np.int32).max


def step_key(key: jax.Array, process_index: int | jax.Array, step: int | jax.Array) -> jax.Array:
    """``fold_in(fold_in(key, process_index), step)``."""
    return jax.random.fold_in(jax.random.fold_in(key, process_index), step)


def profile_mesh(devices: Sequence[Any] | None = None) -> Mesh:
    """1-D mesh over ``devices`` (default: every device of every process)."""
    devs = list(jax.devices() if devices is None else devices)
    if not devs:
        raise ValueError("profile_mesh needs at least one device")
    return Mesh(np.array(devs), (PROFILE_AXIS,))


def _bank_specs(floor: float) -> ProfileBank:
    prof = P(PROFILE_AXIS)
    specs: dict[str, Any] = {
        "kernels": prof,
        "log_kernels": prof,
        "state_mask": P(),
        "kinds": prof,
        "epsilon": prof,
        "contamination": prof,
    }
    return ProfileBank(**specs, floor=floor)


def bank_shardings(mesh: Mesh, floor: float) -> ProfileBank:
    """A ProfileBank-shaped tree of ``NamedSharding`` for ``jax.device_put``."""
    return jax.tree.map(
        lambda spec: NamedSharding(mesh, spec),
        _bank_specs(floor),
        is_leaf=lambda x: isinstance(x, P),
    )


def shard_bank(bank: ProfileBank, mesh: Mesh) -> ProfileBank:
    """Pad to a multiple of the mesh size and place the bank sharded along profiles (the
    sharded pass keeps to the XLA paths: no action planes)."""
    padded = with_planes(pad_profiles(bank, mesh.size), hold=False)
    return jax.block_until_ready(jax.device_put(padded, bank_shardings(mesh, bank.floor)))


def make_sharded_selection(mesh: Mesh, metric: str = "kl") -> Any:
    """Jitted ``(bank, alphas, agents, returns, visitation, in_set, lam) -> AlphaSelection``.

    ``bank`` and ``in_set`` sharded along profiles; everything else replicated.
    ``visitation`` must be an array (use ones for uniform).
    """

    def local(
        bank: ProfileBank,
        alphas: jax.Array,
        agents: jax.Array,
        returns: jax.Array,
        visitation: jax.Array,
        in_set: jax.Array,
        lam: jax.Array,
    ) -> AlphaSelection:
        d_pc = total_divergences(bank, agents, visitation, metric)  # [P_local, C]
        local_worst, local_idx = masked_worst(d_pc, in_set)
        offset = jax.lax.axis_index(PROFILE_AXIS) * d_pc.shape[0]
        worst = jax.lax.pmax(local_worst, PROFILE_AXIS)
        candidate = jnp.where(local_worst == worst, local_idx + offset, _INT_MAX)
        worst_idx = jax.lax.pmin(candidate.astype(jnp.int32), PROFILE_AXIS)
        return finish_selection(alphas, returns, lam, d_pc, in_set, worst, worst_idx)

    prof = P(PROFILE_AXIS)
    # choice .. normalised_return replicated; score matrix and divergence split along P
    out_specs = AlphaSelection._make(
        [P()] * 6 + [P(None, PROFILE_AXIS), P(None, PROFILE_AXIS), prof]
    )

    def run(
        bank: ProfileBank,
        alphas: jax.Array,
        agents: jax.Array,
        returns: jax.Array,
        visitation: jax.Array,
        in_set: jax.Array,
        lam: jax.Array,
    ) -> AlphaSelection:
        fn = jax.shard_map(
            local,
            mesh=mesh,
            in_specs=(_bank_specs(bank.floor), P(), P(), P(), P(), prof, P()),
            out_specs=out_specs,
        )
        return fn(bank, alphas, agents, returns, visitation, in_set, lam)  # type: ignore[no-any-return]

    return jax.jit(run)


def _replicated(mesh: Mesh, x: Any) -> jax.Array:
    """A replicated global array from identical host data on every process."""
    arr = np.asarray(x)
    return jax.make_array_from_process_local_data(NamedSharding(mesh, P()), arr, arr.shape)


def sharded_select_alpha(
    bank: ProfileBank,
    mesh: Mesh,
    alphas: Any,
    agents: Any,
    returns: Any,
    visitation: Any = None,
    *,
    lam: float = 1.0,
    metric: str = "kl",
    selection_fn: Any = None,
) -> AlphaSelection:
    """``select_alpha`` on a bank sharded over ``mesh`` (single- or multi-process).

    Host inputs must be identical in every process. Pass ``selection_fn`` from
    ``make_sharded_selection`` to reuse one compiled function across calls.
    """
    validate_agents(bank, agents, visitation)
    agents_np = np.asarray(agents, np.float32)
    vis = (
        np.ones(agents_np.shape[:3], np.float32)
        if visitation is None
        else np.asarray(visitation, np.float32)
    )
    fn = selection_fn if selection_fn is not None else make_sharded_selection(mesh, metric)
    in_set = robust_set(bank)
    return fn(  # type: ignore[no-any-return]
        bank,
        _replicated(mesh, np.asarray(alphas, np.float32)),
        _replicated(mesh, agents_np),
        _replicated(mesh, np.asarray(returns, np.float32)),
        _replicated(mesh, vis),
        in_set,
        _replicated(mesh, np.float32(lam)),
    )


# --------------------------------------------------------------------------- multi-process


def initialize(
    coordinator_address: str,
    num_processes: int,
    process_id: int,
    *,
    timeout_s: int = 120,
) -> None:
    """Join a ``jax.distributed`` job; the coordinator binds to ``coordinator_address`` only.

    Must run before anything touches a JAX backend in this process.
    """
    if not 0 <= process_id < num_processes:
        raise ValueError(f"process_id must be in [0, {num_processes}), got {process_id}")
    jax.distributed.initialize(
        coordinator_address=coordinator_address,
        num_processes=num_processes,
        process_id=process_id,
        coordinator_bind_address=coordinator_address,
        initialization_timeout=timeout_s,
    )


def local_profile_range(n_profiles: int, mesh: Mesh) -> tuple[int, int]:
    """``[start, stop)`` of the (padded) profile axis held by this process's devices."""
    padded = n_profiles + (-n_profiles) % mesh.size
    sharding = NamedSharding(mesh, P(PROFILE_AXIS))
    slices = [
        (idx or (slice(None),))[0]
        for idx in sharding.addressable_devices_indices_map((padded,)).values()
    ]
    starts = [s.start or 0 for s in slices]
    stops = [s.stop if s.stop is not None else padded for s in slices]
    start, stop = min(starts), max(stops)
    if stop - start != sum(b - a for a, b in zip(starts, stops, strict=True)):
        raise ValueError("this process's devices do not hold one contiguous profile range")
    return start, stop


def global_bank(local: ProfileBank, mesh: Mesh, n_profiles: int) -> ProfileBank:
    """Assemble the global sharded bank from each process's slice (``local_profile_range``).

    ``n_profiles`` is the global (padded) profile count; ``local`` holds this process's
    rows, ``state_mask`` is the same everywhere.
    """
    shardings = bank_shardings(mesh, local.floor)
    local = with_planes(local, hold=False)  # the sharded pass keeps to the XLA paths

    def put(x: jax.Array, sharding: NamedSharding) -> jax.Array:
        arr = np.asarray(x)
        shape = arr.shape if sharding.spec == P() else (n_profiles, *arr.shape[1:])
        return jax.make_array_from_process_local_data(sharding, arr, shape)

    return jax.block_until_ready(jax.tree.map(put, local, shardings))


def gather(x: jax.Array) -> np.ndarray:
    """The full value of a (possibly multi-process sharded) array on this host."""
    if x.is_fully_addressable:
        return np.asarray(x)
    if x.is_fully_replicated:
        return np.asarray(x.addressable_data(0))
    from jax.experimental import multihost_utils

    return np.asarray(multihost_utils.process_allgather(x, tiled=True))
