#!/usr/bin/env bash
# One device call (about 5 minutes of one GPU): the parts of distributed execution that one GPU
# runs (two-GPU tensor parallelism is issue 23's tools/device/tp2.sh). Here first:
# tools/device/bundle.sh; then the device call (timeout_s 600, carry [".carry/cuda"]):
#   bash tools/device/parallel.sh
#   1. NCCL with one rank (troupe_transport_tests "nccl:*"): bootstrap, the all-reduce on the
#      executor's stream and inside a CUDA graph; the two-GPU case says it is skipped;
#   2. the tensor-parallel ops (vocab-parallel embedding, shard interleave) against the CPU
#      backend bit for bit (troupe_cuda_tests "[parallel]");
#   3. pipeline parallelism as two worker processes sharing the GPU: Llama-3-8B's shape, bf16,
#      dummy weights, 16 prompts x 64 greedy tokens at PP=2 against PP=1 (pp1.jsonl, pp2.jsonl);
#   4. throughput at PP=1 and PP=2 on the same GPU, 256 prompts x 256 in / 256 out (pp1.json,
#      pp2.json): what splitting a model over stages costs when both share one GPU;
#   5. `troupe serve` against `troupe bench throughput` at the same load (tools/
#      bench_serving_ab.sh: 500 prompts x 128 in / 128 out at once, then request rates 8 and
#      32 per second; serving/).
# Into $OUT: parallel.log, nccl.log, tp_ops.log, pp1.jsonl, pp2.jsonl, pp1.json, pp2.json,
# pp.log, serving/. Exit status: non-zero when a test failed or the PP=2 tokens differ from
# PP=1's.
source "$(dirname "$0")/env.sh"
unpack_bundle || exit 2
export TROUPE_MODEL_FIXTURES="$PWD/tests/fixtures/models"
rc=0
exec > >(tee "$out/parallel.log") 2>&1
start=$(date +%s)
{
  step() { echo "=== $1 ($(( $(date +%s) - start )) s in)"; }
  nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader
  step "NCCL, one rank"
  timeout 120 "$root/bin/troupe_transport_tests" "nccl:*" > "$out/nccl.log" 2>&1 || rc=1
  tail -n 3 "$out/nccl.log"
  step "tensor-parallel ops against the CPU"
  timeout 120 "$root/bin/troupe_cuda_tests" "[parallel]" > "$out/tp_ops.log" 2>&1 || rc=1
  tail -n 3 "$out/tp_ops.log"
  step "PP=2 (two processes on one GPU) against PP=1: greedy tokens"
  python3 "$here/split_parity.py" prompts "$out/prompts.jsonl" 7 32 16 64
  gen=(generate "${model_args[@]}" --skip-tokenizer-init --input "$out/prompts.jsonl")
  timeout 150 "$root/bin/troupe" --log-level info "${gen[@]}" > "$out/pp1.jsonl" 2>> "$out/pp.log" || rc=1
  timeout 200 "$root/bin/troupe" --log-level info "${gen[@]}" --pipeline-parallel-size 2 \
    > "$out/pp2.jsonl" 2>> "$out/pp.log" || rc=1
  python3 "$here/split_parity.py" compare "$out/pp1.jsonl" "$out/pp2.jsonl" "PP=2 against PP=1" ||
    rc=1
  step "throughput PP=1 and PP=2 on one GPU"
  tp=(throughput "${model_args[@]}" --async-scheduling --num-prompts 256 --input-len 256
      --output-len 256)
  timeout 150 "$root/bin/troupe" bench "${tp[@]}" --output-json "$out/pp1.json" >> "$out/pp.log" 2>&1 || rc=1
  timeout 200 "$root/bin/troupe" bench "${tp[@]}" --pipeline-parallel-size 2 \
    --output-json "$out/pp2.json" >> "$out/pp.log" 2>&1 || rc=1
  for f in pp1 pp2; do echo "$f: $(cat "$out/$f.json" 2>/dev/null | head -c 400)"; done
  step "serving against offline"
  build=$(sed -n 2p "$root/paths")
  MODEL_ARGS="${model_args[*]} --skip-tokenizer-init --async-scheduling" ROUNDS=1 N=500 IN=128 \
    OUT=128 RATES="8 32" RATE_N=200 OUTDIR="$out/serving" timeout 300 \
    bash tools/bench_serving_ab.sh "$build" || rc=1
  step "done"
}
rm -f "$out/prompts.jsonl"
exit $rc
