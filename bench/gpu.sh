#!/usr/bin/env bash
# The GPU run: install what the GPU machine lacks, export the package there, check what CUDA
# runs (bench/gpu_checks.py), then the benchmark (`headwise bench --provider cuda`) and process
# mode against whole-server workers (bench/gpu_feed.py --layouts).
#
#   bash bench/gpu.sh take     # each device call but the last: keep its carried .gpu/cK in $STAGE
#   bash bench/gpu.sh setup    # the last call: take, install, export, checks (about 3 minutes)
#   bash bench/gpu.sh bench    # the benchmark, within BUDGET (9 minutes)
#   bash bench/gpu.sh process  # inproc:8 / process:8 / process:12 alternating, within BUDGET (7 minutes)
#                              # (… process --route openai: OpenAI's shape, vectors alone, not the native one)
#   bash bench/gpu.sh all      # setup and bench in one command (within BUDGET too)
#   bash bench/gpu.sh --check  # HERE, before a GPU is lent: the whole recipe on this CPU
#
# The calls, in order: bench/README.md, section GPU. `take` copies the carried folders (.gpu/c*)
# into $STAGE, where the later calls of the same warm machine find them; setup/bench/all take
# first too. Results go to $OUT (the device tool's folder) or bench/results.
#
# --check builds a virtual environment of the GPU machine's packages only (bench/gpu-machine.txt,
# at this machine's Python), packs the carry folders with bench/gpu-prepare.sh for this Python
# into .gpu-check/carry, hands each to `take` as its device call would, then runs setup and a
# short bench and a short process step with PROVIDER=cpu from that environment, SITE a fresh
# folder, so fastapi, uvicorn, pydantic, pyzmq, msgspec and onnxruntime-gpu can only come from
# the carried wheels. It ends with PASS or FAIL (exit 1); its log is .gpu-check/check.log.
# CHECK_FRESH=1 builds the environment anew.
#
# Environment: PYTHON (python3), SITE (/tmp/site), STAGE (/tmp/hw-gpu), CARRY (.gpu), PROVIDER
# (cuda), BUDGET (seconds one command may take: 540, under the device's 10 minutes), STEP_TIMEOUT
# (seconds per setup step, 300), REPS (3), SECONDS_PER_CELL (3), MAX_MINUTES (the bench stops
# after the repetition that passes it; default: what BUDGET leaves, less 2 minutes), SENTENCES
# (STS-B pairs for the checks, 0: all), STRICT (1: fail when the carried wrk does not run), CHECKS
# (0: setup skips the checks). The process step: LAYOUTS (inproc:8,process:8,process:12; with a base
# tree carried, BASE=REV bash bench/gpu-prepare.sh: inproc:8,process:12,process:12@$STAGE/base), CELLS
# (20x1x256,20x32x64,128x1x256,128x32x64,128x1x1: tokens x inputs per request x clients), REPS,
# SECONDS_PER_CELL (2 there), MAX_MINUTES (it starts no repetition that would end past it; default:
# what BUDGET leaves, less 1 minute).
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
SITE=${SITE:-/tmp/site}
STAGE=${STAGE:-/tmp/hw-gpu}
CARRY=${CARRY:-.gpu}
PROVIDER=${PROVIDER:-cuda}
RESULTS=${OUT:-bench/results}
BUDGET=${BUDGET:-540}
STEP_TIMEOUT=${STEP_TIMEOUT:-300}
log() { printf '\n== %s (%s)\n' "$*" "$(date +%T)"; }
die() { echo "gpu.sh: $*" >&2; exit 2; }
first() { for f in "$@"; do if [ -f "$f" ]; then head -1 "$f"; return; fi; done; }
parts() { ls "$STAGE/$1".* 2>/dev/null | sort || true; }
# seconds a step may take: STEP_TIMEOUT, or what is left of BUDGET (less $1 seconds) when less
limit() {
  local left=$((BUDGET - SECONDS - ${1:-0}))
  [ "$left" -gt 10 ] || die "out of time: this command's BUDGET of $BUDGET s is spent"
  echo $((left < STEP_TIMEOUT ? left : STEP_TIMEOUT))
}

