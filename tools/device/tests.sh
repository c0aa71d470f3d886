#!/usr/bin/env bash
# The CUDA tests on the GPU machine (carry .carry/cuda, made here by tools/device/bundle.sh):
#   tests.sh [FILTER]   nvidia-smi, then every test case of troupe_cuda_tests that the Catch
#                       filter selects (default "[cuda]": the op tests against the CPU backend,
#                       model parity against transformers, CUDA graphs, the runner); if any
#                       fails, the same cases again with TROUPE_CUDA_SYNC_CHECK=1, so a failing
#                       kernel is named by the op that launched it. FILTER "all" adds the actor
#                       tests on the GPU (troupe_actors_tests) and `troupe generate` on the
#                       embedded model; FILTER "engine" adds only the actor tests tagged [cuda]
#                       (the engine on the GPU: beam search, batch-invariant mode).
#   tests.sh sanitize [TOOL:TAG ...]
#                       the test cases of each tag under compute-sanitizer's TOOL, one run at a
#                       time (memcheck slows kernels 10-100x): by default memcheck on [fused],
#                       [sampling], [ops], [attention], [graphs] and [memory], racecheck on
#                       [attention] and [sampling], synccheck on [attention]; SANITIZE_TIMEOUT
#                       seconds per run (default 240). A finding fails the run even when every
#                       case passes. compute-sanitizer needs a Firecracker machine (on gVisor it
#                       refuses the device).
# Logs in $OUT: tests.log (and tests_sync.log), or sanitize_TOOL_TAG.log. Exit status: the
# tests' (sanitize: the first failing run's).
source "$(dirname "$0")/env.sh"
unpack_bundle || exit 2
export TROUPE_MODEL_FIXTURES="$PWD/tests/fixtures/models"

if [[ ${1:-} == sanitize ]]; then
  shift
  runs=("$@")
  [[ ${#runs[@]} -eq 0 ]] && runs=(memcheck:fused memcheck:sampling memcheck:ops
    memcheck:attention memcheck:graphs memcheck:memory racecheck:attention racecheck:sampling
    synccheck:attention)
  sanitizer=$(find_tool compute-sanitizer)
  [[ -z $sanitizer ]] && { echo "tests.sh: compute-sanitizer not found"; exit 4; }
  rc=0
  for run in "${runs[@]}"; do
    tool=${run%%:*} tag=${run#*:}
    log="$out/sanitize_${tool}_$tag.log"
    start=$(date +%s)
    timeout "${SANITIZE_TIMEOUT:-240}" "$sanitizer" --tool "$tool" --error-exitcode 9 \
      --print-limit 50 "$root/bin/troupe_cuda_tests" "[$tag]" > "$log" 2>&1
    r=$?
    [[ $rc -eq 0 ]] && rc=$r
    echo "sanitize $tool [$tag]: exit $r, $(( $(date +%s) - start )) s:" \
      "$(grep -hE "ERROR SUMMARY|RACECHECK SUMMARY|test cases|not supported" "$log" | tail -n 3 | tr '\n' ' ')"
  done
  exit "$rc"
fi

filter=${1:-[cuda]}
nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm,clocks.max.mem --format=csv
echo "cuBLASLt: $(readlink -f "$cublas/libcublasLt.so.13" 2>/dev/null || echo NOT FOUND)"
if ldd "$root/bin/troupe_cuda_tests" | grep "not found"; then
  echo "tests.sh: a shared library is missing"
  exit 3
fi
cases=$filter
[[ $filter == all || $filter == engine ]] && cases="[cuda]"
"$root/bin/troupe_cuda_tests" "$cases" --durations yes > "$out/tests.log" 2>&1
rc=$?
grep -E "test cases|assertions|FAILED" "$out/tests.log" | tail -n 5
if [[ $rc -ne 0 ]]; then
  echo "tests.sh: failures: the same cases again with TROUPE_CUDA_SYNC_CHECK=1 (tests_sync.log)"
  TROUPE_CUDA_SYNC_CHECK=1 "$root/bin/troupe_cuda_tests" "$cases" 2>&1 | tail -n 400 \
    > "$out/tests_sync.log"
fi
if [[ $filter == engine ]]; then
  timeout 300 "$root/bin/troupe_actors_tests" "[cuda]" --durations yes > "$out/actors.log" 2>&1
  arc=$?
  echo "actor tests tagged [cuda] on the GPU: exit $arc; $(grep -E "test cases" "$out/actors.log" | tail -n 1)"
  rc=$(( rc || arc ))
fi
if [[ $filter == all ]]; then
  # The dictionary-words test needs Debian's /usr/share/dict/words, which the GPU machine
  # lacks; CI runs it.
  skip=()
  [[ -r /usr/share/dict/words ]] || skip=("~troupe-fortunes writes mostly dictionary words")
  "$root/bin/troupe_actors_tests" "${skip[@]}" > "$out/actors.log" 2>&1
  arc=$?
  echo "actor tests on the GPU: exit $arc; $(grep -E "test cases" "$out/actors.log" | tail -n 1)"
  "$root/bin/troupe" generate --max-tokens 48 --seed 0 "The future of AI is" \
    "Once upon a time" > "$out/generate.log" 2>&1
  grc=$?
  echo "troupe generate on the GPU: exit $grc"
  rc=$(( rc || arc || grc ))
fi
echo "tests.sh: exit $rc"
exit "$rc"
