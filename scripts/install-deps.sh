#!/usr/bin/env bash
# Installs Kiln's build and test dependencies from Debian packages, only those missing.
# Idempotent: a machine that has everything runs no apt command at all.
set -euo pipefail
pkgs=(cmake g++ make libz3-dev nlohmann-json3-dev libfmt-dev libcli11-dev googletest libgtest-dev
      libtbb-dev libbenchmark-dev ninja-build clang libclang-rt-14-dev libsqlite3-dev
      libxxhash-dev libspdlog-dev python3 chromium
      python3-torch)  # python3-torch: the CPU tests of the PyTorch front end (python/kiln)
missing=()
for p in "${pkgs[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -eq 0 ]; then
  exit 0
fi
echo "install-deps: installing ${missing[*]}"
SUDO=""
[ "$(id -u)" -eq 0 ] || SUDO="sudo"
export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get update -qq
$SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}"
