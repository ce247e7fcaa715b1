#!/usr/bin/env bash
# Makes the local Debian base image for docker/Dockerfile where Docker Hub cannot be reached
# (python:3.11-slim-bookworm is the default base elsewhere): Debian bookworm, minbase, with
# the Python 3.11 the image runs on, from Debian's own packages, then `docker import`.
#
#   docker/make-base.sh [IMAGE]          IMAGE: local/python:3.11-bookworm unless given
#
# The tarball is cached in HEADWISE_CACHE_DIR (~/.cache/headwise unless set) and reused while
# it is younger than BASE_MAX_AGE_DAYS (7); an image already present is kept (FORCE=1 remakes
# both). Needs root (mmdebstrap's root mode) and mmdebstrap (.ci/system-deps.sh installs it).
set -euo pipefail
image=${1:-local/python:3.11-bookworm}
suite=${BASE_SUITE:-bookworm}
mirror=${BASE_MIRROR:-http://deb.debian.org/debian}
cache=${HEADWISE_CACHE_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/headwise}
tarball=$cache/base-$suite-python3.tar
max_age=${BASE_MAX_AGE_DAYS:-7}
docker=${DOCKER:-docker}

if [ "${FORCE:-0}" != 1 ] && $docker image inspect "$image" >/dev/null 2>&1; then
  echo "make-base: $image is already present (FORCE=1 to remake it)"
  exit 0
fi
command -v mmdebstrap >/dev/null || { echo "make-base: mmdebstrap not found (bash .ci/system-deps.sh installs it)" >&2; exit 1; }
if [ "$(id -u)" != 0 ]; then
  echo "make-base: run as root (mmdebstrap's root mode; docker import)" >&2
  exit 1
fi
mkdir -p "$cache"
if [ "${FORCE:-0}" = 1 ] || [ ! -s "$tarball" ] || [ -n "$(find "$tarball" -mtime +"$max_age")" ]; then
  echo "make-base: mmdebstrap $suite -> $tarball"
  # passwd: groupadd/useradd for the image's non-root user, as in python:*-slim.
  # The apt lists and caches are left out of the tarball; no documentation, no man pages.
  mmdebstrap --quiet --variant=minbase --format=tar \
    --include=ca-certificates,python3,python3-venv,python-is-python3,passwd \
    --dpkgopt='path-exclude=/usr/share/man/*' \
    --dpkgopt='path-exclude=/usr/share/doc/*' \
    --dpkgopt='path-include=/usr/share/doc/*/copyright' \
    --dpkgopt='path-exclude=/usr/share/locale/*' \
    --dpkgopt='path-exclude=/usr/share/info/*' \
    --customize-hook='rm -rf "$1"/var/lib/apt/lists/* "$1"/var/cache/apt/*' \
    "$suite" "$tarball.part" "$mirror"
  mv "$tarball.part" "$tarball"
else
  echo "make-base: reusing $tarball"
fi
$docker import \
  --change 'ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin' \
  --change 'ENV LANG=C.UTF-8' \
  --change 'CMD ["python3"]' \
  "$tarball" "$image" >/dev/null
echo "make-base: $image ($($docker image inspect -f '{{.Size}}' "$image" | awk '{printf "%.0f MB", $1/1e6}'))"
