#!/usr/bin/env bash
# One device call (about 8 minutes of an H200; carry .carry/cuda after bundle_cuda_tests.sh and
# bundle_old_troupe.sh COMMIT here): the attention test cases, the ceilings, then the 1000 x
# 1000 throughput run (--async-scheduling) with COMMIT's troupe and with the current tree's,
# once per argument ("default" or NAME=VALUE knobs, e.g. "TROUPE_PREFILL_ROWS=32"; "default"
# without arguments), all on one machine, so a difference between builds is not one between
# machines. The ninth session measured 105.6-106.6 s on three machines against the eighth's
# 102.48 s with the same decode path; this settles whether a build or the machines moved.
# RUNS=n rounds (default 1); OLD=0 skips the old build; LATENCY=1 ends with the current build's
# batch-1 latency (128 in / 128 out, --async-scheduling, twice), against the copy rate above.
source "$(dirname "$0")/env.sh"
session_init unpack
gunzip -c .carry/cuda/troupe_old.gz > "$root/bin/troupe_old" && chmod +x "$root/bin/troupe_old"
echo "old build: $(cat .carry/cuda/troupe_old.commit 2>/dev/null || echo unknown)"
echo "cuBLASLt: $(readlink -f "$cublas/libcublasLt.so.13")"
"$root/bin/troupe_cuda_tests" "[attention]" 2>&1 | tail -n 3
OUT=$out SUSTAIN_S=3 timeout 90 bash "$here/ceilings.sh" | grep -E "copy|matmul 8192\^3"
variants=("$@")
[[ ${#variants[@]} == 0 ]] && variants=(default)
run_build() {  # BUILD NAME VARIANT
  echo "=== $1 $3"
  LONG_TIMEOUT=200 long_run "$1" "$3" "$out/throughput_$2.json" |
    grep -E "elapsed|output tokens/s|model TFLOP/s|steps with prompt|decode-only"
}
for i in $(seq 1 "${RUNS:-1}"); do
  [[ ${OLD:-1} == 1 ]] && run_build troupe_old "old_$i" default
  n=0
  for variant in "${variants[@]}"; do
    n=$((n + 1))
    run_build troupe "new_${i}_$n" "$variant"
  done
done
if [[ ${LATENCY:-0} == 1 ]]; then
  VARIANTS_LATENCY_ONLY=1 timeout 150 bash "$here/variants.sh" --async-scheduling \
    --async-scheduling 2>&1 | sed -n '/=== summary ===/,$p'
fi
