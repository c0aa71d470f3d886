#!/usr/bin/env bash
# Tensor and pipeline parallelism on the CPU against one rank, in alternation on one machine
# (docs/benchmarks.md, "Distributed execution"): for each of ROUNDS rounds, batch-1 decode
# (bench latency, 32 in / 64 out) and throughput (bench throughput, N prompts x 64 in / 64 out)
# at TP=1, TP=2 and PP=2 (the head starts the workers), then the cluster start of
# configs/cluster/local.toml (head + two workers, until the engine is ready). Prints one line
# per run and writes the JSON files to OUTDIR.
#
#   tools/bench_parallel_cpu.sh [build dir]      (env: ROUNDS=3 N=128 OUTDIR=bench_parallel)
set -euo pipefail
build=${1:-build}
T="$build/tools/troupe"
ROUNDS=${ROUNDS:-3} N=${N:-128} OUTDIR=${OUTDIR:-bench_parallel}
mkdir -p "$OUTDIR"
layouts=("-tp 1" "-tp 2" "-pp 2")
for i in $(seq 1 "$ROUNDS"); do
  echo "== round $i, load $(cut -d' ' -f1-3 /proc/loadavg)"
  for l in "${layouts[@]}"; do
    name=${l// /}
    read -r -a flags <<< "$l"
    "$T" --log-level warn bench latency "${flags[@]}" --batch-size 1 --input-len 32 \
      --output-len 64 --num-iters-warmup 1 --num-iters 3 \
      --output-json "$OUTDIR/latency${name}_$i.json" > /dev/null
    "$T" --log-level warn bench throughput "${flags[@]}" --num-prompts "$N" --input-len 64 \
      --output-len 64 --output-json "$OUTDIR/throughput${name}_$i.json" > /dev/null 2>&1
    python3 - "$OUTDIR/latency${name}_$i.json" "$OUTDIR/throughput${name}_$i.json" "$l" <<'PY'
import json, sys
lat, thr = json.load(open(sys.argv[1])), json.load(open(sys.argv[2]))
print(f"{sys.argv[3]:>6}: decode {1000 * lat['decode_s_per_token']:.2f} ms/token, "
      f"throughput {thr['output_tokens_per_s']:.0f} output tok/s")
PY
  done
  start=$(date +%s.%N)
  "$T" --log-level info launch configs/cluster/local.toml -- generate --max-tokens 1 Hello \
    2> "$OUTDIR/launch_$i.log" > /dev/null
  end=$(date +%s.%N)
  ready=$(grep -o "ready in [0-9.]* s" "$OUTDIR/launch_$i.log" | head -1)
  echo "cluster start (local.toml): engine $ready; the whole command $(echo "$end - $start" | bc) s"
done
