#!/usr/bin/env bash
# The server against the offline engine at the same load, in alternation on one machine:
# `troupe bench throughput` (LLM::generate, every prompt at once), then `troupe serve` driven by
# `troupe bench serving` with every request at once (--request-rate inf), ROUNDS times; prints
# each round's output tokens/s and their ratio. Then, unless RATES is empty, the server at each
# request rate of RATES (TTFT / TPOT / ITL percentiles).
#
#   tools/bench_serving_ab.sh [build dir]      (env: ROUNDS=3 IN=128 OUT=128 N=300
#                                               RATES="2 4 8" RATE_N=100 OUTDIR=bench_out
#                                               MODEL_ARGS="engine flags for both"
#                                               SERVE_ARGS="flags for the server alone",
#                                               e.g. "--stream-interval 10",
#                                               FLOOR="C S STEP_MS DELAY_MS")
#
# With FLOOR set, each round also runs the offline benchmark a second time with
# tools/loopback_floor.c beside it (its arguments: C connections, S steps of one event each,
# STEP_MS apart, the first DELAY_MS after the start, to lay them over the decode phase) and
# prints that run's ratio to the first: what a server whose only per-token work were the
# kernel's loopback send and receive would keep on this machine.
#
# On a GPU (tools/device/parallel.sh runs it): MODEL_ARGS="--model configs/models/llama-3-8b
# --load-format dummy --dtype bfloat16 --max-model-len 4096 --skip-tokenizer-init" (the random
# prompts are token ids, so no tokenizer is needed).
#
# The server runs with --generation-config vllm: the embedded model's generation_config.json
# caps max_tokens at 64 (vLLM's rule), which the offline benchmark does not apply.
set -euo pipefail
build=${1:-build}
T="$build/tools/troupe"
ROUNDS=${ROUNDS:-3} IN=${IN:-128} OUT=${OUT:-128} N=${N:-300}
RATES=${RATES-"2 4 8"} RATE_N=${RATE_N:-100}
OUTDIR=${OUTDIR:-bench_out}
read -r -a model_args <<< "${MODEL_ARGS:-}"
read -r -a serve_args <<< "${SERVE_ARGS:-}"
mkdir -p "$OUTDIR"
if [ -n "${FLOOR:-}" ]; then
  read -r -a floor_args <<< "$FLOOR"
  floor_bin="$OUTDIR/loopback_floor"
  gcc -O2 -pthread -o "$floor_bin" "$(dirname "$0")/loopback_floor.c"
fi
log="$OUTDIR/serve.log"

start_server() {
  "$T" --log-level warn serve "${model_args[@]}" "${serve_args[@]}" --host 127.0.0.1 --port 0 \
    --disable-uvicorn-access-log --generation-config vllm 2>"$log" &
  SP=$!
  for _ in $(seq 1 1200); do
    grep -q "API server on" "$log" && break
    sleep 0.1
  done
  URL=$(grep -o "http://127.0.0.1:[0-9]*" "$log" | head -1)
  [ -n "$URL" ] || { echo "server did not start:"; cat "$log"; exit 1; }
}
stop_server() { kill -TERM "$SP"; wait "$SP" || true; }
# `troupe bench throughput` at the round's load, its JSON into $1.
offline() {
  "$T" --log-level warn bench throughput "${model_args[@]}" --input-len "$IN" --output-len "$OUT" \
    --num-prompts "$N" --output-json "$1"
}

for i in $(seq 1 "$ROUNDS"); do
  echo "== round $i, $(date -u +%FT%TZ), load $(cut -d' ' -f1-3 /proc/loadavg)"
  offline "$OUTDIR/offline_$i.json" | grep "output tokens/s"
  if [ -n "${FLOOR:-}" ]; then
    "$floor_bin" "${floor_args[@]}" > "$OUTDIR/floor_$i.txt" &
    FP=$!
    offline "$OUTDIR/floor_offline_$i.json" >/dev/null
    wait "$FP"
    python3 -c "import json; a=json.load(open('$OUTDIR/offline_$i.json'))['output_tokens_per_s']; b=json.load(open('$OUTDIR/floor_offline_$i.json'))['output_tokens_per_s']; print(f'round $i: offline beside the loopback floor {b:.1f} output tok/s: {b / a:.3f}')"
  fi
  start_server
  "$T" --log-level warn bench serving --base-url "$URL" --dataset-name random \
    --random-input-len "$IN" --random-output-len "$OUT" --num-prompts "$N" --request-rate inf \
    --ignore-eos --temperature 1.0 --save-result --result-filename "$OUTDIR/server_$i.json" |
    grep "Output token throughput"
  stop_server
  python3 -c "import json,sys; a=json.load(open('$OUTDIR/offline_$i.json'))['output_tokens_per_s']; b=json.load(open('$OUTDIR/server_$i.json'))['output_throughput']; print(f'round $i: offline {a:.1f}, server {b:.1f} output tok/s: {b / a:.3f}')"
done

for rate in $RATES; do
  echo "== request rate $rate/s, $(date -u +%FT%TZ), load $(cut -d' ' -f1-3 /proc/loadavg)"
  start_server
  "$T" --log-level warn bench serving --base-url "$URL" --dataset-name random \
    --random-input-len "$IN" --random-output-len "$OUT" --num-prompts "$RATE_N" \
    --request-rate "$rate" --ignore-eos --temperature 1.0 --metric-percentiles 50,90,99 \
    --percentile-metrics ttft,tpot,itl,e2el --save-result \
    --result-filename "$OUTDIR/rate_$rate.json" | sed -n '/Serving Benchmark/,$p'
  stop_server
done
