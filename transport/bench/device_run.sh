#!/bin/bash
# On the machine the bundle was carried to (transport/bench/bundle.sh): machine facts, the
# transport tests (the NCCL ones run with a GPU; TESTS= picks cases), then troupe_transport_bench
# with UCX-allocated and with user-memory regions. Everything lands in $OUT (default ./out).
B=$(cd "$(dirname "$0")" && pwd)
OUT=${OUT:-$PWD/out}
mkdir -p "$OUT"
NCCL=$(find / -name 'libnccl.so.2' -not -path '/proc/*' 2>/dev/null | head -1)
export LD_LIBRARY_PATH=$B/lib:/usr/local/cuda/lib64:$(dirname "${NCCL:-/}")
export UCX_MODULE_DIR=$B/lib/ucx
{
  echo "nccl lib: $NCCL"; [ -n "$NCCL" ] && strings "$NCCL" | grep -m1 -E "NCCL version [0-9]"
  nproc; grep -m1 "model name" /proc/cpuinfo; uname -r; df -h /dev/shm | tail -1
  nvidia-smi -L 2>/dev/null; cat /proc/loadavg
  "$B/bin/ucx_info" -v | head -1
} > "$OUT/machine.txt" 2>&1
cat "$OUT/machine.txt"
mkdir -p "$(cat "$B/peer_dir")"
cp "$B/bin/troupe_transport_peer" "$(cat "$B/peer_dir")/"
cd /tmp
timeout 300 "$B/bin/troupe_transport_tests" ${TESTS:-} > "$OUT/tests.log" 2>&1
echo "tests rc=$?"
tail -3 "$OUT/tests.log"
if [ -z "${NOBENCH:-}" ]; then
  timeout 420 "$B/bin/troupe_transport_bench" --perftest "$B/bin/ucx_perftest" --reps 5 \
    --out "$OUT/bench.json" 2> "$OUT/bench.log"
  echo "bench rc=$?"
  timeout 120 "$B/bin/troupe_transport_bench" --region user --tls sm --sections kv \
    --no-perftest --reps 3 --out "$OUT/bench_user.json" 2> "$OUT/bench_user.log"
  echo "bench (user memory) rc=$?"
fi
