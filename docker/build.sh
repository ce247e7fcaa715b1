#!/usr/bin/env bash
# Builds a headwise image with BuildKit; `make image` calls it (docs/deployment.md).
#
#   docker/build.sh                       headwise:cpu from docker/Dockerfile
#
# Settings (environment):
#   IMAGE        the tag (headwise:cpu)
#   DOCKERFILE   docker/Dockerfile
#   BASE         auto (default): HUB_BASE (python:3.11-slim-bookworm) when it is here or can be pulled,
#                else the local Debian base (docker/make-base.sh makes it);
#                local: the local Debian base, whatever Docker Hub says;
#                none: no BASE_IMAGE (Dockerfile.gpu: its base is CUDA_IMAGE);
#                anything else: that image.
#   MODELS       a folder of exported packages (build/image/models); copied (hard links where
#                it can) into build/image/staged, inside the build context, when it lies
#                outside build/image/; none: an image without packages (Dockerfile.prometheus)
#   CONTEXT      the build context (the repository root)
#   ONNXRUNTIME  for docker/Dockerfile: onnxruntime (default: the CPU-only wheel, pinned in
#                constraints.txt) or onnxruntime-gpu (about 300 MB more, same answers on CPU);
#                Dockerfile.gpu always installs onnxruntime-gpu
#   PIP_CERT_FILE  CA bundle for pip inside the build; default: the `cert` of `pip config list`
#                (a TLS-intercepting proxy), none when pip names none. Given as a build
#                secret: it is never written into a layer.
#   BUILD_ARGS   more arguments for docker build (e.g. "--target venv")
# Every build uses the host's network (--network host).
set -euo pipefail
cd "$(dirname "$0")/.."
IMAGE=${IMAGE:-headwise:cpu}
DOCKERFILE=${DOCKERFILE:-docker/Dockerfile}
BASE=${BASE:-auto}
MODELS=${MODELS:-build/image/models}
ONNXRUNTIME=${ONNXRUNTIME:-onnxruntime}
HUB_BASE=${HUB_BASE:-python:3.11-slim-bookworm}
CONTEXT=${CONTEXT:-.}
LOCAL_BASE=local/python:3.11-bookworm

# BuildKit: `docker buildx build --load` where the buildx plugin is installed; else a client
# with BuildKit built in (Docker 20.10, as Debian's docker.io ships it) with DOCKER_BUILDKIT=1.
# A newer client without buildx cannot use BuildKit, so Debian's /usr/bin/docker is used then.
if docker buildx version >/dev/null 2>&1; then
  build=(docker buildx build --load)
else
  build=()
  for client in docker /usr/bin/docker; do
    major=$("$client" version --format '{{.Client.Version}}' 2>/dev/null | cut -d. -f1) || continue
    if [ -n "$major" ] && [ "$major" -lt 23 ]; then build=(env DOCKER_BUILDKIT=1 "$client" build); break; fi
  done
  if [ ${#build[@]} = 0 ]; then
    echo "build.sh: BuildKit is needed: install the buildx plugin, or Debian's docker.io (Docker 20.10)" >&2
    exit 1
  fi
fi
docker info >/dev/null 2>&1 || { echo "build.sh: no Docker engine answers (start dockerd)" >&2; exit 1; }

case "$BASE" in
  auto)
    # A registry that cannot be reached fails the pull in seconds; a slow one is cut at 5 min.
    if docker image inspect "$HUB_BASE" >/dev/null 2>&1 \
        || timeout 300 docker pull -q "$HUB_BASE" >/dev/null 2>&1; then
      base=$HUB_BASE
    else
      echo "build.sh: $HUB_BASE cannot be pulled: using the local Debian base $LOCAL_BASE"
      docker/make-base.sh "$LOCAL_BASE"
      base=$LOCAL_BASE
    fi ;;
  local) docker/make-base.sh "$LOCAL_BASE"; base=$LOCAL_BASE ;;
  none) base= ;;
  *) base=$BASE ;;
esac

# The packages: they must lie inside the build context, under build/image/ (.dockerignore lets
# it in); a folder elsewhere is copied (hard links where it can) into build/image/staged.
models=
if [ "$MODELS" = none ]; then
  :
elif ! ls "$MODELS"/*/manifest.json >/dev/null 2>&1; then
  echo "build.sh: no model package in $MODELS (headwise export --out $MODELS; make image does it)" >&2
  exit 1
else
  models=$(realpath --relative-to=. "$MODELS")
  case "$models" in
    build/image/*) ;;
    *)
      models=build/image/staged
      rm -rf "$models"
      mkdir -p "$models"
      cp -al "$MODELS"/. "$models"/ 2>/dev/null || cp -a "$MODELS"/. "$models"/ ;;
  esac
fi

pip_cert() {
  python3 -m pip config list 2>/dev/null | sed -n "s/^[^=]*\.cert='\(.*\)'\$/\1/p" | head -n 1
}
if [ -n "${PIP_CERT_FILE+set}" ]; then cert=$PIP_CERT_FILE; else cert=$(pip_cert); fi
if [ -n "$cert" ]; then
  [ -r "$cert" ] || { echo "build.sh: the CA bundle $cert cannot be read" >&2; exit 1; }
  secret=(--secret "id=pipcert,src=$cert")
fi

args=()
[ -z "$models" ] || args+=(--build-arg "MODELS=$models")
[ -z "$base" ] || args+=(--build-arg "BASE_IMAGE=$base")
# ONNXRUNTIME only where the Dockerfile has the switch (docker/Dockerfile; Dockerfile.gpu has
# onnxruntime-gpu, always).
wheel=
if grep -q '^ARG ONNXRUNTIME=' "$DOCKERFILE"; then
  args+=(--build-arg "ONNXRUNTIME=$ONNXRUNTIME")
  wheel=$ONNXRUNTIME
fi
echo "build.sh: $IMAGE from $DOCKERFILE on ${base:-its own base}${wheel:+ with $wheel}${cert:+ (CA bundle $cert)}"
# shellcheck disable=SC2086  # BUILD_ARGS is split on purpose
"${build[@]}" --network host --progress plain -f "$DOCKERFILE" "${args[@]}" \
  "${secret[@]}" ${BUILD_ARGS:-} -t "$IMAGE" "$CONTEXT"
echo "build.sh: $IMAGE: $(docker image inspect -f '{{.Size}}' "$IMAGE" | awk '{printf "%.0f MB", $1/1e6}')"
