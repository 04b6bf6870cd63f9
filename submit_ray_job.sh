#!/usr/bin/env bash
# Submit engine work to a Ray cluster through the job API (seed 000, "Submitting Jobs").
#
#   RAY_MODE=single      python -m engine.train $TRAIN_ARGS
#   RAY_MODE=distributed python scripts/ray_distributed_train.py --train-args "$TRAIN_ARGS"
#                            --num-nodes $NUM_NODES --tpu-per-task $TPU_PER_TASK --base-seed $BASE_SEED
#   RAY_MODE=sweep       python -m engine.sweep --kind $SWEEP_KIND --method $SWEEP_METHOD
#                            --run-cap $SWEEP_RUN_CAP --num-nodes $NUM_NODES
#                            --agents-per-node $AGENTS_PER_NODE --tpu-per-task $TPU_PER_TASK
#
# Variables (defaults in brackets):
#   RAY_MODE [single]  RAY_ADDRESS [http://localhost:8265]  TRAIN_ARGS [the seed's smoke args]
#   NUM_NODES [1]  TPU_PER_TASK [0]  BASE_SEED [42]  STORAGE [unset: engine default ./runs]
#   SWEEP_KIND [ppo_rl_study]  SWEEP_METHOD [random]  SWEEP_RUN_CAP [10]  AGENTS_PER_NODE [1]
#   SWEEP_BACKEND [tune]  SWEEP_ID [derived]  SWEEP_ARGS [extra engine.sweep flags]
#   WANDB_PROJECT  WANDB_ENTITY  WANDB_MODE [online if WANDB_API_KEY is set, else offline]
#   RUNTIME_ENV_JSON [{}]: merged with the excludes below and the W&B env vars
#   SUBMISSION_ID  NO_WAIT=1 (do not stream logs)  DRY_RUN=1 (print the command only)
#   RAY_BIN [ray]  PYTHON_LOCAL [python3, used here only to build JSON]
#   ENGINE_PYTHON [.venv/bin/python beside this script, else PYTHON_LOCAL]: checks the job's
#                 engine arguments and engine env vars (PHANTOM_JAX_PLATFORM, WANDB_MODE, ...)
#                 before anything is submitted, with the engine's own rules (--validate-only);
#                 skipped with a note when it cannot import the engine
#
# The working dir upload never includes .venv, .git, runs, wandb. WANDB_API_KEY, when set,
# is passed to the job in a mode-600 runtime-env file (never on a command line, never
# printed); without a key the runtime env goes inline with --runtime-env-json.
# Exit codes: 2 bad variables (nothing submitted), otherwise the exit code of `ray job submit`
# (with --no-wait 0 once submitted; the job's own exit code 75 means preempted, resumable).
set -euo pipefail

die() {
    echo "submit_ray_job.sh: $*" >&2
    exit 2
}

RAY_MODE="${RAY_MODE:-single}"
RAY_ADDRESS="${RAY_ADDRESS:-http://localhost:8265}"
TRAIN_ARGS="${TRAIN_ARGS:---algo ppo --total-timesteps 5000 --alpha 0.3 --device cpu}"
NUM_NODES="${NUM_NODES:-1}"
TPU_PER_TASK="${TPU_PER_TASK:-0}"
BASE_SEED="${BASE_SEED:-42}"
SWEEP_KIND="${SWEEP_KIND:-ppo_rl_study}"
SWEEP_METHOD="${SWEEP_METHOD:-random}"
SWEEP_RUN_CAP="${SWEEP_RUN_CAP:-10}"
AGENTS_PER_NODE="${AGENTS_PER_NODE:-1}"
SWEEP_BACKEND="${SWEEP_BACKEND:-tune}"
SWEEP_ID="${SWEEP_ID:-}"
SWEEP_ARGS="${SWEEP_ARGS:-}"
STORAGE="${STORAGE:-}"
RUNTIME_ENV_JSON="${RUNTIME_ENV_JSON:-}"
RAY_BIN="${RAY_BIN:-ray}"
PYTHON_LOCAL="${PYTHON_LOCAL:-python3}"
if [[ -n "${WANDB_API_KEY:-}" ]]; then
    WANDB_MODE="${WANDB_MODE:-online}"
else
    WANDB_MODE="${WANDB_MODE:-offline}"
fi
HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"

