#!/usr/bin/env bash
# The GPU run: install what the GPU machine lacks, export the package there, check what CUDA
# runs (bench/gpu_checks.py), then the benchmark (`headwise bench --provider cuda`).
#
#   bash bench/gpu.sh setup    # install + export + checks (about 3 minutes)
#   bash bench/gpu.sh bench    # the benchmark (under 9 minutes: --max-minutes)
#   bash bench/gpu.sh all      # both, where one command may run longer
#
# What travels there, and in which calls: bench/README.md, section GPU. Parts are found in
# .gpu/ (carried) or in /tmp/hw-gpu (copied there by earlier calls of the same warm machine).
# Results go to $OUT (the device tool's folder) or bench/results.
# Environment: PYTHON (python3), SITE (/tmp/site), REPS (3), SECONDS_PER_CELL (3),
#              MAX_MINUTES (8), STEP_TIMEOUT (seconds per setup step, 300).
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
SITE=${SITE:-/tmp/site}
STAGE=/tmp/hw-gpu
RESULTS=${OUT:-bench/results}
STEP_TIMEOUT=${STEP_TIMEOUT:-300}
mkdir -p "$RESULTS" "$STAGE"
export PYTHONPATH="$SITE:$PWD" PYTHONUNBUFFERED=1
log() { printf '\n== %s (%s)\n' "$*" "$(date +%T)"; }
die() { echo "gpu.sh: $*" >&2; exit 2; }
# the parts of one file, from .gpu/ or $STAGE, once each, in order of their names
first() { for f in "$@"; do if [ -f "$f" ]; then head -1 "$f"; return; fi; done; }
parts() { for p in .gpu/*/"$1".* "$STAGE"/"$1".*; do [ -f "$p" ] && echo "$(basename "$p") $p"; done | sort -u -k1,1 | awk '{print $2}'; }

install() {
  log "1. onnxruntime-gpu and the service's wheels"
  if ! "$PY" -c 'import onnxruntime as o, sys; sys.exit("CUDAExecutionProvider" not in o.get_available_providers())' 2>/dev/null; then
    name=$(first .gpu/*/ORT_WHEEL "$STAGE"/ORT_WHEEL)
    [ -n "$name" ] || die "no ORT_WHEEL (the wheel's file name) in .gpu/* or $STAGE: run bench/gpu-prepare.sh here and carry its parts"
    ps=$(parts ort.part)
    want=$(first .gpu/*/ORT_PARTS "$STAGE"/ORT_PARTS)
    got=$(echo "$ps" | grep -c . || true)
    [ "$got" = "$want" ] || die "onnxruntime-gpu: $got of ${want:-?} parts found in .gpu/* and $STAGE"
    cat $ps > "$STAGE/$name"
    # each wheel once, by file name, wherever it was found
    wheels=$(for w in "$STAGE"/wheels/*.whl .gpu/*/wheels/*.whl; do [ -f "$w" ] && echo "$(basename "$w") $w"; done | sort -u -k1,1 | awk '{print $2}')
    timeout "$STEP_TIMEOUT" "$PY" -m pip install -q --no-index --no-deps --no-compile --target "$SITE" "$STAGE/$name" $wheels
  fi
  "$PY" -c 'import onnxruntime as o, fastapi, uvicorn, pydantic_settings, orjson; print("onnxruntime", o.__version__, o.get_available_providers())'
  nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader || true
}

package() {
  log "2. model package"
  if ! ls "$STAGE"/models/*/manifest.json >/dev/null 2>&1; then
    ps=$(parts ckpt.part)
    [ -n "$ps" ] || die "no checkpoint parts (ckpt.part.*) in .gpu/* or $STAGE"
    cat $ps | tar -C "$STAGE" -xf -
    ckpt=$(dirname "$(ls "$STAGE"/*/config.json | sed -n 1p)")
    timeout "$STEP_TIMEOUT" "$PY" -m headwise.cli export "$ckpt" --name all-minilm-l6-v2 --out "$STAGE/models" --no-int8 --fp16
  fi
  MODELS=$(dirname "$(ls "$STAGE"/models/*/manifest.json | sed -n 1p)")
  CKPT=$(dirname "$(ls "$STAGE"/*/config.json | sed -n 1p)")
  echo "package: $MODELS; checkpoint: $CKPT"
}

checks() {
  log "3. what CUDA runs, and its parity"
  timeout "$STEP_TIMEOUT" "$PY" -m bench.gpu_checks "$MODELS" --out "$RESULTS"
}

bench() {
  log "4. headwise bench --provider cuda"
  for d in .gpu/*/wrk "$STAGE/wrk"; do
    if [ -x "$d/wrk" ] && LD_LIBRARY_PATH="$d" "$d/wrk" --version 2>&1 | grep -q "^wrk "; then  # it exits 1
      export PATH="$d:$PATH" LD_LIBRARY_PATH="$d${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"; break
    fi
  done
  if command -v wrk >/dev/null; then { wrk --version 2>&1 || true; } | sed -n 1p; else echo "no wrk: bench/loadgen.py drives the load"; fi
  suites=ceiling,http
  if "$PY" -c 'import sentence_transformers' 2>/dev/null; then suites=$suites,st; fi
  gpu=$(nvidia-smi --query-gpu=name --format=csv,noheader 2>/dev/null | head -1 | tr -c 'A-Za-z0-9\n' '-' | tr 'A-Z' 'a-z' | sed 's/-*$//')
  "$PY" -m headwise.cli bench --provider cuda --models "$MODELS" --suites "$suites" --st-model "$CKPT" \
    --variants fp16,attention --lengths 20,128 --concurrency 1,16,64 --batches 1,8,32,64 \
    --st-batches 1,32 --reps "${REPS:-3}" --seconds "${SECONDS_PER_CELL:-3}" --ceiling-seconds 1 \
    --name "gpu-${gpu:-cuda}" --out "$RESULTS" --max-minutes "${MAX_MINUTES:-8}" "${@}"
  nvidia-smi > "$RESULTS/gpu-${gpu:-cuda}.nvidia-smi.txt" 2>&1 || true
  echo "results in $RESULTS"
}

case "${1:-all}" in
  setup) install; package; checks ;;
  bench) shift; install >/dev/null; package >/dev/null; bench "$@" ;;
  all) shift || true; install; package; checks; bench "$@" ;;
  *) die "usage: bash bench/gpu.sh setup|bench|all [more headwise bench options]" ;;
esac
