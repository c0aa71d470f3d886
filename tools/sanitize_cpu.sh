#!/usr/bin/env bash
# The CPU test suite under AddressSanitizer and UndefinedBehaviorSanitizer (no CUDA; about
# 10 minutes to build and 5 to run on 2 cores, so not part of CI). UBSan reports inside
# CAF 0.17's headers are suppressed (tools/ubsan_caf.supp); leak checking is off (CAF keeps
# process-lifetime allocations).
# Usage (repo root): tools/sanitize_cpu.sh [build dir, default /tmp/build-asan]
set -euo pipefail
dir=${1:-/tmp/build-asan}
flags="-fsanitize=address,undefined -fno-omit-frame-pointer -fsanitize-recover=all"
cmake -S . -B "$dir" -G Ninja -DTROUPE_CUDA=OFF -DCMAKE_BUILD_TYPE=RelWithDebInfo \
  -DCMAKE_CXX_FLAGS="$flags" -DCMAKE_EXE_LINKER_FLAGS="-fsanitize=address,undefined" \
  -DCMAKE_SHARED_LINKER_FLAGS="-fsanitize=address,undefined" > /dev/null
cmake --build "$dir"
export ASAN_OPTIONS=detect_leaks=0
export UBSAN_OPTIONS="print_stacktrace=1:suppressions=$PWD/tools/ubsan_caf.supp"
ctest --test-dir "$dir" -j2 --timeout 600 --output-on-failure
# Any report the suppressions let through fails the run even when every test passed.
log="$dir/Testing/Temporary/LastTest.log"
if grep -q "runtime error\|ERROR: AddressSanitizer" "$log"; then
  grep "runtime error\|ERROR: AddressSanitizer" "$log" | sort | uniq -c | sort -rn | head -n 20
  exit 1
fi
echo "sanitize_cpu: no AddressSanitizer or UndefinedBehaviorSanitizer report"
