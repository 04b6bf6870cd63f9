"""Behavioural profiles in compiled JAX batches (seed 000, "Behavior Modeling Parallelization").

Modules (each documents its formulas):

* ``bank``       -- ``ProfileBank`` of P policy kernels ``[P, L, S, A]`` with a state mask and
  kinds; estimation from padded trajectories; epsilon-mixture contaminations; ``.npz`` I/O.
* ``divergence`` -- KL (floored), Jensen-Shannon and total variation of J agent kernels
  against all P profiles, per level and visitation-weighted, in one jitted call.
* ``choice``     -- what ``impl="auto"`` and ``precision="auto"`` stand for per backend
  and shape: a table of measured choices.
* ``tiled``      -- JS / TV as an XLA loop over blocks of profiles: one read of the bank.
* ``pallas_kernels`` -- JS / TV as Pallas TPU (Mosaic) kernels, a tile of the bank read
  once for a block of agents (interpreted on CPU in the tests).
* ``compile_cache`` -- JAX's persistent compilation cache, scoped (``compilation_cache()``).
* ``program_cache`` -- inside that scope, the compiled programs kept on disk: a second
  process neither traces, lowers nor compiles them (``CachedProgram``).
* ``alpha``      -- robust alpha selection over a contamination set; online dual update.
* ``sharding``   -- the bank sharded along profiles (``jax.shard_map``, ``NamedSharding``),
  multi-process with ``jax.distributed``; PRNG ``fold_in(fold_in(key, process), step)``.
* ``online``     -- ``AutoAlphaCallback`` for SB3 (``python -m engine.train --alpha auto``).
* bench          -- ``python -m benchmarks.jax_profiles``: each pass against the device's
  bounds, the reference path and a NumPy loop; ``benchmarks.jax_profiles_cache``: a
  second process against a cold one; ``benchmarks/jax_profiles_device.sh``: the TPU run.

Importing this package does not import JAX; import the submodules you need.
"""
