#!/usr/bin/env bash
# Issue 38's GPU figures in one run (an NVIDIA H200 with JAX + CUDA and NumPy; < 5 minutes):
#   bash benchmarks/jax_profiles_device.sh 2>&1 | tee jax_profiles_device.log
# Every step prints its table and ends with one JSON line; a step that fails or times out
# says so and the next one still runs. What to read (each row: ms, bound ms, /bound,
# vs ref, rel err, same):
#   1. default size: every pass "same" as the reference and the NumPy loop, rel err < 1e-5;
#   2. 4096 x 16:   kl pallas fp32 /bound <= 1.3; js, tv pallas /bound <= 3;
#                   kl tf32 / bf16 rows: rel err and "same" (the precision choice);
#   3. 4096 x 256:  js, tv pallas /bound <= 3;
#   4. compile cache: second process / cold < 0.25.
# PYTHON overrides the interpreter (default: python3); SWEEP=1 adds a tile-size sweep.
set -u
cd "$(dirname "$0")/.."
PY="${PYTHON:-python3}"
export TF_CPP_MIN_LOG_LEVEL="${TF_CPP_MIN_LOG_LEVEL:-1}"

step() {
  local name="$1" limit="$2"
  shift 2
  echo
  echo "=== ${name} ($(date -u +%H:%M:%S), limit ${limit} s): $*"
  local t0=$SECONDS
  timeout "${limit}" "$@"
  local rc=$?
  echo "=== ${name}: exit ${rc} after $((SECONDS - t0)) s"
}

"${PY}" -c 'import jax, numpy; print("jax", jax.__version__, "numpy", numpy.__version__, jax.devices())'
step "1 default size, all metrics and implementations, NumPy loop" 110 \
  "${PY}" -m benchmarks.jax_profiles --metric all --impl all --precision all \
  --repeats 10 --baseline-repeats 1
step "2 4096 profiles x 16 candidates" 75 \
  "${PY}" -m benchmarks.jax_profiles --profiles 4096 --candidates 16 --metric all --impl all \
  --precision all --repeats 10 --baseline-repeats 0
step "3 4096 profiles x 256 candidates" 75 \
  "${PY}" -m benchmarks.jax_profiles --profiles 4096 --candidates 256 --metric all --impl all \
  --repeats 4 --baseline-repeats 0
step "4 compile cache: cold vs second process (default size)" 60 \
  "${PY}" -m benchmarks.jax_profiles_cache
if [ "${SWEEP:-0}" = 1 ]; then  # tile sizes, for tuning pallas_kernels.default_config (~1 min)
  step "5 Pallas tile sweep at 4096 profiles" 90 \
    "${PY}" -m benchmarks.jax_profiles_sweep --candidates 16,256 --repeats 3
fi
