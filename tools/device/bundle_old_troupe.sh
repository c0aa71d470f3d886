#!/usr/bin/env bash
# Builds `troupe` at another commit (a git worktree under build-old/, its own CMake build) and
# packs just that binary as .carry/cuda/troupe_old.gz, next to the bundle of the current tree
# (bundle_cuda_tests.sh, whose lib/ it shares: same Debian and CUDA libraries), so one device
# call can run both builds on the same machine (session_ab.sh). ~15 minutes on 2 cores the
# first time; the compressed binary is ~6 MB, so both fit the carry limit.
#
# Usage (repo root): tools/device/bundle_old_troupe.sh COMMIT
set -euo pipefail
commit=${1:?usage: bundle_old_troupe.sh COMMIT}
tree=build-old/src
if [[ ! -d $tree ]]; then
  mkdir -p build-old
  git worktree add --detach "$tree" "$commit"
else
  git -C "$tree" checkout --detach -q "$commit"
fi
cmake -S "$tree" -B build-old/build -G Ninja > /dev/null
cmake --build build-old/build --target troupe -j2
mkdir -p .carry/cuda
gzip -c build-old/build/tools/troupe > .carry/cuda/troupe_old.gz
echo "$commit" > .carry/cuda/troupe_old.commit
ls -la .carry/cuda
