#!/usr/bin/env bash
# The profile kernels' TPU figures in one run (one TPU v5e chip with JAX, NumPy and pytest;
# under 8 minutes; one process holds the chip at a time, so the steps run one by one):
#   bash benchmarks/jax_profiles_device.sh 2>&1 | tee jax_profiles_device.log
# Every step prints its table and ends with one JSON line; a step that fails or times out
# says so and the next one still runs. STEPS picks steps (default "0 1 2 3 4"; 5 is the
# tile sweep). What to read (bench rows: ms, bound ms, /bound, vs ref, rel err, same):
#   0. the kernels' tests (tests/engine/jax_profiles/test_pallas_kernels.py), compiled by
#      Mosaic on the chip: every edge case against the reference and a float64 loop;
#   1. default size: every pass "same" as the reference and the NumPy loop, rel err < 1e-5;
#      the reference's time against today's (CPU: same-run ratio);
#   2. 4096 x 16: no pass slower than the reference; KL's precisions: rel err and "same";
#   3. 4096 x 256: js, tv pallas <= 100 / 60 ms and /bound (the elementwise roofline)
#      <= 1.3; kl auto /bound (read-only) <= 1.3, its rel err and "same";
#   4. compile cache: second process / cold < 0.25 (bank build + first pass);
#   5. tile sweep (JS, TV kernels at 16 and 256 candidates; KL's products by count);
#   6. where a kernel pass goes (benchmarks/jax_profiles_layout.py): the bank's relayout,
#      the kernel per tile config against its roofline, KL on a bank kept split.
# PYTHON overrides the interpreter (default: python3); SWEEP_METRIC, SWEEP_CANDIDATES and
# SWEEP_CONFIGS the sweep's --metric, --candidates and --configs; LAYOUT_ARGS step 6's.
set -u
cd "$(dirname "$0")/.."
PY="${PYTHON:-python3}"
STEPS=" ${STEPS:-0 1 2 3 4} "
export TF_CPP_MIN_LOG_LEVEL="${TF_CPP_MIN_LOG_LEVEL:-1}"
export PYTHONUNBUFFERED=1

step() {
  local id="$1" name="$2" limit="$3"
  shift 3
  case "${STEPS}" in *" ${id} "*) ;; *) return 0 ;; esac
  echo
  echo "=== ${id} ${name} ($(date -u +%H:%M:%S), limit ${limit} s): $*"
  local t0=$SECONDS
  timeout "${limit}" "$@"
  local rc=$?
  echo "=== ${id} ${name}: exit ${rc} after $((SECONDS - t0)) s"
}

"${PY}" -c 'import jax, numpy; print("jax", jax.__version__, "numpy", numpy.__version__)'
# the project's conftests need its install; the kernels' tests need none of it
step 0 "the kernels' tests on the chip" 80 \
  "${PY}" -m pytest -c /dev/null --rootdir . -p no:cacheprovider --noconftest -q \
  -W ignore::pytest.PytestUnknownMarkWarning tests/engine/jax_profiles/test_pallas_kernels.py
step 1 "default size, all metrics and implementations, NumPy loop" 110 \
  "${PY}" -m benchmarks.jax_profiles --metric all --impl all --precision all \
  --repeats 10 --baseline-repeats 1
step 2 "4096 profiles x 16 candidates" 80 \
  "${PY}" -m benchmarks.jax_profiles --profiles 4096 --candidates 16 --metric all --impl all \
  --precision all --repeats 10 --baseline-repeats 0
step 3 "4096 profiles x 256 candidates" 120 \
  "${PY}" -m benchmarks.jax_profiles --profiles 4096 --candidates 256 --metric all --impl all \
  --precision auto,fp32,bf16x3,bf16 --repeats 4 --baseline-repeats 0
step 4 "compile cache: cold vs second process (default size)" 60 \
  "${PY}" -m benchmarks.jax_profiles_cache
step 5 "tile sweep at 4096 profiles" 120 \
  "${PY}" -m benchmarks.jax_profiles_sweep --metric "${SWEEP_METRIC:-js,tv,kl}" \
  --candidates "${SWEEP_CANDIDATES:-256,16}" --configs "${SWEEP_CONFIGS:-7,2}" --repeats 3
step 6 "where a kernel pass goes at 4096 profiles" 300 \
  "${PY}" -m benchmarks.jax_profiles_layout ${LAYOUT_ARGS:---candidates 256 --repeats 4}
