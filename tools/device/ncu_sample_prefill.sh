#!/usr/bin/env bash
# Nsight Compute on the two kernels that the next throughput steps target, on the GPU machine
# (after run_cuda_tests.sh or gpu_check.sh unpacked the bundle into /tmp/troupe_cuda):
#   1. the sampler at 256 rows of 128,256 logits, T = 1 (troupe bench's rows): the op bench's
#      sample group, its 4th launch;
#   2. prefill attention over eight 1,000-token prompts (a 1000 x 1000 prompt step): the op
#      bench's prefill group, the 16th prefill launch (the 8 x 1000 line's timed one).
# Speed-of-light, memory, occupancy, warp-state and scheduler sections; full reports in
# $OUT/ncu_sample.txt and $OUT/ncu_prefill.txt, the key lines printed. First the op bench's
# own timings of the sampler lines.
set -uo pipefail
out=${OUT:-/tmp/troupe_cuda_out}
source "$(dirname "$0")/env.sh"
ncu=$(command -v ncu || ls /opt/nvidia/nsight-compute/*/ncu /usr/local/cuda/bin/ncu 2>/dev/null | head -n 1)
timeout 40 "$root/bin/troupe_cuda_opbench" 20 sample
if [[ -z $ncu ]]; then echo "ncu not found"; exit 2; fi
sections=(--section SpeedOfLight --section MemoryWorkloadAnalysis --section Occupancy
          --section WarpStateStats --section SchedulerStats --section LaunchStats)
timeout ${NCU_TIMEOUT:-70} "$ncu" --clock-control none --kernel-name regex:sample_kernel \
  --launch-skip 3 --launch-count 1 "${sections[@]}" "$root/bin/troupe_cuda_opbench" 1 sample \
  > "$out/ncu_sample.txt" 2>&1
echo "ncu sample: exit $?"
timeout ${NCU_TIMEOUT:-70} "$ncu" --clock-control none --kernel-name regex:prefill \
  --launch-skip 15 --launch-count 1 "${sections[@]}" "$root/bin/troupe_cuda_opbench" 1 prefill \
  > "$out/ncu_prefill.txt" 2>&1
echo "ncu prefill: exit $?"
for f in ncu_sample ncu_prefill; do
  echo "== $f"
  grep -E "sample_kernel|prefill|Duration|Memory Throughput|DRAM Throughput|Compute \(SM\) Throughput|Achieved Occupancy|Theoretical Occupancy|Registers Per|Block Limit|Stall|Issued Warp|No Eligible|Waves Per SM|Grid Size|Block Size|Shared Memory Configuration Size|Dynamic Shared" \
    "$out/$f.txt" | head -n 60
done
