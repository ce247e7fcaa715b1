#!/usr/bin/env bash
# System programs some tests need (DEVELOPERS rule 4): installed here so CI never skips them.
set -euo pipefail
need=()
command -v chromium >/dev/null 2>&1 || need+=(chromium)
command -v promtool >/dev/null 2>&1 || need+=(prometheus)
command -v wrk >/dev/null 2>&1 || need+=(wrk)
if [ ${#need[@]} -gt 0 ]; then
  if [ "$(id -u)" = 0 ]; then
    apt-get update -qq
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${need[@]}" >/dev/null
  else
    echo "missing system programs: ${need[*]} (run as root or install them)" >&2
    [ "${CI:-}" = "true" ] && exit 1
  fi
fi