take() {
  mkdir -p "$STAGE"
  for d in "$CARRY"/c*/; do
    [ -d "$d" ] || continue
    cp -ru "$d". "$STAGE"/  # merges wheels/ and wrk/; -u: what an earlier call copied stays
    echo "took $d: $(ls "$d" | tr '\n' ' ')"
  done
  local o c on cn
  o=$(parts ort.part | grep -c . || true); c=$(parts ckpt.part | grep -c . || true)
  on=$(first "$STAGE/ORT_PARTS" || true); cn=$(first "$STAGE/CKPT_PARTS" || true)
  echo "in $STAGE: onnxruntime-gpu $o of ${on:-?} parts, checkpoint $c of ${cn:-?} parts," \
       "$(find "$STAGE/wheels" -name '*.whl' 2>/dev/null | wc -l) wheels"
}

# What `headwise serve`, the checks and the bench import: CUDA's onnxruntime, the service's wheels.
# shellcheck disable=SC2016
IMPORTS='
import importlib, os, sys
import onnxruntime as o
assert "CUDAExecutionProvider" in o.get_available_providers(), f"onnxruntime {o.__version__} from {o.__file__} has no CUDA"
import headwise.service.api.app, headwise.service.server.serve, headwise.service.backends.onnxruntime  # the whole service, fastapi and its imports included
import headwise.service.server.supervisor, headwise.service.server.frontend, headwise.service.server.engine_process  # process mode: pyzmq, msgspec
site = os.path.realpath(os.environ["SITE"])
for m in ("onnxruntime", "fastapi", "starlette", "uvicorn", "httptools", "pydantic", "pydantic_core",
          "pydantic_settings", "dotenv", "orjson", "opentelemetry", "uvloop", "zmq", "msgspec", "tokie"):
    mod = importlib.import_module(m)
    where = os.path.realpath(getattr(mod, "__file__", None) or list(mod.__path__)[0])
    version, src = getattr(mod, "__version__", ""), "carried" if where.startswith(site) else where
    print(f"{m:18} {version:10} {src}")
print("onnxruntime", o.__version__, o.get_available_providers())
from headwise import compiled  # the front-ends read plain texts with tokie only at the tested version
assert compiled.installed() == compiled.TESTED, f"tokie {compiled.installed()} is not {compiled.TESTED}"
'

