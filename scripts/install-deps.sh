#!/usr/bin/env bash
# Installs the Debian/Ubuntu packages agentflow builds and tests with (chromium: the headless
# browser that tests the report's charts and the page of `agentflow serve`). Idempotent and
# quiet: only missing packages are installed. Uses sudo when not run as root; without root and
# without sudo it lists what is missing and stops (exit 1).
set -euo pipefail
PKGS=(build-essential pkg-config libjansson-dev libcurl4-openssl-dev libmicrohttpd-dev
      libcmocka-dev libsqlite3-dev zlib1g-dev libpcre2-dev libopenblas-dev libxml2-dev
      libclang-rt-14-dev libomp-14-dev clang clang-format cppcheck python3 bubblewrap
      python3-numpy python3-sympy libseccomp-dev libopenmpi-dev openmpi-bin
      chromium) # chromium: test_svg lays the report's charts out in a headless browser
missing=()
for p in "${PKGS[@]}"; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "ok installed" || missing+=("$p")
done
[ "${#missing[@]}" -eq 0 ] && exit 0
SUDO=""
if [ "$(id -u)" -ne 0 ]; then
    if ! command -v sudo >/dev/null 2>&1; then
        # Say what is missing and how to get it, rather than fail inside apt-get.
        echo "install-deps.sh: these packages are missing: ${missing[*]}" >&2
        echo "install-deps.sh: installing them needs root, and sudo is not installed." >&2
        echo "install-deps.sh: run this script as root (su -c ./scripts/install-deps.sh)," >&2
        echo "install-deps.sh: or have an administrator run: apt-get install ${missing[*]}" >&2
        exit 1
    fi
    SUDO="sudo"
fi
echo "installing: ${missing[*]}"
export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get update -qq
$SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
