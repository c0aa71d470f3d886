#!/usr/bin/env bash
# One device call (about 6 minutes of an H200, .carry/cuda carried; bundle_cuda_tests.sh here
# first) that checks a build and measures it with the GPU's clock and power alongside:
#   1. the CUDA test cases;
#   2. batch-1 latency (variants.sh, latency only) for each argument (a variant, e.g.
#      --async-scheduling);
#   3. the op bench's sampler group and the dense and fused ops (into $OUT/opbench_dense.txt);
#   4. the 1000 x 1000 run for each argument (long_variants.sh, with nvidia-smi);
#   5. the copy and matmul ceilings, the matmul also sustained for 30 s (ceilings.sh);
#   6. the model's GEMMs at the long run's row counts, 300 iterations a line (op bench 'gemm'),
#      with nvidia-smi: the sustained rates the long run's steps can count on.
# Each step has its own time limit, so a hang cannot take the whole call.
set -uo pipefail
out=${OUT:-/tmp/troupe_cuda_out}
mkdir -p "$out"
here=$(dirname "$0")
source "$here/env.sh"
session_tests "$out"
source "$here/smi.sh"
VARIANTS_LATENCY_ONLY=1 timeout 120 bash "$here/variants.sh" "$@" 2>&1 | sed -n '/=== summary ===/,$p'
timeout 40 "$root/bin/troupe_cuda_opbench" 20 sample 2>&1 | grep -E "^TROUPE|plain T=1|greedy"
timeout 90 "$root/bin/troupe_cuda_opbench" 20 dense > "$out/opbench_dense.txt" 2>&1
grep -E "qkv|rope" "$out/opbench_dense.txt" | grep -E "T=1$|T=1 " | head -n 12
timeout 300 bash "$here/long_variants.sh" "$@" 2>&1 | sed -n '/=== summary ===/,$p'
SUSTAIN_S=30 timeout 120 bash "$here/ceilings.sh" 2>&1 | grep -E "copy|matmul|GPU during"
smi_start "$out/smi_gemm.csv"
timeout 90 "$root/bin/troupe_cuda_opbench" 300 gemm > "$out/opbench_gemm.txt" 2>&1
smi_stop "GPU during the GEMM lines"
cat "$out/opbench_gemm.txt" | grep gemm
