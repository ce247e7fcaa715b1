#!/usr/bin/env bash
# The one command for the GPU run of the benchmark: the same harness (`headwise bench`) with the
# CUDA provider, the fp16 variant and IOBinding (ceiling and service alike), and the attention
# graph; clients 1/16/64, ceiling batches up to 64 (issue 9's GPU target compares at the same
# batch), inputs of 16/128/512 tokens. Results: $OUT (the device tool's folder) or bench/results.
#
#   bash bench/gpu.sh [more `headwise bench` options]
#
# NOT RUN YET: no GPU was lent to the task that wrote it. Each step prints what it found.
#
# What the GPU machine lacks travels in parts (bench/README.md, section GPU):
#   here:   bash bench/gpu-prepare.sh       → .gpu/p*, .gpu/NAME, .gpu/wheels, .gpu/bench/p*, .gpu/wrk
#   there:  one `run` per part, back to back (the machine stays warm ~30 s):
#             carry [".gpu/p0", ".gpu/NAME", ".gpu/wheels"]:  mkdir -p /tmp/ort && cp .gpu/p0/* /tmp/ort/ && cp -r .gpu/wheels /tmp/wheels
#             carry [".gpu/pN"]:                              cp .gpu/pN/* /tmp/ort/
#             carry [".gpu/bench/pN"] (+ ".gpu/bench/wheels", ".gpu/wrk" once):
#                                                             mkdir -p /tmp/hw-bench && cp -r .gpu/bench/pN/* .gpu/bench/wheels .gpu/wrk /tmp/hw-bench/ 2>/dev/null; ls /tmp/hw-bench
#           then:   carry [".gpu/NAME"]:  bash bench/gpu.sh
# Environment: MODELS (a package folder; else exported from the checkpoint into /tmp/hw-bench/models),
#              SECONDS_PER_CELL (3), REPS (3), SITE (/tmp/site), PYTHON (python3).
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
SITE=${SITE:-/tmp/site}
STAGE=/tmp/hw-bench
RESULTS=${OUT:-bench/results}
mkdir -p "$RESULTS" "$STAGE"
log() { printf '\n== %s\n' "$*"; }
# parts found in several places, once each, in order of their own names (part.00, part.01, ...)
by_base() { for p in "$@"; do if [ -f "$p" ]; then echo "$(basename "$p") $p"; fi; done | sort -u -k1,1 | awk '{print $2}'; }

log "1. onnxruntime-gpu"
ort_cuda() { PYTHONPATH="$SITE:$PWD" "$PY" -c 'import onnxruntime as o, sys; sys.exit("CUDAExecutionProvider" not in o.get_available_providers())' 2>/dev/null; }
if ! ort_cuda; then
  parts=$(by_base /tmp/ort/part.* .gpu/p*/part.*)
  [ -n "$parts" ] || { echo "no onnxruntime-gpu with CUDA and no wheel parts in /tmp/ort or .gpu/p*: see this file's header"; exit 2; }
  name=$(sed 's/wheel name: //' .gpu/NAME 2>/dev/null || true)
  [ -n "$name" ] || { echo ".gpu/NAME (the wheel's file name) was not carried"; exit 2; }
  echo "assembling $name from $(echo "$parts" | wc -l) parts"
  mkdir -p /tmp/ort && cat $parts > "/tmp/ort/$name"
  wheels=$(ls /tmp/wheels/*.whl .gpu/wheels/*.whl "$STAGE"/wheels/*.whl 2>/dev/null || true)
  "$PY" -m pip install -q --no-index --no-deps --target "$SITE" "/tmp/ort/$name" $wheels
fi
export PYTHONPATH="$SITE:$PWD"
# CUDA/cuDNN from the nvidia-* pip packages beside torch, visible to every process (the server too)
nv=$("$PY" - <<'EOF' 2>/dev/null || true
import glob, os
try:
    import nvidia
    roots = list(nvidia.__path__)
except ImportError:
    roots = []
print(":".join(sorted({d for r in roots for d in glob.glob(os.path.join(r, "*", "lib"))})))
EOF
)
[ -n "$nv" ] && export LD_LIBRARY_PATH="$nv${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
"$PY" -c 'import onnxruntime as o; print("onnxruntime", o.__version__, o.get_available_providers())'
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader || true

log "2. model package"
if [ -z "${MODELS:-}" ]; then
  if ls "$STAGE"/models/*/manifest.json >/dev/null 2>&1; then
    MODELS=$(dirname "$(ls "$STAGE"/models/*/manifest.json | head -1)")
  else
    parts=$(by_base "$STAGE"/ckpt.part.* .gpu/bench/p*/ckpt.part.*)
    [ -n "$parts" ] || { echo "no MODELS and no checkpoint parts (ckpt.part.*) in $STAGE or .gpu/bench: see the header"; exit 2; }
    cat $parts | tar -C "$STAGE" -xf -
    ckpt=$(dirname "$(ls "$STAGE"/*/config.json | head -1)")
    "$PY" -m headwise.cli export "$ckpt" --out "$STAGE/models" --no-int8 --fp16
    MODELS=$(dirname "$(ls "$STAGE"/models/*/manifest.json | head -1)")
  fi
fi
echo "package: $MODELS"
"$PY" - "$MODELS" <<'EOF'
import json, sys, onnxruntime as o
pkg = sys.argv[1]
m = json.load(open(f"{pkg}/manifest.json"))
if hasattr(o, "preload_dlls"):
    o.preload_dlls()
s = o.InferenceSession(f"{pkg}/{m['variants']['fast.fp16']['file']}",
                       providers=["CUDAExecutionProvider", "CPUExecutionProvider"])
print("a real fp16 session gets:", s.get_providers())
if "CUDAExecutionProvider" not in s.get_providers():
    sys.exit("CUDA did not load for a real session: the run would measure the CPU; stopping")
EOF

log "3. load generator"
for d in "$STAGE/wrk" .gpu/wrk; do
  if [ -x "$d/wrk" ] && LD_LIBRARY_PATH="$d:${LD_LIBRARY_PATH:-}" "$d/wrk" --version >/dev/null 2>&1; then
    export PATH="$d:$PATH" LD_LIBRARY_PATH="$d:${LD_LIBRARY_PATH:-}"; break
  fi
done
command -v wrk >/dev/null && wrk --version | head -1 || echo "no wrk: bench/loadgen.py (Python, several processes) drives the load"

log "4. headwise bench --provider cuda"
suites=ceiling,http
if "$PY" -c 'import sentence_transformers, fastapi' 2>/dev/null; then suites=$suites,st,naive; fi
gpu=$(nvidia-smi --query-gpu=name --format=csv,noheader 2>/dev/null | head -1 | tr -c 'A-Za-z0-9\n' '-' | tr 'A-Z' 'a-z' | sed 's/-*$//')
"$PY" -m headwise.cli bench --provider cuda --models "$MODELS" --suites "$suites" \
  --variants fp16,attention --lengths 16,128,512 --concurrency 1,16,64 --batches 1,8,16,32,64 \
  --st-batches 1,8,32 --reps "${REPS:-3}" --seconds "${SECONDS_PER_CELL:-3}" --ceiling-seconds 1 \
  --name "gpu-${gpu:-cuda}" --out "$RESULTS" --max-minutes 8 "$@"
nvidia-smi > "$RESULTS/gpu-${gpu:-cuda}.nvidia-smi.txt" 2>&1 || true
echo "results in $RESULTS"