# at most 9 digits: bash arithmetic would overflow silently beyond 18
is_uint() { [[ "$1" =~ ^[0-9]{1,9}$ ]]; }
is_pos_int() { [[ "$1" =~ ^[0-9]{1,9}$ ]] && ((10#$1 >= 1)); }
is_number() { [[ "$1" =~ ^[0-9]{1,9}([.][0-9]{1,9})?$ ]]; }

case "$RAY_MODE" in
    single | distributed | sweep) ;;
    *) die "RAY_MODE must be single, distributed or sweep (got '$RAY_MODE')" ;;
esac
[[ ${#RAY_ADDRESS} -le 2048 && "$RAY_ADDRESS" =~ ^https?://[^/[:space:]]+(/.*)?$ ]] ||
    die "RAY_ADDRESS must be the dashboard URL like http://localhost:8265 (got '$RAY_ADDRESS')"
is_pos_int "$NUM_NODES" || die "NUM_NODES must be a positive integer (got '$NUM_NODES')"
is_number "$TPU_PER_TASK" || die "TPU_PER_TASK must be a number >= 0 (got '$TPU_PER_TASK')"
is_uint "$BASE_SEED" || die "BASE_SEED must be an integer >= 0 (got '$BASE_SEED')"
case "$WANDB_MODE" in
    online | offline | disabled) ;;
    *) die "WANDB_MODE must be online, offline or disabled (got '$WANDB_MODE')" ;;
esac
command -v "$PYTHON_LOCAL" >/dev/null 2>&1 || die "PYTHON_LOCAL '$PYTHON_LOCAL' not found (needed to build JSON)"
if [[ "${DRY_RUN:-0}" != "1" ]]; then
    command -v "$RAY_BIN" >/dev/null 2>&1 ||
        die "'$RAY_BIN' not found; install ray[default] or set RAY_BIN"
fi

# split a string the way a shell would (quotes respected), NUL-separated; fails on bad quoting
split_args() {
    "$PYTHON_LOCAL" -c 'import shlex, sys
try:
    words = shlex.split(sys.argv[1])
except ValueError as exc:
    sys.exit(f"{exc}")
sys.stdout.write("".join(w + "\0" for w in words))' "$1"
}

TRAIN_WORDS=()
if [[ "$RAY_MODE" != "sweep" ]]; then
    [[ -n "${TRAIN_ARGS// /}" ]] || die "TRAIN_ARGS is empty; e.g. TRAIN_ARGS=\"--algo ppo --total-timesteps 5000 --alpha 0.3 --device cpu\""
    split_out="$(split_args "$TRAIN_ARGS" | base64 -w0)" || die "TRAIN_ARGS has unbalanced quotes: $TRAIN_ARGS"
    mapfile -d '' TRAIN_WORDS < <(printf '%s' "$split_out" | base64 -d)
    if [[ -n "$STORAGE" && " $TRAIN_ARGS " != *" --storage"* ]]; then
        TRAIN_WORDS+=(--storage "$STORAGE")
        TRAIN_ARGS="$TRAIN_ARGS --storage $STORAGE"
    fi
    if [[ " $TRAIN_ARGS " != *" --wandb "* && " $TRAIN_ARGS " != *" --wandb="* ]]; then
        TRAIN_WORDS+=(--wandb "$WANDB_MODE")
        TRAIN_ARGS="$TRAIN_ARGS --wandb $WANDB_MODE"
    fi
fi

ENTRY=()
case "$RAY_MODE" in
    single)
        ENTRY=(python -m engine.train "${TRAIN_WORDS[@]}")
        ;;
    distributed)
        ENTRY=(python scripts/ray_distributed_train.py --train-args "$TRAIN_ARGS"
            --num-nodes "$NUM_NODES" --tpu-per-task "$TPU_PER_TASK" --base-seed "$BASE_SEED")
        ;;
    sweep)
        if [[ "$SWEEP_KIND" == *.json ]]; then
            # a search-space file of the uploaded working dir (the repository)
            [[ "$SWEEP_KIND" != /* && "$SWEEP_KIND" != *..* && -f "$HERE/$SWEEP_KIND" ]] ||
                die "SWEEP_KIND '$SWEEP_KIND' is not a .json file inside the repository (paths are relative to it, as in the uploaded working dir)"
        else
            [[ "$SWEEP_KIND" =~ ^[A-Za-z0-9_-]+$ && -f "$HERE/engine/sweeps/$SWEEP_KIND.json" ]] ||
                die "SWEEP_KIND '$SWEEP_KIND' has no engine/sweeps/$SWEEP_KIND.json; available: $(cd "$HERE/engine/sweeps" && ls -1 ./*.json 2>/dev/null | sed 's|^\./||; s|\.json$||' | tr '\n' ' ')"
        fi
        case "$SWEEP_METHOD" in
            random | grid) ;;
            *) die "SWEEP_METHOD must be random or grid (got '$SWEEP_METHOD')" ;;
        esac
        case "$SWEEP_BACKEND" in
            tune | wandb) ;;
            *) die "SWEEP_BACKEND must be tune or wandb (got '$SWEEP_BACKEND')" ;;
        esac
        is_pos_int "$SWEEP_RUN_CAP" || die "SWEEP_RUN_CAP must be a positive integer (got '$SWEEP_RUN_CAP')"
        is_pos_int "$AGENTS_PER_NODE" || die "AGENTS_PER_NODE must be a positive integer (got '$AGENTS_PER_NODE')"
        if [[ "$SWEEP_BACKEND" == "wandb" ]]; then
            [[ "$WANDB_MODE" == "online" ]] ||
                die "SWEEP_BACKEND=wandb needs W&B online (WANDB_MODE=$WANDB_MODE): a W&B sweep's controller lives on the server; use SWEEP_BACKEND=tune offline"
            [[ -n "${WANDB_API_KEY:-}" ]] || die "SWEEP_BACKEND=wandb needs WANDB_API_KEY in the environment"
        fi
        [[ -z "$SWEEP_ID" || "$SWEEP_ID" =~ ^[A-Za-z0-9._-]+$ ]] ||
            die "SWEEP_ID may only contain letters, digits, . _ - (got '$SWEEP_ID')"
        ENTRY=(python -m engine.sweep --kind "$SWEEP_KIND" --method "$SWEEP_METHOD"
            --run-cap "$SWEEP_RUN_CAP" --num-nodes "$NUM_NODES"
            --agents-per-node "$AGENTS_PER_NODE" --tpu-per-task "$TPU_PER_TASK"
            --backend "$SWEEP_BACKEND" --wandb "$WANDB_MODE")
        [[ -n "$SWEEP_ID" ]] && ENTRY+=(--sweep-id "$SWEEP_ID")
        [[ -n "$STORAGE" ]] && ENTRY+=(--storage "$STORAGE")
        if [[ -n "$SWEEP_ARGS" ]]; then
            split_out="$(split_args "$SWEEP_ARGS" | base64 -w0)" || die "SWEEP_ARGS has unbalanced quotes"
            mapfile -d '' SWEEP_WORDS < <(printf '%s' "$split_out" | base64 -d)
            ENTRY+=("${SWEEP_WORDS[@]}")
        fi
        ;;
esac

# Runtime env: the user's JSON plus upload excludes and W&B settings (the user's values win).
# The API key is read by Python from the environment, so it never appears in argv.
RUNTIME_ENV="$(
    RUNTIME_ENV_JSON="$RUNTIME_ENV_JSON" WANDB_MODE="$WANDB_MODE" "$PYTHON_LOCAL" -c '
import json, os, sys
raw = os.environ.get("RUNTIME_ENV_JSON", "").strip() or "{}"
try:
    env = json.loads(raw)
except json.JSONDecodeError as exc:
    sys.exit(f"RUNTIME_ENV_JSON is not valid JSON: {exc.msg} at char {exc.pos}")
if not isinstance(env, dict):
    sys.exit("RUNTIME_ENV_JSON must be a JSON object like {\"env_vars\": {...}}")
excludes = list(env.get("excludes") or [])
for item in (".venv", ".git", "runs", "wandb", "__pycache__", ".mypy_cache", ".ruff_cache", ".pytest_cache"):
    if item not in excludes:
        excludes.append(item)
env["excludes"] = excludes
env_vars = dict(env.get("env_vars") or {})
if not all(isinstance(v, str) for v in env_vars.values()):
    sys.exit("RUNTIME_ENV_JSON env_vars values must be strings")
for name in ("WANDB_PROJECT", "WANDB_ENTITY", "WANDB_MODE", "WANDB_BASE_URL", "WANDB_API_KEY"):
    if os.environ.get(name) and name not in env_vars:
        env_vars[name] = os.environ[name]
env_vars.setdefault("RAY_USAGE_STATS_ENABLED", "0")
env["env_vars"] = env_vars
print(json.dumps(env, sort_keys=True))
'
)" || die "bad runtime env (see message above)"

# The engine checks its own arguments and env vars, with the runtime env's env_vars applied,
# exactly as the job would start (storage is not touched: it is the cluster's path).
if [[ -z "${ENGINE_PYTHON:-}" ]]; then
    if [[ -x "$HERE/.venv/bin/python" ]]; then ENGINE_PYTHON="$HERE/.venv/bin/python"; else ENGINE_PYTHON="$PYTHON_LOCAL"; fi
fi
if (cd "$HERE" && "$ENGINE_PYTHON" -c "import engine.trainconfig" >/dev/null 2>&1); then
    set +e
    CHECK_ERR="$(cd "$HERE" && PHANTOM_RUNTIME_ENV="$RUNTIME_ENV" "$ENGINE_PYTHON" - "${ENTRY[@]:1}" --validate-only 2>&1 >/dev/null <<'PY'
import json, os, runpy, sys
env = json.loads(os.environ.pop("PHANTOM_RUNTIME_ENV"))
os.environ.update({k: v for k, v in env.get("env_vars", {}).items()})
args = sys.argv[1:]
if args[0] == "-m":
    sys.argv = [args[1], *args[2:]]
    runpy.run_module(args[1], run_name="__main__", alter_sys=True)
else:
    sys.argv = args
    runpy.run_path(args[0], run_name="__main__")
PY
)"
    check_rc=$?
    set -e
    if ((check_rc != 0)); then
        reason="$(printf '%s\n' "$CHECK_ERR" | grep -E 'error:' | tail -1)"
        [[ -n "$reason" ]] || reason="$(printf '%s\n' "$CHECK_ERR" | tail -1)"
        reason="${reason#*error: }"
        case "$reason" in
            *PHANTOM_JAX_PLATFORM* | *PHANTOM_NOTICE_GRACE_S* | *WANDB_MODE=*) field="RUNTIME_ENV_JSON env_vars" ;;
            *--kind*) field="SWEEP_KIND" ;;
            *--train-args* | *--algo* | *--alpha* | *--total-timesteps* | *--hparams* | *--env* | *--n-envs* | *--run-name* | *--device*) field="TRAIN_ARGS" ;;
            *--method*) field="SWEEP_METHOD" ;;
            *--run-cap*) field="SWEEP_RUN_CAP" ;;
            *--agents-per-node*) field="AGENTS_PER_NODE" ;;
            *--num-nodes*) field="NUM_NODES" ;;
            *--tpu-per-task*) field="TPU_PER_TASK" ;;
            *--base-seed*) field="BASE_SEED" ;;
            *--sweep-id*) field="SWEEP_ID" ;;
            *--storage*) field="STORAGE" ;;
            *--backend*) field="SWEEP_BACKEND" ;;
            *) if [[ "$RAY_MODE" == "sweep" ]]; then field="SWEEP_ARGS"; else field="TRAIN_ARGS"; fi ;;
        esac
        die "$field rejected by the engine (nothing submitted): $reason"
    fi
else
    echo "submit_ray_job.sh: note: engine arguments not checked locally ($ENGINE_PYTHON cannot import the engine; set ENGINE_PYTHON)" >&2
fi

REDACTED="$(printf '%s' "$RUNTIME_ENV" | "$PYTHON_LOCAL" -c '
import json, sys
env = json.load(sys.stdin)
for k in list(env.get("env_vars", {})):
    if "KEY" in k or "TOKEN" in k or "SECRET" in k or "PASSWORD" in k:
        env["env_vars"][k] = "<redacted>"
print(json.dumps(env, sort_keys=True))')"

cd "$HERE" # the working dir upload is the repository, whatever the caller's cwd
SUBMIT=("$RAY_BIN" job submit --address "$RAY_ADDRESS" --working-dir .)
[[ -n "${SUBMISSION_ID:-}" ]] && SUBMIT+=(--submission-id "$SUBMISSION_ID")
[[ "${NO_WAIT:-0}" == "1" ]] && SUBMIT+=(--no-wait)

ENV_FILE=""
cleanup() {
    if [[ -n "$ENV_FILE" ]]; then rm -f "$ENV_FILE"; fi
}
trap cleanup EXIT
if [[ "$REDACTED" != "$RUNTIME_ENV" ]]; then
    # a secret is in there: hand it over in a private file (JSON is valid YAML)
    ENV_FILE="$(umask 077 && mktemp "${TMPDIR:-/tmp}/phantom-runtime-env.XXXXXX")"
    printf '%s\n' "$RUNTIME_ENV" >"$ENV_FILE"
    SUBMIT+=(--runtime-env "$ENV_FILE")
    SHOWN=("${SUBMIT[@]}")
    echo "submit_ray_job.sh: runtime env (secrets redacted): $REDACTED" >&2
else
    SUBMIT+=(--runtime-env-json "$RUNTIME_ENV")
    SHOWN=("${SUBMIT[@]}")
fi

echo "submit_ray_job.sh: mode=$RAY_MODE address=$RAY_ADDRESS" >&2
printf '+' >&2
printf ' %q' "${SHOWN[@]}" -- "${ENTRY[@]}" >&2
printf '\n' >&2
if [[ "${DRY_RUN:-0}" == "1" ]]; then
    exit 0
fi
set +e
"${SUBMIT[@]}" -- "${ENTRY[@]}"
rc=$?
set -e
exit "$rc"
