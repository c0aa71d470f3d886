#!/usr/bin/env bash
# Packs what the GPU machine needs to run the CUDA op tests and the op bench, built here:
#   .carry/cuda/troupe_cuda.tar.gz = bin/ (troupe_cuda_tests, troupe_cuda_opbench, troupe,
#   troupe_actors_tests) and lib/
#   with the shared libraries they need that a stock CUDA image may lack (Debian's libfmt,
#   OpenBLAS + libgfortran + libquadmath for the CPU reference backend, and libcudart 13.0).
# libcublasLt (~500 MB) is NOT packed: run_cuda_tests.sh finds the machine's own copy.
#
# Usage (repo root): tools/device/bundle_cuda_tests.sh [build dir, default build]
# Then on the device tool: carry [".carry/cuda"], command "bash tools/device/run_cuda_tests.sh".
set -euo pipefail
build=${1:-build}
cmake --build "$build" --target troupe_cuda_tests troupe_cuda_opbench troupe troupe_actors_tests -j2
stage=$(mktemp -d)
trap 'rm -rf "$stage"' EXIT
mkdir -p "$stage/bin" "$stage/lib"
cp "$build/tests/troupe_cuda_tests" "$build/cuda/troupe_cuda_opbench" "$build/tools/troupe" \
   "$build/tests/troupe_actors_tests" "$stage/bin/"
# Every non-glibc, non-toolchain library the binaries load, except cuBLASLt.
for bin in "$stage"/bin/*; do
  ldd "$bin" | awk '/=>/ {print $1, $3}'
done | sort -u | while read -r name path; do
  case "$name" in
    libc.so*|libm.so*|libdl.so*|libpthread.so*|librt.so*|ld-linux*|libstdc++.so*|libgcc_s.so*) ;;
    libcublasLt.so*|libcublas.so*) ;;
    *) cp -L "$path" "$stage/lib/$name" ;;
  esac
done
mkdir -p .carry/cuda
tar -C "$stage" -czf .carry/cuda/troupe_cuda.tar.gz bin lib
ls -la "$stage/bin" "$stage/lib"
du -h .carry/cuda/troupe_cuda.tar.gz