install() {
  log "1. onnxruntime-gpu and the service's wheels"
  if ! SITE="$SITE" "$PY" -c "$IMPORTS" >/dev/null 2>&1; then
    local name ps want got
    name=$(first "$STAGE/ORT_WHEEL")
    [ -n "$name" ] || die "no ORT_WHEEL (the wheel's file name) in $STAGE: run bench/gpu-prepare.sh here and carry its parts (bash bench/gpu.sh take)"
    ps=$(parts ort.part)
    want=$(first "$STAGE/ORT_PARTS")
    got=$(echo "$ps" | grep -c . || true)
    [ "$got" = "$want" ] || die "onnxruntime-gpu: $got of ${want:-?} parts in $STAGE: carry the missing .gpu/cK"
    # shellcheck disable=SC2086
    cat $ps > "$STAGE/$name"
    # shellcheck disable=SC2046
    timeout "$(limit)" "$PY" -m pip install -q --no-index --no-deps --no-compile --target "$SITE" \
      "$STAGE/$name" $(ls "$STAGE"/wheels/*.whl 2>/dev/null)
    rm -f "$STAGE/$name"
  fi
  SITE="$SITE" "$PY" -c "$IMPORTS" || die "the service cannot be imported from $SITE (above): a wheel is missing from gpu-prepare.sh's list"
  if command -v nvidia-smi >/dev/null; then nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader || true; fi
}

package() {
  log "2. model package"
  if ! ls "$STAGE"/models/*/manifest.json >/dev/null 2>&1; then
    local ps want got ckpt
    ps=$(parts ckpt.part)
    want=$(first "$STAGE/CKPT_PARTS")
    got=$(echo "$ps" | grep -c . || true)
    [ "$got" -gt 0 ] && [ "$got" = "${want:-$got}" ] || die "checkpoint: $got of ${want:-?} parts (ckpt.part.*) in $STAGE"
    # shellcheck disable=SC2086
    cat $ps | tar -C "$STAGE" -xf -
    ckpt=$(dirname "$(ls "$STAGE"/*/config.json | sed -n 1p)")
    timeout "$(limit)" "$PY" -m headwise.cli export "$ckpt" --name all-minilm-l6-v2 --out "$STAGE/models" --no-int8 --fp16 \
      || { rm -rf "$STAGE/models"; die "the export failed or ran out of time"; }
  fi
  MODELS=$(dirname "$(ls "$STAGE"/models/*/manifest.json | sed -n 1p)")
  CKPT=$(dirname "$(ls "$STAGE"/*/config.json | sed -n 1p)")
  echo "package: $MODELS; checkpoint: $CKPT"
}

checks() {
  log "3. what $PROVIDER runs, and its parity"
  timeout "$(limit)" "$PY" -m bench.gpu_checks "$MODELS" --out "$RESULTS" --provider "$PROVIDER" \
    --sentences "${SENTENCES:-0}"
}

# the carried wrk first on PATH when it runs here; else a wrk of this machine, else loadgen.py
use_wrk() {
  local d carried=""
  for d in "$STAGE/wrk" "$CARRY"/*/wrk; do
    [ -x "$d/wrk" ] || continue
    carried=$d
    # `wrk --version` exits 1: read what it prints (under pipefail, a pipe would fail)
    case "$(LD_LIBRARY_PATH="$d" "$d/wrk" --version 2>&1 || true)" in
      "wrk "*) export PATH="$d:$PATH" LD_LIBRARY_PATH="$d${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"; carried=ok; break ;;
    esac
  done
  if [ -n "$carried" ] && [ "$carried" != ok ]; then
    echo "gpu.sh: the carried wrk ($carried) does not run here: $(LD_LIBRARY_PATH="$carried" "$carried/wrk" --version 2>&1 | head -1 || true)" >&2
    [ "${STRICT:-0}" = 1 ] && die "STRICT=1: the carried wrk must run"
  fi
  if command -v wrk >/dev/null; then echo "wrk: $(command -v wrk)"; else echo "no wrk: bench/loadgen.py drives the load"; fi
}

# the GPU's name for file names (nvidia-h100-80gb-hbm3), or $PROVIDER without one
gpu_slug() {
  local gpu=""
  if command -v nvidia-smi >/dev/null; then
    gpu=$(nvidia-smi --query-gpu=name --format=csv,noheader 2>/dev/null | head -1 | tr -c 'A-Za-z0-9\n' '-' | tr 'A-Z' 'a-z' | sed 's/-*$//')
  fi
  echo "${gpu:-$PROVIDER}"
}

bench() {
  log "4. headwise bench --provider $PROVIDER"
  use_wrk
  local suites=ceiling,http left max rc=0
  if "$PY" -c 'import sentence_transformers' 2>/dev/null; then suites=$suites,st; fi
  # the bench stops after the repetition that passes MAX_MINUTES (one lasted about a minute on an
  # H100); `timeout` ends it at BUDGET whatever happens, the repetitions done kept in .raw.json
  left=$((BUDGET - SECONDS - 15))
  [ "$left" -gt 60 ] || die "out of time: this command's BUDGET of $BUDGET s is spent"
  max=${MAX_MINUTES:-$(awk -v s="$left" 'BEGIN { m = (s - 120) / 60; printf "%.1f", m < 1 ? 1 : m }')}
  local name
  name="gpu-$(gpu_slug)"
  timeout -s INT -k 20 "$left" "$PY" -m headwise.cli bench --provider "$PROVIDER" --models "$MODELS" \
    --suites "$suites" --st-model "$CKPT" \
    --variants fp16,attention --lengths 20,128 --concurrency 1,16,64 --batches 1,8,32,64 \
    --st-batches 1,32 --reps "${REPS:-3}" --seconds "${SECONDS_PER_CELL:-3}" --ceiling-seconds 1 \
    --name "$name" --out "$RESULTS" --max-minutes "$max" "${@}" || rc=$?
  if command -v nvidia-smi >/dev/null; then nvidia-smi > "$RESULTS/$name.nvidia-smi.txt" 2>&1 || true; fi
  if [ "$rc" = 124 ] || [ "$rc" = 137 ]; then
    die "the bench ran into BUDGET ($BUDGET s): what it measured is in $RESULTS/$name.raw.json" \
        "(headwise bench --from-raw $RESULTS/$name.raw.json writes the report); lower REPS or MAX_MINUTES"
  fi
  [ "$rc" = 0 ] || die "headwise bench failed (exit $rc)"
  echo "results in $RESULTS"
}

# inproc:8 / process:8 / process:12; with a base tree carried (gpu-prepare.sh's BASE), process:12 of
# this tree against process:12 of the base (an A/B in one sitting) instead of process:8
default_layouts() {
  if [ -d "$STAGE/base/headwise" ]; then echo "inproc:8,process:12,process:12@$STAGE/base"
  else echo "inproc:8,process:8,process:12"; fi
}

# Process mode against whole-server workers (issue 37): bench/gpu_feed.py, the layouts alternating
# per repetition, the fp16 ceiling measured in each; a report after every repetition, so one
# ended at BUDGET keeps those done.
process() {
  log "5. process mode against whole-server workers (bench.gpu_feed), provider $PROVIDER"
  use_wrk
  local left max rc=0 name
  name=$(gpu_slug)
  left=$((BUDGET - SECONDS - 15))
  [ "$left" -gt 60 ] || die "out of time: this command's BUDGET of $BUDGET s is spent"
  max=${MAX_MINUTES:-$(awk -v s="$left" 'BEGIN { m = (s - 60) / 60; printf "%.1f", m < 1 ? 1 : m }')}
  timeout -s INT -k 20 "$left" "$PY" -m bench.gpu_feed "$MODELS" --provider "$PROVIDER" --precision fp16 \
    --layouts "${LAYOUTS:-$(default_layouts)}" --cells "${CELLS:-20x1x256,20x32x64,128x1x256,128x32x64,128x1x1}" \
    --reps "${REPS:-3}" --seconds "${SECONDS_PER_CELL:-2}" --warm 1 --ceiling-seconds 1 --max-minutes "$max" \
    --prefix gpu-process-mode --name "$name" --out "$RESULTS" "${@}" || rc=$?
  if [ "$rc" = 124 ] || [ "$rc" = 137 ]; then
    die "the process step ran into BUDGET ($BUDGET s): the repetitions done are in $RESULTS/gpu-process-mode-$name.md;" \
        "lower REPS or MAX_MINUTES"
  fi
  [ "$rc" = 0 ] || die "bench.gpu_feed failed (exit $rc)"
  echo "results in $RESULTS/gpu-process-mode-$name.md"
}

# --check: a virtual environment of the GPU machine's packages (bench/gpu-machine.txt) at this
# machine's Python; reused while it still holds exactly what it was built with.
check_venv() {
  local v=$1 want reqs absent extra
  want="$(sha256sum bench/gpu-machine.txt | cut -c1-16) $(python3 -V 2>&1)"
  if [ -z "${CHECK_FRESH:-}" ] && [ -x "$v/bin/python" ] && [ "$(cat "$v/.made-for" 2>/dev/null)" = "$want" ] \
     && [ "$("$v/bin/python" -m pip freeze --all 2>/dev/null)" = "$(cat "$v/.freeze" 2>/dev/null)" ]; then
    echo "reusing $v (CHECK_FRESH=1 builds it anew)"
    return
  fi
  rm -rf "$v"
  python3 -m venv "$v"
  # NAME==V here=W -> NAME==W; -NAME lines are the absent ones
  reqs=$(awk '/^[A-Za-z0-9]/ { r = $1; for (i = 2; i <= NF; i++) if ($i ~ /^here=/) { sub(/==.*/, "", r); r = r "==" substr($i, 6) } print r }' bench/gpu-machine.txt)
  absent=$(sed -n 's/^-\([A-Za-z0-9._-]*\).*/\1/p' bench/gpu-machine.txt)
  echo "installing: $(echo "$reqs" | tr '\n' ' ')"
  # shellcheck disable=SC2086
  "$v/bin/python" -m pip install -q --disable-pip-version-check $reqs 2>&1 | { grep -v "^WARNING: Location '" || true; }
  [ "${PIPESTATUS[0]}" = 0 ] || die "pip could not build the GPU machine's environment"
  # what pip pulled in here as a dependency but the GPU machine has not (typer -> pydantic, say)
  # shellcheck disable=SC2086
  extra=$("$v/bin/python" -m pip list --format=freeze 2>/dev/null | sed 's/==.*//' | tr 'A-Z_' 'a-z-' \
          | grep -Fx -f <(echo "$absent" | tr 'A-Z_' 'a-z-') || true)
  if [ -n "$extra" ]; then
    echo "removing what the GPU machine has not (pulled in here as dependencies): $(echo "$extra" | tr '\n' ' ')"
    # shellcheck disable=SC2086
    "$v/bin/python" -m pip uninstall -y -q $extra
  fi
  "$v/bin/python" -m pip freeze --all > "$v/.freeze"
  echo "$want" > "$v/.made-for"
}

