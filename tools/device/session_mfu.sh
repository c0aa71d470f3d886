#!/usr/bin/env bash
# One device call (about 3 minutes of an H200, .carry/cuda carried; bundle_cuda_tests.sh here
# first): the throughput target on one machine: the ceilings (ceilings.sh, 3 s sustained) and
# the 1000 x 1000 run (--async-scheduling) right after, so the MFU divides by the matmul rate
# of the machine that ran it. Logs under $OUT.
source "$(dirname "$0")/env.sh"
session_init unpack
echo "cuBLASLt: $(readlink -f "$cublas/libcublasLt.so.13")"
nvidia-smi --query-gpu=driver_version,clocks.max.sm,power.limit --format=csv,noheader
OUT=$out SUSTAIN_S=3 timeout 90 bash "$here/ceilings.sh" | grep -E "copy|matmul 8192\^3:"
LONG_TIMEOUT=200 long_run troupe default "$out/throughput_1000.json" | grep -vE "it/s|^\s*$" |
  tail -n 14
