#!/usr/bin/env bash
# System programs some tests need (DEVELOPERS rule 4): installed here so CI never skips them.
#   chromium: the viewer tests; promtool: the alert rules; wrk: the load tests;
#   docker.io (dockerd, the Debian docker client, containerd, runc), mmdebstrap (the local
#   Debian base image, docker/make-base.sh) and docker-compose: the image tests
#   (tests/e2e/test_docker*.py, which start dockerd themselves when it is not running).
set -euo pipefail
need=()
command -v chromium >/dev/null 2>&1 || need+=(chromium)
command -v promtool >/dev/null 2>&1 || need+=(prometheus)
command -v wrk >/dev/null 2>&1 || need+=(wrk)
command -v dockerd >/dev/null 2>&1 || need+=(docker.io)
command -v mmdebstrap >/dev/null 2>&1 || need+=(mmdebstrap)
command -v docker-compose >/dev/null 2>&1 || need+=(docker-compose)
if [ ${#need[@]} -gt 0 ]; then
  if [ "$(id -u)" = 0 ]; then
    apt-get update -qq
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${need[@]}" >/dev/null
  else
    echo "missing system programs: ${need[*]} (run as root or install them)" >&2
    [ "${CI:-}" = "true" ] && exit 1
  fi
fi
