#!/usr/bin/env bash
# Builds here (no GPU needed) and packs what the GPU machine runs, into .carry/cuda/:
#   troupe_cuda.tar.gz  bin/ (troupe, troupe_cuda_tests, troupe_cuda_opbench,
#                       troupe_actors_tests, troupe_transport_tests and its rank process
#                       troupe_transport_peer, troupe_transport_bench, the example
#                       logits-processor plug-in the actor tests load), lib/ (the shared libraries they load that a stock
#                       CUDA image may lack: Debian's fmt, spdlog, OpenBLAS, libcudart 13, ...;
#                       not cuBLASLt, ~500 MB, nor NCCL, ~210 MB: env.sh finds the machine's
#                       own, NCCL in its PyTorch when nowhere else) and paths (this
#                       checkout and the build folder, which the test binaries have compiled in)
#   troupe_old.gz       with --ab COMMIT: COMMIT's `troupe`, built in a worktree under
#                       build-old/ (~15 minutes on 2 cores the first time), for ab.sh
# Then carry ".carry/cuda" in the device call and run the other scripts there.
#
# Usage (repository root): tools/device/bundle.sh [--ab COMMIT] [BUILD_DIR, default build]
set -euo pipefail
old=""
if [[ ${1:-} == --ab ]]; then
  old=${2:?usage: bundle.sh [--ab COMMIT] [BUILD_DIR]}
  shift 2
fi
build=${1:-build}
nice -n 10 cmake --build "$build" --target troupe_cuda_tests troupe_cuda_opbench troupe \
  troupe_actors_tests troupe_transport_tests troupe_transport_peer troupe_transport_bench
stage=$(mktemp -d)
trap 'rm -rf "$stage"' EXIT
mkdir -p "$stage/bin" "$stage/lib"
cp "$build/tests/troupe_cuda_tests" "$build/cuda/troupe_cuda_opbench" "$build/tools/troupe" \
   "$build/tests/troupe_actors_tests" "$build/tests/troupe_transport_tests" \
   "$build/tests/troupe_transport_peer" "$build/transport/troupe_transport_bench" \
   "$build/examples/libtroupe_no_repeat_ngram.so" "$stage/bin/"
printf '%s\n%s\n' "$PWD" "$(cd "$build" && pwd)" > "$stage/paths"
# Every non-glibc, non-toolchain library the binaries load, except cuBLAS.
for bin in "$stage"/bin/*; do
  ldd "$bin" | awk '/=>/ {print $1, $3}'
done | sort -u | while read -r name path; do
  case "$name" in
    libc.so*|libm.so*|libdl.so*|libpthread.so*|librt.so*|ld-linux*|libstdc++.so*|libgcc_s.so*) ;;
    libcublasLt.so*|libcublas.so*|libnccl.so*) ;;
    *) cp -L "$path" "$stage/lib/$name" ;;
  esac
done
mkdir -p .carry/cuda
tar -C "$stage" -czf .carry/cuda/troupe_cuda.tar.gz bin lib paths
du -h .carry/cuda/troupe_cuda.tar.gz

if [[ -n $old ]]; then
  tree="build-old/src"
  if [[ ! -d $tree ]]; then
    mkdir -p build-old
    git worktree add --detach "$tree" "$old"
  else
    git -C "$tree" checkout --detach -q "$old"
  fi
  cmake -S "$tree" -B build-old/build -G Ninja > /dev/null
  nice -n 10 cmake --build build-old/build --target troupe
  gzip -c build-old/build/tools/troupe > .carry/cuda/troupe_old.gz
  git -C "$tree" rev-parse HEAD > .carry/cuda/troupe_old.commit
  du -h .carry/cuda/troupe_old.gz
fi
