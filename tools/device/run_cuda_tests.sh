#!/usr/bin/env bash
# Runs on the GPU machine, from the repo root, with .carry/cuda (made here by
# tools/device/bundle_cuda_tests.sh) carried along:
#   1. nvidia-smi;
#   2. the CUDA op tests (every test case tagged [cuda]); if any fails, the whole suite again
#      with TROUPE_CUDA_SYNC_CHECK=1, so a failing kernel is named by the op that launched it;
#   3. the op bench (per-op time, GB/s, TFLOP/s on Llama-3-8B shapes).
# Logs go to $OUT (or /tmp/troupe_cuda_out). Exit status: that of the tests.
#
# Usage: bash tools/device/run_cuda_tests.sh [full|tests|bench|sanitize [TOOL [FILTER]]]
#   full (default): 1-3; tests: 1-2; bench: 1 and 3;
#   sanitize: the test cases matching FILTER (a Catch filter, default "[cuda]") under
#   compute-sanitizer's TOOL (memcheck by default; racecheck, initcheck, synccheck), with
#   SANITIZE_TIMEOUT seconds (default 500) for all of it: memcheck slows the kernels 10-100x,
#   so give it a tag at a time, e.g. "[fused]", "[attention]", "[sampling]".
set -uo pipefail
mode=${1:-full}
tool=${2:-memcheck}
filter=${3:-[cuda]}
out=${OUT:-/tmp/troupe_cuda_out}
mkdir -p "$out"
source "$(dirname "$0")/env.sh"  # root, cublas, LD_LIBRARY_PATH
if ! msg=$(unpack_bundle 2>&1); then
  echo "run_cuda_tests: $msg" | tee "$out/error.txt"
  exit 2
fi

nvidia-smi 2>&1 | tee "$out/nvidia-smi.txt"

# cuBLASLt is not in the bundle (too big): take the machine's own CUDA 13 copy.
{
  echo "cuBLASLt from: ${cublas:-NOT FOUND}"
  [[ -n $cublas ]] && echo "cuBLASLt file: $(readlink -f "$cublas/libcublasLt.so.13")"
  ldd "$root/bin/troupe_cuda_tests"
} 2>&1 | tee "$out/ldd.txt"
if grep -q "not found" "$out/ldd.txt"; then
  echo "run_cuda_tests: a shared library is missing (see ldd.txt)" | tee -a "$out/ldd.txt"
  exit 3
fi

rc=0
if [[ $mode == full || $mode == tests ]]; then
  "$root/bin/troupe_cuda_tests" "[cuda]" --durations yes 2>&1 | tee "$out/cuda_tests.log"
  rc=${PIPESTATUS[0]}
  if [[ $rc -ne 0 ]]; then
    echo "=== failures: running again with TROUPE_CUDA_SYNC_CHECK=1 ===" | tee -a "$out/cuda_tests.log"
    TROUPE_CUDA_SYNC_CHECK=1 "$root/bin/troupe_cuda_tests" "[cuda]" 2>&1 | tail -n 400 \
      > "$out/cuda_tests_sync.log"
  fi
fi
if [[ $mode == full || $mode == bench ]]; then
  "$root/bin/troupe_cuda_opbench" 2>&1 | tee "$out/opbench.log"
fi
if [[ $mode == sanitize ]]; then
  sanitizer=$(command -v compute-sanitizer ||
              ls /usr/local/cuda*/bin/compute-sanitizer /opt/nvidia/*/compute-sanitizer 2>/dev/null |
              head -n 1)
  if [[ -z $sanitizer ]]; then
    echo "run_cuda_tests: compute-sanitizer not found" | tee "$out/sanitizer.log"
    exit 4
  fi
  # --error-exitcode: a finding fails the run even when every test case passes.
  timeout "${SANITIZE_TIMEOUT:-500}" "$sanitizer" --tool "$tool" --error-exitcode 9 \
    --print-limit 50 "$root/bin/troupe_cuda_tests" "$filter" 2>&1 |
    tail -n 600 | tee "$out/sanitizer_$tool.log"
  rc=${PIPESTATUS[0]}
  grep -E "ERROR SUMMARY|test cases" "$out/sanitizer_$tool.log" | tail -n 3
fi
echo "run_cuda_tests: mode $mode, tests exit status $rc"
exit "$rc"
