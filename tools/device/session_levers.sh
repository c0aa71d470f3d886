#!/usr/bin/env bash
# One device call (about 6 minutes of an H200, .carry/cuda carried; bundle_cuda_tests.sh here
# first), the ninth session's measurements for the throughput target:
#   1. the CUDA test cases;
#   2. HBM read rates (op bench "stream": contiguous, decode attention's K/V rows, cp.async.bulk)
#      next to the copy rate, i.e. the ceiling decode attention streams against;
#   3. decode attention (op bench "decode"), with the 1000 x 1000 run's spread of contexts in
#      three orders;
#   4. prefill attention (op bench "prefill"), the diagonal-only mask against every tile masked;
#   5. Nsight Compute on the sampler at 256 rows and on the 8 x 1000 prefill
#      (ncu_sample_prefill.sh).
# Logs under $OUT.
source "$(dirname "$0")/env.sh"
session_init
session_tests "$out"
nvidia-smi --query-gpu=name,clocks.max.sm,clocks.max.mem,power.limit --format=csv
timeout 60 "$root/bin/troupe_cuda_opbench" 10 stream 2>&1 | tee "$out/stream.txt"
timeout 60 "$root/bin/troupe_cuda_opbench" 20 decode 2>&1 | tee "$out/decode.txt"
timeout 120 "$root/bin/troupe_cuda_opbench" 10 prefill 2>&1 | tee "$out/prefill.txt"
OUT=$out NCU_TIMEOUT=80 timeout 200 bash "$here/ncu_sample_prefill.sh" 2>&1 | tee "$out/ncu.txt"
