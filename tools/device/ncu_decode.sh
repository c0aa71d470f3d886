#!/usr/bin/env bash
# Nsight Compute on the default decode-attention kernel, on the GPU machine (after
# run_cuda_tests.sh or gpu_check.sh unpacked the bundle into /tmp/troupe_cuda): the op bench's
# decode cases (troupe_cuda_opbench 1 decode: 1 x 160, 256 x 1024, 232 x 1536, 4 x 32768 keys)
# with the speed-of-light, memory, occupancy, warp-state and scheduler sections of every launch
# of the decode kernels. Output: $OUT/ncu_decode.txt.
#   NCU_KERNEL (regex, default "decode") and NCU_GROUP (the op bench's group, default "decode";
#   "dense" for the GEMMs, GEMVs and fused ops) pick other kernels, e.g.
#   NCU_KERNEL=gemv NCU_GROUP=dense for the skinny GEMMs.
set -uo pipefail
out=${OUT:-/tmp/troupe_cuda_out}
source "$(dirname "$0")/env.sh"
ncu=$(command -v ncu || ls /opt/nvidia/nsight-compute/*/ncu /usr/local/cuda/bin/ncu 2>/dev/null | head -n 1)
if [[ -z $ncu ]]; then
  echo "ncu_decode: ncu not found" | tee "$out/ncu_decode.txt"
  exit 2
fi
timeout ${NCU_TIMEOUT:-240} "$ncu" --clock-control none --kernel-name regex:"${NCU_KERNEL:-decode}" \
  --launch-count "${NCU_COUNT:-16}" --section SpeedOfLight --section MemoryWorkloadAnalysis \
  --section Occupancy --section WarpStateStats --section SchedulerStats --section LaunchStats \
  "$root/bin/troupe_cuda_opbench" 1 "${NCU_GROUP:-decode}" > "$out/ncu_decode.txt" 2>&1
echo "ncu_decode: exit $?"
grep -E "${NCU_KERNEL:-decode}|Duration|Memory Throughput|DRAM Throughput|Achieved Occupancy|Registers Per|Stall|Issued Warp|No Eligible|Waves Per SM" \
  "$out/ncu_decode.txt" | head -n 200
