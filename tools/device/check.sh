#!/usr/bin/env bash
# One device call (at most ~9 minutes of an H200; about 6 as a rule) that checks a build
# against docs/benchmarks.md: the CUDA tests, the ceilings, batch-1 latency and the 1000 x 1000
# throughput run, all on one machine. Here first: tools/device/bundle.sh; then the device call
# (kind nvidia-h200, timeout_s 600, carry [".carry/cuda"]): bash tools/device/check.sh
#   1. the CUDA test cases ([cuda], tests.sh), 150 s at most;
#   2. the ceilings (ceilings.py: copy rate, bf16 matmul burst and 3 s sustained), 60 s;
#   3. batch-1 decode, Llama-3-8B shape, bf16, dummy weights, 128 in / 128 out, 100 s;
#   4. the 1000 prompts x 1000 in / 1000 out throughput run, 220 s.
# Into $OUT (at most 8 files, as the device tool returns): check.log (what it printed),
# summary.md (the results table with each ratio to its limit), tests.log (tests_sync.log too
# when a case failed), ceilings.json, b1.json, long.json, long.log. Exit status: the tests'.
dest=${OUT:-/tmp/troupe_cuda_out}
mkdir -p "$dest"
export OUT=/tmp/troupe_check
rm -rf "$OUT"
source "$(dirname "$0")/env.sh"
keep() { for f in "$@"; do [[ -f $out/$f ]] && cp "$out/$f" "$dest/"; done; }
{
  start=$(date +%s)
  step() { echo "=== $1 ($(( $(date +%s) - start )) s in)"; }
  unpack_bundle || exit 2
  step "CUDA tests"
  timeout 150 bash "$here/tests.sh"
  rc=$?
  keep tests.log tests_sync.log
  step "ceilings"
  timeout 60 python3 "$here/ceilings.py" --sustain-s 3 --output-json "$out/ceilings.json"
  keep ceilings.json
  step "batch-1 decode"
  bench b1 100 "${b1_args[@]}"
  echo "batch-1: $(field "$out/b1.json" decode_s_per_token 1000) ms per output token"
  steps "$out/b1.log"
  keep b1.json
  step "1000 x 1000"
  smi_start /tmp/troupe_check_smi.csv
  bench long 220 "${long_args[@]}"
  smi_stop "GPU during the 1000 x 1000 run"
  steps "$out/long.log"
  keep long.json long.log
  step "summary"
  python3 "$here/summary.py" "$out" | tee "$dest/summary.md"
  echo "check.sh: tests exit $rc, $(( $(date +%s) - start )) s"
  exit "$rc"
} 2>&1 | tee "$dest/check.log"
exit "${PIPESTATUS[0]}"
