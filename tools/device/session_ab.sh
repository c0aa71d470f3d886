#!/usr/bin/env bash
# One device call (about 8 minutes of an H200; carry .carry/cuda after bundle_cuda_tests.sh and
# bundle_old_troupe.sh COMMIT here): the 1000 x 1000 throughput run (--async-scheduling) with
# the current tree's troupe and COMMIT's, alternating new, old, new, old on one machine, after
# the ceilings, so a difference between builds is not one between machines. The ninth session
# measured 105.6-106.6 s on three machines against the eighth's 102.48 s with the same decode
# path; this settles whether a build or the machines moved. RUNS=n pairs (default 2).
source "$(dirname "$0")/env.sh"
session_init unpack
gunzip -c .carry/cuda/troupe_old.gz > "$root/bin/troupe_old" && chmod +x "$root/bin/troupe_old"
echo "old build: $(cat .carry/cuda/troupe_old.commit 2>/dev/null || echo unknown)"
echo "cuBLASLt: $(readlink -f "$cublas/libcublasLt.so.13")"
OUT=$out SUSTAIN_S=3 timeout 90 bash "$here/ceilings.sh" | grep -E "copy|matmul 8192\^3"
for i in $(seq 1 "${RUNS:-2}"); do
  for build in troupe troupe_old; do
    echo "=== $build, run $i"
    timeout 200 "$root/bin/$build" --log-level info bench "${long_args[@]}" --async-scheduling \
      --output-json "$out/throughput_${build}_$i.json" 2>&1 |
      grep -E "elapsed|output tokens/s|model TFLOP/s|steps with prompt|decode-only"
  done
done
