#!/usr/bin/env bash
# Installs the Debian/Ubuntu packages agentflow builds and tests with (chromium: the headless
# browser that tests the page of `agentflow serve`). Idempotent and quiet:
# only missing packages are installed. Uses sudo when not run as root.
set -euo pipefail
PKGS=(build-essential pkg-config libjansson-dev libcurl4-openssl-dev libmicrohttpd-dev
      libcmocka-dev libsqlite3-dev zlib1g-dev libpcre2-dev libopenblas-dev libxml2-dev
      libclang-rt-14-dev libomp-14-dev clang clang-format cppcheck python3 bubblewrap
      python3-numpy python3-sympy libseccomp-dev libopenmpi-dev openmpi-bin
      chromium)
missing=()
for p in "${PKGS[@]}"; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "ok installed" || missing+=("$p")
done
[ "${#missing[@]}" -eq 0 ] && exit 0
SUDO=""
[ "$(id -u)" -ne 0 ] && SUDO="sudo"
echo "installing: ${missing[*]}"
export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get update -qq
$SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