check() {
  local root=${CHECK_DIR:-.gpu-check} here v run cs n i c
  step="" t0=$SECONDS  # global: the EXIT trap reads them
  case "$root" in ""|/|.|..|/*) die "CHECK_DIR must be a folder inside the project" ;; esac
  here=$(python3 -c 'import sys; print("%d.%d" % sys.version_info[:2])')
  v=$root/venv run=$root/run
  trap 'rc=$?; if [ $rc != 0 ]; then echo; echo "FAIL: bash bench/gpu.sh --check: ${step:-?} (exit $rc after $((SECONDS - t0)) s; log: ${CHECK_DIR:-.gpu-check}/check.log)"; fi' EXIT

  step="1. a virtual environment of the GPU machine's packages (bench/gpu-machine.txt), Python $here"
  log "check $step"
  check_venv "$v"
  # nothing the carried wheels bring may be importable without them
  "$v/bin/python" -I - "$(sed -n 's/^-\([A-Za-z0-9._-]*\).*/\1/p' bench/gpu-machine.txt)" <<'EOF' || die "the environment holds what the GPU machine lacks"
import importlib.metadata as md, importlib.util, sys
modules = {"python-dotenv": "dotenv", "opentelemetry-api": "opentelemetry", "pyzmq": "zmq", "onnxruntime-gpu": None}
bad = []
for dist in sys.argv[1].split():
    try:
        md.distribution(dist); bad.append(dist)
    except md.PackageNotFoundError:
        pass
    mod = modules.get(dist, dist.replace("-", "_"))
    if mod and importlib.util.find_spec(mod):
        bad.append(mod)
import onnxruntime
if "CUDAExecutionProvider" in onnxruntime.get_available_providers():
    bad.append("onnxruntime with CUDA")
print("absent, as on the GPU machine:", sys.argv[1].replace("\n", " "), "| present:", ", ".join(bad) or "none")
sys.exit(1 if bad else 0)
EOF

  step="2. bench/gpu-prepare.sh for Python $here into $root/carry"
  log "check $step"
  env -u PYTHON PYVER="$here" GPU_DIR="$root/carry" BASE="${CHECK_BASE:-HEAD}" bash bench/gpu-prepare.sh

  # a clean environment, as on the GPU machine: its Python first on PATH, no PYTHONPATH of ours
  local clean=(env -i HOME="$HOME" LANG=C.UTF-8 TMPDIR="${TMPDIR:-/tmp}"
               PATH="$PWD/$v/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
               PYTHON="$PWD/$v/bin/python3" PYTHONNOUSERSITE=1 SITE="$PWD/$run/site" STAGE="$PWD/$run/stage"
               CARRY="$PWD/$run/call" OUT="$PWD/$run/out" PROVIDER=cpu SENTENCES="${SENTENCES:-48}" STRICT=1
               BUDGET="$BUDGET" STEP_TIMEOUT="$STEP_TIMEOUT")
  rm -rf "$run" && mkdir -p "$run/site" "$run/stage" "$run/out"
  cs=("$root"/carry/c*)
  n=${#cs[@]}
  for ((i = 0; i < n; i++)); do
    c=${cs[i]}
    rm -rf "$run/call" && mkdir -p "$run/call" && mv "$c" "$run/call/"  # the device's .gpu holds this one
    if ((i < n - 1)); then
      step="3. device call $((i + 1)) of $n: $c, gpu.sh take"
      log "check $step"
      "${clean[@]}" bash bench/gpu.sh take
    else
      step="4. device call $n of $n: $c, gpu.sh setup (PROVIDER=cpu)"
      log "check $step"
      "${clean[@]}" bash bench/gpu.sh setup
    fi
  done
  rm -rf "$run/call"

  step="5. gpu.sh bench (PROVIDER=cpu, short)"
  log "check $step"
  "${clean[@]}" REPS=1 bash bench/gpu.sh bench --lengths 20 --concurrency 1,4 --batches 1,4 --st-batches 4 \
    --seconds 1 --ceiling-seconds 0.3
  step="6. gpu.sh process (PROVIDER=cpu, short: 2 workers, 2 and 3 front-ends)"
  log "check $step"
  "${clean[@]}" REPS=1 bash bench/gpu.sh process --layouts "inproc:2,process:2,process:3,process:2@$PWD/$run/stage/base" \
    --cells 20x1x8,20x8x4,128x1x1 --seconds 1 --warm 0 --ceiling-seconds 0.3
  step="7. the results"
  ls "$run/out"
  rm -rf "$run/site" "$run/stage"  # 700 MB; kept when the check fails
  [ -s "$run/out/gpu-checks.json" ] || die "no gpu-checks.json in $run/out"
  [ -s "$run/out/gpu-cpu.md" ] || die "no gpu-cpu.md in $run/out"
  grep -q "^| headwise | " "$run/out/gpu-cpu.md" || die "gpu-cpu.md has no headwise (HTTP) rows"
  local pm=$run/out/gpu-process-mode-cpu.md layout
  [ -s "$pm" ] || die "no gpu-process-mode-cpu.md in $run/out"
  for layout in inproc2 process2 process3 "process2@$(git rev-parse --short "${CHECK_BASE:-HEAD}")"; do
    grep -q "^| $layout | 128 | 1 | 1 | [0-9]" "$pm" || die "gpu-process-mode-cpu.md has no $layout row at 128 tokens, 1 client"
  done
  # the main table's rows: 14 columns, errors last
  awk -F'|' 'NF == 16 && $2 ~ /^ (inproc|process)[0-9]+(@[^ ]+)? $/ && $15 + 0 > 0 { bad = 1 } END { exit bad }' "$pm" \
    || die "gpu-process-mode-cpu.md: requests failed (its errors column)"
  trap - EXIT
  echo
  echo "PASS: bash bench/gpu.sh --check: the GPU recipe ran here in $((SECONDS - t0)) s, from the carried wheels" \
       "($n carry folders) in an environment of the GPU machine's packages (Python $here, PROVIDER=cpu)"
}

export PYTHONPATH="$SITE:$PWD" PYTHONUNBUFFERED=1
case "${1:-all}" in
  take) take ;;
  setup) take; install; package; if [ "${CHECKS:-1}" != 0 ]; then checks; fi ;;
  bench) shift; take >/dev/null; install >/dev/null; package >/dev/null; bench "$@" ;;
  process) shift; take >/dev/null; install >/dev/null; package >/dev/null; process "$@" ;;
  all) shift || true; take; install; package; checks; bench "$@" ;;
  --check) unset PYTHONPATH; mkdir -p "${CHECK_DIR:-.gpu-check}"
           check 2>&1 | tee "${CHECK_DIR:-.gpu-check}/check.log"; exit "${PIPESTATUS[0]}" ;;
  *) die "usage: bash bench/gpu.sh take|setup|bench|all [more headwise bench options] | process [more bench.gpu_feed options] | --check" ;;
esac
