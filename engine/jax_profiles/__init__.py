"""Behavioural profiles in compiled JAX batches (seed 000, "Behavior Modeling Parallelization").

Modules (each documents its formulas):

* ``bank``       -- ``ProfileBank`` of P policy kernels ``[P, L, S, A]`` with a state mask and
  kinds; estimation from padded trajectories; epsilon-mixture contaminations; ``.npz`` I/O.
* ``divergence`` -- KL (floored), Jensen-Shannon and total variation of J agent kernels
  against all P profiles, per level and visitation-weighted, in one jitted call.
* ``alpha``      -- robust alpha selection over a contamination set; online dual update.
* ``sharding``   -- the bank sharded along profiles (``jax.shard_map``, ``NamedSharding``),
  multi-process with ``jax.distributed``; PRNG ``fold_in(fold_in(key, process), step)``.
* ``online``     -- ``AutoAlphaCallback`` for SB3 (``python -m engine.train --alpha auto``).
* ``bench``      -- ``python -m benchmarks.jax_profiles``: JAX pass vs a NumPy loop.

Importing this package does not import JAX; import the submodules you need.
"""
